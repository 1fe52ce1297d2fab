"""Progress counters: each worker process is told apart by a random id, never by its pid."""

from __future__ import annotations

import os

from transforms.progress import counters


def test_a_worker_is_named_by_a_random_id_and_a_forked_child_gets_its_own(tmp_path, monkeypatch) -> None:
    mine = counters.worker_id()
    assert len(mine) == 32 and str(os.getpid()) != mine
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(write, counters.worker_id().encode())
        os._exit(0)
    os.close(write)
    theirs = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(child, 0)
    assert len(theirs) == 32 and theirs != mine
    assert counters.worker_id() == mine  # the parent keeps its id

    monkeypatch.setenv(counters.PROGRESS_ENV, str(tmp_path))
    counters.note(counters.IMAGES_READ, 2, 10)
    counters.flush()
    assert os.listdir(tmp_path) == [f"{mine}.json"]  # a machine's pid may be another's
    assert counters.read_counts(str(tmp_path)) == {counters.IMAGES_READ: (2, 10)}


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_writes_its_counts_file_at_most_once_a_second_and_the_last_counts_soon_after(
        tmp_path, monkeypatch) -> None:
    clock, writes, later = _Clock(), [], []
    monkeypatch.setenv(counters.PROGRESS_ENV, str(tmp_path))
    monkeypatch.setattr(counters, "_clock", clock)
    monkeypatch.setattr(counters, "_counts", {})
    monkeypatch.setattr(counters, "_flushed", {})
    monkeypatch.setattr(counters, "_pending", set())
    real_write = counters._write
    monkeypatch.setattr(counters, "_write", lambda folder, counts: (writes.append(clock.now),
                                                                    real_write(folder, counts)))
    monkeypatch.setattr(counters, "_later", lambda delay, fn: later.append((clock.now + delay, fn)))

    def timers_due() -> None:
        while later and later[0][0] <= clock.now:
            later.pop(0)[1]()

    # A short job: 3 s of 3,000 notes of two kinds and a bundle finished every 20 notes.
    for i in range(3000):
        timers_due()
        counters.note(counters.IMAGES_READ if i < 1500 else counters.RECORDS_WRITTEN, 1, 10)
        if i % 20 == 19:
            counters.flush()
        clock.now += 0.001
    assert 3 <= len(writes) <= 4, writes  # at 1000 s, then at most once a second
    assert all(b - a >= 1.0 - 1e-6 for a, b in zip(writes, writes[1:])), writes
    # What was counted since the last write is written once a second has passed, by one timer.
    assert len(later) == 1 and later[0][0] - writes[-1] >= 1.0 - 1e-6, (later, writes)
    clock.now = later[0][0]
    later[0][1]()
    assert counters.read_counts(str(tmp_path)) == {counters.IMAGES_READ: (1500, 15000),
                                                   counters.RECORDS_WRITTEN: (1500, 15000)}
    assert len(writes) <= 5


def test_the_job_process_writes_its_counts_at_once_when_the_run_is_over(tmp_path, monkeypatch) -> None:
    clock, later = _Clock(), []
    monkeypatch.setenv(counters.PROGRESS_ENV, str(tmp_path))
    monkeypatch.setattr(counters, "_clock", clock)
    monkeypatch.setattr(counters, "_counts", {})
    monkeypatch.setattr(counters, "_flushed", {})
    monkeypatch.setattr(counters, "_pending", set())
    monkeypatch.setattr(counters, "_later", lambda delay, fn: later.append(fn))
    counters.note(counters.RECORDS_READ, 1, 5)
    counters.note(counters.RECORDS_READ, 1, 5)  # within the second: not written yet
    assert counters.read_counts(str(tmp_path)) == {counters.RECORDS_READ: (1, 5)}
    counters.flush(now=True)
    assert counters.read_counts(str(tmp_path)) == {counters.RECORDS_READ: (2, 10)}
