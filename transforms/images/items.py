"""Small records passed between the build job's stages (pure dataclasses).

Only these cross Beam's shuffles, never image bytes: a record is written to a
run file when its image is read, and its metadata says where.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from transforms.images.image_codec import ImageInfo
from transforms.tfrecord.run_files import RunSlice

__all__ = ["SPLIT_BY_CONTENT", "SourceImage", "ImageMeta"]

# The split of an input that ``--split_fractions`` places (``planning.split_by_content``).
SPLIT_BY_CONTENT = ""


@dataclass(frozen=True)
class SourceImage:
    """One input file found by listing a folder or reading an input manifest.

    Attributes:
        path: Full path or URI of the file.
        relpath: Path relative to its input root; becomes ``image/filename``.
        split: Split the file belongs to; ``SPLIT_BY_CONTENT`` until the
            image's bytes choose it (``--split_fractions``).
        label: Class name (the first one when ``labels`` is set; "" when none).
        origin: ``MANIFEST:LINE`` of the manifest row that named it; empty for a listed file.
        labels: Every class name of a multi-label input (possibly none), or None.
        features: ``(name, type, values)`` of the input's extra features.
        objects: The input's boxes (``objects.SourceBox``), or None when it gives none.
        member: Where its bytes are in a container input (``archives.members.MemberRef``), or None.
    """

    path: str
    relpath: str
    split: str
    label: str
    origin: str = ""
    labels: tuple[str, ...] | None = None
    features: tuple[tuple[str, str, tuple], ...] = ()
    objects: tuple | None = None
    member: tuple | None = None

    def class_names(self) -> tuple[str, ...]:
        """The image classes of the input (``image/class/label``); its objects' are ``object_names``."""
        return self.labels if self.labels is not None else (self.label,)

    def object_names(self) -> tuple[str, ...]:
        """The classes of the input's objects (``image/object/class/label``), a space of their own."""
        return tuple(box.label for box in self.objects or ())

    def __reduce__(self):
        return SourceImage, _plain(self)


@dataclass(frozen=True)
class ImageMeta:
    """An image that passed inspection, with everything needed to write its record.

    Attributes:
        sha256: Hex sha256 of the source file's bytes.
        info: Format and size of the image as stored in the record.
        record_size: Exact framed size of the record in bytes.
        order_key: Shuffle key (see ``planning.order_key``).
        extra: ``(name, kind, values)`` of the record's keys beyond the plain
            image schema (``annotations.record_extras``).
        run: Where the framed record was written when the image was read
            (``tfrecord.run_files``); None only before it is written.
        phash: The 64-bit perceptual hash of its pixels (``perceptual``) with
            --near_duplicates, or None.
    """

    source: SourceImage
    label_index: int
    sha256: str
    info: ImageInfo
    record_size: int
    order_key: int
    extra: tuple[tuple[str, str, tuple], ...] = ()
    run: RunSlice | None = None
    phash: int | None = None

    def __reduce__(self):
        """Pickles as one call with tuples of plain values, in the order of the fields: half the bytes
        and time of the default pickle, at every shuffle it crosses."""
        return _image_meta, tuple(_plain(getattr(self, name)) if name in _NESTED else getattr(self, name)
                                  for name in _META_FIELDS)


def _plain(value) -> tuple | None:
    """A nested dataclass's field values, in order (None stays None)."""
    return None if value is None else tuple(getattr(value, name) for name in _FIELDS[type(value)])


def _image_meta(*values) -> ImageMeta:
    """Unpickles an ImageMeta (see ``ImageMeta.__reduce__``)."""
    return ImageMeta(**{name: (_NESTED[name](*value) if name in _NESTED and value is not None else value)
                        for name, value in zip(_META_FIELDS, values)})


# The field names each pickle follows, and ImageMeta's fields that hold a dataclass.
_FIELDS = {cls: tuple(field.name for field in fields(cls)) for cls in (SourceImage, ImageInfo, RunSlice)}
_META_FIELDS = tuple(field.name for field in fields(ImageMeta))
_NESTED = {"source": SourceImage, "info": ImageInfo, "run": RunSlice}
