"""Unit tests of ``transforms/images/items.py``: the records that cross Beam's shuffles."""

from __future__ import annotations

import dataclasses
import pickle

from apache_beam.coders.coders import FastPrimitivesCoder

from transforms.archives.members import MemberRef
from transforms.images.image_codec import ImageInfo
from transforms.images.items import ImageMeta, SourceImage
from transforms.tfrecord.run_files import RunSlice


def _every_field_set() -> ImageMeta:
    """An ImageMeta whose every field, and every field of the dataclasses it holds, is not the default."""
    source = SourceImage(path="/in/a.tar//c/é.jpg", relpath="c/é.jpg", split="train", label="c",
                         origin="list.csv:3", labels=("c", "d"), features=(("w", "float", (1.0,)),),
                         objects=(("box",),), member=MemberRef("/in/a.tar", "tar", 512, 99, 99, 0, 0, ""))
    info = ImageInfo(format="png", height=10, width=20, channels=4, source_format="jpeg", tf_decodes=False,
                     png_fix="srgb", orientation=6, upright="rotate")
    return ImageMeta(source=source, label_index=3, sha256="ab" * 32, info=info, record_size=110_016,
                     order_key=2**62 + 5, extra=(("weight", "float", (0.5,)),),
                     run=RunSlice("/out/.staging/r/runs/f.run", 100, 110_016), phash=0xFEDCBA9876543210)


def test_every_field_is_set_in_the_fixture() -> None:
    meta = _every_field_set()
    for value in (meta, meta.source, meta.info, meta.run):
        for field in dataclasses.fields(value):
            assert getattr(value, field.name) != field.default, field.name


def test_an_image_meta_keeps_every_field_through_pickle_and_beams_coder() -> None:
    meta = _every_field_set()
    data = pickle.dumps(meta, pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(data) == meta
    assert pickle.loads(pickle.dumps(meta.source)) == meta.source
    assert pickle.loads(pickle.dumps(dataclasses.replace(meta, run=None, phash=None))).run is None
    # One global (the rebuilding function), not the three nested classes' names and fields.
    assert b"SourceImage" not in data and b"ImageInfo" not in data and b"label_index" not in data
    assert FastPrimitivesCoder().decode(FastPrimitivesCoder().encode(meta)) == meta
