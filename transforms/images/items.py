"""Small records passed between the build job's stages (pure dataclasses).

Only these cross Beam's shuffles, never image bytes: a record is written to a
run file when its image is read, and its metadata says where.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter

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
        """Pickles as one call with its field values, in order; unpickled without ``__init__`` (``_rebuilt``)."""
        return _source_image, _VALUES[SourceImage](self)


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

    def written_to(self, run: RunSlice) -> ImageMeta:
        """This image with its record at ``run`` (``dataclasses.replace``'s result, made without ``__init__``)."""
        made = object.__new__(ImageMeta)
        made.__dict__.update(self.__dict__, run=run)
        return made

    def __reduce__(self):
        """Pickles as one call with tuples of plain values, in the order of the fields, at every shuffle it
        crosses (``python -m benchmarks.per_image meta_coding``: 3.3 us to encode, 4.5 to decode)."""
        values = list(_VALUES[ImageMeta](self))
        for at, cls in _NESTED_AT:
            if values[at] is not None:
                values[at] = _VALUES[cls](values[at])
        return _image_meta, tuple(values)


def _rebuilt(cls: type, values: tuple):
    """A ``cls`` with these field values, in order, made without ``__init__``: they come from one
    that was made (nothing to check or default), and a frozen dataclass's ``__init__`` costs a
    ``object.__setattr__`` per field."""
    made = object.__new__(cls)
    made.__dict__.update(zip(_NAMES[cls], values))
    return made


def _source_image(*values) -> SourceImage:
    """Unpickles a SourceImage (see ``SourceImage.__reduce__``)."""
    return _rebuilt(SourceImage, values)


def _image_meta(*values) -> ImageMeta:
    """Unpickles an ImageMeta (see ``ImageMeta.__reduce__``)."""
    values = list(values)
    for at, cls in _NESTED_AT:
        if values[at] is not None:
            values[at] = _rebuilt(cls, values[at])
    return _rebuilt(ImageMeta, values)


# Each pickled dataclass's field names, a getter of its values in that order, and where ImageMeta's
# fields hold one.
_NAMES = {cls: tuple(field.name for field in fields(cls)) for cls in (SourceImage, ImageInfo, RunSlice, ImageMeta)}
_VALUES = {cls: attrgetter(*names) for cls, names in _NAMES.items()}
_NESTED_AT = tuple((_NAMES[ImageMeta].index(name), cls)
                   for name, cls in (("source", SourceImage), ("info", ImageInfo), ("run", RunSlice)))
