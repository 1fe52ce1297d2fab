"""The scaling harness (benchmarks/scaling.py): strace reading, marginal figures, planning at small N."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from benchmarks import common, scaling
from benchmarks.scaling import beam_flags, marginal, read_bytes_by_file
from tests.benchmarks.harness_checks import assert_cases_wired
from transforms.plan_shards import ASSIGNED
from tests.helpers import plan_in_memory

# strace -f -y -s 0 output: two threads interleave a read; a forked process preads; errors and
# sockets appear too.
_TRACE = """\
101 openat(AT_FDCWD</work>, "/data/a.jpg", O_RDONLY|O_CLOEXEC) = 5</data/a.jpg>
101 read(5</data/a.jpg>, ""..., 65536) = 65536
101 read(5</data/a.jpg>,  <unfinished ...>
102 openat(AT_FDCWD</work>, "/data/b.jpg", O_RDONLY|O_CLOEXEC) = 6</data/b.jpg>
102 read(6</data/b.jpg>, ""..., 1000) = 1000
101 <... read resumed>""..., 65536) = 4464
101 read(5</data/a.jpg>, "", 65536) = 0
102 read(7<socket:[4242]>, ""..., 4096) = 300
103 pread64(6</data/b.jpg>, ""..., 500, 1000) = 500
103 readv(6</data/b.jpg>, [{iov_base=""..., iov_len=10}], 1) = 10
103 read(6</data/b.jpg>, 0x7f00, 10) = -1 EAGAIN (Resource temporarily unavailable)
103 openat(AT_FDCWD</work>, "/data/c.jpg", O_RDONLY) = -1 ENOENT (No such file or directory)
104 sendfile(9</out/x>, 6</data/b.jpg>, NULL, 90) = 90
104 openat(AT_FDCWD</work>, "/data/a.jpg", O_RDONLY|O_CLOEXEC) = 8</data/a.jpg>
"""


def test_reads_are_summed_per_file_across_threads_processes_and_split_calls():
    files = read_bytes_by_file(_TRACE.splitlines(keepends=True))
    assert files["/data/a.jpg"].bytes == 70_000  # 65536 + the resumed 4464
    assert files["/data/a.jpg"].opens == 2
    assert files["/data/b.jpg"].bytes == 1000 + 500 + 10 + 90  # read, pread64, readv, sendfile's source
    assert files["/data/b.jpg"].opens == 1
    assert files["socket:[4242]"].bytes == 300
    assert "/data/c.jpg" not in files  # a failed open is no open
    assert "/out/x" not in files  # sendfile's destination is written, not read


@pytest.mark.parametrize("small, large, small_bytes, large_bytes, expected", [
    ([10.0], [30.0], 1_000_000_000, 3_000_000_000, 10.0),
    ([10.0, 11.0, 50.0], [30.0, 31.0, 52.0], 0, 2_000_000_000, 10.0),  # median of paired differences
    ([10.0], [30.0], 2_000_000_000, 2_000_000_000, None),  # no bytes between the sizes
    ([10.0], [], 0, 1_000_000_000, None),  # a round missing
])
def test_marginal_is_the_median_paired_difference_per_gb(small, large, small_bytes, large_bytes, expected):
    assert marginal(small, large, small_bytes, large_bytes) == expected


def test_one_worker_is_beams_default_and_more_are_processes():
    assert beam_flags(1) == ["--direct_num_workers", "1"]
    assert beam_flags(4) == ["--direct_running_mode", "multi_processing", "--direct_num_workers", "4"]


@pytest.mark.slow
def test_benchmark_plan_equals_the_in_memory_reference():
    count = 25_000  # several chunks of generated items
    items = [it for chunk in scaling.chunks_of(count) for it in scaling.synthetic_items(chunk)]
    n, shards = plan_in_memory([(it[1], it[2]) for it in items], scaling.TARGET_BYTES)
    assert n > 10
    expected = [(shard, items[i][3]) for shard, members in enumerate(shards) for i in members]
    with TestPipeline() as p:
        planned = scaling.plan_items(p, count, None, bucket_bits=4)
        assert_that(planned[ASSIGNED] | beam.MapTuple(lambda key, it: (key[1], it[3])), equal_to(expected))


@pytest.mark.parametrize("count", [2_000, 8_000])
def test_groups_are_buckets_of_the_order_key(count, capsys):
    figures = scaling.plan_scale_run(["--items", str(count), "--bucket_bits", "4"])
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == figures  # one JSON line
    assert figures["items"] == count
    assert figures["groups"] == 16  # every bucket of 4 bits is occupied
    assert count / 16 < figures["max_items_per_group"] <= 1.5 * count / 16  # about 1/16 of the items each
    assert figures["max_minus_min_bytes"] < 2 * figures["max_record_bytes"]
    assert figures["peak_rss_mib"] > 0 and figures["seconds"] > 0



def test_every_case_is_wired(capsys):
    assert_cases_wired(scaling.CASES, capsys)


def test_plan_scale_quick_prints_one_line_of_figures(capsys):
    assert common.run_case(scaling.CASES, ["plan_scale", "--quick"]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["items"] == 2000 and figures["groups"] == 16
