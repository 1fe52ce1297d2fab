"""Copies of one image resolved in packed groups: the tally, the choice, each copy's dead letter, and the step."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.images.image_codec import ImageInfo
from transforms.images.duplicates import (CopyTally, PublishedCopy, copy_choices, copy_letter, copy_letters,
                                         tally_copies)
from tests.helpers import copy_choice
from transforms.images.items import ImageMeta, SourceImage
from transforms.reject_duplicates import METRICS_NAMESPACE, RejectDuplicateImages
from transforms.shardset.dead_letters import DEAD_LETTERS

_INFO = ImageInfo("png", 2, 2, 3)
_SPLITS = ("train", "test", "validation", "extra")


def _meta(path: str, split: str, sha: str = "ab" * 32) -> ImageMeta:
    return ImageMeta(SourceImage(path, path.rsplit("/", 1)[-1], split, "cat"), 0, sha, _INFO, 100, 1)


def _copies(seed: int, count: int, published: int) -> list:
    rng = random.Random(seed)
    values = [_meta(f"d{rng.randrange(9)}/{i:03d}.png", rng.choice(_SPLITS)) for i in range(count)]
    values += [PublishedCopy(rng.choice(_SPLITS)) for _ in range(published)]
    rng.shuffle(values)
    return values


def _tally(values) -> CopyTally:
    tally = CopyTally()
    for value in values:
        tally = tally.add(value)
    return tally


def _keyed(values) -> list:
    """Copies as they travel in a group: ImageMeta, or ``(sha256, PublishedCopy)``."""
    return [v if isinstance(v, ImageMeta) else (v.sha256 if hasattr(v, "sha256") else "ab" * 32, v) for v in values]


@pytest.mark.parametrize("seed, count, published, written", [
    (0, 1, 0, None), (1, 2, 0, None), (2, 30, 0, None), (3, 30, 2, ["train"]),
    (4, 30, 3, list(_SPLITS)), (5, 0, 2, None), (6, 200, 1, ["train", "test"]),
])
def test_tallies_in_any_order_choose_what_the_whole_list_chose(seed, count, published, written) -> None:
    values = _copies(seed, count, published)
    shuffled = values[::-1][1::2] + values[::-1][::2]
    tallies = tally_copies(_keyed(shuffled))
    tally = tallies["ab" * 32] if tallies else CopyTally()
    assert tally == _tally(values)
    assert tally.copies == count
    kept, dead = copy_choice(values, written)
    assert copy_choice(shuffled, written)[0] == kept
    found, choices = copy_choices(tallies, written)
    assert found == ([] if kept is None else [kept])
    letters = list(copy_letters(_keyed(values), choices))
    assert sorted(letters, key=lambda d: d.path) == sorted(dead, key=lambda d: d.path)
    choice = tally.choice(written)
    singles = [] if choice is None else [copy_letter(v, choice) for v in values if isinstance(v, ImageMeta)]
    assert sorted((d for d in singles if d is not None), key=lambda d: d.path) == sorted(dead, key=lambda d: d.path)
    assert len(dead) + (kept is not None) == count  # every copy kept or dead-lettered


def test_the_step_keeps_one_copy_and_letters_every_other(monkeypatch) -> None:
    copies = [_meta(f"in/{i:04d}.png", "train", "cc" * 32) for i in range(300)]
    others = [_meta(f"in/u{i}.png", "train", f"{i:064x}") for i in range(5)]
    with TestPipeline() as p:
        out = p | beam.Create(copies[::-1] + others) | RejectDuplicateImages()
        assert_that(out["main"] | "Paths" >> beam.Map(lambda m: m.source.path),
                    equal_to(["in/0000.png"] + [m.source.path for m in others]), label="Kept")
        assert_that(out[DEAD_LETTERS] | "Letters" >> beam.Map(lambda d: (d.path, d.reason)),
                    equal_to([(f"in/{i:04d}.png", "duplicate_image") for i in range(1, 300)]), label="Dead")


def test_the_only_grouping_is_of_packs_by_content_bucket() -> None:
    p = beam.Pipeline()
    _ = p | beam.Create([_meta("a.png", "train")]) | "Reject" >> RejectDuplicateImages()
    kinds = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            kinds.append((node.full_label, type(node.transform).__name__,
                          [getattr(i.element_type, "tuple_types", None) for i in node.inputs]))

    p.visit(Visitor())
    grouping = [(label, inputs) for label, kind, inputs in kinds if kind == "GroupByKey"]
    assert [label for label, _ in grouping] == ["Reject/GroupByContent"], grouping
    assert grouping[0][1][0][1] is bytes  # (bucket, pack): many copies an element


def test_a_known_image_count_makes_one_group_of_few_elements() -> None:
    # 2,000 images known ahead are one group (group_bits): not one per sha256, nor one per image.
    metas = [_meta(f"in/{i:05d}.png", "train", f"{i % 1_500:064x}") for i in range(2_000)]
    p = TestPipeline()
    count = p | "Count" >> beam.Create([len(metas)])
    out = p | beam.Create(metas) | RejectDuplicateImages(expected=count)
    assert_that(out["main"] | "Paths" >> beam.Map(lambda m: m.source.path),
                equal_to([f"in/{i:05d}.png" for i in range(1_500)]), label="Kept")
    assert_that(out[DEAD_LETTERS] | "Letters" >> beam.Map(lambda d: d.path),
                equal_to([f"in/{i:05d}.png" for i in range(1_500, 2_000)]), label="Dead")
    result = p.run()
    result.wait_until_finish()
    query = MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("images_per_group")
    (dist,) = result.metrics().query(query)["distributions"]
    assert (dist.committed.count, dist.committed.sum, dist.committed.max) == (1, 2_000, 2_000)
    packs = _packed(metas, expected=len(metas))
    assert len(packs) <= 2 and {key for key, _ in packs} == {0}  # 2,000 images cross as 1 or 2 elements


def test_a_million_copies_make_no_list(monkeypatch) -> None:
    # Both passes read the copies one at a time: the tally holds one entry for 100,000 copies of one
    # image, and the letters come out as the copies are read again, never gathered.
    def copies():
        for i in range(100_000):
            yield _meta(f"in/{i:06d}.png", "train" if i % 2 else "test", "dd" * 32)

    tallies = tally_copies(copies())
    assert list(tallies) == ["dd" * 32] and tallies["dd" * 32].copies == 100_000
    kept, choices = copy_choices(tallies)
    assert [m.source.path for m in kept] == ["in/000000.png"]  # test ranks before train
    letters = copy_letters(copies(), choices)
    first = next(letters)
    assert (first.path, first.reason) == ("in/000001.png", "cross_split_duplicate")
    assert 1 + sum(1 for _ in letters) == 99_999


def _packed(metas, expected=None) -> list:
    """The ``(bucket, pack)`` elements ``_PackByContentFn`` makes of ``metas`` in one bundle."""
    from apache_beam import coders
    from apache_beam.utils.windowed_value import WindowedValue

    from transforms.reject_duplicates import _PackByContentFn

    fn = _PackByContentFn(coders.registry.get_coder(object))
    fn.start_bundle()
    out = [keyed for meta in metas for keyed in fn.process(meta, expected) or ()]
    out += [w.value if isinstance(w, WindowedValue) else w for w in fn.finish_bundle()]
    return out


def test_the_copies_cross_to_their_letters_packed_and_compressed() -> None:
    # The copies leave the inspecting step in compressed packs of ~1 MiB: a runner holds a few
    # elements and a fraction of the copies' bytes, not one element a copy.
    import pickle

    from apache_beam import coders

    from transforms.packed_groups import PackedValues
    from transforms.reject_duplicates import _KeepOneCopyFn

    metas = [_meta(f"/data/images/cat/copy-{i:07d}.png", "train", "cc" * 32) for i in range(20_000)]
    packed = _packed(metas)
    assert len(packed) <= 8 and len({key for key, _ in packed}) == 1  # 20,000 copies, a handful of elements
    assert sum(len(pack) for _, pack in packed) * 4 < sum(len(pickle.dumps(m)) for m in metas)
    fn = _KeepOneCopyFn(appending=False)
    group = PackedValues([pack for _, pack in packed], coders.registry.get_coder(object), compressed=True)
    out = list(fn.process((packed[0][0], group)))
    letters = [o.value for o in out if isinstance(o, beam.pvalue.TaggedOutput)]
    assert [m.source.path for m in out if isinstance(m, ImageMeta)] == [metas[0].source.path]
    assert sorted(d.path for d in letters) == [m.source.path for m in metas[1:]]  # each copy once, but the kept


def test_published_keys_come_from_the_keys_file_or_else_from_the_shard(tmp_path) -> None:
    import hashlib
    import os

    from tests.helpers import encode_example
    from transforms.reject_duplicates import _crc32c_of, _shard_keys
    from transforms.tfrecord.framing import frame_record

    keys = [hashlib.sha256(bytes([n])).hexdigest() for n in range(3)]
    shard = tmp_path / "train-00000-of-00001.tfrecord"
    shard.write_bytes(b"".join(frame_record(encode_example({"image/key/sha256": [k.encode()]})) for k in keys))
    os.makedirs(tmp_path / "index")
    listed = [keys[2], keys[0]]  # not the shard's: tells which source was read
    data = b"".join(bytes.fromhex(k) for k in listed)
    (tmp_path / "index" / (shard.name + ".keys")).write_bytes(data)
    copies = lambda crc: [key for key, copy in _shard_keys(("train", str(shard), crc), "none")]  # noqa: E731
    assert copies(_crc32c_of(data)) == listed  # the keys file, 32 bytes a record
    assert copies(None) == keys  # no keys file listed (an older set): the records
    assert copies("AAAAAA==") == keys  # not the listed keys file: the records
    os.remove(tmp_path / "index" / (shard.name + ".keys"))
    assert copies(_crc32c_of(data)) == keys  # gone: the records


@pytest.mark.slow
def test_published_keys_count_toward_the_groups() -> None:
    # 60,010 copies in all (10 images, 60,000 published keys): two groups, as group_bits gives.
    metas = [_meta(f"in/{i}.png", "train", f"{i:064x}") for i in range(10)]
    p = TestPipeline()
    count = p | "Count" >> beam.Create([len(metas)])
    published = p | "Published" >> beam.Create([(f"{i + 100:064x}"[::-1], PublishedCopy("test")) for i in range(60_000)])
    out = p | beam.Create(metas) | RejectDuplicateImages(published, appending=True, expected=count)
    assert_that(out["main"] | beam.Map(lambda m: m.source.path), equal_to([m.source.path for m in metas]))
    result = p.run()
    result.wait_until_finish()
    query = MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("images_per_group")
    (dist,) = result.metrics().query(query)["distributions"]
    assert (dist.committed.count, dist.committed.sum) == (2, 10)
