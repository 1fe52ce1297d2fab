"""The scaling benchmark's strace reading and marginal figures (benchmarks/scaling.py)."""

from __future__ import annotations

import pytest

from benchmarks.scaling import beam_flags, marginal, read_bytes_by_file

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
