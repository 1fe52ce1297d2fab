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
