"""End-to-end tests of the build job on real image files (DirectRunner)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from PIL import Image
import io

from tests.shard_fixtures import (crc32c_file, dead_letters, examples, image_bytes, load_manifest,
                                  make_class_tree, records, run_build, sha256_file,
                                  shard_files, write)
from tests.trees import Part
from transforms.tfrecord.framing import OVERHEAD
from transforms.example.schema import schema_problems
from transforms.example.codec import decode_example

SHARD_MB = "0.02"  # ~20 KiB shards: several shards from a few dozen tiny images


TREE = (Part(per_class=12, broken=True),)  # the module's input tree and build (tests/trees.py)
BUILD = ("--shard_size_mb", SHARD_MB, "--max_bad_fraction", "0.2")


def test_manifest_lists_exactly_the_files_written(built):
    _, _, out, _ = built
    manifest = load_manifest(out)
    listed = [s["file"] for s in manifest["splits"]["train"]["shards"]]
    assert listed == shard_files(out)
    assert len(listed) >= 3
    for shard in manifest["splits"]["train"]["shards"]:
        path = os.path.join(out, shard["file"])
        assert os.path.getsize(path) == shard["bytes"]
        assert crc32c_file(path) == shard["crc32c"]
        assert len(records(path)) == shard["records"]
    assert not os.path.exists(os.path.join(out, ".staging"))
    assert open(os.path.join(out, "labels.txt")).read() == "daisy\nrose\ntulip\n"


def test_idx_sidecar_matches_record_offsets(built):
    _, _, out, _ = built
    for name in shard_files(out):
        recs = records(os.path.join(out, name))
        lines = open(os.path.join(out, "index", name + ".idx")).read().splitlines()
        assert lines == [f"{offset} {len(data) + OVERHEAD}" for offset, data in recs]


def test_every_record_matches_its_source_image(built):
    root, expected, out, _ = built
    labels = open(os.path.join(out, "labels.txt")).read().splitlines()
    seen = set()
    for name in shard_files(out):
        for _, data in records(os.path.join(out, name)):
            assert schema_problems(decode_example(data)) == []
        for ex in examples(os.path.join(out, name)):
            rel = ex["image/filename"].decode()
            source = open(os.path.join(root, rel), "rb").read()
            assert ex["image/encoded"] == source  # passthrough keeps the bytes
            assert ex["image/key/sha256"].decode() == hashlib.sha256(source).hexdigest()
            assert ex["image/class/text"].decode() == expected[rel]
            assert labels[ex["image/class/label"]] == expected[rel]
            img = Image.open(io.BytesIO(source))
            assert (ex["image/width"], ex["image/height"]) == img.size
            assert ex["image/format"] == {"JPEG": b"jpeg", "PNG": b"png"}[img.format]
            assert ex["image/channels"] == 3
            seen.add(rel)
    assert seen == {rel for rel, outcome in expected.items() if not outcome.startswith("dead:")}


def test_broken_files_are_dead_letters_and_nothing_is_lost(built):
    root, expected, out, _ = built
    dead = {os.path.relpath(d["path"], root): d["reason"] for d in dead_letters(out)}
    assert dead == {rel: o[5:] for rel, o in expected.items() if o.startswith("dead:")}
    manifest = load_manifest(out)
    assert manifest["records"] + manifest["dead_letters"] == len(expected)


def test_shards_are_balanced_by_bytes_and_shuffled(built):
    _, _, out, _ = built
    shards = load_manifest(out)["splits"]["train"]["shards"]
    sizes = [s["bytes"] for s in shards]
    largest_record = max(len(d) + OVERHEAD for s in shards for _, d in records(os.path.join(out, s["file"])))
    assert max(sizes) - min(sizes) <= largest_record
    for shard in shards:
        assert len(shard["label_counts"]) >= 2, shard  # classes are mixed, not one class per shard
    filenames = [ex["image/filename"] for n in shard_files(out) for ex in examples(os.path.join(out, n))]
    assert filenames != sorted(filenames)


def test_label_counts_match_records(built):
    _, _, out, _ = built
    for shard in load_manifest(out)["splits"]["train"]["shards"]:
        counts = {}
        for ex in examples(os.path.join(out, shard["file"])):
            counts[str(ex["image/class/label"])] = counts.get(str(ex["image/class/label"]), 0) + 1
        assert counts == shard["label_counts"]


@pytest.mark.slow
def test_multi_processing_run_is_byte_identical(built, tmp_path, capsys):
    root, _, out, _ = built
    status, _, err = run_build(capsys, "--input", root, "--output_dir", str(tmp_path),
                               "--shard_size_mb", SHARD_MB, "--max_bad_fraction", "0.2",
                               "--direct_num_workers", "2", "--direct_running_mode", "multi_processing")
    assert status == 0, err
    assert shard_files(str(tmp_path)) == shard_files(out)
    for name in shard_files(out) + ["manifest.json", "dead_letters.jsonl", "labels.txt"]:
        assert sha256_file(os.path.join(out, name)) == sha256_file(str(tmp_path / name)), name


def test_seed_changes_order_but_not_content(built, tmp_path, capsys):
    root, _, out, _ = built
    status, _, _ = run_build(capsys, "--input", root, "--output_dir", str(tmp_path),
                             "--shard_size_mb", SHARD_MB, "--max_bad_fraction", "0.2", "--seed", "7")
    assert status == 0
    def all_records(folder):
        return [d for n in shard_files(folder) for _, d in records(os.path.join(folder, n))]
    assert all_records(str(tmp_path)) != all_records(out)
    assert sorted(all_records(str(tmp_path))) == sorted(all_records(out))


@pytest.mark.slow
def test_rerun_with_another_shard_size_replaces_the_old_shards(built, tmp_path, capsys):
    root, _, _, _ = built
    out = str(tmp_path)
    args = ["--input", root, "--output_dir", out, "--max_bad_fraction", "0.2"]
    assert run_build(capsys, *args, "--num_shards", "5")[0] == 0
    assert len(shard_files(out)) == 5
    assert run_build(capsys, *args, "--num_shards", "2")[0] == 0
    assert shard_files(out) == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    assert sorted(os.listdir(os.path.join(out, "index"))) == [
        "train-00000-of-00002.tfrecord.idx", "train-00000-of-00002.tfrecord.keys",
        "train-00001-of-00002.tfrecord.idx", "train-00001-of-00002.tfrecord.keys"]
    listed = [s["file"] for s in load_manifest(out)["splits"]["train"]["shards"]]
    assert listed == shard_files(out)


@pytest.mark.slow
def test_split_folders_become_splits(tmp_path, capsys):
    root = tmp_path / "in"
    make_class_tree(str(root / "train"), per_class=4, broken=False)
    make_class_tree(str(root / "validation"), classes=("daisy", "rose"), per_class=2, seed=1, broken=False)
    out = str(tmp_path / "out")
    assert run_build(capsys, "--input", str(root), "--output_dir", out)[0] == 0
    manifest = load_manifest(out)
    assert sorted(manifest["splits"]) == ["train", "validation"]
    assert manifest["splits"]["train"]["records"] == 12
    assert manifest["splits"]["validation"]["records"] == 4
    assert manifest["labels"] == ["daisy", "rose", "tulip"]  # one class list for every split
    assert shard_files(out) == ["train-00000-of-00001.tfrecord", "validation-00000-of-00001.tfrecord"]
    names = {ex["image/filename"] for ex in examples(os.path.join(out, "validation-00000-of-00001.tfrecord"))}
    assert all(n.startswith(b"validation/") for n in names)


def test_input_manifests_with_relative_paths_and_bad_rows(tmp_path, capsys):
    import random
    rng = random.Random(3)
    for i in range(4):
        write(str(tmp_path / "imgs" / f"{i}.jpg"), image_bytes("rose", "JPEG", rng))
    (tmp_path / "list.csv").write_text(
        "path,label,split\n"
        "imgs/0.jpg,rose,train\n"
        "imgs/1.jpg,daisy,validation\n"
        f"{tmp_path}/imgs/2.jpg,rose,\n"
        ",rose,train\n"
        "imgs/missing.jpg,rose,train\n"
        "imgs/3.jpg,rose,../evil\n")
    (tmp_path / "more.jsonl").write_text(
        json.dumps({"path": "imgs/3.jpg", "label": "tulip", "split": "test"}) + "\n"
        "{not json\n")
    out = str(tmp_path / "out")
    status, _, _ = run_build(capsys, "--input", str(tmp_path / "list.csv"), "--input",
                             str(tmp_path / "more.jsonl"), "--output_dir", out, "--max_bad_fraction", "1")
    assert status == 0
    manifest = load_manifest(out)
    assert {k: v["records"] for k, v in manifest["splits"].items()} == {"train": 2, "validation": 1, "test": 1}
    reasons = sorted(d["reason"] for d in dead_letters(out))
    assert reasons == ["bad_manifest_row", "bad_manifest_row", "bad_split", "unreadable"]
    assert manifest["records"] + manifest["dead_letters"] == 8
    names = {ex["image/filename"] for n in shard_files(out) for ex in examples(os.path.join(out, n))}
    assert b"imgs/0.jpg" in names and f"{tmp_path}/imgs/2.jpg".encode() in names


def test_labels_from_file_names_and_fixed_class_order(tmp_path, capsys):
    import random
    rng = random.Random(5)
    for i, label in enumerate(["apple", "orange", "apple", "pear", "orange"]):
        write(str(tmp_path / "flat" / f"{label}{i:02d}.jpg"), image_bytes("rose", "JPEG", rng))
    out = str(tmp_path / "out")
    status, _, _ = run_build(capsys, "--input", str(tmp_path / "flat"), "--output_dir", out,
                             "--label_regex", "(apple|orange)", "--class_names", "orange,apple",
                             "--max_bad_fraction", "0.5")
    assert status == 0
    assert open(os.path.join(out, "labels.txt")).read() == "orange\napple\n"
    got = {ex["image/filename"].decode(): (ex["image/class/label"], ex["image/class/text"].decode())
           for n in shard_files(out) for ex in examples(os.path.join(out, n))}
    assert got == {"apple00.jpg": (1, "apple"), "orange01.jpg": (0, "orange"),
                   "apple02.jpg": (1, "apple"), "orange04.jpg": (0, "orange")}
    assert [d["reason"] for d in dead_letters(out)] == ["no_label"]


def test_unknown_class_with_fixed_list_is_a_dead_letter(tmp_path, capsys):
    make_class_tree(str(tmp_path / "in"), per_class=2, broken=False)
    out = str(tmp_path / "out")
    status, _, _ = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", out,
                             "--class_names", "daisy,rose", "--max_bad_fraction", "0.5")
    assert status == 0
    assert sorted(d["reason"] for d in dead_letters(out)) == ["unknown_label", "unknown_label"]


@pytest.mark.slow
def test_split_fractions_are_deterministic(tmp_path, capsys):
    make_class_tree(str(tmp_path / "in"), per_class=20, broken=False)
    outs = []
    for run in range(2):
        out = str(tmp_path / f"out{run}")
        assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", out,
                         "--split_fractions", "train=0.75,validation=0.25")[0] == 0
        outs.append(out)
    counts = {k: v["records"] for k, v in load_manifest(outs[0])["splits"].items()}
    assert counts["train"] + counts["validation"] == 60 and 5 <= counts["validation"] <= 25
    for name in ("manifest.json", "shards.jsonl"):
        assert open(os.path.join(outs[0], name), "rb").read() == open(os.path.join(outs[1], name), "rb").read()


@pytest.mark.slow
@pytest.mark.parametrize("extra, fmt, channels", [
    (["--image_mode", "reencode", "--image_format", "png", "--resize", "20x10", "--grayscale"], b"png", 1),
    (["--image_mode", "reencode", "--resize", "16x16"], b"jpeg", 3),
    (["--image_mode", "raw", "--resize", "8x6"], b"raw", 3),
])
def test_reencode_and_raw_modes(tmp_path, capsys, extra, fmt, channels):
    make_class_tree(str(tmp_path / "in"), per_class=3, broken=False)
    out = str(tmp_path / "out")
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", out, *extra)[0] == 0
    exs = [ex for n in shard_files(out) for ex in examples(os.path.join(out, n))]
    assert len(exs) == 9
    width, height = (int(v) for v in extra[extra.index("--resize") + 1].split("x"))
    for ex in exs:
        assert (ex["image/format"], ex["image/width"], ex["image/height"], ex["image/channels"]) == (
            fmt, width, height, channels)
        if fmt == b"raw":
            assert len(ex["image/encoded"]) == width * height * channels
        else:
            img = Image.open(io.BytesIO(ex["image/encoded"]))
            assert img.size == (width, height) and len(img.getbands()) == channels


@pytest.mark.slow
@pytest.mark.parametrize("compression, suffix", [("gzip", ".gz"), ("zlib", ".zz")])
def test_compressed_shards(tmp_path, capsys, compression, suffix):
    make_class_tree(str(tmp_path / "in"), per_class=4, broken=False)
    out = str(tmp_path / "out")
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", out,
                     "--compression", compression, "--num_shards", "2")[0] == 0
    names = shard_files(out)
    assert names == [f"train-0000{i}-of-00002.tfrecord{suffix}" for i in range(2)]
    assert not [n for n in os.listdir(out) if n.endswith(".idx")]
    # No .idx for compressed shards; index/ holds their keys files only.
    assert sorted(os.listdir(os.path.join(out, "index"))) == [f"{name}.keys" for name in names]
    manifest = load_manifest(out)
    for shard in manifest["splits"]["train"]["shards"]:
        path = os.path.join(out, shard["file"])
        assert crc32c_file(path) == shard["crc32c"] and os.path.getsize(path) == shard["bytes"]
        assert len(records(path)) == shard["records"]
    assert manifest["records"] == 12


def test_too_many_bad_inputs_fails_and_publishes_nothing(tree, tmp_path, capsys):
    root = tree
    out = str(tmp_path)
    status, _, err = run_build(capsys, "--input", root, "--output_dir", out, "--shard_size_mb", SHARD_MB)
    assert status == 1
    *_, cause, kept = err.strip().splitlines()
    assert "3 of 39 inputs" in cause and "--max_bad_fraction" in cause
    assert kept.startswith("build_shards: staged work kept in ")  # a rerun with a higher bound resumes it
    assert len(dead_letters(out)) == 3
    assert sorted(os.listdir(out)) == [".staging", "dead_letters.jsonl"]


@pytest.mark.parametrize("argv, message", [
    ([], "--input is required"),
    (["--input", "/no/such/folder", "--output_dir", "x"], "does not exist"),
    (["--input", ".", "--output_dir", "x", "--shard_size_mb", "0"], "must be between"),
    (["--input", ".", "--output_dir", "x", "--image_mode", "fancy"], "invalid choice"),
    (["--input", ".", "--output_dir", "x", "--resize", "12"], "WIDTHxHEIGHT"),
    (["--input", ".", "--output_dir", "x", "--split_fractions", "train=0.5"], "sum to 1"),
    (["--input", ".", "--output_dir", "x", "--split", "../up"], "must match"),
    (["--input", ".", "--output_dir", "x", "--resize", "4x4"], "need --image_mode"),
    (["--input", ".", "--output_dir", "x", "--max_bad_fraction", "2"], "between 0 and 1"),
    (["--input", ".", "--output_dir", "x", "--label_regex", "("], "does not compile"),
    (["--input", ".", "--output_dir", "x", "--shard-size-mb", "0"], "must be between"),  # --shard_size_mb
    (["--input", ".", "--output_dir", "x", "--shard_sise_mb", "3"],
     "unknown flag --shard_sise_mb; did you mean --shard_size_mb?"),
    (["--input", ".", "--output_dir", "x", "data/extra"], "unexpected argument 'data/extra'"),
])
def test_bad_flags_fail_at_once_with_one_line(capsys, argv, message):
    status, out, err = run_build(capsys, *argv)
    assert status == 2
    lines = [l for l in err.splitlines() if l.startswith("build_shards:")]
    assert len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err


@pytest.mark.slow
def test_the_summary_counts_the_seconds_from_the_process_start(built, tmp_path):
    # Importing Beam and the job's modules and starting the pipeline take seconds a person waits too.
    import re
    import subprocess
    import sys

    root, _, _, _ = built
    argv = ["tfrecord-shards", "build", "--input", root, "--output_dir", str(tmp_path / "out"),
            "--max_bad_fraction", "0.2"]
    code = ("import sys, time\n"
            f"sys.argv = {argv!r}\n"
            "from beam_jobs.cli.main import main\n"
            "status = main()\n"
            "from beam_jobs.cli.started import process_started\n"
            "print('status', status, 'seconds', time.monotonic() - process_started())\n")
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", code], cwd=here, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": here})
    reported = float(re.search(r"^Published .* in ([\d.]+) s \(", done.stdout, re.M).group(1))
    status, lived = done.stdout.split()[-3], float(done.stdout.split()[-1])
    assert status == "0", done.stderr
    # All of it up to the summary, start-up included (the summary rounds to 0.1 s).
    assert lived - 0.5 <= reported <= lived + 0.05, done.stdout


@pytest.mark.slow
def test_flags_spelt_with_dashes_are_the_declared_flags(built, tmp_path, capsys):
    # The job's own flags and Beam's (--direct_num_workers, --temp_location), as gsutil and tfds spell flags.
    root, expected, _, _ = built
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", root, "--output-dir", out, "--num-shards=2", "--max-bad-fraction",
                               "0.2", "--direct-num-workers", "1", "--temp-location", str(tmp_path))
    assert status == 0, err
    manifest = load_manifest(out)
    assert manifest["options"]["num_shards"] == 2
    assert len(manifest["splits"]["train"]["shards"]) == 2


def test_duplicate_paths_and_duplicate_images(tmp_path, capsys):
    import random
    rng = random.Random(9)
    a, b = tmp_path / "a", tmp_path / "b"
    same = image_bytes("rose", "JPEG", rng)
    write(str(a / "rose" / "x.jpg"), image_bytes("rose", "JPEG", rng))
    write(str(b / "rose" / "x.jpg"), image_bytes("rose", "JPEG", rng))  # same relative path
    write(str(a / "rose" / "one.jpg"), same)
    write(str(a / "rose" / "two.jpg"), same)  # same bytes, other name
    write(str(a / "daisy" / "ok.jpg"), image_bytes("daisy", "JPEG", rng))
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", str(a), "--input", str(b), "--output_dir", out,
                             "--max_bad_fraction", "1")
    assert status == 0
    # Progress counts the records to write without the dropped copy: it ends at 100%, not 2 of 3.
    writing = [line for line in err.splitlines() if "writing shards:" in line]
    assert writing and "writing shards: 2 of 2 records (100%)" in writing[-1], err
    dead = sorted((os.path.relpath(d["path"], tmp_path), d["reason"]) for d in dead_letters(out))
    assert dead == [("a/rose/two.jpg", "duplicate_image"), ("a/rose/x.jpg", "duplicate_path"),
                    ("b/rose/x.jpg", "duplicate_path")]
    names = sorted(ex["image/filename"] for n in shard_files(out) for ex in examples(os.path.join(out, n)))
    assert names == [b"daisy/ok.jpg", b"rose/one.jpg"]


@pytest.mark.slow
def test_progress_leaves_out_duplicates_counted_in_worker_processes(tmp_path, capsys):
    """Copies dropped in both worker processes, one shard written by one of them: the report
    still leaves every copy out and ends at 100%."""
    import random
    rng = random.Random(5)
    for i in range(12):  # 12 images, each twice: the copies are spread over both workers
        data = image_bytes("rose", "JPEG", rng)
        for copy in ("a", "b"):
            write(str(tmp_path / "in" / "rose" / f"{i}{copy}.jpg"), data)
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir",
                               str(tmp_path / "out"), "--max_bad_fraction", "1", "--num_shards", "1",
                               "--direct_num_workers", "2", "--direct_running_mode", "multi_processing")
    assert status == 0
    writing = [line for line in err.splitlines() if "writing shards:" in line]
    assert writing and "writing shards: 12 of 12 records (100%)" in writing[-1], err


def test_more_shards_than_records_gives_empty_shards(tmp_path, capsys):
    make_class_tree(str(tmp_path / "in"), classes=("rose",), per_class=2, broken=False)
    out = str(tmp_path / "out")
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", out, "--num_shards", "4")[0] == 0
    assert len(shard_files(out)) == 4
    counts = [s["records"] for s in load_manifest(out)["splits"]["train"]["shards"]]
    assert sorted(counts) == [0, 0, 1, 1]


@pytest.mark.parametrize("mode", ["tf", "reencode"])
def test_a_source_rewritten_after_it_was_read_leaves_the_record_as_read(tmp_path, capsys, monkeypatch,
                                                                        mode):
    """Each image is read once: its record holds the bytes that were checked and hashed, however
    the file changes after that (before, the writer read it again and refused a changed file)."""
    from apache_beam.io.filesystems import FileSystems

    root = tmp_path / "in"
    make_class_tree(str(root), classes=("daisy",), per_class=3, broken=False)
    victim = root / "daisy" / sorted(os.listdir(root / "daisy"))[0]
    create = FileSystems.create
    original = victim.read_bytes()

    def rewrite_then_create(path, *args, **kwargs):
        if ".staging" in path and ".tfrecord." in path:  # the writer starts: reading is over
            victim.write_bytes(b"not an image any more")
        return create(path, *args, **kwargs)

    monkeypatch.setattr(FileSystems, "create", staticmethod(rewrite_then_create))
    out = str(tmp_path / "out")
    status, _, err = run_build(capsys, "--input", str(root), "--output_dir", out, "--image_mode", mode)
    assert status == 0, err
    assert victim.read_bytes() == b"not an image any more"
    [record] = [e for name in shard_files(out) for e in examples(os.path.join(out, name))
                if e["image/filename"] == f"daisy/{victim.name}".encode()]
    assert record["image/key/sha256"] == hashlib.sha256(original).hexdigest().encode()
    if mode == "tf":
        assert record["image/encoded"] == original


@pytest.mark.slow
def test_each_input_is_opened_once(tmp_path, capsys, monkeypatch):
    """The build reads every image once: the record goes to a run file and is copied from there. Its resume
    stamp comes from the fstat of that opening, not from a stat of its path."""
    from transforms import inspect_images

    root = tmp_path / "in"
    make_class_tree(str(root), per_class=4, broken=True)
    opened: list[str] = []
    stated: list[str] = []  # inputs stated by path for their resume stamp
    open_local, input_stamp = inspect_images.open_local, inspect_images.input_stamp

    def counting(path):
        opened.append(path)
        return open_local(path)

    def counting_stamps(path):
        stated.append(path)
        return input_stamp(path)

    monkeypatch.setattr(inspect_images, "open_local", counting)
    monkeypatch.setattr(inspect_images, "input_stamp", counting_stamps)
    for mode in ("tf", "reencode"):
        opened.clear()
        stated.clear()
        out = str(tmp_path / f"out-{mode}")
        status, _, err = run_build(capsys, "--input", str(root), "--output_dir", out, "--image_mode", mode,
                                   "--max_bad_fraction", "0.5", "--num_shards", "3")
        assert status == 0, err
        assert len(opened) == len(set(opened)) == 15, sorted(opened)
        assert stated == []  # each stamp from the fstat of the input's opening (15 stats by path before)
        assert not os.path.exists(os.path.join(out, ".staging"))  # run files go with the staging folder


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["stretch", "fit", "crop"])
def test_resize_mode_sizes_follow_in_the_records(tmp_path, mode):
    root = tmp_path / "images"
    for label, size in (("wide", (40, 20)), ("tall", (20, 40))):
        img = Image.new("RGB", size, (90, 120, 200))
        write(str(root / label / "a.png"), _png(img))
    out = str(tmp_path / "out")
    from beam_jobs import build_shards
    assert build_shards.run(["--input", str(root), "--output_dir", out, "--image_mode", "raw",
                             "--resize", "10x10", "--resize_mode", mode]) == 0
    sizes = {}
    for name in shard_files(out):
        for ex in examples(os.path.join(out, name)):
            sizes[ex["image/class/text"].decode()] = (ex["image/width"], ex["image/height"])
            assert len(ex["image/encoded"]) == ex["image/width"] * ex["image/height"] * 3
    expected = {"stretch": {"wide": (10, 10), "tall": (10, 10)},
                "fit": {"wide": (10, 5), "tall": (5, 10)},
                "crop": {"wide": (10, 10), "tall": (10, 10)}}[mode]
    assert sizes == expected
    assert load_manifest(out)["options"]["resize_mode"] == mode


def test_resize_mode_needs_resize(tmp_path, capsys):
    (tmp_path / "in" / "cat").mkdir(parents=True)
    (tmp_path / "in" / "cat" / "a.png").write_bytes(b"not read: the flags are refused first")
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "o"),
                               "--image_mode", "raw", "--resize_mode", "fit")
    assert status == 2 and "--resize_mode needs --resize" in err


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_summary_counts_agree_with_their_nouns(tmp_path, capsys):
    img = Image.new("RGB", (8, 8), (1, 2, 3))
    write(str(tmp_path / "in" / "only" / "a.png"), _png(img))
    status, out, _ = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"))
    assert status == 0
    assert "Published 1 record to" in out and "(0 dead letters;" in out
    assert "train: 1 record in 1 shard," in out and "labels: 1 class;" in out


def _damaged_inputs(root) -> dict[str, bytes]:
    """A good JPEG and PNG, and damage each validation level sees differently."""
    from tests import imagegen

    png = bytearray(imagegen.png("RGB"))
    png[png.index(b"IEND") - 5] ^= 0xFF  # the last IDAT's CRC: Pillow's decoder never reads it
    jpeg = imagegen.jpeg("RGB")
    files = {"a/good.jpg": jpeg, "a/good.png": imagegen.png("RGB"), "a/crc.png": bytes(png),
             "a/cut.jpg": jpeg[:-2]}  # only EOI missing
    for rel, data in files.items():
        write(str(root / rel), data)
    return files


@pytest.mark.parametrize("flags", [["--validate", "structure"], []], ids=["structure", "default"])
def test_validate_structure_refuses_damage_naming_offset(tmp_path, capsys, flags):
    root = tmp_path / "in"
    _damaged_inputs(root)
    out = str(tmp_path / "out")
    status, _, _ = run_build(capsys, "--input", str(root), "--output_dir", out,
                             "--max_bad_fraction", "1", *flags)
    assert status == 0
    dead = {os.path.relpath(d["path"], root): d for d in dead_letters(out)}
    assert sorted(dead) == ["a/crc.png", "a/cut.jpg"]
    assert dead["a/crc.png"]["reason"] == "corrupt_image"
    assert "PNG chunk IDAT at offset 33: CRC mismatch" in dead["a/crc.png"]["error"]
    assert dead["a/cut.jpg"]["reason"] == "truncated"
    assert "JPEG ends at byte" in dead["a/cut.jpg"]["error"] and "without EOI" in dead["a/cut.jpg"]["error"]
    kept = sorted(ex["image/filename"].decode() for name in shard_files(out)
                  for ex in examples(os.path.join(out, name)))
    assert [os.path.basename(k) for k in kept] == ["good.jpg", "good.png"]
    manifest = load_manifest(out)
    assert manifest["options"]["validate"] == "structure"


def test_validate_decode_keeps_damage_structure_refuses(tmp_path, capsys):
    """Pillow decodes the PNG with a damaged IDAT CRC, which TensorFlow's libpng refuses."""
    root = tmp_path / "in"
    _damaged_inputs(root)
    out = str(tmp_path / "out")
    assert run_build(capsys, "--input", str(root), "--output_dir", out, "--max_bad_fraction", "1",
                     "--validate", "decode")[0] == 0
    dead = {os.path.relpath(d["path"], root): d["reason"] for d in dead_letters(out)}
    assert dead == {"a/cut.jpg": "truncated"}  # Pillow notices a missing EOI in this small file
    assert sum(len(records(os.path.join(out, name))) for name in shard_files(out)) == 3


def _listing_steps(tmp_path, *inputs: str) -> list[str]:
    """The labels of the steps ``list_inputs`` wires for these inputs (the pipeline is not run)."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_jobs import build_shards
    from beam_jobs.cli import jobs
    from beam_jobs.cli.config import BuildConfig
    from beam_jobs.cli.declared import flag_parser

    argv = [arg for path in inputs for arg in ("--input", path)] + ["--output_dir", str(tmp_path / "out")]
    cfg = build_shards.make_config(BuildConfig.from_flags(vars(flag_parser(jobs.BUILD).parse_args(argv))),
                                   PipelineOptions([]))
    p = beam.Pipeline()
    build_shards.list_inputs(p, cfg)
    labels = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def enter_composite_transform(self, node):
            labels.append(node.full_label)

    p.visit(Visitor())
    return labels


def test_one_folder_input_is_not_checked_for_duplicate_paths(tmp_path):
    import random

    # A folder lists each relative path once: the check, a shuffle of every input, could find none.
    for folder in ("a", "b"):
        write(str(tmp_path / folder / "rose" / "x.jpg"), image_bytes("rose", "JPEG", random.Random(1)))
    assert not any("RejectDuplicatePaths" in label for label in _listing_steps(tmp_path, str(tmp_path / "a")))
    assert any("RejectDuplicatePaths" in label
               for label in _listing_steps(tmp_path, str(tmp_path / "a"), str(tmp_path / "b")))
