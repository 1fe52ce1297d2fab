"""End-to-end tests of the reshard job (DirectRunner)."""

from __future__ import annotations

import gzip
import os
import random

import apache_beam as beam
import pytest

from tests.shard_fixtures import (crc32c_file, load_manifest, make_class_tree, records, run_build, sha256_file,
                                  shard_files)
from tests.helpers import encode_example
from transforms.tfrecord.framing import OVERHEAD, frame_record


def run_reshard(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import reshard

    capsys.readouterr()
    status = reshard.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def labelled_records(count: int, seed: int = 0) -> list[bytes]:
    """Examples of varied size carrying a label and its class name."""
    rng = random.Random(seed)
    names = ["cat", "dog", "emu"]
    out = []
    for i in range(count):
        label = rng.randrange(3)
        out.append(encode_example({"image/encoded": rng.randbytes(rng.choice([200, 3000, 9000])),
                                   "image/class/label": label, "image/class/text": names[label],
                                   "id": i}))
    return out


def write_tfrecord(path: str, datas: list[bytes]) -> str:
    with open(path, "wb") as fh:
        for data in datas:
            fh.write(frame_record(data))
    return path


def output_records(folder: str) -> list[bytes]:
    return [d for name in shard_files(folder) for _, d in records(os.path.join(folder, name))]


def assert_balanced(folder: str, split: str = "train") -> None:
    shards = load_manifest(folder)["splits"][split]["shards"]
    sizes = [s["bytes"] for s in shards]
    largest = max(len(d) + OVERHEAD for d in output_records(folder))
    assert max(sizes) - min(sizes) <= largest, sizes


@pytest.mark.slow
def test_beam_written_uneven_files_become_balanced_shards(tmp_path, capsys):
    datas = labelled_records(300)
    src = tmp_path / "beam"
    with beam.Pipeline() as p:
        _ = (p | beam.Create(datas)
             | beam.io.WriteToTFRecord(str(src / "part"), file_name_suffix=".tfrecord", num_shards=3))
    out = str(tmp_path / "out")
    status, stdout, err = run_reshard(capsys, "--input", str(src / "part-*"), "--output_dir", out,
                                      "--num_shards", "4", "--split", "train")
    assert status == 0, err
    assert sorted(output_records(out)) == sorted(datas)  # every record once, byte for byte
    assert_balanced(out)
    manifest = load_manifest(out)
    assert manifest["labels"] == ["cat", "dog", "emu"]
    assert open(os.path.join(out, "labels.txt")).read() == "cat\ndog\nemu\n"
    counts = manifest["splits"]["train"]["label_counts"]
    assert sum(counts.values()) == 300 and set(counts) == {"0", "1", "2"}
    assert manifest["feature_spec"]["image/class/label"] == "int64"
    assert "2146" not in stdout and "300 records" in stdout
    # Records without image/key/sha256: no keys file (a build beside them reads the shards for keys).
    assert not any("keys_crc32c" in shard for shard in manifest["splits"]["train"]["shards"])
    assert not [n for n in os.listdir(os.path.join(out, "index")) if n.endswith(".keys")]


def test_one_big_file_is_read_in_parallel_ranges_and_resharded(tmp_path, capsys):
    datas = labelled_records(400, seed=1)
    big = write_tfrecord(str(tmp_path / "big.tfrecord"), datas)
    out = str(tmp_path / "out")
    status, _, err = run_reshard(capsys, "--input", big, "--output_dir", out, "--shard_size_mb", "0.4",
                                 "--split", "train",
                                 "--direct_num_workers", "2", "--direct_running_mode", "multi_threading")
    assert status == 0, err
    assert sorted(output_records(out)) == sorted(datas)
    assert len(shard_files(out)) >= 3
    assert_balanced(out)


@pytest.mark.slow
def test_output_does_not_depend_on_input_file_boundaries(tmp_path, capsys):
    datas = labelled_records(120, seed=2)
    two, five = tmp_path / "two", tmp_path / "five"
    os.makedirs(two), os.makedirs(five)
    write_tfrecord(str(two / "a.tfrecord"), datas[:70])
    write_tfrecord(str(two / "b.tfrecord"), datas[70:])
    for i in range(5):
        write_tfrecord(str(five / f"{i}.tfrecord"), datas[i::5])
    outs = []
    for name, folder in (("x", two), ("y", five)):
        out = str(tmp_path / f"out_{name}")
        assert run_reshard(capsys, "--input", str(folder / "*.tfrecord"), "--output_dir", out,
                           "--num_shards", "3", "--seed", "5", "--split", "train")[0] == 0
        outs.append(out)
    assert shard_files(outs[0]) == shard_files(outs[1])
    for name in shard_files(outs[0]):
        assert sha256_file(os.path.join(outs[0], name)) == sha256_file(os.path.join(outs[1], name))


@pytest.mark.slow
def test_build_output_resharded_to_another_size(tmp_path, capsys):
    make_class_tree(str(tmp_path / "in"), per_class=15, broken=False)
    built = str(tmp_path / "built")
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", built, "--num_shards", "5")[0] == 0
    out = str(tmp_path / "out")
    # the pattern also matches .idx sidecars and manifest.json: they are left out
    status, _, err = run_reshard(capsys, "--input", built + "/*", "--output_dir", out, "--num_shards", "2",
                                 "--compression", "gzip")
    assert status == 0, err
    assert sorted(output_records(out)) == sorted(output_records(built))
    before, after = load_manifest(built), load_manifest(out)
    assert after["labels"] == before["labels"]
    assert after["splits"]["train"]["label_counts"] == before["splits"]["train"]["label_counts"]
    assert shard_files(out) == ["train-00000-of-00002.tfrecord.gz", "train-00001-of-00002.tfrecord.gz"]
    for shard in after["splits"]["train"]["shards"]:
        assert crc32c_file(os.path.join(out, shard["file"])) == shard["crc32c"] and "sha256" not in shard
        # The build's records carry their keys: the resharded shards get keys files (in index/, even gzipped).
        keys = open(os.path.join(out, "index", shard["file"] + ".keys"), "rb").read()
        assert len(keys) == 32 * shard["records"] and crc32c_file(
            os.path.join(out, "index", shard["file"] + ".keys")) == shard["keys_crc32c"]


def test_gzip_inputs_are_read_whole(tmp_path, capsys):
    datas = labelled_records(50, seed=3)
    with gzip.open(tmp_path / "in.tfrecord.gz", "wb") as fh:
        for data in datas:
            fh.write(frame_record(data))
    out = str(tmp_path / "out")
    assert run_reshard(capsys, "--input", str(tmp_path / "in.tfrecord.gz"), "--output_dir", out,
                       "--split", "train")[0] == 0
    assert sorted(output_records(out)) == sorted(datas)


def _corrupt_copy(tmp_path, datas):
    path = write_tfrecord(str(tmp_path / "bad.tfrecord"), datas)
    offset = sum(len(d) + OVERHEAD for d in datas[:10])  # start of record 10
    blob = bytearray(open(path, "rb").read())
    blob[offset + 12 + 5] ^= 0xFF  # a byte of record 10's data
    open(path, "wb").write(bytes(blob))
    return path, offset


def test_corrupt_record_stops_the_job_with_file_and_offset(tmp_path, capsys):
    datas = labelled_records(30, seed=4)
    path, offset = _corrupt_copy(tmp_path, datas)
    out = str(tmp_path / "out")
    status, _, err = run_reshard(capsys, "--input", path, "--output_dir", out, "--split", "train")
    assert status == 1
    last = err.strip().splitlines()[-1]
    assert path in last and f"byte {offset}" in last and "crc_mismatch" in last
    assert not os.path.exists(os.path.join(out, "manifest.json"))


def test_skip_corrupt_writes_the_damaged_span_and_goes_on(tmp_path, capsys):
    datas = labelled_records(30, seed=4)
    path, offset = _corrupt_copy(tmp_path, datas)
    out = str(tmp_path / "out")
    status, _, err = run_reshard(capsys, "--input", path, "--output_dir", out, "--skip_corrupt",
                                   "--split", "train", "--max_bad_fraction", "0.5")
    assert status == 0, err
    import json
    dead = [json.loads(l) for l in open(os.path.join(out, "dead_letters.jsonl"))]
    assert len(dead) == 1 and dead[0]["path"] == path and dead[0]["reason"] == "crc_mismatch"
    assert f"byte {offset}" in dead[0]["error"]
    kept = output_records(out)
    assert set(kept) <= set(datas) and datas[10] not in kept
    assert set(datas[:10]) <= set(kept)  # nothing before the damage is lost
    manifest = load_manifest(out)
    assert manifest["records"] + manifest["dead_letters"] == len(kept) + 1


def test_skip_corrupt_refuses_more_damage_than_max_bad_fraction_by_default(tmp_path, capsys):
    """A8: one damaged stretch among about 20 records is over build's default of 0.01."""
    datas = labelled_records(30, seed=4)
    path, _ = _corrupt_copy(tmp_path, datas)
    out = str(tmp_path / "out")
    status, _, err = run_reshard(capsys, "--input", path, "--output_dir", out, "--skip_corrupt",
                                 "--split", "train")
    assert status == 1
    assert "--max_bad_fraction 0.01" in err and "nothing was published" in err
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert not shard_files(out)


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [[], ["--max_bad_fraction", "1"]], ids=["default", "1"])
def test_skip_corrupt_with_every_input_damaged_publishes_nothing(tmp_path, capsys, fraction):
    """A8: every input damaged at its first record: no empty set is published, exit non-zero."""
    paths = []
    for i in range(2):
        path = write_tfrecord(str(tmp_path / f"in{i}.tfrecord"), labelled_records(5, seed=i))
        blob = bytearray(open(path, "rb").read())
        blob[12 + 3] ^= 0xFF  # a byte of the first record's data
        open(path, "wb").write(bytes(blob))
        paths.append(path)
    out = str(tmp_path / "out")
    status, _, err = run_reshard(capsys, "--input", str(tmp_path / "in*.tfrecord"), "--output_dir", out,
                                 "--skip_corrupt", "--split", "train", *fraction)
    assert status == 1
    lines = [line for line in err.splitlines() if line.startswith("reshard:")]
    assert len(lines) == 1, err
    assert "all 2 inputs were rejected" in lines[0] and "nothing was published" in lines[0]
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert not shard_files(out)
    assert all(open(p, "rb").read() for p in paths)  # inputs untouched


@pytest.mark.parametrize("argv, message", [
    ([], "--input is required"),
    (["--input", "/no/such/*.tfrecord", "--output_dir", "x"], "matches no file"),
    (["--input", "/etc/hostname", "--output_dir", "x", "--split", "a/b"], "must match"),
    (["--input", "/etc/hostname", "--output_dir", "/etc"], "lies in --output_dir"),
    (["--input", "/etc/hostname", "--output_dir", "x", "--skip-corupt"],
     "unknown flag --skip-corupt; did you mean --skip_corrupt?"),
])
def test_bad_flags_fail_with_one_line(capsys, argv, message):
    status, _, err = run_reshard(capsys, *argv)
    assert status == 2
    lines = [l for l in err.splitlines() if l.startswith("reshard:")]
    assert len(lines) == 1 and message in lines[0], err


def run_verify(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.slow
def test_reshard_output_passes_verify(tmp_path, capsys):
    make_class_tree(str(tmp_path / "in"), per_class=6, broken=False)
    built = str(tmp_path / "built")
    assert run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", built, "--num_shards", "3")[0] == 0
    out = str(tmp_path / "out")
    assert run_reshard(capsys, "--input", built + "/train-*", "--output_dir", out, "--num_shards", "2")[0] == 0
    status, stdout, err = run_verify(capsys, "--output_dir", out, "--decode_images")
    assert status == 0, stdout + err


@pytest.mark.slow
def test_reshard_of_other_examples_passes_verify_against_its_feature_spec(tmp_path, capsys):
    datas = labelled_records(40, seed=6)
    src = write_tfrecord(str(tmp_path / "src.tfrecord"), datas)
    out = str(tmp_path / "out")
    assert run_reshard(capsys, "--input", src, "--output_dir", out, "--num_shards", "2",
                       "--split", "train")[0] == 0
    assert load_manifest(out)["feature_spec"] == {
        "id": "int64", "image/class/label": "int64", "image/class/text": "bytes", "image/encoded": "bytes"}
    status, stdout, err = run_verify(capsys, "--output_dir", out)
    assert status == 0, stdout + err
    # a record without the spec's features is a schema problem
    shard = os.path.join(out, shard_files(out)[0])
    with open(shard, "ab") as fh:
        fh.write(frame_record(encode_example({"other": 1})))
    status, stdout, _ = run_verify(capsys, "--output_dir", out)
    assert status == 1 and "schema" in stdout


def _graph_bytes(folder, files: int) -> int:
    """Bytes of the reshard job's pipeline proto for ``files`` empty input files in ``folder``."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_jobs import reshard
    from beam_jobs.cli.config import ReshardConfig
    from beam_jobs.quiet_beam import all_options

    folder.mkdir()
    for i in range(files):
        (folder / f"train-{i:05d}.tfrecord").touch()
    options = PipelineOptions(["--input", str(folder / "train-*"), "--output_dir",
                               str(folder.parent / f"out-{files}"), "--split", "train"])
    cfg = reshard.make_config(ReshardConfig.from_flags(all_options(options)), options)
    assert len(cfg.files) == files  # matched to check them
    p = beam.Pipeline(options=options)
    reshard.build_pipeline(p, cfg)
    return len(p.to_runner_api().SerializeToString())


@pytest.mark.slow
def test_the_job_graph_does_not_grow_with_the_input_files(tmp_path):
    # Before, the matched files went into the graph (about 60 bytes each: 300 KB more for
    # 5,000 files); now the pipeline matches the patterns itself.
    assert abs(_graph_bytes(tmp_path / "many", 5000) - _graph_bytes(tmp_path / "few", 5)) < 1000
