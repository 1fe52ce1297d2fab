"""What a path names before anything is read: local or on a store, readable by a file system, the same file.

A local path is written without a scheme; anything with ``://`` is a URL of one of Beam's file
systems, which read ``WILDCARDS`` anywhere in a pattern and cannot quote them.
"""

from __future__ import annotations

import os
import posixpath

from transforms.filesystems import FileSystem, FileSystems
from transforms.shardset.naming import WILDCARDS

__all__ = ["WILDCARDS", "STORES", "is_local", "bucket_key", "has_wildcards", "path_problem", "same_file"]

# The object stores read in bounded ranges and listed (by level, by key range) with their own clients.
STORES = ("gs://", "s3://")
_schemes: frozenset = frozenset()


def is_local(path: str) -> bool:
    """True for a local path (no ``scheme://``)."""
    return "://" not in path


def bucket_key(url: str) -> tuple[str, str]:
    """The bucket and key of a gs:// or s3:// URL: ``s3://b/k/x`` -> ``("b", "k/x")``."""
    bucket, _, key = url.split("://", 1)[1].partition("/")
    return bucket, key


def has_wildcards(path: str) -> bool:
    """True if a match would read some character of ``path`` as a wildcard."""
    return any(c in WILDCARDS for c in path)


def _has_file_system(scheme: str) -> bool:
    """True if one of Beam's registered file systems reads ``scheme://`` paths."""
    global _schemes
    if scheme not in _schemes:  # file systems may register later (an import): look again
        _schemes = frozenset(fs.scheme() for fs in FileSystem.get_all_subclasses())
    return scheme in _schemes


def path_problem(path: str) -> str | None:
    """Why no file system can open ``path`` (a NUL byte, or a scheme no file system reads), or None.

    Beam raises ``ValueError`` for both, not an ``OSError``.
    """
    if "\0" in path:
        return "path holds a NUL byte, which no file system accepts"
    scheme = FileSystems.get_scheme(path) if "://" in path else None
    if scheme is not None and not _has_file_system(scheme):
        known = ", ".join(f"{s}://" for s in sorted(s for s in _schemes if s))
        return (f"no file system reads {scheme}:// paths (a local path is written without a "
                f"scheme; these are read: {known})")
    return None


def _normal(path: str) -> str:
    scheme, sep, rest = path.partition("://")
    return f"{scheme}://{posixpath.normpath(rest)}" if sep else os.path.realpath(path)


def same_file(a: str, b: str) -> bool:
    """True if the paths name one file: the same path once normalized, or (locally) one through a link."""
    return _normal(a) == _normal(b) or (is_local(a) and is_local(b) and os.path.exists(a) and os.path.exists(b)
                                        and os.path.samefile(a, b))
