"""Unit tests of ``transforms/shardset/resume.py``: a done list and a resumed input keep every field."""

from __future__ import annotations

import dataclasses
import json

from transforms.archives.members import MemberRef
from transforms.images.image_codec import ImageInfo
from transforms.images.items import ImageMeta, SourceImage
from tests.helpers import done_list
from transforms.shardset.resume import context_key, done_list_line, parse_done_list, source_key
from transforms.tfrecord.run_files import RunSlice


def _meta(source: SourceImage) -> ImageMeta:
    """An ImageMeta whose every field (and every field of its ImageInfo) is not the default."""
    return ImageMeta(source=source, label_index=1, sha256="ab" * 32,
                     info=ImageInfo(format="png", height=10, width=20, channels=4, source_format="jpeg",
                                    tf_decodes=False, png_fix="srgb", orientation=6, upright="rotate"),
                     record_size=1234, order_key=-(1 << 62) + 7, extra=(("weight", "float", (0.5,)),),
                     run=RunSlice("/out/.staging/r/runs/f.run", 100, 1234), phash=0xFEDCBA9876543210)


def _member_source(split: str) -> SourceImage:
    return SourceImage(path="/in/a.tar//rose/a.jpg", relpath="rose/a.jpg", split=split, label="rose",
                       origin="list.csv:3", labels=("rose", "tulip"), features=(("w", "float", (1.0,)),),
                       member=MemberRef("/in/a.tar", "tar", 512, 99, 99, 0, 0, ""))


def test_a_resumed_input_keeps_every_field_of_the_reruns_source_and_the_split_chosen_by_content() -> None:
    listed = _member_source("")  # split by content: chosen when first read
    context = context_key(["rose", "tulip"], None)
    lines = list(done_list("f.run", 5000, context, [(source_key(listed), (1234, 5, 6), _meta(
        dataclasses.replace(listed, split="train")))]))
    [entry] = parse_done_list(iter(lines), "/out/.staging/r/runs", 5000)
    resumed = entry.for_source(listed)
    assert resumed.source == dataclasses.replace(listed, split="train")  # member, labels, origin kept
    assert resumed == dataclasses.replace(_meta(resumed.source), run=entry.meta.run)


def test_a_done_list_keeps_every_field_of_the_image_info() -> None:
    meta = _meta(SourceImage("/in/rose/a.jpg", "rose/a.jpg", "train", "rose"))
    lines = list(done_list("f.run", 5000, "ctx", [("key", (1234, 5, 6), meta)]))
    [entry] = parse_done_list(iter(lines), "/out/.staging/r/runs", 5000)
    assert entry.meta.info == meta.info  # orientation and upright too: the manifest counts them
    for name in ("label_index", "sha256", "record_size", "order_key", "extra", "run", "phash"):
        assert getattr(entry.meta, name) == getattr(meta, name), name


def _json_line(key: str, stamp: tuple[int, int, int], meta: ImageMeta) -> bytes:
    """A done-list line as json.dumps writes it: the format ``done_list_line`` must keep, byte for byte."""
    from transforms.shardset.resume import _INFO_TYPES

    fields = {"path": meta.source.path, "source": key, "stamp": list(stamp), "split": meta.source.split,
              "label_index": meta.label_index, "sha256": meta.sha256,
              "info": [getattr(meta.info, name) for name in _INFO_TYPES], "record_size": meta.record_size,
              "order_key": meta.order_key, "extra": repr(meta.extra) if meta.extra else "",
              "offset": meta.run.offset, "length": meta.run.length}
    if meta.phash is not None:
        fields["phash"] = meta.phash
    return (json.dumps(fields) + "\n").encode("utf-8")


def test_a_done_list_line_is_the_json_of_its_fields_byte_for_byte() -> None:
    """Odd paths (quotes, backslashes, control characters, non-ASCII, undecodable bytes), every
    field set or left default, with and without a perceptual hash."""
    plain = ImageMeta(source=SourceImage("/in/a.jpg", "a.jpg", "train", "a"), label_index=0, sha256="0" * 64,
                      info=ImageInfo("jpeg", 480, 640, 3), record_size=99, order_key=0,
                      run=RunSlice("/out/r.run", 0, 99))
    full = _meta(SourceImage('/in/ro"se\\\t\n\x00é雪\udcff.jpg', "x", "val\u2028", "rose"))
    for meta in (plain, full, dataclasses.replace(full, phash=None), dataclasses.replace(plain, phash=0),
                 dataclasses.replace(full, order_key=(1 << 63) - 1, label_index=12345)):
        for stamp in ((0, 0, 0), (123456789, 1_764_000_000_123_456_789, 2**63 - 1)):
            assert done_list_line("k" * 32, stamp, meta) == _json_line("k" * 32, stamp, meta)
