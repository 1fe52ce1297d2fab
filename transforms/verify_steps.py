"""Beam transforms of the verify job: thin wrappers around ``transforms.verify.checks``.

Element types:
- a record read with offsets: ``(path, offset, data)``;
- a ``RecordCheck`` per record, ``Problem`` objects for everything found;
- ``(path, ShardTally)`` per shard; ``(label, PreviewSample)`` for the preview.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import posixpath
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms.verify.preview import PREVIEW_PER_CLASS, preview_sample, render_preview
from transforms.tfrecord.compression import compression_of
from transforms.errors import ManifestError, RecordError
from transforms.output_folder import open_lines
from transforms.shardset.manifest import LABELS_NAME, MANIFEST_NAME, Manifest, ShardEntry, SplitEntry
from transforms.shardset.shard_list import read_shard_list
from transforms.shardset.naming import join_path
from transforms.tfrecord.record_index import index_names
from transforms.verify.checks import (Problem, RecordCheck, Report, ShardTally, check_record,
                                      duplicate_key_problems, index_problems, labels_problems,
                                      listing_problems, record_labels, sha256_problem,
                                      shard_label_problems, shard_problems)

__all__ = ["ReadManifest", "ShardFile", "CheckRecords", "CheckShardFiles", "TallyShards",
           "FindDuplicateKeys", "WriteReport", "WritePreview", "MANIFEST", "SHARDS", "PROBLEMS", "SAMPLES"]

MANIFEST = "manifest"
SHARDS = "shards"
PROBLEMS = "problems"
SAMPLES = "samples"
_NAMESPACE = "verify_shards"
_HASH_CHUNK = 8 << 20


@dataclass(frozen=True)
class ShardFile:
    """A file the verify job reads.

    Attributes:
        path: Its path, as ``FileSystems.match`` spells it.
        size: Its size in bytes.
        split: Its split (from the manifest, or the shard name), or None when
            its name states none.
        entry: Its manifest entry, or None without a manifest.
    """

    path: str
    size: int
    split: str | None
    entry: ShardEntry | None = None


def _load_manifest(folder: str):
    """folder -> its Manifest (format 2: without its shard list), or a ``parse_error`` problem to PROBLEMS."""
    path = join_path(folder, MANIFEST_NAME)
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        data = fh.read()
    try:
        yield Manifest.loads(data)
    except ManifestError as err:
        yield beam.pvalue.TaggedOutput(PROBLEMS, Problem(path, None, "parse_error", str(err)))


def _list_folder(folder: str) -> dict[str, tuple[str, int]]:
    """Name -> (path, size) of the files directly in ``folder``."""
    return {posixpath.basename(meta.path): (meta.path, meta.size_in_bytes)
            for meta in FileSystems.match([join_path(folder, "*")])[0].metadata_list}


def _read_labels(present: Mapping[str, tuple[str, int]]) -> bytes | None:
    if LABELS_NAME not in present:
        return None
    with FileSystems.open(present[LABELS_NAME][0], compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        return fh.read()


def _list_shards(manifest: Manifest, present: Mapping[str, tuple[str, int]], folder: str):
    """Manifest -> a ``ShardFile`` per listed shard that exists, and problems to PROBLEMS.

    A format-2 shard list is streamed (one shard's label counts at a time)
    and checked against ``manifest.json``; a missing or disagreeing list is
    one problem naming it, and the folder is then not compared with a
    partial list. Otherwise the folder's files and ``labels.txt`` are
    compared with the listed shards (file names and sizes only).
    """
    entries: dict[str, list[ShardEntry]] = {name: [] for name in manifest.splits}
    count = len(manifest.labels)
    try:
        with contextlib.ExitStack() as stack:
            if manifest.complete:
                listed = ((name, e) for name, split in sorted(manifest.splits.items()) for e in split.shards)
            else:
                name = manifest.shards_file.file
                lines = (stack.enter_context(open_lines(present[name][0])) if name in present else None)
                if lines is None:
                    raise ManifestError(f"{name} is missing; {MANIFEST_NAME} lists its shards there")
                listed = read_shard_list(manifest, lines)
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
    for problem in (listing_problems(folder, light, sizes)
                    + labels_problems(folder, light, _read_labels(present))):
        yield beam.pvalue.TaggedOutput(PROBLEMS, problem)


class ReadManifest(beam.PTransform):
    """Reads a shard set's ``manifest.json`` (and ``shards.jsonl``) and lists its folder, in the pipeline.

    The job graph holds only the folder's name, whatever the manifest's size,
    and the shard list is read line by line: no element holds every shard's
    label counts. Outputs (a dict): ``MANIFEST``: the ``Manifest`` (none when
    it cannot be parsed; for format 2 without shard entries, with its
    splits' totals); ``SHARDS``: a ``ShardFile`` per listed shard that exists;
    ``PROBLEMS``: an unparsable manifest, a missing or disagreeing shard
    list, missing, extra and wrong-sized files, and ``labels.txt`` against
    the manifest.

    Args:
        folder: The shard set's folder.
    """

    def __init__(self, folder: str) -> None:
        super().__init__()
        self._folder = folder

    def expand(self, pbegin):
        folder = pbegin | "Folder" >> beam.Create([self._folder])
        loaded = folder | "Load" >> beam.FlatMap(_load_manifest).with_outputs(PROBLEMS, main=MANIFEST)
        present = beam.pvalue.AsSingleton(folder | "ListFolder" >> beam.Map(_list_folder))
        listed = loaded[MANIFEST] | "ListShards" >> beam.FlatMap(
            _list_shards, present, self._folder).with_outputs(PROBLEMS, main=SHARDS)
        problems = (loaded[PROBLEMS], listed[PROBLEMS]) | "AllProblems" >> beam.Flatten()
        return {MANIFEST: loaded[MANIFEST], SHARDS: listed[SHARDS], PROBLEMS: problems}


class _CheckRecordFn(beam.DoFn):
    """(path, offset, data) -> RecordCheck; its problems and preview samples to side outputs."""

    def __init__(self, schema: Mapping[str, str] | None, decode_images: bool, preview: bool,
                 labels: Sequence[str] | None) -> None:
        self._schema = schema
        self._decode_images = decode_images
        self._preview = preview
        self._labels = list(labels) if labels else None
        self._checked = Metrics.counter(_NAMESPACE, "records_checked")

    def process(self, item: tuple[str, int, bytes], schema: Mapping[str, str] | None = None,
                labels: Sequence[str] | None = None):
        path, offset, data = item
        schema = self._schema if schema is None else schema
        labels = self._labels if labels is None else (list(labels) or None)
        check, features = check_record(path, offset, data, schema, self._decode_images, labels)
        self._checked.inc()
        yield check
        for problem in check.problems:
            yield beam.pvalue.TaggedOutput(PROBLEMS, problem)
        if self._preview:
            sample = preview_sample(features)
            if sample is not None:
                yield beam.pvalue.TaggedOutput(SAMPLES, (sample.label, sample))


class CheckRecords(beam.PTransform):
    """Checks every record: Example parsing, optionally the schema, the labels and the image.

    Input ``(path, offset, data)``; outputs ``checks`` (``RecordCheck``),
    ``problems`` and, with ``preview``, ``samples``. With ``labels`` (the
    manifest's class names), each record's label and class text must agree
    with them. ``schema`` and ``labels`` may also be singleton side inputs
    (the manifest's, read in the pipeline).
    """

    def __init__(self, schema: Mapping[str, str] | beam.pvalue.AsSingleton | None, decode_images: bool,
                 preview: bool, labels: Sequence[str] | beam.pvalue.AsSingleton | None = None) -> None:
        super().__init__()
        side = {name: value for name, value in (("schema", schema), ("labels", labels))
                if isinstance(value, beam.pvalue.AsSingleton)}
        self._fn = _CheckRecordFn(None if "schema" in side else schema, decode_images, preview,
                                  None if "labels" in side else labels)
        self._side = side

    def expand(self, records):
        return records | "Check" >> beam.ParDo(self._fn, **self._side).with_outputs(
            PROBLEMS, SAMPLES, main="checks")


def _read_file(path: str) -> Iterable[bytes]:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        while chunk := fh.read(_HASH_CHUNK):
            yield chunk


class _CheckShardFileFn(beam.DoFn):
    """(path, size, ShardEntry or None) -> problems with the file's sha256 and its ``.idx``."""

    def __init__(self, index_required: bool) -> None:
        self._index_required = index_required

    def process(self, item: tuple[str, int, ShardEntry | None]):
        path, size, entry = item
        if entry is not None:
            digest = hashlib.sha256()
            for chunk in _read_file(path):
                digest.update(chunk)
            problem = sha256_problem(path, entry, digest.hexdigest())
            if problem:
                yield problem
        if compression_of(path) == "none":
            index_path = next((name for name in index_names(path) if FileSystems.exists(name)), None)
            index = b"".join(_read_file(index_path)) if index_path is not None else None
            yield from index_problems(path, index, size, self._index_required)


class CheckShardFiles(beam.PTransform):
    """Checks whole files: sha256 against the manifest, ``.idx`` against the file.

    Input ``(path, size, ShardEntry or None)``; output ``Problem``.
    """

    def __init__(self, index_required: bool) -> None:
        super().__init__()
        self._index_required = index_required

    def expand(self, files):
        return (files
                | "Spread" >> beam.Reshuffle()  # one file per element, over all workers
                | "HashAndIndex" >> beam.ParDo(_CheckShardFileFn(self._index_required)))


# The marker fed to _TallyFn for a damaged record (other inputs are labels or None).
_DAMAGED = "damaged"


class _TallyFn(beam.CombineFn):
    """Counts a shard's records per label; notes damage. Inputs: a label, None, or _DAMAGED."""

    def create_accumulator(self):
        return [0, {}, False]

    def add_input(self, acc, item):
        if item == _DAMAGED:
            acc[2] = True
        else:
            acc[0] += 1
            for label in record_labels(item):
                acc[1][str(label)] = acc[1].get(str(label), 0) + 1
        return acc

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for records, labels, damaged in accs:
            out[0] += records
            for label, count in labels.items():
                out[1][label] = out[1].get(label, 0) + count
            out[2] = out[2] or damaged
        return out

    def extract_output(self, acc) -> ShardTally:
        return ShardTally(acc[0], dict(acc[1]), acc[2])


def _record_label(check: RecordCheck) -> tuple[str, int | None]:
    return check.file, check.label


def _damage(err: RecordError) -> tuple[str, str]:
    return err.path, _DAMAGED


def _compare_with_manifest(joined):
    path, groups = joined
    tallies = list(groups["tally"])
    for entry in groups["entry"]:  # a listed shard with no record read gets an empty tally
        yield from shard_problems(path, entry, tallies[0] if tallies else ShardTally())


class TallyShards(beam.PTransform):
    """Counts records and labels per listed shard and compares them with the manifest.

    Input: a triple ``(checks, errors, listed)`` of PCollections, ``listed``
    holding ``(path, ShardEntry)`` for every listed shard that exists; output
    ``Problem``. Tallies meet their entries in a join, so no step holds the
    whole manifest.
    """

    def expand(self, inputs):
        checks, errors, listed = inputs
        tallies = ((checks | "Labels" >> beam.Map(_record_label),
                    errors | "Damage" >> beam.Map(_damage))
                   | "AllCounts" >> beam.Flatten()
                   | "PerShard" >> beam.CombinePerKey(_TallyFn()))  # (path, ShardTally)
        return ({"tally": tallies, "entry": listed}
                | "JoinManifest" >> beam.CoGroupByKey()  # (path, {tally, entry})
                | "CompareWithManifest" >> beam.FlatMap(_compare_with_manifest))


def _key_location(check: RecordCheck, split_of: Mapping[str, str | None]):
    if check.key is not None:
        yield check.key, (split_of.get(check.file), check.file, check.offset)


def _duplicates(item):
    key, locations = item
    yield from duplicate_key_problems(key, locations)


class FindDuplicateKeys(beam.PTransform):
    """Reports every ``image/key/sha256`` seen twice, within a split or across splits.

    Input ``RecordCheck``; output ``Problem``.

    Args:
        split_of: ``PCollection[(shard path, split name or None)]``.
    """

    def __init__(self, split_of: beam.PCollection) -> None:
        super().__init__()
        self._split_of = split_of

    def expand(self, checks):
        split_of = beam.pvalue.AsDict(self._split_of)
        return (checks
                | "KeyByImage" >> beam.FlatMap(_key_location, split_of)  # (key, (split, path, offset))
                | "GroupKeys" >> beam.GroupByKey()
                | "Repeats" >> beam.FlatMap(_duplicates))


def _write(path: str, data: bytes) -> None:
    with FileSystems.create(path, mime_type="application/octet-stream",
                            compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        fh.write(data)


def _count_problem(problem: Problem) -> Problem:
    Metrics.counter(_NAMESPACE, "problems").inc()
    return problem


def _write_report(problems: list[Problem], records: int, files: int, size: int, path: str) -> None:
    _write(path, Report.build(files, records, size, problems).dumps())


class WriteReport(beam.PTransform):
    """Writes the JSON report once every problem is known.

    Input: a triple ``(problems, checks, sizes)`` of PCollections, ``sizes``
    holding the size in bytes of every shard file checked.

    Args:
        path: Where the report goes (any FileSystems path).
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, inputs):
        problems, checks, sizes = inputs
        records = checks | "CountRecords" >> beam.combiners.Count.Globally()
        files = sizes | "CountFiles" >> beam.combiners.Count.Globally()
        size = sizes | "SumSizes" >> beam.CombineGlobally(sum)
        return (problems
                | "CountProblems" >> beam.Map(_count_problem)
                | "AllProblems" >> beam.combiners.ToList()
                | "Write" >> beam.Map(_write_report, beam.pvalue.AsSingleton(records),
                                      beam.pvalue.AsSingleton(files), beam.pvalue.AsSingleton(size),
                                      self._path))


def _sample_key(sample) -> str:
    return sample.key


def _values(item):
    return item[1]


def _write_preview(details: tuple[str, Sequence[tuple[str, str, int]], Mapping[int, int] | None],
                   samples: list, path: str) -> None:
    title, shard_sizes, class_counts = details
    _write(path, render_preview(samples, sorted(shard_sizes), title, class_counts))


class WritePreview(beam.PTransform):
    """Draws the contact sheet from a few samples per class and writes it as PNG.

    Input: a pair ``(samples, details)`` of PCollections: ``(label,
    PreviewSample)`` per sample, and one ``(title, shard sizes, class
    counts)``: the first line of the picture, ``(split, file name, bytes)``
    per shard, and label -> records (from the manifest) or None. Nothing is
    drawn without details (an unreadable manifest).

    Args:
        path: Where the PNG goes.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, inputs):
        samples, details = inputs
        chosen = (samples
                  | "FewPerClass" >> beam.combiners.Top.SmallestPerKey(PREVIEW_PER_CLASS, key=_sample_key)
                  | "Samples" >> beam.FlatMap(_values))
        return details | "Draw" >> beam.Map(_write_preview, beam.pvalue.AsList(chosen), self._path)
