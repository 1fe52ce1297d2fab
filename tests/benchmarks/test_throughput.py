"""The throughput harness: the cross-decoder check, the build baselines, every case wired."""

from __future__ import annotations

import glob
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import throughput
from tests.benchmarks.harness_checks import assert_cases_wired
from tests.shard_fixtures import make_class_tree, run_build
from transforms.example.codec import decode_example
from transforms.tfrecord.framing import iter_records


def test_reference_holds_tf_decodes_at_the_recorded_sizes(tmp_path, capsys):
    make_class_tree(str(tmp_path / "in"), per_class=3, broken=False)
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"))
    assert status == 0, err
    ref = throughput.reference([str(tmp_path / "out" / "*.tfrecord")])
    assert sorted(ref) == sorted(f"{label}/{label}_{i:03d}.{'png' if i == 2 else 'jpg'}"
                                 for label in ("daisy", "rose", "tulip") for i in range(3))
    for entry in ref.values():
        assert entry["shape"] == entry["recorded"]
        assert len(entry["blocks"]) == 16 * 16 * 3 and len(entry["sha256"]) == 64
    assert {entry["format"] for entry in ref.values()} == {"jpeg", "png"}


@pytest.mark.parametrize("shape", [(1, 1, 3), (5, 40, 3), (64, 48, 3)])
def test_block_means_of_a_flat_image_are_its_value_and_defined_for_tiny_images(shape):
    blocks = throughput._blocks(np.full(shape, 77, dtype=np.uint8))
    assert len(blocks) == 768 and all(not math.isnan(v) and v == 77 for v in blocks)


def test_block_means_tell_a_turned_image_from_its_original():
    image = np.zeros((64, 64, 3), dtype=np.uint8)
    image[:32] = 200  # top half bright
    upright, turned = throughput._blocks(image), throughput._blocks(np.rot90(image, 2))
    assert max(abs(a - b) for a, b in zip(upright, turned)) == 200


def test_one_of_reference_and_check_is_required(tmp_path):
    for both in ([], ["--reference", str(tmp_path / "r.json"), "--check", str(tmp_path / "r.json")]):
        with pytest.raises(SystemExit) as stop:
            throughput.consumer_decode_main(["--shards", str(tmp_path / "*.tfrecord"), *both])
        assert stop.value.code == 2
    assert not os.listdir(tmp_path)


def test_every_case_is_wired(capsys):
    assert_cases_wired(throughput.CASES, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("baseline", ["beam_build", "pool_build", "floor"])
def test_build_baselines_write_every_file_once(baseline, tmp_path):
    """The plain Beam pipeline, the Pool loop and the floor, as ``cpu_per_gb`` runs them."""
    make_class_tree(str(tmp_path / "in"), per_class=2, broken=False)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "benchmarks.throughput", "baseline", baseline, "--input",
                           str(tmp_path / "in"), "--output_dir", str(out), "--num_shards", "2",
                           "--processes", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1][len("RESULT "):])
    assert result["records"] == 6
    records = []
    for path in sorted(glob.glob(str(out / "*.tfrecord"))):
        with open(path, "rb") as fh:
            records += [data for _, data in iter_records(fh, path)]
    assert len(records) == 6
    if baseline != "floor":
        assert sorted(decode_example(r)["image/class/text"][1][0] for r in records) == sorted(
            label.encode() for label in ("daisy", "rose", "tulip") for _ in range(2))
    if baseline == "beam_build":
        assert result["example_classes"].startswith("tensorflow")  # protobuf's generated classes


@pytest.mark.slow
def test_the_beam_baseline_writes_the_same_examples_without_tensorflow(tmp_path):
    """``fixed_cost``'s Beam pipeline: the project's Example classes, so it pays no TensorFlow import."""
    make_class_tree(str(tmp_path / "in"), per_class=1, broken=False)
    probe = ("import sys; from benchmarks.throughput import baseline_main; baseline_main(sys.argv[1:]); "
             "print('TF', 'tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, "beam_build", "--input", str(tmp_path / "in"),
                           "--output_dir", str(tmp_path / "out"), "--num_shards", "1", "--example_classes",
                           "project"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-2][len("RESULT "):]) == {"example_classes": "transforms.example.messages",
                                                      "records": 3}
    assert lines[-1] == "TF False"
    with open(glob.glob(str(tmp_path / "out" / "*.tfrecord"))[0], "rb") as fh:
        records = [data for _, data in iter_records(fh, "out")]
    assert sorted(decode_example(r)["image/class/text"][1][0] for r in records) == [b"daisy", b"rose", b"tulip"]


@pytest.mark.slow
def test_the_duplicate_check_case_prints_its_cost_per_image(capsys):
    assert throughput.duplicate_check_main(["--images", "200", "--rounds", "1"]) == 0
    printed = capsys.readouterr().out
    assert re.fullmatch(r"this checkout: -?\d+\.\d us per image \(rounds: -?\d+\.\d\)\n", printed), printed


@pytest.mark.slow
def test_the_stage_costs_case_splits_a_builds_cpu_by_fused_stage(tmp_path):
    """Two small builds, each timing its bundles by stage: the inspect and write stages are named, and
    in each build the stages' CPU adds up to no more than the whole process's."""
    make_class_tree(str(tmp_path / "small"), per_class=2, broken=False)
    make_class_tree(str(tmp_path / "large"), per_class=6, broken=False)
    done = subprocess.run([sys.executable, "-m", "benchmarks.throughput", "stage_costs", "--rounds", "1",
                           "--folders", str(tmp_path / "small"), str(tmp_path / "large")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    stages = report["cpu_s_per_gb"]
    assert "Inspect-InspectImage-ParDo-_InspectImageFn" in stages and "Write/GroupByShard" in stages, stages
    runs = report["runs"]["small"] + report["runs"]["large"]
    assert len(runs) == 2
    for run in runs:
        assert 0 < sum(run["stages"].values()) <= run["process"]
    assert "| the whole process |" in done.stdout


def test_a_fused_stage_is_named_by_its_first_step_that_is_not_a_collection_read():
    name = ("((((ref_PCollection_PCollection_17/Read)+(ref_AppliedPTransform_Inspect-InspectImage-ParDo-"
            "_InspectImageFn-_32))+(ref_AppliedPTransform_RejectDuplicateImages-PackByContent_34))")
    assert throughput._stage_label(name) == "Inspect-InspectImage-ParDo-_InspectImageFn"
    assert throughput._stage_label("((Write/GroupByShard/Group/Read)+(ref_AppliedPTransform_Write-Unpack_55))") \
        == "Write/GroupByShard"
