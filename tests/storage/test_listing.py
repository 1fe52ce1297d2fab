"""Local listing helpers of ``storage.listing``: files counted up to a limit, a walk that keeps some paths."""

from __future__ import annotations

import os

from transforms.storage.listing import count_local_files, walk_local_tree


def _tree(root) -> None:
    for rel in ("a.jpg", "b.jpg", "sub/c.jpg", "sub/deeper/d.jpg", ".hidden"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    (root / "empty").mkdir()
    os.symlink(root / "sub", root / "link_to_sub")  # a link to a folder: one entry, not followed


def test_count_local_files_counts_every_entry_but_folders(tmp_path) -> None:
    _tree(tmp_path)
    assert count_local_files(str(tmp_path), 1000) == 6  # a, b, c, d, .hidden and the link


def test_count_local_files_stops_at_the_limit(tmp_path) -> None:
    for i in range(50):
        (tmp_path / f"{i}.jpg").write_bytes(b"")
    assert count_local_files(str(tmp_path), 10) == 10


def test_count_local_files_of_a_missing_folder_is_zero(tmp_path) -> None:
    assert count_local_files(str(tmp_path / "missing"), 10) == 0


def test_walk_local_tree_gives_only_what_keep_keeps_and_stats_nothing_else(tmp_path, monkeypatch) -> None:
    _tree(tmp_path)
    everything = sorted(path for path, err in walk_local_tree(str(tmp_path)))
    stated = []
    real_exists = os.path.exists

    def exists(path):
        stated.append(path)
        return real_exists(path)

    monkeypatch.setattr(os.path, "exists", exists)
    asked = []

    def keep(folder: bytes):
        asked.append(folder)
        return lambda name: folder.startswith(b"sub") or name == b"a.jpg"

    kept = sorted(path for path, _ in walk_local_tree(str(tmp_path), keep))
    assert kept == [p for p in everything if "/sub/" in p or p.endswith("/a.jpg")] and len(kept) == 3
    assert sorted(os.fsdecode(path) for path in stated) == kept  # what keep refused was not stat-ed
    assert sorted(asked) == [b"", b"empty", b"sub", b"sub/deeper"]  # each folder, relative to the root


def test_walk_local_tree_with_keep_gives_undecodable_names_as_listed(tmp_path) -> None:
    (tmp_path / os.fsdecode(b"bad\xff.jpg")).write_bytes(b"x")
    assert [path for path, _ in walk_local_tree(str(tmp_path), lambda folder: lambda name: True)] == [
        path for path, _ in walk_local_tree(str(tmp_path))] == [str(tmp_path / "bad\udcff.jpg")]


def test_walk_local_tree_keeps_unreadable_folders_by_keep_too(tmp_path, monkeypatch) -> None:
    _tree(tmp_path)
    locked = str(tmp_path / "sub")
    real_scandir = os.scandir

    def scandir(path="."):
        if isinstance(path, (str, bytes)) and os.fsdecode(path) == locked:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    errors = [path for path, err in walk_local_tree(str(tmp_path)) if err is not None]
    assert errors == [locked]
    seen = []

    def keep(folder: bytes):
        return lambda name: seen.append((folder, name)) or name != b"sub"

    assert [p for p, err in walk_local_tree(str(tmp_path), keep) if err] == []
    assert (b"", b"sub") in seen  # an unreadable folder is tested as a name in its parent
    assert [(p, type(err)) for p, err in walk_local_tree(str(tmp_path), lambda folder: lambda name: True)
            if err] == [(locked, PermissionError)]


def test_a_folder_whose_files_all_have_a_suffix_gives_them_and_stops_at_another(tmp_path):
    from transforms.storage.listing import files_all_of_suffix

    def ignored(name: str) -> bool:
        return name.startswith(".") or name.endswith(".md")

    for name in ("b.parquet", "a.PARQUET", "README.md", ".gitattributes"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / ".cache").mkdir()  # hidden: passed over
    assert files_all_of_suffix(str(tmp_path), ".parquet", ignored) == [
        str(tmp_path / "a.PARQUET"), str(tmp_path / "b.parquet")]
    (tmp_path / "cat").mkdir()  # a class folder beside a metadata.parquet: not a folder of Parquet files
    (tmp_path / "cat" / "c.jpg").write_bytes(b"x")
    assert files_all_of_suffix(str(tmp_path), ".parquet", ignored) is None
    assert files_all_of_suffix(str(tmp_path / "cat"), ".parquet", ignored) is None  # a jpg
    (tmp_path / "empty").mkdir()
    assert files_all_of_suffix(str(tmp_path / "empty"), ".parquet", ignored) is None  # none at all
