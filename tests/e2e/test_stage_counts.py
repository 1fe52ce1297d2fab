"""How many fused stages the build job runs on the DirectRunner: each costs every worker a set-up.

Counted as ``benchmarks/scaling.py workers`` counts them (``benchmarks/common.py child_usage
--count_stages``: the stage list the FnApiRunner executes after fusion), in a
process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.imagegen import jpeg, png

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stages(tmp_path, module: str, *args: str) -> list[str]:
    usage = tmp_path / f"usage-{len(list(tmp_path.iterdir()))}.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.common", "child_usage", str(usage), "--count_stages",
                           module, *args], cwd=_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (pipeline,) = json.loads(usage.read_text())["pipelines"]
    return pipeline["stage_names"]


def _images(root, layout: str) -> None:
    for s, split in enumerate(("train", "test") if layout == "splits" else ("",)):
        for c, name in enumerate(("daisy", "rose", "tulip")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(4):
                data = jpeg(size=(16 + i, 12 + c + 3 * s)) if i % 2 else png(size=(10 + i, 8 + c + 3 * s))
                (folder / f"{i}.{'jpg' if i % 2 else 'png'}").write_bytes(data)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["classes", "splits"])
def test_a_folder_build_runs_at_most_twelve_stages(tmp_path, layout) -> None:
    _images(tmp_path / "in", layout)
    names = _stages(tmp_path, "beam_jobs.build_shards", "--input", str(tmp_path / "in"),
                    "--output_dir", str(tmp_path / "out"), "--num_shards", "3")
    # The copies of an image are decided, kept or dead-lettered, in the one stage that reads
    # their packed group (KeepOneCopy). The eleventh and twelfth: publishing's renames run on
    # every worker (MoveStaged, after the step that writes the journal hands them out) before
    # one step writes the manifest (CommitPublish, which must wait for every rename), where one
    # publish worker did them all. The near-duplicate check (off by default) would add one (below).
    assert len(names) <= 12, "\n".join(names)
    assert not any("GroupNearPairs" in name for name in names)
    assert sum("MoveStaged" in name for name in names) == 1 and "CommitPublish" in names[-1]
    assert (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_a_build_from_a_manifest_and_with_published_splits_stays_small(tmp_path) -> None:
    _images(tmp_path / "in", "classes")
    for i in range(3):
        (tmp_path / f"new{i}.png").write_bytes(png(size=(40 + i, 30)))
    rows = ["path,label"] + [f"{tmp_path / f'new{i}.png'},rose" for i in range(3)]
    (tmp_path / "list.csv").write_text("\n".join(rows) + "\n")
    # A split of its own first, so that the second run also reads the published images' keys.
    _stages(tmp_path, "beam_jobs.build_shards", "--input", str(tmp_path / "in"),
            "--output_dir", str(tmp_path / "out"), "--split", "validation")
    names = _stages(tmp_path, "beam_jobs.build_shards", "--input", str(tmp_path / "list.csv"),
                    "--output_dir", str(tmp_path / "out"), "--split", "train",
                    "--class_names", "daisy,rose,tulip")
    # Beside the folder build's 12: the manifest's ranges (3), the splits written and the
    # published keys, read and counted (4).
    assert len(names) <= 19, "\n".join(names)


@pytest.mark.slow
def test_a_build_from_an_archive_runs_one_stage_more_than_from_a_folder(tmp_path) -> None:
    import tarfile

    _images(tmp_path / "in", "classes")
    with tarfile.open(tmp_path / "in.tar", "w") as archive:
        archive.add(tmp_path / "in", arcname=".")
    names = _stages(tmp_path, "beam_jobs.build_shards", "--input", str(tmp_path / "in.tar"),
                    "--output_dir", str(tmp_path / "out"), "--num_shards", "3")
    # Beside the folder build's 12: the archive's parts spread over workers (1).
    assert len(names) <= 13, "\n".join(names)
    assert (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_a_build_looking_for_near_duplicates_runs_one_stage_more(tmp_path) -> None:
    _images(tmp_path / "in", "splits")
    names = _stages(tmp_path, "beam_jobs.build_shards", "--input", str(tmp_path / "in"),
                    "--output_dir", str(tmp_path / "out"), "--num_shards", "3", "--near_duplicates", "report")
    # Beside the folder build's 12: the pairs brought to their later copies (1).
    assert len(names) <= 13, "\n".join(names)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["options"]["near_duplicates"] == "report"
