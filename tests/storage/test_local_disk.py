"""Unit tests of the storage package on local disk: listing, reading, writing, deleting, a full disk.

The same functions on gs:// and s3:// are tested against emulators in
``tests/e2e/test_object_stores.py`` and ``tests/reliability/test_publish.py``.
"""

from __future__ import annotations

import errno
import hashlib
import os

import pytest

from transforms.errors import PublishError
from transforms.storage.files import hashes_match, open_lines, read_if_present
from transforms.storage.folders import delete_empty_folder, delete_if_exists, make_folder, move_chunk
from transforms.storage.listing import has_files_below, list_below, list_folder
from transforms.storage.writing import (FREE_SOME_SPACE, create_exclusive, reporting_full_disk, shards_need,
                                        write_atomic, write_file)


def _tree(root) -> None:
    for rel, data in [("a.txt", b"aa"), ("b[1].txt", b"b"), ("sub/c.txt", b"ccc"), ("sub/deep/d.txt", b"")]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_a_folders_files_are_listed_by_name_without_matching_their_names(tmp_path) -> None:
    _tree(tmp_path)
    assert list_folder(str(tmp_path)) == {"a.txt": (str(tmp_path / "a.txt"), 2),
                                          "b[1].txt": (str(tmp_path / "b[1].txt"), 1)}
    assert sorted(os.path.relpath(p, tmp_path) for p in list_below(str(tmp_path))) == [
        "a.txt", "b[1].txt", "sub/c.txt", "sub/deep/d.txt"]
    assert has_files_below(str(tmp_path / "sub")) and has_files_below(str(tmp_path) + "/")
    (tmp_path / "empty").mkdir()
    assert not has_files_below(str(tmp_path / "empty")) and not has_files_below(str(tmp_path / "gone"))


def test_reading_a_file_that_may_be_missing(tmp_path) -> None:
    path = tmp_path / "lines.txt"
    assert read_if_present(str(path)) is None
    with open_lines(str(path)) as lines:
        assert lines is None
    path.write_bytes(b"one\ntwo")
    assert read_if_present(str(path)) == b"one\ntwo"
    with open_lines(str(path)) as lines:
        assert list(lines) == [b"one\n", b"two"]
    assert hashes_match(str(path), None, hashlib.sha256(b"one\ntwo").hexdigest())
    assert not hashes_match(str(path), None, hashlib.sha256(b"one\ntwo!").hexdigest())


def test_an_atomic_write_leaves_its_temporary_file_nowhere(tmp_path) -> None:
    staging = tmp_path / ".staging"
    staging.mkdir()
    target = str(tmp_path / "labels.txt")
    write_atomic(target, iter([b"a\n", b"b\n"]), str(staging))
    assert open(target, "rb").read() == b"a\nb\n" and os.listdir(staging) == []
    write_file(str(tmp_path / "empty"), b"")
    assert os.path.getsize(tmp_path / "empty") == 0


def test_an_exclusive_create_happens_once(tmp_path) -> None:
    path = str(tmp_path / ".lock")
    assert create_exclusive(path, b"first") is True
    assert create_exclusive(path, b"second") is False
    assert open(path, "rb").read() == b"first"


def test_deleting_only_what_is_there_and_empty_folders_only(tmp_path) -> None:
    _tree(tmp_path)
    delete_if_exists([str(tmp_path / "a.txt"), str(tmp_path / "missing.txt")])
    assert sorted(os.listdir(tmp_path)) == ["b[1].txt", "sub"]
    delete_if_exists([])
    index = str(tmp_path / "index")
    make_folder(index)
    make_folder(index)  # already there: nothing happens
    delete_empty_folder(str(tmp_path / "sub"))  # holds files (below it too): kept
    delete_empty_folder(index)
    assert sorted(os.listdir(tmp_path)) == ["b[1].txt", "sub"]


def test_staged_files_are_moved_and_a_moved_one_is_recognised_by_its_sha256(tmp_path) -> None:
    staging = tmp_path / ".staging"
    staging.mkdir()
    (staging / "x.tmp").write_bytes(b"x")
    (tmp_path / "y").write_bytes(b"y")  # moved by an earlier attempt
    moves = [(str(staging / "x.tmp"), str(tmp_path / "x"), None),
             (str(staging / "y.tmp"), str(tmp_path / "y"), hashlib.sha256(b"y").hexdigest())]
    assert move_chunk(moves) == 2
    assert (tmp_path / "x").read_bytes() == b"x" and not (staging / "x.tmp").exists()
    with pytest.raises(PublishError, match="staged file .*y.tmp is gone and .*y does not hold it"):
        move_chunk([(str(staging / "y.tmp"), str(tmp_path / "y"), "0" * 64)])


@pytest.mark.parametrize("need, says", [
    (shards_need(3 * 2**20), "this run's shards need about 3.0 MiB"),
    (shards_need(None), FREE_SOME_SPACE),
    (FREE_SOME_SPACE, "free some space"),
])
def test_a_full_disk_is_one_line_naming_the_folder(tmp_path, need, says) -> None:
    with pytest.raises(PublishError) as caught:
        with reporting_full_disk(str(tmp_path), str(tmp_path / "f.tmp"), need):
            raise OSError(errno.ENOSPC, "No space left on device")
    line = str(caught.value)
    assert line.startswith(f"no space left in {tmp_path} writing {tmp_path / 'f.tmp'}: {says}; ")
    assert line.endswith("MiB were free when writing failed")
    with pytest.raises(PermissionError):  # any other error passes as it is
        with reporting_full_disk(str(tmp_path), "f", need):
            raise PermissionError(errno.EACCES, "denied")
