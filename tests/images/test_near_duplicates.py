"""Near-duplicates across splits: the perceptual hash, its bands, the pairs in a bucket, and builds that find them.

The measurement as tests: a copy of a train photo
resized to 90% and saved at JPEG quality 80, placed in validation, is
reported (and rejected with ``--near_duplicates reject``); unrelated photos
give no pair at the default distance. The same on 1,000 photos is
``python -m benchmarks.faults near_duplicates`` (BENCHMARKS.md).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random

import numpy as np
import pytest
from PIL import Image

from tests.imagegen import EXIF_ORIENTATION, encode, png
from tests.shard_fixtures import dead_letters, load_manifest, run_build
from transforms.errors import ImageError
from transforms.images.image_codec import ImageInfo
from transforms.shardset.dead_letters import DEAD_LETTERS as DEAD_LETTERS_TAG
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.choices import DEFAULT_NEAR_DUPLICATE_DISTANCE
from transforms.images.near_duplicates import CappedBucket, HashedImage, NearPair, bucket_pairs, near_choice
from transforms.images.perceptual import HASH_BITS, band_widths, hash_bands, perceptual_hash, popcount
from tests.helpers import hamming

# Photographs of different scenes that scikit-image ships (not motorcycle_right: the same scene as
# motorcycle_left from a second camera).
SCENES = ("astronaut.png", "chelsea.png", "coffee.png", "camera.png", "coins.png", "rocket.jpg",
          "retina.jpg", "horse.png", "hubble_deep_field.jpg", "ihc.png", "moon.png", "page.png",
          "motorcycle_left.png", "brick.png", "grass.png", "gravel.png", "text.png", "clock_motion.png")


def _photo(name: str, side: int = 200) -> Image.Image:
    import skimage

    with Image.open(os.path.join(os.path.dirname(skimage.__file__), "data", name)) as image:
        image = image.convert("RGB")
        image.thumbnail((side, side))
        return image


def _jpeg(image: Image.Image, quality: int = 90, exif_orientation: int | None = None) -> bytes:
    params: dict = {"quality": quality}
    if exif_orientation is not None:
        exif = Image.Exif()
        exif[EXIF_ORIENTATION] = exif_orientation
        params["exif"] = exif.tobytes()
    return encode(image, "JPEG", **params)


def _resaved(data: bytes) -> bytes:
    """The issue's copy: resized to 90% and saved at JPEG quality 80."""
    with Image.open(io.BytesIO(data)) as image:
        w, h = image.size
        return _jpeg(image.convert("RGB").resize((int(w * 0.9), int(h * 0.9)), Image.Resampling.BICUBIC), 80)


# ---------------------------------------------------------------- the hash

def _gradient_png() -> bytes:
    y, x = np.mgrid[0:48, 0:64]
    return encode(Image.fromarray((np.sin(x / 9.0) * np.cos(y / 7.0) * 100 + 128).astype(np.uint8)), "PNG")


@pytest.mark.parametrize("make, golden", [
    (lambda: png(size=(64, 48)), 0x30DE3751224D7E55),
    (_gradient_png, 0x3FC0C03FC03EC43F),
    (lambda: png(mode="P", size=(40, 30)), 0xC739AA18B8E7544E),
])
def test_the_hash_of_lossless_images_is_golden(make, golden) -> None:
    value = perceptual_hash(make())
    assert value == golden, hex(value)
    assert bin(value).count("1") == HASH_BITS // 2  # one bit per coefficient above the median


def test_a_16_bit_image_hashes_as_its_8_bit_twin() -> None:
    y, x = np.mgrid[0:48, 0:64]
    levels = (np.sin(x / 9.0) * np.cos(y / 7.0) * 100 + 128).astype(np.uint8)
    wide = encode(Image.fromarray(levels.astype(np.uint16) * 257), "PNG")  # I;16: "L" would clip it at 255
    assert hamming(perceptual_hash(wide), perceptual_hash(encode(Image.fromarray(levels), "PNG"))) <= 2


def test_an_image_stored_turned_with_its_exif_orientation_hashes_as_it_is_shown() -> None:
    upright = _photo("chelsea.png")
    # Orientation 6: the stored pixels are turned a quarter to the left; a viewer turns them back.
    stored = _jpeg(upright.transpose(Image.Transpose.ROTATE_90), exif_orientation=6)
    plain = _jpeg(upright.transpose(Image.Transpose.ROTATE_90))
    assert hamming(perceptual_hash(stored), perceptual_hash(_jpeg(upright))) <= 4
    assert hamming(perceptual_hash(plain), perceptual_hash(_jpeg(upright))) > 16


def test_pixels_that_do_not_decode_are_an_undecodable_image_error() -> None:
    data = _jpeg(_photo("coffee.png"))
    with pytest.raises(ImageError) as raised:
        perceptual_hash(data[:len(data) // 3])
    assert raised.value.reason == "undecodable"


def test_resaved_copies_are_near_and_different_scenes_far() -> None:
    originals = [_jpeg(_photo(name)) for name in SCENES]
    hashes = [perceptual_hash(d) for d in originals]
    copies = [perceptual_hash(_resaved(d)) for d in originals]
    assert max(hamming(a, b) for a, b in zip(hashes, copies)) <= DEFAULT_NEAR_DUPLICATE_DISTANCE
    apart = [(hamming(hashes[i], hashes[j]), SCENES[i], SCENES[j])
             for i in range(len(hashes)) for j in range(i + 1, len(hashes))]
    assert min(apart)[0] > DEFAULT_NEAR_DUPLICATE_DISTANCE, min(apart)


@pytest.mark.parametrize("values", [[0, 1, 2**64 - 1, 0x8000000000000000, 0x0F0F0F0F0F0F0F0F],
                                    [random.Random(3).getrandbits(64) for _ in range(50)]])
def test_popcount_counts_the_set_bits_of_each_value(values) -> None:
    counted = popcount(np.array(values, dtype=np.uint64))
    assert counted.tolist() == [bin(v).count("1") for v in values]


# ---------------------------------------------------------------- bands

@pytest.mark.parametrize("distance, widths", [
    (0, (64,)), (1, (32, 32)), (3, (16, 16, 16, 16)), (4, (13, 13, 13, 13, 12)),
    (6, (10, 9, 9, 9, 9, 9, 9)), (31, (2,) * 32),
])
def test_a_hash_is_cut_into_distance_plus_one_bands(distance, widths) -> None:
    assert band_widths(distance) == widths
    assert sum(widths) == HASH_BITS


@pytest.mark.parametrize("distance", [-1, 32])
def test_a_distance_out_of_range_is_refused(distance) -> None:
    with pytest.raises(ValueError, match="0..31"):
        band_widths(distance)


def test_the_bands_put_back_together_are_the_hash() -> None:
    value = 0xCAEB555141AA75A5
    bands = hash_bands(value, 6)
    assert [index for index, _ in bands] == list(range(7))
    joined = 0
    for (_, band), width in zip(bands, band_widths(6)):
        assert 0 <= band < 1 << width
        joined = (joined << width) | band
    assert joined == value


@pytest.mark.parametrize("distance", [1, 4, 6, 10])
def test_two_hashes_within_the_distance_share_a_band(distance) -> None:
    rng = random.Random(distance)
    for _ in range(300):
        value = rng.getrandbits(64)
        flipped = value
        for bit in rng.sample(range(64), rng.randint(0, distance)):
            flipped ^= 1 << bit
        assert set(hash_bands(value, distance)) & set(hash_bands(flipped, distance))


# ---------------------------------------------------------------- pairs in a bucket

def _member(phash: int, split: str, name: str, sha: str | None = None) -> HashedImage:
    return HashedImage(sha or f"{name}-sha", phash, split, f"{split}/{name}", f"/in/{split}/{name}")


def test_a_bucket_pairs_images_of_different_splits_within_the_distance_only() -> None:
    base = 0xCAEB555141AA75A5
    members = [
        _member(base, "train", "a.jpg"),
        _member(base ^ 0b111111, "validation", "b.jpg"),  # 6 bits apart: a pair
        _member(base ^ 0b1111111, "test", "c.jpg"),  # 7 from a, 1 from b
        _member(base ^ 0b1, "train", "d.jpg"),  # same split as a: never compared with it
        _member(base, "test", "e.jpg", sha="a.jpg-sha"),  # a's very bytes: the exact check's
    ]
    pairs = {(p.kept.relpath, p.later.relpath, p.distance) for p in bucket_pairs(members, 6)}
    assert pairs == {
        ("validation/b.jpg", "train/a.jpg", 6),
        ("test/c.jpg", "validation/b.jpg", 1),
        ("test/c.jpg", "train/d.jpg", 6),
        ("validation/b.jpg", "train/d.jpg", 5),
        ("test/e.jpg", "validation/b.jpg", 6),
        ("test/e.jpg", "train/d.jpg", 1),
    }


def test_a_bucket_keeps_the_same_members_whatever_order_they_arrive_in() -> None:
    rng = random.Random(7)
    members = [_member(rng.getrandbits(64), "train", f"{i}.jpg") for i in range(40)]
    one = CappedBucket(5)
    for member in members:
        one.add(member)
    shuffled = members[:]
    rng.shuffle(shuffled)
    left, right = CappedBucket(5), CappedBucket(5)
    for member in shuffled[:17]:
        left.add(member)
    for member in shuffled[17:]:
        right.add(member)
    merged = left.merge(right)
    assert one.members() == merged.members() == sorted(members)[:5]
    assert one.count == merged.count == 40


def _meta(split: str, name: str, sha: str) -> ImageMeta:
    return ImageMeta(SourceImage(f"/in/{split}/{name}", f"{split}/{name}", split, "a"), 0, sha,
                     ImageInfo("jpeg", 8, 8, 3), 100, 1)


def test_the_later_copy_is_reported_and_with_reject_dead_lettered_naming_the_nearest() -> None:
    kept = _meta("train", "a.jpg", "aa")
    later = _member(1, "train", "a.jpg", sha="aa")
    pairs = [NearPair(_member(1, "validation", "v.jpg", sha="vv"), later, 4),
             NearPair(_member(1, "test", "t.jpg", sha="vv"), later, 4),  # v's bytes again, in a better split
             NearPair(_member(2, "test", "u.jpg", sha="uu"), later, 2),
             NearPair(_member(2, "test", "u.jpg", sha="uu"), later, 2),  # found in a second band
             NearPair(_member(1, "test", "x.jpg", sha="xx"), _member(1, "train", "b.jpg", sha="aa"), 1)]
    same, dead, found = near_choice(kept, pairs, False, 6)
    assert same is kept and dead == []
    assert [(p.kept.relpath, p.distance) for p in found] == [("test/u.jpg", 2), ("test/t.jpg", 4)]
    gone, dead, found = near_choice(kept, pairs, True, 6)
    assert gone is None and len(found) == 2
    (letter,) = dead
    assert (letter.path, letter.reason) == ("/in/train/a.jpg", "cross_split_near_duplicate")
    assert "'test/u.jpg' in split 'test'" in letter.error and "2 bits apart" in letter.error
    assert "and 1 more" in letter.error


def test_a_copy_the_exact_check_rejected_has_no_near_verdict() -> None:
    pair = NearPair(_member(1, "validation", "v.jpg"), _member(1, "train", "a.jpg", sha="aa"), 0)
    assert near_choice(None, [pair], True, 6) == (None, [], [])


# ---------------------------------------------------------------- builds

def _split_tree(root, copy_split: str = "validation") -> bytes:
    """Train and validation photos of different scenes, and a resaved copy of a train photo in ``copy_split``."""
    for i, name in enumerate(SCENES[:8]):
        split = "train" if i < 5 else "validation"
        folder = root / split / ("a" if i % 2 else "b")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jpg").write_bytes(_jpeg(_photo(name, 120)))
    original = (root / "train" / "b" / f"{SCENES[0]}.jpg").read_bytes()
    (root / copy_split / "b").mkdir(parents=True, exist_ok=True)
    (root / copy_split / "b" / "resaved.jpg").write_bytes(_resaved(original))
    return original


def _pairs(out) -> list[dict]:
    return [json.loads(line) for line in (out / "near_duplicates.jsonl").read_text().splitlines()]


def test_a_build_reports_a_resaved_copy_of_a_train_photo_in_validation(tmp_path, capsys) -> None:
    _split_tree(tmp_path / "in")
    out = tmp_path / "out"
    status, stdout, _ = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(out),
                                  "--near_duplicates", "report")
    assert status == 0
    manifest = load_manifest(str(out))
    assert manifest["near_duplicates"] == {
        "mode": "report", "distance": DEFAULT_NEAR_DUPLICATE_DISTANCE, "pairs": 1, "file": "near_duplicates.jsonl",
        "buckets_over_cap": 0, "images_not_compared_in_a_bucket": 0, "images_not_hashed": 0,
        "split_pairs": [{"kept": "validation", "later": "train", "pairs": 1}]}
    assert manifest["options"]["near_duplicates"] == "report"
    assert {s: manifest["splits"][s]["records"] for s in manifest["splits"]} == {"train": 5, "validation": 4}
    (pair,) = _pairs(out)
    # The evaluation split keeps the image: the train photo is the later copy.
    assert (pair["kept"]["relpath"], pair["later"]["relpath"]) == ("validation/b/resaved.jpg",
                                                                   f"train/b/{SCENES[0]}.jpg")
    assert pair["distance"] <= DEFAULT_NEAR_DUPLICATE_DISTANCE and pair["rejected"] is False
    assert "near-duplicates across splits (perceptual hash within 6 bits): 1 pair in" in stdout
    assert dead_letters(str(out)) == []


@pytest.mark.slow
def test_a_build_without_the_check_says_so_and_report_finds_a_resaved_copy_keeping_both(tmp_path, capsys) -> None:
    _split_tree(tmp_path / "in")
    status, stdout, _ = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "off"))
    assert status == 0 and "near_duplicates" not in load_manifest(str(tmp_path / "off"))
    assert "near-duplicates across splits: not looked for (--near_duplicates report looks" in stdout
    out = tmp_path / "out"
    status, stdout, _ = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(out),
                                  "--near_duplicates", "report")
    assert status == 0
    manifest = load_manifest(str(out))
    assert manifest["options"]["near_duplicates"] == "report"
    assert manifest["near_duplicates"]["pairs"] == 1
    # Which splits the pairs join: the split that keeps the image, the one with the later copy.
    assert manifest["near_duplicates"]["split_pairs"] == [{"kept": "validation", "later": "train", "pairs": 1}]
    assert {s: manifest["splits"][s]["records"] for s in manifest["splits"]} == {"train": 5, "validation": 4}
    (pair,) = _pairs(out)
    assert pair["later"]["split"] == "train" and pair["kept"]["split"] == "validation"
    assert pair["rejected"] is False and dead_letters(str(out)) == []
    assert "near-duplicates across splits (perceptual hash within 6 bits): 1 pair in" in stdout
    assert "near_duplicates.jsonl (validation keeps, train has the later copy: 1)" in stdout


@pytest.mark.slow
def test_a_build_that_finds_no_pair_publishes_what_a_build_without_the_check_does(tmp_path, capsys) -> None:
    _split_tree(tmp_path / "in")
    (tmp_path / "in" / "validation" / "b" / "resaved.jpg").unlink()  # no near-duplicate left
    built = {}
    for mode in ("report", "off"):
        out = tmp_path / mode
        assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(out),
                         "--near_duplicates", mode)[0] == 0
        manifest = load_manifest(str(out))
        options = manifest.pop("options")
        files = {os.path.relpath(os.path.join(folder, name), out): open(os.path.join(folder, name), "rb").read()
                 for folder, _, names in os.walk(out) for name in names
                 if name not in ("manifest.json", "shards.jsonl")}
        built[mode] = (manifest, files, options)
    assert built["report"][2]["near_duplicates"] == "report" and "near_duplicates" not in built["off"][2]
    assert "near_duplicates" not in built["report"][0]  # no summary, no near_duplicates.jsonl
    for name in ("shards", "sha256", "created_at"):
        for mode in built:
            for split in built[mode][0]["splits"].values():
                split.pop(name, None)
    assert built["report"][0]["splits"] == built["off"][0]["splits"]
    assert sorted(built["report"][1]) == sorted(built["off"][1])
    for name in built["off"][1]:
        if name != "dataset_info.json":  # it names its folder
            assert built["report"][1][name] == built["off"][1][name], name  # shards byte-identical


@pytest.mark.parametrize("layout, extra, hashes", [
    ("classes", ["--near_duplicates", "report"], False),  # every image goes to --split: no pair across splits
    ("classes", ["--near_duplicates", "report", "--split_fractions", "train=0.8,validation=0.2"], True),
    ("splits", ["--near_duplicates", "report"], True),
    ("splits", [], False),  # off by default
])
def test_the_build_hashes_images_only_when_they_may_fall_in_two_splits(tmp_path, layout, extra, hashes) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_jobs import build_shards
    from beam_jobs.cli import jobs
    from beam_jobs.cli.config import BuildConfig
    from beam_jobs.cli.declared import flag_parser

    root = tmp_path / "in"
    for split in (("train", "validation") if layout == "splits" else ("",)):
        (root / split / "a").mkdir(parents=True)
        (root / split / "a" / "x.png").write_bytes(png(size=(20, 10)))
    argv = ["--input", str(root), "--output_dir", str(tmp_path / "out"), *extra]
    cfg = BuildConfig.from_flags(vars(flag_parser(jobs.BUILD).parse_args(argv)))
    assert build_shards.make_config(cfg, PipelineOptions([])).found.near_hashes is hashes


def test_a_build_into_one_split_hashes_nothing_and_publishes_no_report(tmp_path, capsys) -> None:
    for i, name in enumerate(SCENES[:3]):
        (tmp_path / "in" / "a").mkdir(parents=True, exist_ok=True)
        (tmp_path / "in" / "a" / f"{i}.jpg").write_bytes(_jpeg(_photo(name, 64)))
    (tmp_path / "in" / "a" / "resaved.jpg").write_bytes(_resaved((tmp_path / "in" / "a" / "0.jpg").read_bytes()))
    out = tmp_path / "out"
    status, _, stderr = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(out),
                                  "--near_duplicates", "report")
    assert status == 0, stderr
    manifest = load_manifest(str(out))
    assert manifest["records"] == 4 and manifest["options"]["near_duplicates"] == "report"
    assert "near_duplicates" not in manifest and not (out / "near_duplicates.jsonl").exists()


@pytest.mark.slow
def test_a_build_with_reject_dead_letters_the_train_copy(tmp_path, capsys) -> None:
    _split_tree(tmp_path / "in", copy_split="test")
    out = tmp_path / "out"
    status, stdout, _ = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(out),
                                  "--near_duplicates", "reject", "--max_bad_fraction", "0.2")
    assert status == 0
    manifest = load_manifest(str(out))
    assert {s: manifest["splits"][s]["records"] for s in manifest["splits"]} == {
        "train": 4, "validation": 3, "test": 1}
    (letter,) = dead_letters(str(out))
    assert letter["reason"] == "cross_split_near_duplicate"
    assert letter["path"] == str(tmp_path / "in" / "train" / "b" / f"{SCENES[0]}.jpg")
    assert "'test/b/resaved.jpg' in split 'test'" in letter["error"]
    (pair,) = _pairs(out)
    assert pair["rejected"] is True
    assert manifest["records"] + manifest["dead_letters"] == 9  # every input accounted for
    assert "cross_split_near_duplicate" in stdout


@pytest.mark.slow
def test_a_build_without_the_check_has_no_report_and_removes_an_earlier_one(tmp_path, capsys) -> None:
    _split_tree(tmp_path / "in")
    out = tmp_path / "out"
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(out),
                     "--near_duplicates", "report")[0] == 0
    assert (out / "near_duplicates.jsonl").exists()
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(out),
                     "--near_duplicates", "off")[0] == 0
    manifest = load_manifest(str(out))
    assert "near_duplicates" not in manifest and "near_duplicates" not in manifest["options"]
    assert not (out / "near_duplicates.jsonl").exists()


def test_a_distance_out_of_range_is_one_line(tmp_path, capsys) -> None:
    _split_tree(tmp_path / "in")
    status, _, stderr = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"),
                                  "--near_duplicates", "report", "--near_duplicate_distance", "40")
    assert status == 2
    assert "--near_duplicate_distance must be 0-31 bits, got 40" in stderr


def test_an_image_meta_with_a_hash_pickles_with_it() -> None:
    import pickle

    for meta in (_meta("train", "a.jpg", "aa"),
                 dataclasses.replace(_meta("train", "a.jpg", "aa"), phash=0xFEDCBA9876543210)):
        assert pickle.loads(pickle.dumps(meta, pickle.HIGHEST_PROTOCOL)) == meta


@pytest.mark.slow
def test_the_step_counts_buckets_over_their_cap_and_images_without_a_hash() -> None:
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from transforms.reject_duplicates import (NEAR_DEAD_LETTERS, NEAR_DUPLICATES, OVER_CAP, UNHASHED,
                                              NearDuplicateRule, RejectDuplicateImages)

    base = 0xCAEB555141AA75A5
    metas = [dataclasses.replace(_meta(split, f"{i}.jpg", f"{i:064x}"), phash=base ^ (1 << (63 - i)))
             for i, split in enumerate(("train", "train", "validation", "test"))]  # 1 bit each: one band differs
    metas.append(_meta("train", "plain.jpg", "e" * 64))  # no hash: not compared, counted
    metas.append(dataclasses.replace(_meta("test", "copy.jpg", f"{0:064x}"), phash=metas[0].phash))  # bytes of 0
    with TestPipeline() as p:
        out = p | beam.Create(metas) | RejectDuplicateImages(near=NearDuplicateRule(True, 2, cap=3))
        assert_that(out["main"] | "Kept" >> beam.Map(lambda m: m.source.relpath),
                    equal_to(["validation/2.jpg", "test/3.jpg", "train/plain.jpg", "test/copy.jpg"]),
                    label="kept")
        assert_that(out[DEAD_LETTERS_TAG] | beam.Map(lambda d: (d.path, d.reason)), equal_to([
            ("/in/train/0.jpg", "cross_split_duplicate")]), label="dead")  # test/copy.jpg keeps 0.jpg's bytes
        assert_that(out[NEAR_DEAD_LETTERS] | "Near" >> beam.Map(lambda d: (d.path, d.reason)), equal_to([
            ("/in/train/1.jpg", "cross_split_near_duplicate")]), label="near dead")
        # Bands 1 and 2 each hold all five hashed copies, over a cap of 3: the three with the smallest
        # sha256 are compared, so validation/2.jpg and test/3.jpg (2 bits from train/1.jpg) are missed.
        assert_that(out[OVER_CAP], equal_to([(5, 3), (5, 3)]), label="over")
        assert_that(out[UNHASHED], equal_to(["/in/train/plain.jpg"]), label="unhashed")
        assert_that(out[NEAR_DUPLICATES] | beam.Map(lambda pair: (pair.kept.relpath, pair.later.relpath)),
                    equal_to([("test/copy.jpg", "train/1.jpg")]), label="pairs")


@pytest.mark.slow
def test_a_reshard_of_every_file_of_a_set_leaves_its_near_duplicates_out(tmp_path, capsys) -> None:
    from beam_jobs import reshard

    _split_tree(tmp_path / "in")
    built = tmp_path / "built"
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(built),
                     "--near_duplicates", "report")[0] == 0
    capsys.readouterr()
    # The pattern matches near_duplicates.jsonl too: a companion of the set, not a TFRecord file.
    status = reshard.run(["--input", str(built / "*"), "--output_dir", str(tmp_path / "out"), "--num_shards", "1"])
    assert status == 0, capsys.readouterr().err
    assert load_manifest(str(tmp_path / "out"))["records"] == 9


def test_a_resumed_run_keeps_the_hash_of_an_image_it_does_not_read_again() -> None:
    from tests.helpers import done_list
    from transforms.shardset.resume import context_key, parse_done_list, source_key
    from transforms.tfrecord.run_files import RunSlice

    source = SourceImage("/in/train/a.jpg", "train/a.jpg", "train", "a")
    meta = dataclasses.replace(_meta("train", "a.jpg", "ab" * 32), phash=0xFEDCBA9876543210,
                               run=RunSlice("/out/runs/f.run", 100, 1234))
    context = context_key(["a"], None)
    lines = list(done_list("f.run", 5000, context, [(source_key(source), (1, 2, 3), meta)]))
    [entry] = parse_done_list(iter(lines), "/out/runs", 5000)
    assert entry.for_source(source).phash == 0xFEDCBA9876543210
