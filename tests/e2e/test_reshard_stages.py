"""How many fused stages the reshard job runs on the DirectRunner: each costs every worker a set-up.

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

from tests.e2e.test_reshard import labelled_records, write_tfrecord

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stages(tmp_path, *args: str) -> list[str]:
    usage = tmp_path / "usage.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.common", "child_usage", str(usage), "--count_stages",
                           "beam_jobs.reshard", *args], cwd=_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (pipeline,) = json.loads(usage.read_text())["pipelines"]
    return pipeline["stage_names"]


# Match (2: the patterns, then the files spread), read with the items and every precombine,
# the facts (count, class names, feature spec: one combine), planning (2), write, shard list
# parts, publish (3: prepare, the renames on every worker, commit); --skip_corrupt adds the
# facts' default (every input may be damaged).
@pytest.mark.slow
@pytest.mark.parametrize("flags, most", [([], 11), (["--skip_corrupt", "--max_bad_fraction", "0.5"], 12)],
                         ids=["plain", "skip_corrupt"])
def test_a_reshard_runs_at_most_eleven_stages(tmp_path, flags, most) -> None:
    for i in range(2):
        write_tfrecord(str(tmp_path / f"train-0000{i}-of-00002.tfrecord"), labelled_records(12, seed=i))
    names = _stages(tmp_path, "--input", str(tmp_path / "train-*"), "--output_dir", str(tmp_path / "out"),
                    "--num_shards", "3", *flags)
    assert len(names) <= most, "\n".join(names)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["labels"] == ["cat", "dog", "emu"] and manifest["feature_spec"]
