"""End-to-end tests of the plan job on real image folders: counts, rejects, shards, and nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import imagegen
from tests.shard_fixtures import load_manifest, make_class_tree, write
from transforms.images.image_codec import HEAD_BYTES
from transforms.shardset.disk_needs import size_text
from transforms.shardset.plan_report import START_UP_SECONDS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _photo(salt: int, fmt: str = "jpeg", size: tuple[int, int] = (48, 32)) -> bytes:
    """A distinct small image (``salt`` changes its pixels, so no two share a sha256)."""
    img = imagegen.image("RGB", *size, salt=salt)
    return imagegen.encode(img, "JPEG", quality=90) if fmt == "jpeg" else imagegen.encode(img, "PNG")


def _split_tree(root: str) -> dict:
    """ROOT/<split>/<class>/* with known counts, one broken file, one duplicate; returns the counts."""
    salt = 0
    counts = {"train": {"daisy": 7, "rose": 5}, "validation": {"daisy": 2, "rose": 3}}
    for split, classes in counts.items():
        for label, count in classes.items():
            for i in range(count):
                salt += 1
                fmt = "png" if i % 4 == 3 else "jpeg"
                write(os.path.join(root, split, label, f"{label}_{i}.{'png' if fmt == 'png' else 'jpg'}"),
                      _photo(salt, fmt))
    write(os.path.join(root, "train", "rose", "notes.jpg"), b"not an image at all\n")
    write(os.path.join(root, "train", "daisy", "copy.jpg"), _photo(1))  # the bytes of train/daisy/daisy_0.jpg
    return counts


def _listing(folder: str) -> dict[str, str] | None:
    """Every file and folder under ``folder`` (hidden ones too) with its sha256; None if it does not exist."""
    if not os.path.exists(folder):
        return None
    found = {}
    for where, dirs, files in os.walk(folder):
        for name in dirs:
            found[os.path.relpath(os.path.join(where, name), folder) + "/"] = ""
        for name in files:
            path = os.path.join(where, name)
            with open(path, "rb") as fh:
                found[os.path.relpath(path, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return found


def _plan(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import plan_build

    capsys.readouterr()
    status = plan_build.run(list(argv), prog="tfrecord-shards plan")
    out, err = capsys.readouterr()
    return status, out, err


def _build(capsys, *argv: str) -> int:
    from beam_jobs import build_shards

    status = build_shards.run(list(argv))
    capsys.readouterr()
    return status


def _command(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "beam_jobs.cli.main", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def split_tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("plan_in"))
    return root, _split_tree(root)


def test_plan_counts_splits_classes_formats_rejects_and_duplicates(split_tree, tmp_path, capsys):
    root, counts = split_tree
    out, plan_json = str(tmp_path / "out"), str(tmp_path / "plans" / "plan.json")
    status, text, err = _plan(capsys, "--input", root, "--output_dir", out, "--plan_json", plan_json,
                              "--max_bad_fraction", "0.2")
    assert status == 0, err
    plan = json.loads(open(plan_json, encoding="utf-8").read())
    found = plan["found"]["splits"]
    assert found["validation"] == counts["validation"]
    assert found["train"] == {"daisy": 7 + 1, "rose": 5 + 1}  # the copy and the text file were found too
    assert plan["found"]["inputs"] == 12 + 5 + 2
    assert plan["rejected"]["reasons"]["not_an_image"]["count"] == 1
    assert plan["rejected"]["reasons"]["not_an_image"]["examples"][0]["path"].endswith("train/rose/notes.jpg")
    assert plan["duplicates"] == {"duplicate_image": 1}
    assert {name: split["classes"] for name, split in plan["splits"].items()} == counts
    assert plan["formats"] == {"jpeg": 15, "png": 2}
    files = [os.path.join(w, n) for w, _, names in os.walk(root) for n in names]
    assert plan["input_bytes"] == sum(os.path.getsize(f) for f in files)
    assert plan["output_folder"] == {"exists": False, "published": {}, "new": ["train", "validation"],
                                     "replaced": [], "kept": [], "dropped": []}
    assert plan["refusals"] == []
    assert "not_an_image 1: " in text and "duplicates (same bytes, or the same path in a split): 1" in text
    assert "    train: 14 in 2 classes: daisy 8, rose 6" in text
    assert "an estimate" in text and "nothing was written" in text
    assert f"plan as JSON: {plan_json}" in text
    assert not os.path.exists(out)


def _bytes_of_splits(manifest: dict) -> dict[str, tuple[int, int, int]]:
    return {name: (split["records"], split["bytes"], len(split["shards"])) for name, split in manifest["splits"].items()}


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--shard_size_mb", "0.01"], ["--num_shards", "3"],
                                   ["--split_fractions", "train=0.6,test=0.4", "--shard_size_mb", "0.006"]],
                         ids=["shard_size", "num_shards", "split_fractions"])
def test_plan_gives_each_split_the_shards_the_build_then_writes(tmp_path, capsys, flags):
    """With --validate header the build checks what the plan checks: records, bytes and shards agree."""
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=10, broken=False)
    common = ["--input", root, "--validate", "header", *flags]
    plan_json = str(tmp_path / "plan.json")
    status, _, err = _plan(capsys, *common, "--output_dir", str(tmp_path / "out"), "--plan_json", plan_json)
    assert status == 0, err
    assert _build(capsys, *common, "--output_dir", str(tmp_path / "out")) == 0
    plan = json.loads(open(plan_json, encoding="utf-8").read())
    built = _bytes_of_splits(load_manifest(str(tmp_path / "out")))
    planned = {name: (s["records"], s["record_bytes"], s["num_shards"]) for name, s in plan["splits"].items()}
    assert planned == built
    assert len(built) == (2 if "--split_fractions" in flags else 1)
    assert plan["record_sizes_estimated"] == 0


def test_a_broken_image_the_header_passes_is_counted_by_the_build_only(tmp_path, capsys):
    """The plan says its rejects are an estimate: a truncated JPEG passes the header check."""
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=6, broken=True)  # cut.jpg (truncated), notes.jpg, empty.png
    out = str(tmp_path / "out")
    status, text, _ = _plan(capsys, "--input", root, "--output_dir", out, "--max_bad_fraction", "0.5")
    assert status == 0
    assert "empty_file 1:" in text and "not_an_image 1:" in text and "truncated" not in text
    assert "the build's --validate structure checks more and may reject more" in text


@pytest.mark.slow
def test_output_folder_is_untouched_and_its_set_compared(split_tree, tmp_path, capsys):
    root, _ = split_tree
    train_only = str(tmp_path / "train_in")
    shutil.copytree(os.path.join(root, "train"), train_only)
    other = str(tmp_path / "other_in")
    make_class_tree(other, per_class=4, broken=False)
    out = str(tmp_path / "out")
    assert _build(capsys, "--input", train_only, "--output_dir", out, "--max_bad_fraction", "0.2") == 0
    os.makedirs(os.path.join(out, ".keep_me"))  # hidden things of the user's stay as they are too
    before = _listing(out)
    published = load_manifest(out)["splits"]["train"]["records"]

    status, text, err = _plan(capsys, "--input", other, "--output_dir", out, "--split", "validation")
    assert status == 0, err
    assert f"output folder {out}: holds a published set (train {published} records)" in text
    assert "gains: validation (~12)" in text and f"keeps: train ({published} records)" in text
    assert "would refuse" not in text

    status, text, _ = _plan(capsys, "--input", other, "--output_dir", out, "--split", "validation",
                            "--drop_other_splits")
    assert status == 0 and f"loses (--drop_other_splits): train ({published} records)" in text

    status, text, _ = _plan(capsys, "--input", other, "--output_dir", out)
    assert status == 0 and f"replaces: train ({published} -> ~12 records)" in text
    assert f"the build would refuse: --output_dir {out} holds split 'train'" in text and "--replace" in text
    status, text, _ = _plan(capsys, "--input", other, "--output_dir", out, "--replace")
    assert status == 0 and "replaces: train" in text and "would refuse" not in text

    # The same images again in another split: the build would reject them as published copies.
    status, text, _ = _plan(capsys, "--input", train_only, "--output_dir", out, "--split", "test")
    assert status == 0
    assert f"cross_split_duplicate {published + 1}" in text and "the build would refuse" in text  # + the copy
    assert _listing(out) == before


def test_a_missing_output_folder_stays_missing(tmp_path, capsys):
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=2, broken=False)
    out = str(tmp_path / "not" / "there")
    status, text, err = _plan(capsys, "--input", root, "--output_dir", out)
    assert status == 0, err
    assert f"output folder {out}: does not exist yet; the build would publish train" in text
    assert not os.path.exists(tmp_path / "not")


@pytest.mark.parametrize("where", ["out/plan.json", "out", "in/plan.json"])
def test_plan_json_inside_the_output_or_input_folder_is_refused(tmp_path, capsys, where):
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=2, broken=False)
    before = _listing(root)
    status, _, err = _plan(capsys, "--input", root, "--output_dir", str(tmp_path / "out"),
                           "--plan_json", str(tmp_path / where))
    assert status == 2
    assert err.startswith("plan_build: error: --plan_json") and "elsewhere" in err and len(err.splitlines()) == 1
    assert not os.path.exists(tmp_path / "out") and _listing(root) == before


def test_rate_flag_sets_the_time_estimate(tmp_path, capsys):
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=3, broken=False)
    plan_json = str(tmp_path / "plan.json")
    status, text, _ = _plan(capsys, "--input", root, "--output_dir", str(tmp_path / "out"),
                            "--rate_mb_s", "0.001", "--plan_json", plan_json)
    assert status == 0
    plan = json.loads(open(plan_json, encoding="utf-8").read())
    # The start-up every build pays, then the bytes at the rate given.
    assert plan["build_seconds"] == pytest.approx(START_UP_SECONDS + plan["input_bytes"] / (0.001 * 1024 * 1024),
                                                  abs=0.06)
    assert "--rate_mb_s 0.001" in text


def test_plan_reads_each_input_once_and_only_its_head_when_it_cannot_be_an_image(tmp_path, capsys):
    """A large file that is not an image costs one head read, as in the build (read_source)."""
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=2, broken=False)
    write(os.path.join(root, "rose", "video.jpg"), b"\x00\x00\x00\x18ftypmp42" + b"\x00" * (4 * HEAD_BYTES))
    plan_json = str(tmp_path / "plan.json")
    status, _, _ = _plan(capsys, "--input", root, "--output_dir", str(tmp_path / "out"), "--plan_json", plan_json,
                         "--max_bad_fraction", "0.5")
    assert status == 0
    plan = json.loads(open(plan_json, encoding="utf-8").read())
    assert plan["rejected"]["reasons"]["not_an_image"]["count"] == 1
    images = [os.path.join(w, n) for w, _, names in os.walk(root) for n in names if n != "video.jpg"]
    assert plan["input_bytes"] == sum(os.path.getsize(f) for f in images)  # the video was not read whole


@pytest.mark.slow
@pytest.mark.parametrize("command", ["build", "append"])
def test_build_dry_run_on_the_local_runner_is_refused_naming_the_plan(tmp_path, command):
    """``build --dry_run`` on a local runner is no second spelling of ``plan``: one line, naming it."""
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=3, broken=False)
    out = str(tmp_path / "out")
    done = _command(command, "--input", root, "--output_dir", out, "--dry_run", "True")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--dry_run" in lines[0] and "tfrecord-shards plan" in lines[0], done.stderr
    assert done.stdout == ""
    assert not os.path.exists(out)


@pytest.mark.slow
def test_plan_subcommand_runs_and_help_lists_its_flags(tmp_path):
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=2, broken=False)
    done = _command("plan", "--input", root, "--output_dir", str(tmp_path / "out"), "--num_shards", "2")
    assert done.returncode == 0, done.stderr
    assert "train: 6 records" in done.stdout and "-> 2 shards" in done.stdout
    helped = _command("plan", "--help")
    assert helped.returncode == 0
    for flag in ("--plan_json", "--rate_mb_s", "--shard_size_mb", "--split_fractions", "--drop_other_splits"):
        assert flag in helped.stdout


def _stages(tmp_path, *argv: str) -> list[str]:
    """The fused stages the plan runs, counted as benchmarks/common.py child_usage counts them."""
    usage = tmp_path / f"usage-{len(list(tmp_path.iterdir()))}.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.common", "child_usage", str(usage), "--count_stages",
                           "beam_jobs.plan_build", *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (pipeline,) = json.loads(usage.read_text())["pipelines"]
    return pipeline["stage_names"]


@pytest.mark.slow
def test_a_plan_runs_few_stages(tmp_path, capsys):
    """8 fused stages (the build: 12); 13 when it also reads and counts a published set's keys.

    One writes the tally to storage even when nothing was listed (a missing tally is an error, so
    the combine keeps its default: Beam runs that as a stage of its own).
    """
    root = str(tmp_path / "in")
    make_class_tree(root, per_class=2, broken=False)
    out = str(tmp_path / "out")
    assert len(_stages(tmp_path, "--input", root, "--output_dir", out)) <= 8
    assert _build(capsys, "--input", root, "--output_dir", out) == 0
    assert len(_stages(tmp_path, "--input", root, "--output_dir", out, "--split", "test")) <= 13


@pytest.mark.slow
@pytest.mark.parametrize("new_per_class, fraction, publishes", [(4, "0.1", True), (1, "0.1", False), (0, "0.5", None)],
                         ids=["within", "over", "nothing_new"])
def test_plan_append_and_append_judge_rejections_alike(tmp_path, capsys, new_per_class, fraction, publishes):
    # Copies of published images are not bad inputs of an append: the plan counts them as the
    # append does. 12 published, an input of those 12 copies, 3 * new_per_class new images and
    # one broken file: the append judges 1 bad input of 1 + 3 * new_per_class.
    published, grown, out = str(tmp_path / "photos"), str(tmp_path / "grown"), str(tmp_path / "out")
    make_class_tree(published, per_class=4, broken=False, seed=1)
    assert _build(capsys, "--input", published, "--output_dir", out) == 0
    shutil.copytree(published, grown)
    if new_per_class:
        make_class_tree(os.path.join(str(tmp_path), "new"), per_class=new_per_class, broken=False, seed=2)
        for label in os.listdir(tmp_path / "new"):
            for name in os.listdir(tmp_path / "new" / label):
                shutil.copy(tmp_path / "new" / label / name, os.path.join(grown, label, "new_" + name))
    write(os.path.join(grown, "rose", "notes.jpg"), b"not an image at all\n")
    flags = ["--input", grown, "--output_dir", out, "--max_bad_fraction", fraction]
    plan_json = str(tmp_path / "plan.json")
    status, text, err = _plan(capsys, *flags, "--append", "--plan_json", plan_json)
    assert status == 0, err
    refusals = json.loads(open(plan_json, encoding="utf-8").read())["refusals"]
    from beam_jobs import append_shards

    capsys.readouterr()
    status = append_shards.run(flags)
    stdout, err = capsys.readouterr()
    if publishes is None:  # nothing but copies and a reject within the fraction: nothing to append
        assert status == 0 and stdout.startswith("Nothing to append: 12 of 13 inputs"), (stdout, err)
        assert refusals == [], text
    elif publishes:
        assert status == 0 and "appended to split train: 12 -> 24 records (+12)" in stdout, (stdout, err)
        assert refusals == [], text
    else:
        assert status == 1 and "more than --max_bad_fraction 0.1" in err, (stdout, err)
        assert any("more than --max_bad_fraction 0.1" in line for line in refusals), text


@pytest.fixture
def tiny_disk():
    """A 1 MiB tmpfs, mounted for the test and unmounted after."""
    import subprocess as sp
    import tempfile

    folder = tempfile.mkdtemp(prefix="tiny_disk_")
    done = sp.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", folder], capture_output=True, text=True)
    if done.returncode != 0:
        os.rmdir(folder)
        pytest.fail(f"cannot mount a tmpfs (this test needs root): {done.stderr.strip()}")
    try:
        yield folder
    finally:
        sp.run(["umount", folder], check=True)
        os.rmdir(folder)


@pytest.mark.slow
def test_plan_states_the_disk_the_build_needs_and_what_to_free(tmp_path, capsys, tiny_disk):
    import io
    import random

    from PIL import Image

    root, rng = str(tmp_path / "in"), random.Random(5)
    for i in range(6):  # noise: about 120 KB each, 0.7 MiB of records, about 1.4 MiB needed at the peak
        buf = io.BytesIO()
        Image.frombytes("RGB", (200, 200), rng.randbytes(200 * 200 * 3)).save(buf, format="PNG")
        write(os.path.join(root, f"class{i % 2}", f"{i}.png"), buf.getvalue())
    for out in (str(tmp_path / "out"), os.path.join(tiny_disk, "out")):
        plan_json = str(tmp_path / "plan.json")
        status, text, err = _plan(capsys, "--input", root, "--output_dir", out, "--plan_json", plan_json)
        assert status == 0, err
        plan = json.loads(open(plan_json, encoding="utf-8").read())
        records = sum(split["record_bytes"] for split in plan["splits"].values())
        disk = plan["disk"]
        assert disk["staged_bytes"] == disk["shard_bytes"] == records and disk["peak_bytes"] == 2 * records
        free = shutil.disk_usage(os.path.dirname(out)).free
        assert abs(disk["free_bytes"] - free) < 64 * 2**20
        line = next(line for line in text.splitlines() if line.startswith("  disk: "))
        assert f"in the file system of {out}" in line and f"records staged in {out}/.staging" in line, line
        if out.startswith(tiny_disk):  # 1 MiB free, about twice the records needed
            assert disk["peak_bytes"] > free and disk["more_bytes"] == disk["peak_bytes"] - disk["free_bytes"]
            assert "free about" in line and "more first" in line, line
        else:
            assert disk["more_bytes"] == 0 and "more first" not in line, line
        assert not os.path.exists(out)


@pytest.mark.slow
def test_plan_with_staging_dir_states_the_disk_needed_in_each_place(tmp_path, capsys, tiny_disk):
    import io
    import random

    from PIL import Image

    root, rng = str(tmp_path / "in"), random.Random(5)
    for i in range(6):  # 0.7 MiB of records: the shards fit in the 1 MiB disk, shards and run files do not
        buf = io.BytesIO()
        Image.frombytes("RGB", (200, 200), rng.randbytes(200 * 200 * 3)).save(buf, format="PNG")
        write(os.path.join(root, f"class{i % 2}", f"{i}.png"), buf.getvalue())
    out, stage, plan_json = os.path.join(tiny_disk, "out"), str(tmp_path / "stage"), str(tmp_path / "plan.json")
    status, text, err = _plan(capsys, "--input", root, "--output_dir", out, "--staging_dir", stage,
                              "--plan_json", plan_json)
    assert status == 0, err
    plan = json.loads(open(plan_json, encoding="utf-8").read())
    records = sum(split["record_bytes"] for split in plan["splits"].values())
    disk = plan["disk"]
    assert disk["staging_dir"] == stage and disk["staged_bytes"] == disk["shard_bytes"] == records
    assert disk["more_bytes"] == 0 and disk["staging_more_bytes"] == 0 and "peak_bytes" not in disk
    assert abs(disk["staging_free_bytes"] - shutil.disk_usage(str(tmp_path)).free) < 64 * 2**20
    assert abs(disk["free_bytes"] - shutil.disk_usage(tiny_disk).free) < 64 * 2**20
    line = next(line for line in text.splitlines() if line.startswith("  disk: "))
    assert line.startswith(f"  disk: about {size_text(records)} free needed in the file system of {stage} "
                           f"(--staging_dir: records staged in run files); ") and "more first" not in line, line
    assert (f", and about {size_text(records)} in that of {out} (shards staged in {out}/.staging, then published); "
            in line), line
    assert not os.path.exists(out) and not os.path.exists(stage)  # a plan writes nothing there
