"""Beam transforms of the verify job: thin wrappers around ``transforms.verify.checks``.

Shards are read and checked by ``transforms.read_and_check``; the steps here read the manifest, check
across ranges, and write the report and the preview, in few fused stages; no step holds every problem.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from operator import attrgetter, itemgetter
from typing import Any, Iterable, Mapping, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from transforms.errors import ManifestError
from transforms.shardset.manifest import LABELS_NAME, MANIFEST_NAME, Manifest, ShardEntry, SplitEntry
from transforms.shardset.naming import join_path
from transforms.shardset.shard_list import read_shard_list
from transforms.storage.files import open_lines, read_file
from transforms.storage.listing import list_folder
from transforms.storage.report_files import PART_PROBLEMS, parts_folder, write_problem_part, write_report
from transforms.storage.writing import write_file
from transforms.verify.checks import (Problem, ProblemPart, labels_problems, listing_problems, shard_label_problems)
from transforms.verify.preview import PREVIEW_PER_CLASS, render_preview
from transforms.verify.ranges import KEY_BUCKETS, ShardFile, group_parts, group_problems
from transforms.worker_options import StageInPartsFn

__all__ = ["ReadManifest", "CheckAcrossRanges", "WriteReport", "WritePreview", "MANIFEST", "SHARDS", "PROBLEMS"]

MANIFEST = "manifest"
SHARDS = "shards"
PROBLEMS = "problems"
_NAMESPACE = "verify_shards"


def _read_shard_set(folder: str):
    """folder -> a ``ShardFile`` per listed shard that exists; its Manifest to MANIFEST, problems to PROBLEMS
    (an unparsable ``manifest.json`` is a ``parse_error`` and nothing else is read)."""
    path = join_path(folder, MANIFEST_NAME)
    data = read_file(path)
    try:
        manifest = Manifest.loads(data)
    except ManifestError as err:
        yield beam.pvalue.TaggedOutput(PROBLEMS, Problem(path, None, "parse_error", str(err)))
        return
    yield beam.pvalue.TaggedOutput(MANIFEST, manifest)
    yield from _list_shards(manifest, list_folder(folder), folder)


def _list_shards(manifest: Manifest, present: Mapping[str, tuple[str, int]], folder: str):
    """Manifest -> a ``ShardFile`` per listed shard that exists, and problems to PROBLEMS.

    A format-2 shard list is streamed (one shard's label counts at a time); a missing or disagreeing
    list is one problem naming it, and the folder is then not compared with a partial list.
    """
    entries: dict[str, list[ShardEntry]] = {name: [] for name in manifest.splits}
    count = len(manifest.labels)
    try:
        with contextlib.ExitStack() as stack:
            if manifest.complete:
                listed = ((name, e) for name, split in sorted(manifest.splits.items()) for e in split.shards)
            else:
                name = manifest.shards_file.file
                if name not in present:
                    raise ManifestError(f"{name} is missing; {MANIFEST_NAME} lists its shards there")
                listed = read_shard_list(manifest, stack.enter_context(open_lines(present[name][0])))
            for split, entry in listed:
                if entry.file in present:
                    yield ShardFile(present[entry.file][0], present[entry.file][1], split, entry)
                if count:
                    for problem in shard_label_problems(folder, count, entry):
                        yield beam.pvalue.TaggedOutput(PROBLEMS, problem)
                entries[split].append(dataclasses.replace(entry, label_counts={}))
    except ManifestError as err:
        name = manifest.shards_file.file if manifest.shards_file else MANIFEST_NAME
        kind = "missing_file" if name not in present else "parse_error"
        yield beam.pvalue.TaggedOutput(PROBLEMS, Problem(join_path(folder, name), None, kind, str(err)))
        return
    light = dataclasses.replace(manifest, splits={
        name: SplitEntry(name, entries[name], split.to_counts()) for name, split in manifest.splits.items()})
    sizes = {name: size for name, (_, size) in present.items()}
    labels_txt = read_file(present[LABELS_NAME][0]) if LABELS_NAME in present else None
    for problem in listing_problems(folder, light, sizes) + labels_problems(folder, light, labels_txt):
        yield beam.pvalue.TaggedOutput(PROBLEMS, problem)


class ReadManifest(beam.PTransform):
    """Reads a shard set's ``manifest.json`` (and ``shards.jsonl``) and lists its ``folder``, in one step.

    No element holds every shard's label counts. Outputs (by tag): ``MANIFEST``: the ``Manifest``
    (none when it cannot be parsed; for format 2 without shard entries); ``SHARDS``: a ``ShardFile``
    per listed shard that exists; ``PROBLEMS``: what ``_read_shard_set`` finds.
    """

    def __init__(self, folder: str) -> None:
        super().__init__()
        self._folder = folder

    def expand(self, pbegin):
        return (pbegin
                | "Folder" >> beam.Create([self._folder])
                | "ListShards" >> beam.FlatMap(_read_shard_set).with_outputs(MANIFEST, PROBLEMS,
                                                                              main=SHARDS))


class CheckAcrossRanges(beam.PTransform):
    """Checks what no single range shows: each listed shard's counts, and image keys seen twice.

    Input ``RangeTally``; output ``Problem``. Both checks share one ``GroupByKey`` (``ranges.group_parts``).

    Args:
        compare_counts: Compare each shard's counts with its manifest entry (a shard set); without,
            only repeated keys are looked for.
        buckets: Buckets for the keys: a number, or a singleton side input of one.
    """

    def __init__(self, compare_counts: bool = True, buckets: Any = KEY_BUCKETS) -> None:
        super().__init__()
        self._compare_counts = compare_counts
        self._buckets = buckets

    def expand(self, tallies):
        return (tallies
                | "Parts" >> beam.FlatMap(group_parts, self._compare_counts,
                                          self._buckets)  # ((kind, group), part)
                | "Group" >> beam.GroupByKey()  # ((kind, group), [part])
                | "Check" >> beam.FlatMapTuple(group_problems))


def _write_report(path: str, records: Iterable[int], sizes: Iterable[int], folder: str,
                  *parts: Iterable[ProblemPart]) -> None:
    sizes = list(sizes)
    found = write_report(path, len(sizes), sum(records), sum(sizes),
                         [part for group in parts for part in group], folder)
    Metrics.counter(_NAMESPACE, "problems").inc(found)


class WriteReport(beam.PTransform):
    """Writes the JSON report to ``path`` once every problem is known.

    Input: a tuple ``(tallies, sizes, *problems)`` of PCollections: the ``RangeTally`` of every range,
    the size of every shard file checked, and any number of PCollections of ``Problem``, staged in
    sorted parts where they are found and merged by one step (no flatten, no shuffle).
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path
        self._folder = parts_folder(path)

    def expand(self, inputs):
        tallies, sizes, *problems = inputs
        records = tallies | "RangeRecords" >> beam.Map(attrgetter("records"))
        parts = [found | f"StageProblems{i}" >> beam.ParDo(StageInPartsFn(
                     functools.partial(write_problem_part, folder=self._folder), PART_PROBLEMS))
                 for i, found in enumerate(problems)]  # ProblemPart, in the steps that find them
        side = [beam.pvalue.AsIter(records), beam.pvalue.AsIter(sizes), self._folder,
                *[beam.pvalue.AsList(found) for found in parts]]
        return (tallies.pipeline
                | "Once" >> beam.Create([self._path])
                | "Write" >> beam.Map(_write_report, *side))


def _write_preview(details: tuple[str, Sequence[tuple[str, str, int]], Mapping[int, int] | None],
                   samples: list, path: str) -> None:
    title, shard_sizes, class_counts = details
    write_file(path, render_preview(samples, sorted(shard_sizes), title, class_counts))


class WritePreview(beam.PTransform):
    """Draws the contact sheet from a few samples per class and writes it as PNG to ``path``.

    Input: a pair ``(samples, details)`` of PCollections: ``(label, PreviewSample)`` per sample, and
    one ``(title, shard sizes, class counts)``, without which (an unreadable manifest) nothing is drawn.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, inputs):
        samples, details = inputs
        chosen = (samples
                  | "FewPerClass" >> beam.combiners.Top.SmallestPerKey(PREVIEW_PER_CLASS, key=attrgetter("key"))
                  | "Samples" >> beam.FlatMap(itemgetter(1)))
        return details | "Draw" >> beam.Map(_write_preview, beam.pvalue.AsList(chosen), self._path)
