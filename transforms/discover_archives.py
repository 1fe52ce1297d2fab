"""Beam steps of the build job that list container inputs: tar and zip archives, WebDataset shards, Parquet.

Every member (every Parquet row) is one input, listed without reading an image.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.archives.members import (PARQUET, SEPARATOR, TAR, TGZ, WEBDATASET, ZIP, ContainerRules, MemberRef,
                                         archive_kind, is_parquet_pattern, is_shard_pattern, label_path,
                                         listed_member, member_entry, member_name, unsafe_entry, unsafe_member)
from transforms.archives.parquet_rows import (class_names_of, columns_problem, open_parquet, open_rows,
                                              row_group_entries)
from transforms.archives.tar_index import MemberDamage, is_inner_tar, tar_members
from transforms.archives.webdataset import (IMAGE_EXTENSIONS, LABEL_EXTENSIONS, expand_braces, key_and_extension,
                                            sample_entry, samples_of)
from transforms.archives.zip_index import zip_members
from transforms.errors import ImageError, ManifestError, PlanError
from transforms.example.features import ManifestTyping
from transforms.images.inputs import LabelRules, layout_of_levels, levels_of_paths, shown_name
from transforms.shardset.dead_letters import DeadLetter
from transforms.filesystems import naming_s3_errors
from transforms.storage.files import STORAGE_ERRORS, open_for_read
from transforms.storage.listing import match_files
from transforms.worker_options import CarriesStorageOptions

__all__ = ["ListArchives", "ArchivePart"]

# Rows of a Parquet file listed as one part (whole row groups: at least one).
ROWS_PER_PART = 20_000
_PARTS = "parts"


class ArchivePart(NamedTuple):
    """One part of a container input, listed by one worker.

    Attributes:
        container: The file (path or URI).
        kind: ``tar``, ``zip``, ``parquet`` or ``webdataset`` (a shard).
        start: An inner tar: offset of its bytes; Parquet: the first row group.
        size: An inner tar: its bytes; Parquet: the row group after the last.
        first_row: Parquet: the row number of the first row.
        prefix: An inner tar: its member name and ``!``; "" for an archive's own members.
        layout: ``classes`` or ``splits`` (archives).
    """

    container: str
    kind: str
    start: int = 0
    size: int = 0
    first_row: int = 0
    prefix: str = ""
    layout: str = "classes"


def _dead(where: str, err: Exception) -> DeadLetter:
    if isinstance(err, MemberDamage):  # one member's header: the dead letter names it
        return DeadLetter(shown_name(member_name(where, err.member)), err.reason, err.detail)
    if isinstance(err, ImageError):
        return DeadLetter(shown_name(where), err.reason, err.detail)
    return DeadLetter(shown_name(where), "unreadable", f"{type(err).__name__}: {err}")


class _StartArchiveFn(CarriesStorageOptions, beam.DoFn):
    """Container input -> its parts (_PARTS); the dead letter (main) of one that cannot be read, and the
    entries (main) of a ``.tar.gz``, listed here."""

    def __init__(self, rules: LabelRules, containers: ContainerRules) -> None:
        self._rules = rules
        self._containers = containers

    def process(self, path: str):
        try:
            files = _shards_of(path) if is_shard_pattern(path) or is_parquet_pattern(path) else [path]
        except (*STORAGE_ERRORS, PlanError) as err:
            yield _dead(path, err)
            return
        if files != [path] and archive_kind(path) == TAR:  # a pattern, not a tar whose name holds [ or *
            for shard in files:
                yield beam.pvalue.TaggedOutput(_PARTS, ArchivePart(shard, WEBDATASET))
            return
        for found in files:  # a Parquet pattern's files: each as if named, never matched again
            yield from self._parts_of(found)

    def _parts_of(self, path: str):
        """One container's parts (_PARTS), the entries of a ``.tar.gz``, or its dead letter (main)."""
        try:
            kind = archive_kind(path)
            parts = (self._parquet(path) if kind == PARQUET else self._zip(path) if kind == ZIP
                     else self._stream(path) if kind == TGZ else self._tar(path))
            for part in parts:  # or an entry of a .tar.gz
                yield beam.pvalue.TaggedOutput(_PARTS, part) if isinstance(part, ArchivePart) else part
        except (*STORAGE_ERRORS, ImageError, PlanError) as err:
            yield _dead(path, err)

    def _layout(self, paths) -> str:
        """The layout the members' paths show (``--layout`` unless auto), in bounded memory."""
        if self._rules.layout != "auto":
            for _ in paths:
                pass
            return self._rules.layout
        return layout_of_levels(levels_of_paths(paths))

    def _tar(self, path: str):
        """A tar's parts: its own members and each inner tar, or the whole tar as a WebDataset shard."""
        inner: list[ArchivePart] = []
        shards = [False]

        def paths(members):
            key, exts = None, set()
            for member in members:
                if not listed_member(member.name):
                    continue
                stem, ext = key_and_extension(member.name)
                exts = exts if stem == key else set()
                key = stem
                exts.add(ext)
                shards[0] |= bool(exts & set(LABEL_EXTENSIONS)) and bool(exts & set(IMAGE_EXTENSIONS))
                if member.is_file and is_inner_tar(member.name):
                    inner.append(ArchivePart(path, TAR, member.offset, member.size, 0, member.name + SEPARATOR))
                    yield label_path(member.name + SEPARATOR + "x")
                else:
                    yield member.name

        with open_for_read(path) as fh, naming_s3_errors(path):
            layout = self._layout(paths(_up_to_damage(tar_members(fh))))
        if shards[0] and not inner:
            yield ArchivePart(path, WEBDATASET)
            return
        yield ArchivePart(path, TAR, layout=layout)
        for part in inner:
            yield part._replace(layout=layout)

    def _stream(self, path: str):
        """A ``.tar.gz``'s members, listed here in one streaming pass (it cannot be cut into parts).

        A damaged stream gives the members before the damage and its dead letter.
        """
        members, unsafe, damage = [], [], []
        with open_for_read(path) as fh, naming_s3_errors(path):
            for member in _up_to_damage(tar_members(fh, stream=True), damage):
                problem = unsafe_member(member.name)
                if problem:
                    unsafe.append(unsafe_entry(path, member.name, problem))
                elif listed_member(member.name):
                    members.append(member)
        layout = self._layout(m.name for m in members)
        yield from unsafe
        for member in members:
            ref = MemberRef(path, TGZ, member.offset, member.size, member.size) if member.is_file else None
            yield member_entry(path, member.name, ref, layout, self._rules)
        if damage:
            yield _dead(path, damage[0])

    def _zip(self, path: str):
        with open_for_read(path) as fh, naming_s3_errors(path):
            layout = self._layout(m.name for m in zip_members(fh) if listed_member(m.name))
        yield ArchivePart(path, ZIP, layout=layout)

    def _parquet(self, path: str):
        with open_for_read(path) as fh, naming_s3_errors(path):
            parquet = open_parquet(fh)
        problem = columns_problem(parquet.schema_arrow, self._containers.image_column, self._containers.label_column)
        if problem:
            yield DeadLetter(path, "unreadable", f"Parquet file {problem}")
            return
        meta = parquet.metadata
        start = first = rows = 0
        for group in range(meta.num_row_groups):
            rows += meta.row_group(group).num_rows
            if rows >= ROWS_PER_PART or group == meta.num_row_groups - 1:
                yield ArchivePart(path, PARQUET, start, group + 1, first)
                start, first, rows = group + 1, first + rows, 0


def _up_to_damage(members, damage: list | None = None):
    """The members of a tar up to where it is damaged, the damage appended to ``damage`` if given
    (without, the listing part meets it again and reports it)."""
    try:
        yield from members
    except ImageError as err:
        if damage is not None:
            damage.append(err)


def _shards_of(pattern: str) -> list[str]:
    """The files (WebDataset shards, Parquet files) a pattern names: its brace ranges expanded, its
    wildcards matched (once)."""
    names = expand_braces(pattern)
    globs = [name for name in names if any(c in name for c in "*?[")]
    matched = iter(match_files(globs)) if globs else iter(())
    shards = []
    for name in names:
        if name in globs:
            shards.extend(sorted(meta.path for meta in next(matched)))
        else:
            shards.append(name)
    return shards


class _ListPartFn(CarriesStorageOptions, beam.DoFn):
    """ArchivePart -> SourceImage (with its ``MemberRef``) or DeadLetter per member or Parquet row.

    A part that cannot be read to its end gives the members read before, and one dead letter.
    """

    def __init__(self, rules: LabelRules, containers: ContainerRules) -> None:
        self._rules = rules
        self._containers = containers
        self._hidden = Metrics.counter("build", "hidden_files_skipped")
        self._parts = Metrics.counter("build", "archive_parts_listed")

    def process(self, part: ArchivePart):
        self._parts.inc()
        where = part.container + (SEPARATOR + part.prefix.rstrip(SEPARATOR) if part.prefix else "")
        try:
            with open_for_read(part.container) as fh, naming_s3_errors(part.container):
                if part.kind == WEBDATASET:
                    yield from self._samples(part, fh)
                elif part.kind == PARQUET:
                    yield from self._rows(part, fh)
                elif part.kind == ZIP:
                    yield from self._zip(part, fh)
                else:
                    yield from self._tar(part, fh)
        except (*STORAGE_ERRORS, ImageError) as err:
            yield _dead(where, err)

    def _tar(self, part: ArchivePart, fh):
        inner = bool(part.prefix)
        for member in tar_members(fh, start=part.start, size=part.size) if inner else tar_members(fh):
            problem = unsafe_member(member.name)
            if problem:
                yield unsafe_entry(part.container, part.prefix + member.name, problem)
                continue
            if not listed_member(member.name):
                self._hidden.inc(not member.name.endswith("/") and bool(member.name))
                continue
            if not inner and member.is_file and is_inner_tar(member.name):
                continue  # a part of its own
            ref = MemberRef(part.container, part.kind, member.offset, member.size, member.size) \
                if member.is_file else None
            yield member_entry(part.container, part.prefix + member.name, ref, part.layout, self._rules)

    def _zip(self, part: ArchivePart, fh):
        for member in zip_members(fh):
            problem = unsafe_member(member.name)
            if problem:
                yield unsafe_entry(part.container, member.name, problem)
                continue
            if not listed_member(member.name):
                self._hidden.inc(not member.name.endswith("/") and bool(member.name))
                continue
            if member.damage:
                yield DeadLetter(shown_name(member_name(part.container, member.name)), "unreadable", member.damage)
                continue
            ref = MemberRef(part.container, ZIP, member.header_offset, member.compressed, member.size,
                            member.method, member.crc) if member.is_file else None
            yield member_entry(part.container, member.name, ref, part.layout, self._rules)

    def _samples(self, part: ArchivePart, fh):
        typing = ManifestTyping(self._rules.features)

        def read(member) -> bytes:
            fh.seek(member.offset)
            return fh.read(member.size)

        damage: list[ImageError] = []  # the sample being grouped when the damage is met is still given
        for sample in samples_of(_up_to_damage(tar_members(fh), damage)):
            problem = next(filter(None, (unsafe_member(m.name) for m in sample.members.values())), None)
            if problem:
                yield unsafe_entry(part.container, sample.key, problem)
                continue
            yield sample_entry(part.container, sample, read, self._rules, typing, self._containers.class_names)
        if damage:
            yield _dead(part.container, damage[0])

    def _rows(self, part: ArchivePart, fh):
        parquet = open_rows(fh, self._containers.image_column, self._containers.label_column)
        try:
            names = self._containers.class_names or class_names_of(parquet.schema_arrow, self._containers.label_column)
        except ManifestError as err:
            raise ManifestError(f"{part.container}: {err}") from err
        first = part.first_row
        for group in range(part.start, part.size):
            yield from row_group_entries(part.container, parquet, group, first, self._containers.image_column,
                                         self._containers.label_column, self._rules, names)
            first += parquet.metadata.row_group(group).num_rows


class ListArchives(beam.PTransform):
    """Lists the members of container inputs, spread over workers by part.

    A first pass over each archive's headers decides its layout and cuts it into parts (its own
    members, each inner tar, each WebDataset shard, ranges of row groups) that workers list.
    Applied to the pipeline. Output: ``PCollection`` of ``SourceImage`` and ``DeadLetter``.

    Args:
        inputs: Archives, Parquet files, patterns of WebDataset shards (``shard-{000..099}.tar``)
            and of Parquet files (``hf/*.parquet``).
        containers: Parquet columns and the names of integer class indices.
    """

    def __init__(self, inputs: Sequence[str], rules: LabelRules, containers: ContainerRules) -> None:
        super().__init__()
        self._inputs = list(inputs)
        self._rules = rules
        self._containers = containers

    def expand(self, pbegin):
        started = (pbegin
                   | "CreateArchiveInputs" >> beam.Create(self._inputs)
                   | "StartArchives" >> beam.ParDo(_StartArchiveFn(self._rules, self._containers)).with_outputs(
                       _PARTS, main="entries"))  # ArchivePart; DeadLetter, .tar.gz members
        listed = (started[_PARTS]
                  | "SpreadArchiveParts" >> beam.Reshuffle()
                  | "ListArchiveParts" >> beam.ParDo(_ListPartFn(self._rules, self._containers)))
        return (started.entries, listed) | "AllArchiveMembers" >> beam.Flatten()
