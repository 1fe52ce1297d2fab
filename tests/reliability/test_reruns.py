"""Reliability: retried bundles and reruns into the same folder.

``--direct_runner_bundle_repeat N`` makes Beam's in-process runner process
every bundle N more times (outputs dropped, side effects kept), as a runner
does when it retries a failed or slow bundle: shards are written to staging
several times and the publish step runs several times. The output must not
change. Reruns with other shard sizes, compressions or splits into one folder
must leave exactly the new shard set, which the verify job passes.
"""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from tests.reliability_support import assert_only_shard_set, folder_bytes
from tests.shard_fixtures import load_manifest, run_build
from tests.trees import Part
from transforms.beam_compat import local_runner


TREE = (Part(per_class=8, broken=True),)  # with three broken files: dead letters as well


def _run_verify(capsys, *argv: str) -> tuple[int, str]:
    from beam_jobs import verify_shards

    capsys.readouterr()
    status = verify_shards.run(list(argv))
    out, err = capsys.readouterr()
    return status, out + err


class _AppendLineFn(beam.DoFn):
    def __init__(self, path: str) -> None:
        self._path = path

    def process(self, element):
        with open(self._path, "a", encoding="utf-8") as fh:
            fh.write(f"{element}\n")
        yield element


def test_bundle_repeat_reaches_the_runner_the_jobs_use(tmp_path) -> None:
    # The jobs build their DirectRunner with local_runner(); the flag must replay bundles there.
    log = str(tmp_path / "calls.txt")
    options = PipelineOptions(["--direct_runner_bundle_repeat", "2"])
    with beam.Pipeline(runner=local_runner(options), options=options) as p:
        _ = p | beam.Create(["a", "b"]) | beam.ParDo(_AppendLineFn(log))
    with open(log, encoding="utf-8") as fh:
        assert sorted(fh.read().split()) == ["a"] * 3 + ["b"] * 3


@pytest.mark.slow
@pytest.mark.parametrize("flags", [
    ["--shard_size_mb", "0.02"],
    ["--image_mode", "reencode", "--num_shards", "3", "--compression", "gzip"],
], ids=["passthrough", "reencode_gzip"])
def test_repeated_bundles_give_byte_identical_output(tree, tmp_path, capsys, flags) -> None:
    common = ["--input", tree, "--max_bad_fraction", "0.2", "--split_fractions", "train=0.7,test=0.3",
              *flags]
    once, repeated = str(tmp_path / "once"), str(tmp_path / "repeated")
    status, _, err = run_build(capsys, *common, "--output_dir", once)
    assert status == 0, err
    status, _, err = run_build(capsys, *common, "--output_dir", repeated, "--direct_runner_bundle_repeat", "2")
    assert status == 0, err
    assert folder_bytes(repeated) == folder_bytes(once)  # shards, .idx, manifest, labels, dead letters
    assert_only_shard_set(repeated)  # the extra staged copies are gone too
    assert load_manifest(once)["dead_letters"] == 3


RERUNS = [
    ("small shards", ["--shard_size_mb", "0.02"]),
    ("two gzip shards", ["--num_shards", "2", "--compression", "gzip"]),
    ("two splits, zlib", ["--split_fractions", "train=0.5,validation=0.5", "--num_shards", "3",
                          "--compression", "zlib"]),
    ("small shards again", ["--shard_size_mb", "0.02"]),
]


@pytest.mark.slow
def test_reruns_with_other_layouts_leave_only_the_new_shard_set(tree, tmp_path, capsys) -> None:
    out = str(tmp_path / "out")
    first = None
    for name, flags in RERUNS:
        status, _, err = run_build(capsys, "--input", tree, "--max_bad_fraction", "0.2", *flags,
                                   "--drop_other_splits", "--output_dir", out)
        assert status == 0, (name, err)
        assert_only_shard_set(out)
        listed = sorted(s["file"] for split in load_manifest(out)["splits"].values() for s in split["shards"])
        assert listed == sorted(n for n in os.listdir(out) if ".tfrecord" in n and not n.endswith(".idx"))
        status, report = _run_verify(capsys, "--output_dir", out)
        assert status == 0, (name, report)
        first = first or folder_bytes(out)
    # The last run has the first run's flags: after three other layouts, the same bytes again.
    assert folder_bytes(out) == first
