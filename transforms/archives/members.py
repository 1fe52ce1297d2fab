"""Members of container inputs: how they are located, named and labelled.

Each member (each Parquet row) is one input, named ``CONTAINER!MEMBER`` (``inner.tar!path`` in an
inner tar); its ``image/filename`` is ``BASENAME!MEMBER``. Its split and class come from its path as
from a folder's, an inner tar counting as the folder of its name without ``.tar`` (``label_path``).
"""

from __future__ import annotations

import posixpath
import zipfile
from dataclasses import dataclass
from typing import NamedTuple

from transforms.images.inputs import LabelRules, is_hidden, shown_name, tree_entry
from transforms.images.items import SourceImage
from transforms.shardset.dead_letters import DeadLetter

__all__ = ["ContainerRules", "container_problem", "SEPARATOR", "TAR", "TGZ", "ZIP", "PARQUET", "WEBDATASET",
           "input_kind", "MemberRef", "archive_kind", "is_container_input", "is_shard_pattern",
           "is_parquet_pattern", "member_name", "label_path", "member_entry", "listed_member",
           "unsafe_member", "unsafe_entry"]

SEPARATOR = "!"
TAR, TGZ, ZIP, PARQUET, WEBDATASET = "tar", "tgz", "zip", "parquet", "webdataset"
# What one input of each kind is called in reports (``input_kind``).
_INPUT_KINDS = {TAR: "tar member", TGZ: ".tar.gz member", ZIP: "zip member", PARQUET: "Parquet row",
                WEBDATASET: "WebDataset sample"}
_SUFFIXES = ((".tar.gz", TGZ), (".tgz", TGZ), (".tar", TAR), (".zip", ZIP), (".parquet", PARQUET))
_PATTERN_CHARS = "*?[{"


class MemberRef(NamedTuple):
    """Where one member's bytes are, enough to read them without listing the container again.

    Attributes:
        container: The file holding it (path or URI).
        kind: ``tar``, ``zip``, ``tgz``, ``parquet`` or ``webdataset`` (read as a tar member).
        offset: ``tar``: offset of its bytes; ``zip``: of its local header; ``tgz``: of its bytes
            in the decompressed stream; ``parquet``: its row group.
        size: Bytes stored (``zip``: compressed); ``parquet``: its row in the row group.
        length: Bytes of the member once read (``zip``: uncompressed; ``parquet``: -1, unknown).
        method: ``zip``: the compression method; else 0.
        crc: ``zip``: the CRC-32 of its bytes; else 0.
        column: ``parquet``: the image column; else "".
    """

    container: str
    kind: str
    offset: int
    size: int
    length: int
    method: int = 0
    crc: int = 0
    column: str = ""


def archive_kind(path: str) -> str | None:
    """``tar``, ``tgz``, ``zip`` or ``parquet`` from a path's suffix (any case), or None."""
    lower = path.lower()
    return next((kind for suffix, kind in _SUFFIXES if lower.endswith(suffix)), None)


def is_shard_pattern(path: str) -> bool:
    """True for a pattern of WebDataset shards: ``.tar`` names with a brace range or wildcards."""
    return archive_kind(path) == TAR and any(c in path for c in _PATTERN_CHARS)


def is_parquet_pattern(path: str) -> bool:
    """True for a pattern of Parquet files: ``.parquet`` names with wildcards or braces (``hf/*.parquet``)."""
    return archive_kind(path) == PARQUET and any(c in path for c in _PATTERN_CHARS)


def is_container_input(path: str) -> bool:
    """True if an ``--input`` names an archive, a Parquet file or a pattern of WebDataset shards."""
    return archive_kind(path) is not None


def member_name(container: str, member: str) -> str:
    """``CONTAINER!MEMBER``: how a member is named in dead letters."""
    return f"{container}{SEPARATOR}{member}"


def label_path(member: str) -> str:
    """The folder path a member's split and class are read from: ``inner.tar!x.jpg`` -> ``inner/x.jpg``."""
    parts = member.split(SEPARATOR)
    folders = [part[:-len(".tar")] if part.lower().endswith(".tar") else part for part in parts[:-1]]
    return "/".join(folders + parts[-1:])


def input_kind(source: SourceImage) -> str:
    """What kind of input a listed input is: ``file``, ``manifest row``, ``tar member``, ``Parquet row``, ..."""
    if source.member is not None:
        return _INPUT_KINDS.get(source.member.kind, source.member.kind)
    return "manifest row" if source.origin else "file"


def listed_member(name: str) -> bool:
    """True if a member name is an input: not hidden (``.DS_Store``, ``__MACOSX/._x``), not a folder, not unsafe."""
    return bool(name) and not name.endswith("/") and not is_hidden(name) and unsafe_member(name) is None


def unsafe_member(name: str) -> str | None:
    """Why a member's path cannot name an input (absolute, or a ``..`` or ``.`` part), or None.

    Such a member (not a folder) is an ``unsafe_path`` dead letter, counted as an input.
    """
    if name.endswith("/"):
        return None
    if name.startswith("/"):
        return "member path is absolute; archive members are read only by paths inside the archive"
    parts = name.split("/")
    if ".." in parts or "." in parts:
        return "member path has a '..' or '.' part; archive members are read only by plain paths inside the archive"
    return None


def unsafe_entry(container: str, member: str, problem: str) -> DeadLetter:
    """The ``unsafe_path`` dead letter of a member (``inner.tar!path`` inside an inner tar)."""
    return DeadLetter(shown_name(member_name(container, member)), "unsafe_path", problem)


def member_entry(container: str, member: str, ref: MemberRef | None, layout: str,
                 rules: LabelRules) -> SourceImage | DeadLetter:
    """Resolves ``member`` (``inner.tar!path`` inside an inner tar) as ``inputs.tree_entry`` resolves a
    file under a folder; ``ref`` is None for a member that is not a regular file."""
    name = member_name(container, member)
    rel = f"{posixpath.basename(container)}{SEPARATOR}{member}"
    if ref is None:
        return DeadLetter(shown_name(name), "unreadable", "archive member is not a regular file (a link or "
                                                          "a device); only files are inputs")
    entry = tree_entry(container, label_path(member), layout, rules)
    if isinstance(entry, DeadLetter):
        return DeadLetter(shown_name(name), entry.reason, entry.error)
    return SourceImage(path=name, relpath=rel, split=entry.split, label=entry.label, member=ref)


@dataclass(frozen=True)
class ContainerRules:
    """How container inputs give images and labels beyond ``LabelRules``.

    Attributes:
        image_column: A Parquet file's image column (``--image_column``).
        label_column: Its label column (``--label_column``).
        class_names: ``--class_names``/``--labels_file``: the names of integer class indices (a
            WebDataset ``cls``, a Parquet integer label); None to name an index by its number.
    """

    image_column: str = "image"
    label_column: str = "label"
    class_names: tuple[str, ...] | None = None


def container_problem(fh, kind: str) -> str | None:
    """Why an archive (``fh``, seekable unless ``kind`` is ``tgz``) cannot be read at all, from its start
    (a tar's first header) or end (a zip's), or None. A tar that holds no member is refused as an empty
    folder is."""
    from transforms.archives.tar_index import MemberDamage, tar_members  # here: tar_index is below this module
    from transforms.errors import ImageError

    if kind == ZIP:
        return None if zipfile.is_zipfile(fh) else "is not a zip archive (no central directory at its end)"
    try:
        if next(tar_members(fh, stream=kind == TGZ), None) is None:
            return "archive holds no members (an empty or all-zero tar)"
    except MemberDamage:  # the first member's own damage: its dead letter, listed with the others
        return None
    except ImageError as err:
        return err.detail
    return None
