"""storage.folders: the renames a publish hands out in chunks (``move_chunk``, ``move_chunks``, ``moves_problem``)."""

from __future__ import annotations

import hashlib
import os

import pytest

from transforms.errors import PublishError
from transforms.storage.folders import move_chunk, move_chunks, moves_problem


def _staged(tmp_path, count: int) -> list[tuple[str, str, str]]:
    """``count`` staged files and their moves (staged, final, sha256)."""
    (tmp_path / "staging").mkdir()
    moves = []
    for i in range(count):
        data = f"shard {i}".encode()
        staged = tmp_path / "staging" / f"s{i}.tmp"
        staged.write_bytes(data)
        moves.append((str(staged), str(tmp_path / f"train-{i:05d}-of-{count:05d}.tfrecord"),
                      hashlib.sha256(data).hexdigest()))
    return moves


def test_a_chunk_moves_every_staged_file_and_may_be_moved_again(tmp_path) -> None:
    moves = _staged(tmp_path, 5)
    assert move_chunk(moves) == 5
    assert os.listdir(tmp_path / "staging") == []
    assert [open(final, "rb").read() for _, final, _ in moves] == [f"shard {i}".encode() for i in range(5)]
    assert move_chunk(moves) == 5  # a retried chunk: every file is at its final name already


def test_a_chunk_half_moved_before_is_finished(tmp_path) -> None:
    moves = _staged(tmp_path, 4)
    move_chunk(moves[:2])
    assert move_chunk(moves) == 4
    assert all(os.path.exists(final) and not os.path.exists(staged) for staged, final, _ in moves)


@pytest.mark.parametrize("what", ["missing", "other bytes"])
def test_a_staged_file_gone_must_be_at_its_final_name(tmp_path, what) -> None:
    moves = _staged(tmp_path, 3)
    staged, final, _ = moves[1]
    os.remove(staged)
    if what == "other bytes":
        open(final, "wb").write(b"not the shard")
    with pytest.raises(PublishError, match=f"staged file {staged} is gone and {final} does not hold it"):
        move_chunk(moves)


def test_a_rename_that_fails_names_the_file(tmp_path) -> None:
    moves = _staged(tmp_path, 2)
    staged, final, sha = moves[0]
    blocked = str(tmp_path / "a-file" / "train-00000-of-00002.tfrecord")
    open(tmp_path / "a-file", "wb").close()  # a file where the final name's folder goes
    with pytest.raises(PublishError, match=f"^cannot rename {staged} to {blocked}: "):
        move_chunk([(staged, blocked, sha), moves[1]])
    assert os.path.exists(staged)


def test_moves_are_cut_into_chunks_in_order() -> None:
    moves = [(f"s{i}", f"f{i}", None) for i in range(7)]
    chunks = list(move_chunks(moves, 3))
    assert [len(c) for c in chunks] == [3, 3, 1]
    assert [m for c in chunks for m in c] == moves
    assert list(move_chunks([], 3)) == []


def test_a_commit_needs_every_move_done() -> None:
    assert moves_problem("/out", 2_000, 2_000) is None
    assert moves_problem("/out", 0, 0) is None
    assert moves_problem("/out", 2_000, 1_900) == (
        "1,900 of the 2,000 staged files handed out to be renamed into /out were renamed; "
        "the set is not published (run again to publish it)")
