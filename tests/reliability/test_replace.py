"""No silent loss: a run never replaces a published split built from other inputs unasked.

A second day's ``build --input new/ --split train`` into a folder whose
``train`` split was built from ``--input photos/`` replaced 2715 records with 100, exit 0, and
its summary counted the kept splits' records as the run's inputs. Each case runs the real job
modules on real image files:

- a run that would replace a split built from other inputs is refused (exit 2, one line naming
  the split, its records, the inputs that built it and ``--replace``), before any input is read
  where the splits are known at start (``--split``, reshard's shard names), else once the inputs
  are listed (split folders, manifests' split column), the published set byte for byte as before;
- rebuilding from the same inputs needs no flag; ``--replace`` rebuilds from other ones;
- the summary names every split the run replaced (old -> new records) and counts as inputs
  only what the run read.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.reliability_support import tree_state
from tests.shard_fixtures import load_manifest, make_class_tree, run_build
from tests.trees import Part
from transforms.shardset.manifest import MANIFEST_NAME

FLAGS = ["--num_shards", "1"]


# photos/ (12 images), new/ (6), val/ (6), more/ (6, other classes) of class folders;
# split folders a/ (train 6, validation 6) and b/ (train 9) (tests/trees.py).
TREES = {
    "photos": (Part(per_class=4, seed=1),),
    "new": (Part(per_class=2, seed=2),),
    "val": (Part(per_class=2, seed=3),),
    "more": (Part(classes=("iris", "lily"), per_class=3, seed=8),),
    "a": (Part("train", per_class=2, seed=4), Part("validation", per_class=2, seed=5)),
    "b": (Part("train", per_class=3, seed=6),),
}


def _build(capsys, *argv: str) -> tuple[int, str, str]:
    return run_build(capsys, *argv, *FLAGS)


def _reshard(capsys, *argv: str) -> tuple[int, str, str]:
    from beam_jobs import reshard

    capsys.readouterr()
    status = reshard.run([*argv, *FLAGS])
    out, err = capsys.readouterr()
    return status, out, err


def _published(capsys, out: str, trees) -> None:
    """out/ holds train (12 records, from photos/) and validation (6, from val/)."""
    status, _, err = _build(capsys, "--input", trees["photos"], "--output_dir", out, "--split", "train")
    assert status == 0, err
    status, _, err = _build(capsys, "--input", trees["val"], "--output_dir", out, "--split", "validation")
    assert status == 0, err


def _no_pipeline(monkeypatch, module) -> None:
    """Fails the run if it builds its pipeline: the refusal must come before any input is read."""
    def refuse(*_):
        raise AssertionError("the pipeline was built: inputs would be read")

    monkeypatch.setattr(module, "build_pipeline", refuse)


def _last_line(err: str) -> str:
    return err.strip().splitlines()[-1]


@pytest.mark.slow
def test_a_build_from_other_inputs_into_a_published_split_is_refused_before_reading(
        tmp_path, capsys, monkeypatch, trees):
    from beam_jobs import build_shards

    out = str(tmp_path / "out")
    _published(capsys, out, trees)
    before = tree_state(str(tmp_path))
    _no_pipeline(monkeypatch, build_shards)
    status, stdout, err = _build(capsys, "--input", trees["new"] + "/", "--output_dir", out, "--split", "train")
    assert status == 2, err
    assert stdout == ""
    line = _last_line(err)
    assert line == (f"build_shards: error: --output_dir {out} holds split 'train' (12 records) built from "
                    f"--input {trees['photos']}; this run would replace it with one built from --input "
                    f"{trees['new']}/: pass --replace to rebuild split 'train' from these inputs, or "
                    "choose another --split or --output_dir (nothing was changed)")
    assert len(err.strip().splitlines()) == 1, err
    assert tree_state(str(tmp_path)) == before  # every file hashed: nothing written, no lock left


@pytest.mark.slow
def test_split_fractions_name_the_splits_a_build_writes(tmp_path, capsys, monkeypatch, trees):
    from beam_jobs import build_shards

    out = str(tmp_path / "out")
    _published(capsys, out, trees)
    before = tree_state(out)
    _no_pipeline(monkeypatch, build_shards)
    status, _, err = _build(capsys, "--input", trees["new"], "--output_dir", out,
                            "--split_fractions", "test=0.5,validation=0.5")
    assert status == 2 and "split 'validation' (6 records) built from --input " + trees["val"] in err, err
    assert tree_state(out) == before


@pytest.mark.slow
def test_rebuilding_from_the_same_inputs_needs_no_flag(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    status, _, err = _build(capsys, "--input", trees["photos"], "--input", trees["more"], "--output_dir", out)
    assert status == 0, err
    # The same inputs in another order, one with a trailing slash, other sharding.
    status, stdout, err = run_build(capsys, "--input", trees["more"], "--input", trees["photos"] + "/",
                                    "--output_dir", out, "--num_shards", "2")
    assert status == 0, err
    assert "  replaced split train: 18 -> 18 records\n" in stdout
    assert "written + dead-lettered = 18 inputs" in stdout
    assert load_manifest(out)["splits"]["train"]["num_shards"] == 2


@pytest.mark.slow
def test_replace_rebuilds_the_split_and_the_summary_names_it(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    _published(capsys, out, trees)
    status, stdout, err = _build(capsys, "--input", trees["new"], "--output_dir", out, "--split", "train",
                                 "--replace")
    assert status == 0, err
    lines = stdout.splitlines()
    assert "Published 6 records to" in lines[0] and "written + dead-lettered = 6 inputs" in lines[0], stdout
    assert lines[1] == "  replaced split train: 12 -> 6 records"
    assert lines[2].startswith("  train: 6 records in 1 shard")
    assert lines[3].startswith("  validation (kept): 6 records in 1 shard")
    manifest = load_manifest(out)
    assert {name: split["records"] for name, split in manifest["splits"].items()} == {"train": 6, "validation": 6}
    assert manifest["splits"]["train"]["built_from"] == [trees["new"]]
    assert manifest["splits"]["validation"]["built_from"] == [trees["val"]]  # carried over while kept
    assert manifest["written_splits"] == ["train"]
    assert "replace" not in manifest["options"]  # it says how to publish, not what


def _reads(monkeypatch) -> list[str]:
    """The inputs the build reads from now on (its DoFns run in this process)."""
    from transforms import inspect_images

    read, original = [], inspect_images.read_input

    def counted(source, *args, **kwargs):
        read.append(source.path)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(inspect_images, "read_input", counted)
    return read


@pytest.mark.slow
def test_a_split_folder_collision_is_refused_once_listed_before_any_image_is_read(
        tmp_path, capsys, monkeypatch, trees):
    out = str(tmp_path / "out")
    status, _, err = _build(capsys, "--input", trees["a"], "--output_dir", out)
    assert status == 0, err
    before = tree_state(str(tmp_path))
    # b/ holds split folders: its splits are known once it is listed, and the run stops there.
    read = _reads(monkeypatch)
    status, stdout, err = _build(capsys, "--input", trees["b"], "--output_dir", out)
    assert read == []
    assert status == 2, err
    assert stdout == ""
    assert _last_line(err) == (
        f"build_shards: error: --output_dir {out} holds split 'train' (6 records) built from --input "
        f"{trees['a']}; this run would replace it with one built from --input {trees['b']}: pass "
        "--replace to rebuild split 'train' from these inputs, or choose another --split or "
        "--output_dir (nothing was changed)")
    assert tree_state(str(tmp_path)) == before  # staged shards removed, lock released
    status, stdout, err = _build(capsys, "--input", trees["b"], "--output_dir", out, "--replace")
    assert status == 0, err
    assert "  replaced split train: 6 -> 9 records\n" in stdout
    assert "  validation (kept): 6 records" in stdout


@pytest.mark.slow
def test_the_summary_counts_the_inputs_this_run_read(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    status, _, err = _build(capsys, "--input", trees["photos"], "--output_dir", out, "--split", "train")
    assert status == 0, err
    broken = tmp_path / "val"
    make_class_tree(str(broken), per_class=30, broken=True, seed=7)  # 90 images, 3 of them broken
    status, stdout, err = _build(capsys, "--input", str(broken), "--output_dir", out, "--split", "validation",
                                 "--max_bad_fraction", "0.1")
    assert status == 0, err
    first = stdout.splitlines()[0]
    assert "Published 90 records to" in first, stdout
    assert "(3 dead letters; written + dead-lettered = 93 inputs)" in first, stdout
    assert "  train (kept): 12 records" in stdout and "replaced split" not in stdout


@pytest.mark.slow
def test_drop_other_splits_is_named_in_the_summary(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    _published(capsys, out, trees)
    status, stdout, err = _build(capsys, "--input", trees["photos"], "--output_dir", out, "--split", "train",
                                 "--drop_other_splits")
    assert status == 0, err
    assert "  replaced split train: 12 -> 12 records\n" in stdout
    assert "  removed split validation: 6 records (--drop_other_splits)\n" in stdout


@pytest.mark.slow
def test_reshard_into_a_split_other_inputs_built_is_refused(tmp_path, capsys, monkeypatch, trees):
    from beam_jobs import reshard

    source = str(tmp_path / "source")
    _published(capsys, source, trees)
    out = str(tmp_path / "out")
    status, _, err = _build(capsys, "--input", trees["new"], "--output_dir", out, "--split", "train")
    assert status == 0, err
    before = tree_state(out)
    pattern = os.path.join(source, "train-*")
    with monkeypatch.context() as patch:
        _no_pipeline(patch, reshard)
        status, stdout, err = _reshard(capsys, "--input", pattern, "--output_dir", out)
    assert status == 2, err
    assert _last_line(err) == (
        f"reshard: error: --output_dir {out} holds split 'train' (6 records) built from --input "
        f"{trees['new']}; this run would replace it with one built from --input {pattern}: pass "
        "--replace to rebuild split 'train' from these inputs, or choose another --split or "
        "--output_dir (nothing was changed)")
    assert tree_state(out) == before
    # Another split is fine; the same patterns again need no flag; --replace replaces.
    status, stdout, err = _reshard(capsys, "--input", os.path.join(source, "validation-*"), "--output_dir", out)
    assert status == 0 and "written + dead-lettered = 6 inputs" in stdout, err
    status, stdout, err = _reshard(capsys, "--input", os.path.join(source, "validation-*"), "--output_dir", out)
    assert status == 0 and "  replaced split validation: 6 -> 6 records\n" in stdout, err
    status, stdout, err = _reshard(capsys, "--input", pattern, "--output_dir", out, "--replace")
    assert status == 0, err
    assert "  replaced split train: 6 -> 12 records\n" in stdout
    assert "written + dead-lettered = 12 inputs" in stdout
    assert load_manifest(out)["splits"]["train"]["built_from"] == [pattern]


@pytest.mark.slow
def test_a_manifest_without_built_from_falls_back_to_its_options(tmp_path, capsys, trees):
    out = str(tmp_path / "out")
    status, _, err = _build(capsys, "--input", trees["photos"], "--output_dir", out, "--split", "train")
    assert status == 0, err
    path = os.path.join(out, MANIFEST_NAME)
    with open(path, encoding="utf-8") as fh:
        raw = json.load(fh)
    for split in raw["splits"].values():  # as a manifest written before splits recorded their inputs
        del split["built_from"]
    del raw["written_splits"]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(raw, fh, indent=2)
    status, _, err = _build(capsys, "--input", trees["new"], "--output_dir", out, "--split", "train")
    assert status == 2 and f"(12 records) built from --input {trees['photos']};" in err, err
    status, stdout, err = _build(capsys, "--input", trees["photos"], "--output_dir", out, "--split", "train")
    assert status == 0 and "  replaced split train: 12 -> 12 records\n" in stdout, err
    assert load_manifest(out)["splits"]["train"]["built_from"] == [trees["photos"]]


@pytest.mark.parametrize("name", ["build", "reshard"])
def test_replace_is_in_the_help_of_the_publishing_jobs(name, capsys):
    from beam_jobs.cli import main as cli

    module = __import__(cli.COMMANDS[name][0], fromlist=["run"])
    assert module.run(["--help"], prog=f"tfrecord-shards {name}") == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--replace build, reshard: rebuild a split --output_dir holds from these inputs" in text
