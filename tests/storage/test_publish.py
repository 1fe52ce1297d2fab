"""The commit record a publish's prepare step stages for its commit step (``storage.publish``)."""

from __future__ import annotations

import os

import pytest

from transforms.errors import PublishError
from transforms.shardset.ownership import PublishPolicy
from transforms.storage.run_lock_files import acquire_lock
from transforms.storage.output_folder import STAGING_DIR
from transforms.storage.publish import published_already, stage_commit_record, staged_commit_record

RUN = "a" * 32


def test_a_staged_record_reads_back_until_staging_is_cleared(tmp_path):
    out = str(tmp_path)
    record = ({"splits": {"train": list(range(1000))}}, ("reject", b"line\n"))
    path = stage_commit_record(out, RUN, record)
    assert path.startswith(os.path.join(out, STAGING_DIR, RUN))
    assert staged_commit_record(path) == record
    assert not [n for n in os.listdir(os.path.dirname(path)) if n != os.path.basename(path)]  # no temporary left
    os.remove(path)
    assert staged_commit_record(path) is None


def test_a_commit_run_again_without_its_record_needs_the_manifest(tmp_path):
    out = str(tmp_path)
    acquire_lock(out, PublishPolicy(RUN), "build_shards")
    with pytest.raises(PublishError, match=f"record of run {RUN} is gone .* no manifest.json was written"):
        published_already(out, RUN)
