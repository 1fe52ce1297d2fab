"""Beam transforms that turn duplicates into dead letters instead of silent overwrites."""

from __future__ import annotations

import apache_beam as beam

from transforms.image_items import DeadLetter, ImageMeta, SourceImage

__all__ = ["RejectDuplicatePaths", "RejectDuplicateImages", "DUPLICATE_TAG"]

DUPLICATE_TAG = "duplicates"


def _reject_same_path(keyed):
    """(split, relpath), [SourceImage] -> the image, or dead letters for all of them."""
    _, sources = keyed
    sources = sorted(sources, key=lambda s: s.path)
    if len(sources) == 1:
        yield sources[0]
        return
    for source in sources:
        others = ", ".join(s.path for s in sources if s is not source)
        yield beam.pvalue.TaggedOutput(DUPLICATE_TAG, DeadLetter(
            source.path, "duplicate_path",
            f"relative path {source.relpath!r} in split {source.split!r} also comes from {others}"))


def _keep_first_copy(keyed):
    """(split, sha256), [ImageMeta] -> the copy with the smallest path; the rest are dead letters."""
    _, metas = keyed
    metas = sorted(metas, key=lambda m: m.source.relpath)
    yield metas[0]
    for meta in metas[1:]:
        yield beam.pvalue.TaggedOutput(DUPLICATE_TAG, DeadLetter(
            meta.source.path, "duplicate_image",
            f"same bytes (sha256 {meta.sha256[:16]}...) as {metas[0].source.relpath!r} "
            f"in split {meta.source.split!r}"))


class RejectDuplicatePaths(beam.PTransform):
    """Two inputs with one relative path in one split: both become dead letters.

    Input: ``PCollection[SourceImage]``. Output: outputs ``main`` (SourceImage)
    and ``DUPLICATE_TAG`` (DeadLetter).
    """

    def expand(self, sources):
        return (sources
                | "KeyByPath" >> beam.Map(lambda s: ((s.split, s.relpath), s))
                | "GroupByPath" >> beam.GroupByKey()  # ((split, relpath), [SourceImage])
                | "RejectSamePath" >> beam.FlatMap(_reject_same_path).with_outputs(
                    DUPLICATE_TAG, main="main"))


class RejectDuplicateImages(beam.PTransform):
    """Identical image bytes twice in one split: the first by path is kept.

    ``image/key/sha256`` is then unique within a split.
    Input: ``PCollection[ImageMeta]``. Output: outputs ``main`` (ImageMeta)
    and ``DUPLICATE_TAG`` (DeadLetter).
    """

    def expand(self, metas):
        return (metas
                | "KeyByContent" >> beam.Map(lambda m: ((m.source.split, m.sha256), m))
                | "GroupByContent" >> beam.GroupByKey()  # ((split, sha256), [ImageMeta])
                | "KeepFirstCopy" >> beam.FlatMap(_keep_first_copy).with_outputs(
                    DUPLICATE_TAG, main="main"))
