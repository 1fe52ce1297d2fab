"""Run files' records copied back in batches: which neighbours are read together."""

from __future__ import annotations

from transforms.storage.runs import batches
from transforms.tfrecord.run_files import RunSlice


def _spans(found):
    return sorted((b.path, b.start, b.end, b.offsets) for b in found)


def test_records_end_to_end_in_a_run_file_are_one_batch_and_lone_ones_none():
    slices = [RunSlice("s3://b/r1.run", 30, 10), RunSlice("s3://b/r1.run", 0, 10), RunSlice("s3://b/r1.run", 10, 20),
              RunSlice("s3://b/r1.run", 50, 5), RunSlice("s3://b/r2.run", 0, 7), RunSlice("s3://b/r2.run", 7, 7)]
    assert _spans(batches(slices)) == [("s3://b/r1.run", 0, 40, [0, 10, 30]), ("s3://b/r2.run", 0, 14, [0, 7])]


def test_a_batch_spans_at_most_the_limit():
    slices = [RunSlice("s3://b/r.run", 10 * i, 10) for i in range(7)]
    assert _spans(batches(slices, limit=30)) == [("s3://b/r.run", 0, 30, [0, 10, 20]),
                                                 ("s3://b/r.run", 30, 60, [30, 40, 50])]  # 60-70 is alone
