"""Beam transform that lists the build job's inputs: folders and input manifests."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from transforms.image_items import DeadLetter, SourceImage
from transforms.inputs import LabelRules, is_hidden, is_manifest_path, manifest_entries, tree_entries

__all__ = ["DiscoverImages", "DEAD_LETTER_TAG"]

DEAD_LETTER_TAG = "dead_letters"


class _ListInputFn(beam.DoFn):
    """input path -> SourceImage per file (main) and DeadLetter (tagged)."""

    def __init__(self, rules: LabelRules) -> None:
        self._rules = rules
        self._listed = Metrics.counter("build", "inputs_listed")
        self._hidden = Metrics.counter("build", "hidden_files_skipped")

    def process(self, root: str):
        if is_manifest_path(root):
            with FileSystems.open(root) as fh:
                text = fh.read().decode("utf-8-sig")
            entries = manifest_entries(text, root, self._rules)
        else:
            prefix = root.rstrip("/") + "/"
            matched = FileSystems.match([prefix + "**"])[0].metadata_list
            relpaths = []
            for meta in matched:
                rel = meta.path[len(prefix):] if meta.path.startswith(prefix) else meta.path
                if is_hidden(rel):
                    self._hidden.inc()
                    continue
                relpaths.append(rel)
            entries = tree_entries(root.rstrip("/"), relpaths, self._rules)
        for entry in entries:
            self._listed.inc()
            if isinstance(entry, DeadLetter):
                yield beam.pvalue.TaggedOutput(DEAD_LETTER_TAG, entry)
            else:
                yield entry


class DiscoverImages(beam.PTransform):
    """Lists every input file or manifest row.

    Input: ``PCollection[str]`` of ``--input`` values (folders or ``.csv``/``.jsonl``).
    Output: a ``DoOutputsTuple`` with ``SourceImage`` (main) and ``DeadLetter``
    (``DEAD_LETTER_TAG``).
    """

    def __init__(self, rules: LabelRules) -> None:
        super().__init__()
        self._rules = rules

    def expand(self, roots):
        return (roots
                | "ListInputs" >> beam.ParDo(_ListInputFn(self._rules)).with_outputs(
                    DEAD_LETTER_TAG, main="images"))
