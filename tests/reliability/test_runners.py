"""Reliability: the same shards whatever runs the job.

The build job runs on Beam's in-process DirectRunner, on the DirectRunner
with two worker processes, and through the PortableRunner against Beam's
local job service (the job API a Flink job server speaks, see
tests/servers.py); every shard, ``.idx``, ``manifest.json``, ``labels.txt``
and ``dead_letters.jsonl`` must have the same sha256. tests/e2e/test_build_shards.py
and tests/e2e/test_portable_runner.py compare pairs of runners on the default
settings; this runs all three on re-encoded, zlib-compressed output in two
splits from an input with dead letters.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from tests.shard_fixtures import load_manifest, make_class_tree, run_build

RUNNERS = {
    "direct": [],
    "multi_processing": ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"],
    "portable": ["--runner", "PortableRunner", "--environment_type", "LOOPBACK"],
}


def _digests(folder: str) -> dict[str, str]:
    """Every file below ``folder`` (``index/`` with its keys files too) -> its sha256."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return dict(sorted(out.items()))


@pytest.mark.slow
def test_every_runner_writes_the_same_bytes(job_server, tmp_path, capsys) -> None:
    make_class_tree(str(tmp_path / "in"), per_class=7, seed=11)
    common = ["--input", str(tmp_path / "in"), "--image_mode", "reencode", "--jpeg_quality", "80",
              "--compression", "zlib", "--split_fractions", "train=0.75,validation=0.25",
              "--shard_size_mb", "0.01", "--max_bad_fraction", "0.2", "--seed", "4"]
    digests = {}
    for name, flags in RUNNERS.items():
        if name == "portable":
            flags = [*flags, "--job_endpoint", job_server.address]
        out = str(tmp_path / name)
        status, _, err = run_build(capsys, *common, *flags, "--output_dir", out)
        assert status == 0, (name, err)
        digests[name] = _digests(out)
    manifest = load_manifest(str(tmp_path / "direct"))
    assert sorted(manifest["splits"]) == ["train", "validation"]
    assert sum(len(s["shards"]) for s in manifest["splits"].values()) >= 4
    assert manifest["dead_letters"] == 3
    assert digests["multi_processing"] == digests["direct"]
    assert digests["portable"] == digests["direct"]
