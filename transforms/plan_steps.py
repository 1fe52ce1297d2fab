"""Beam steps of the plan: survey each input from its header, and tally what a build would do.

A plan lists its inputs and rejects duplicates with the build's own steps; these steps replace the
build's inspecting, writing and publishing: nothing is staged or written but the tally.
"""

from __future__ import annotations

from typing import Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from transforms import worker_threads
from transforms.images.listing_facts import ListingFacts
from transforms.storage.files import STORAGE_ERRORS
from transforms.storage.writing import write_file
from transforms.archives.members import input_kind
from transforms.inspect_images import ImageRules, OrderedImageFn, read_input
from transforms.shardset.dead_letters import DEAD_LETTERS, DeadLetter
from transforms.errors import ImageError
from transforms.example.schema import IMAGE_FEATURES
from transforms.images.annotations import RecordLayout
from transforms.images.inspection import Inspected, inspect_image, unknown_label
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.records import EncodeSettings, image_count_keys, orientation_spec
from transforms.progress import counters as progress
from transforms.shardset.plan_report import PlanTally
from transforms.worker_options import CarriesStorageOptions

__all__ = ["SurveyImages", "TallyPlan", "READS"]

READS = "reads"


class _SurveyImageFn(OrderedImageFn):
    """SourceImage -> ImageMeta (main), DeadLetter (DEAD_LETTERS), ("read", nbytes, exact) (READS),
    on ``threads`` threads, in input order (``OrderedImageFn``), as the build's inspection does."""

    def __init__(self, settings: EncodeSettings, seed: int, rules: ImageRules, threads: int = 1) -> None:
        self._settings = settings
        self._seed = seed
        self._rules = rules
        self._threads = threads
        self._read = Metrics.counter("plan", "images_read")
        self._rejected = Metrics.counter("plan", "images_rejected")

    THREAD_NAME = "survey-image"

    def _emit(self, surveyed: Inspected, window, timestamp) -> Iterator:
        """Counts one input and yields its outputs; on the bundle's thread, in input order."""
        self._images_read.add(1, surveyed.bytes_read or 0)
        if surveyed.bytes_read is not None:
            self._read.inc()
            yield beam.pvalue.TaggedOutput(READS, WindowedValue(
                ("read", surveyed.bytes_read, surveyed.exact), timestamp, (window,)))
        yield from self._output(surveyed.output, window, timestamp)

    def _work_on(self, source: SourceImage, index_of: dict[str, int],
                 layout: RecordLayout | None) -> Inspected:
        """Reads and surveys one input (``inspect_image``); no Beam calls, so that it may run on any thread."""
        dead = unknown_label(source, index_of)
        if dead is not None:
            return Inspected(dead, None)
        try:
            data = read_input(source, self._rules.max_bytes)
        except STORAGE_ERRORS as err:
            return Inspected(DeadLetter(source.path, "unreadable", f"{type(err).__name__}: {err}"), None)
        except ImageError as err:
            return Inspected(DeadLetter(source.path, err.reason, err.detail), None)
        return inspect_image(source, data, index_of, layout, self._settings, self._seed,
                             self._rules.split_fractions, survey=True)


class SurveyImages(beam.PTransform):
    """Reads each input once, checks its header (``images.survey``) and measures the record a build would make.

    Input: ``PCollection[SourceImage]``. Outputs: ``main`` (``ImageMeta`` as a build would plan
    with it: sha256, order key, exact or estimated record size; no run file, no bytes),
    ``DEAD_LETTERS`` (the inputs header checks reject) and ``READS`` (``("read", bytes, exact)``
    per file read).

    Args:
        labels: Singleton side input with the class names in index order.
        rules: The build's ``ImageRules`` (``--split_fractions``, the largest input read).
        layout: Singleton side input with the build's ``RecordLayout``, or None.
        threads: Inputs surveyed at once by each worker (0: one per usable core); the outputs do
            not depend on it.
    """

    def __init__(self, settings: EncodeSettings, seed: int, labels, rules: ImageRules | None = None,
                 layout=None, threads: int = 1) -> None:
        super().__init__()
        worker_threads.thread_count(threads)  # refuses a negative count here, not on a worker
        self._fn = _SurveyImageFn(settings, seed, rules or ImageRules(), threads)
        self._labels = labels
        self._layout = layout

    def expand(self, sources):
        extra = {} if self._layout is None else {"layout": self._layout}
        return sources | "SurveyImage" >> beam.ParDo(self._fn, labels=self._labels, **extra).with_outputs(
            DEAD_LETTERS, READS, main="main")


def _found(source: SourceImage) -> tuple:
    return ("found", source.split, source.label, input_kind(source))


def _rejected(dead: DeadLetter) -> tuple:
    return ("rejected", dead.reason, dead.path, dead.error)


def _record(meta: ImageMeta) -> tuple:
    keys = dict(image_count_keys(meta.info))
    return ("record", meta.source.split, meta.source.label, keys["source_formats"], "converted" in keys,
            meta.record_size)


def _listing(facts: ListingFacts, fixed_labels: tuple[str, ...] | None, settings_spec: dict[str, str]) -> tuple:
    classes = fixed_labels if fixed_labels is not None else facts.classes
    return ("listing", facts.inputs, list(classes), {**IMAGE_FEATURES, **facts.layout.feature_spec(), **settings_spec})


class _PlanTallyFn(CarriesStorageOptions, beam.CombineFn):
    """Plan facts -> one ``PlanTally`` (as a dict, ``PlanTally.to_dict``)."""

    def create_accumulator(self) -> PlanTally:
        return PlanTally()

    def add_input(self, acc: PlanTally, fact: tuple) -> PlanTally:
        return acc.add(fact)

    def merge_accumulators(self, accs) -> PlanTally:
        accs = iter(accs)
        return next(accs).merge(accs)

    def extract_output(self, acc: PlanTally) -> dict:
        return acc.to_dict()


def _write_tally(tally: dict, path: str) -> None:
    write_file(path, PlanTally.from_dict(tally).dumps())


class TallyPlan(beam.PTransform):
    """Gathers what the plan saw into one ``PlanTally`` and writes it as JSON to ``path``.

    Input: a dict of PCollections: ``listed`` (``SourceImage``), ``records`` (``ImageMeta`` a build
    would write), ``reads`` (``SurveyImages``' ``READS``), ``facts`` (``ListingFacts``) and ``dead``
    (a tuple of PCollections of ``DeadLetter``). One combine; with nothing listed at all it writes
    an empty tally (a missing tally is an error: a worker that could not write it).

    Args:
        path: Where the tally goes (a local, gs:// or s3:// path every worker reaches).
        fixed_labels: ``--class_names``/``--labels_file``, or None for the listed classes.
        settings: The build's image options (``image/orientation`` is in the spec with
            ``--exif_orientation keep``).
    """

    def __init__(self, path: str, fixed_labels: tuple[str, ...] | None, settings: EncodeSettings) -> None:
        super().__init__()
        self._path = path
        self._fixed = fixed_labels
        self._spec = orientation_spec(settings)

    def expand(self, inputs):
        facts = [inputs["listed"] | "Found" >> beam.Map(_found),
                 inputs["records"] | "Records" >> beam.Map(_record),
                 inputs["reads"],
                 inputs["facts"] | "Listing" >> beam.Map(_listing, self._fixed, self._spec)]
        facts += [dead | f"Rejected{i}" >> beam.Map(_rejected) for i, dead in enumerate(inputs["dead"])]
        return (facts
                | "AllFacts" >> beam.Flatten()
                # With its default: with nothing at all, an empty tally is written.
                | "Combine" >> beam.CombineGlobally(_PlanTallyFn())  # one PlanTally, as a dict
                | "Write" >> beam.Map(_write_tally, self._path))
