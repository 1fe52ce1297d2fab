"""Finding files: paths matched once, a folder's files, local trees, store prefixes by level or key range.

A path that came out of a match is never matched again (Beam cannot quote wildcard characters:
``b[1].tfrecord`` matched again is ``b1.tfrecord``). gs:// and s3:// prefixes are listed with the
stores' clients, keys taken as they are.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
from typing import Callable, Iterator, Sequence

from transforms.filesystems import (STORE_CLIENT_ERRORS, FileMetadata, FileSystems, filesystem_of, naming_s3_errors,
                                    store_client)
from transforms.shardset.naming import join_path
from transforms.storage.files import exists
from transforms.storage.paths import STORES, bucket_key, has_wildcards, is_local

__all__ = ["FileMetadata", "exact_file", "is_folder", "match_files", "list_folder", "files_all_of_suffix", "list_below",
           "has_files_below", "walk_local_tree", "scan_local_folder",
           "local_bytes_at_least", "count_local_files", "list_store",
           "scan_store", "list_store_range", "first_store_key_after"]


def _matched(pattern: str, limit: int | None = None) -> list[FileMetadata]:
    """The files one pattern matches (at most ``limit``), in one call of Beam's ``match``."""
    return list(FileSystems.match([pattern], limits=None if limit is None else [limit])[0].metadata_list)


def exact_file(path: str) -> FileMetadata | None:
    """The metadata (path as given, size) of the file named exactly ``path`` without matching, or None."""
    if is_local(path):
        try:
            found = os.stat(path)
        except OSError:
            return None
        return FileMetadata(path, found.st_size, found.st_mtime) if stat.S_ISREG(found.st_mode) else None
    if path.endswith("/") or not exists(path):
        return None
    return (filesystem_of(path) if path.startswith(STORES) else FileSystems.get_filesystem(path)).metadata(path)


def is_folder(path: str) -> bool:
    """True if ``path`` names a folder: a local directory, or a prefix ending with ``/`` or with objects
    right below it and none of its name (with wildcard characters: only locally)."""
    if is_local(path):
        return os.path.isdir(path)
    if path.endswith("/"):
        return True
    if has_wildcards(path) or exists(path):
        return False
    if path.startswith(STORES):  # the objects right below it, as the match of ``path/*`` finds them
        with _listing_errors(path + "/"):  # pages of _PROBE_PAGE keys, until one
            return any(not sub for _, sub in list_store(path + "/", by_level=True, page_size=_PROBE_PAGE))
    return bool(_matched(path + "/*", limit=1))


def match_files(patterns: Sequence[str | FileMetadata]) -> list[list[FileMetadata]]:
    """Returns, per path, pattern or file already matched (itself), the files it names; each path matched once.

    An existing file is itself, whatever characters it holds; a path without wildcard characters
    that names no file names nothing. Never match the returned paths again.
    """
    exact = [p if isinstance(p, FileMetadata) else exact_file(p) for p in patterns]
    to_match = [pattern for pattern, meta in zip(patterns, exact) if meta is None and has_wildcards(pattern)]
    matched = iter(FileSystems.match(to_match) if to_match else [])
    return [[meta] if meta is not None else list(next(matched).metadata_list) if has_wildcards(pattern) else []
            for pattern, meta in zip(patterns, exact)]


def list_folder(folder: str) -> dict[str, tuple[str, int]]:
    """Name -> (path, size) of the files directly in ``folder`` (a folder without wildcard characters)."""
    return {meta.path.rstrip("/").rsplit("/", 1)[-1]: (meta.path, meta.size_in_bytes)
            for meta in _matched(join_path(folder, "*"))}


def files_all_of_suffix(folder: str, suffix: str, ignored: Callable[[str], bool]) -> list[str] | None:
    """The files directly in ``folder``, sorted, when each entry (but those ``ignored`` passes over by
    name) is a file ending with ``suffix`` (lower case); else None, the listing stopped at the first."""
    entries = scan_local_folder(folder) if is_local(folder) else scan_store(folder.rstrip("/") + "/")
    found = []
    for path, is_prefix in entries:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if ignored(name):
            continue
        if is_prefix or not name.lower().endswith(suffix):
            return None
        found.append(path)
    return sorted(found) or None


def list_below(folder: str) -> list[str]:
    """The path of every file below ``folder``, at any depth (a folder without wildcard characters)."""
    return [meta.path for meta in _matched(folder + "/**")]


def has_files_below(folder: str) -> bool:
    """True if some file lies below ``folder``, at any depth; on a store one request for one key
    (Beam's match lists every key, whatever its limit)."""
    if folder.startswith(STORES) and not has_wildcards(folder):
        prefix = folder.rstrip("/") + "/"
        with _listing_errors(prefix):
            return next(_store_keys_from(prefix, None, page_size=1), None) is not None
    return bool(_matched(folder.rstrip("/") + "/**", limit=1))


def walk_local_tree(root: str, keep: Callable[[bytes], Callable[[bytes], bool]] | None = None
                    ) -> Iterator[tuple[str, OSError | None]]:
    """Every file below a local folder as ``(path, None)``, every folder it cannot list as ``(folder, error)``.

    Walks as Beam's local file system lists (``os.walk`` over bytes, links to folders not followed,
    entries that cannot be stat-ed left out).

    Args:
        keep: Only some entries: ``keep(folder)`` for each folder walked (its path relative to
            ``root`` as bytes, ``b""`` for ``root``) gives a test of the bytes of an entry's name;
            only the files and unreadable folders it passes are given and stat-ed. The root, if it
            cannot be listed, is tested as ``b""`` in ``b""``. None: every entry.
    """
    keep = keep or (lambda folder: lambda name: True)
    top = os.fsencode(root)
    start = len(top) + 1
    errors: list[OSError] = []

    def unlisted() -> Iterator[tuple[str, OSError]]:
        """The folders ``os.walk`` reported it could not list since last asked, those ``keep`` passes."""
        while errors:
            err = errors.pop(0)
            path = os.fsencode(err.filename) if err.filename else top
            folder, _, name = path[start:].rpartition(b"/")
            if (keep(b"")(b"") if path == top else keep(folder)(name)):
                yield os.fsdecode(err.filename) if err.filename else root, err

    for folder, _, names in os.walk(top, onerror=errors.append):
        yield from unlisted()
        test = keep(folder[start:])
        for name in names:
            if test(name):
                path = os.path.join(folder, name)
                if os.path.exists(path):  # Beam drops what os.path.getsize cannot stat
                    yield os.fsdecode(path), None
    yield from unlisted()


def scan_local_folder(folder: str) -> Iterator[tuple[str, bool]]:
    """The entries of one local folder as ``(path, is_folder)`` (``OSError``: it cannot be listed).

    A link to a folder is neither (it is not followed); an entry that cannot be stat-ed is left out.
    """
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                try:
                    link = entry.is_symlink()
                except OSError:
                    link = False
                if not link:
                    yield entry.path, True
            elif os.path.exists(entry.path):
                yield entry.path, False


def local_bytes_at_least(folders: Sequence[str], limit: int, files: Sequence[str] = ()) -> int | None:
    """Bytes of the files below local ``folders`` and of local ``files``, counted until ``limit`` is reached.

    Links are not followed. None when a path is not a local folder or file (its size is not known).
    """
    total = 0
    for path in files:
        if not is_local(path) or not os.path.isfile(path):
            return None
        total += os.path.getsize(path)
    for folder in folders:
        if not is_local(folder) or not os.path.isdir(folder):
            return None
    for entry in _entries_below(folders):
        if total >= limit:
            break
        try:
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue  # gone since it was listed
    return total


def _entries_below(folders: Sequence[str]) -> Iterator[os.DirEntry]:
    """Every entry but folders below local ``folders`` (no ``stat``; links not followed, unreadable folders skipped)."""
    stack = list(folders)
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        yield entry
        except OSError:
            continue


def count_local_files(folder: str, limit: int) -> int:
    """Entries other than folders below a local folder, counted until ``limit`` (``images.folder_parts``)."""
    return sum(1 for _ in itertools.islice(_entries_below([folder]), limit))


# Keys (and sub-prefixes) a page of a probing listing asks for (``is_folder``): a folder of many
# files costs one small page, not a listing of all of them.
_PROBE_PAGE = 20


def list_store(prefix: str, by_level: bool, page_size: int | None = None, first_page: int | None = None,
               start: str | None = None) -> Iterator[tuple[str, bool]]:
    """``(path, is_prefix)`` below a gs:// or s3:// prefix ending with ``/``, without matching: one level
    (sub-prefixes with their ``/``), or every object below it (from the key ``start`` on, when given);
    ``page_size`` keys a request (None: the store's most), ``first_page`` keys the first one."""
    scheme, _, rest = prefix.partition("://")
    bucket, _, key_prefix = rest.partition("/")
    if scheme == "s3":
        client = store_client("s3")
        extra = {**({"Delimiter": "/"} if by_level else {}), **({} if start is None else {"StartAfter": start})}
        paging: dict = {} if page_size is None else {"PageSize": page_size}
        if first_page is not None:
            page = client.list_objects_v2(Bucket=bucket, Prefix=key_prefix, MaxKeys=first_page, **extra)
            yield from _s3_entries(bucket, page)
            if not page.get("IsTruncated"):
                return
            paging["StartingToken"] = page["NextContinuationToken"]
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key_prefix,
                                                                  PaginationConfig=paging, **extra)
        for page in pages:
            yield from _s3_entries(bucket, page)
        return
    if scheme == "gs":
        token = None
        listing = dict(prefix=key_prefix, delimiter="/" if by_level else None, start_offset=start)
        if first_page is not None:
            blobs = store_client("gs").list_blobs(bucket, page_size=first_page, **listing)
            yield from _gcs_entries(bucket, next(blobs.pages, []))
            token = blobs.next_page_token
            if not token:
                return
        for page in store_client("gs").list_blobs(bucket, page_size=page_size, page_token=token, **listing).pages:
            yield from _gcs_entries(bucket, page)
        return
    raise ValueError(f"{prefix}: only gs:// and s3:// prefixes are listed without matching")


def _s3_entries(bucket: str, page: dict) -> Iterator[tuple[str, bool]]:
    for item in page.get("Contents") or ():
        yield f"s3://{bucket}/{item['Key']}", False
    for item in page.get("CommonPrefixes") or ():
        yield f"s3://{bucket}/{item['Prefix']}", True


def _gcs_entries(bucket: str, page) -> Iterator[tuple[str, bool]]:
    for blob in page:
        yield f"gs://{bucket}/{blob.name}", False
    for sub in sorted(getattr(page, "prefixes", ())):
        yield f"gs://{bucket}/{sub}", True


@contextlib.contextmanager
def _listing_errors(prefix: str) -> Iterator[None]:
    """Raises a refused or unanswered listing of ``prefix`` as an ``OSError`` naming it."""
    with naming_s3_errors(prefix):
        try:
            yield
        except STORE_CLIENT_ERRORS as err:
            raise OSError(errno.EIO, f"the listing failed: {err}", prefix) from err


def scan_store(prefix: str) -> Iterator[tuple[str, bool]]:
    """One level (``list_store``), S3's errors raised as ``OSError``s naming the prefix; its first request asks
    for ``_PROBE_PAGE`` keys (planning reads a level until its first file; 1,000 keys are 270 KB on S3)."""
    with naming_s3_errors(prefix):
        yield from list_store(prefix, by_level=True, first_page=_PROBE_PAGE)


def _store_keys_from(prefix: str, after: str | None, page_size: int | None = None) -> Iterator[str]:
    """Keys (relative to ``prefix``) of every object below a gs:// or s3:// prefix after ``after``, in order
    (S3 starts after ``after``, GCS at it: keys not after it are dropped here as well)."""
    key_prefix = bucket_key(prefix)[1]
    start = None if after is None else key_prefix + after
    for key in (bucket_key(path)[1] for path, _ in list_store(prefix, False, page_size, start=start)):
        if start is None or key > start:
            yield key[len(key_prefix):]


def list_store_range(prefix: str, after: str | None = None, until: str | None = None) -> Iterator[str]:
    """The path of every object below a gs:// or s3:// prefix whose key lies in ``(after, until]``.

    ``after`` and ``until`` are relative to ``prefix`` (ending with ``/``); None: no bound. The
    listing stops past ``until``: workers list one prefix in ranges (``images.key_ranges``).
    """
    for name in _store_keys_from(prefix, after):
        if until is not None and name > until:
            return
        yield prefix + name


def first_store_key_after(prefix: str, after: str) -> str | None:
    """The first key (relative to ``prefix``) below a gs:// or s3:// prefix after ``after``, or None (one request)."""
    with naming_s3_errors(prefix):
        return next(_store_keys_from(prefix, after, page_size=1), None)
