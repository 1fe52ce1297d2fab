"""Inspecting an image and making its record again from the metadata alone."""

from __future__ import annotations

import pickle

import pytest
from apache_beam.coders import FastPrimitivesCoder

from tests import imagegen
from transforms.errors import ShardsError
from transforms.tfrecord.framing import framed_size
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.records import EncodeSettings, image_example
from transforms.images.codec import ImageInfo
from transforms.inspect_images import ImageRecordMaker, _InspectImageFn

_LABELS = ["cat", "dog"]


def _inspect(path, settings: EncodeSettings) -> ImageMeta:
    source = SourceImage(str(path), "dog/a.jpg", "train", "dog")
    inspected, _ = _InspectImageFn(settings, seed=7)._work_on(source, {n: i for i, n in enumerate(_LABELS)},
                                                               None)  # (inspection, what a resume would need)
    meta = inspected.output
    assert isinstance(meta, ImageMeta)
    return meta


@pytest.mark.parametrize("mode", ["passthrough", "reencode", "raw"])
def test_record_made_from_metadata_is_the_image_example(tmp_path, mode):
    path = tmp_path / "a.jpg"
    path.write_bytes(imagegen.jpeg(size=(40, 30)))
    settings = EncodeSettings(mode=mode)
    meta = _inspect(path, settings)
    (head, stored, tail), label = ImageRecordMaker(settings)(meta)
    record = head + stored + tail
    assert label == 1
    assert framed_size(len(record)) == meta.record_size
    assert record == image_example(stored, meta.info, 1, "dog", "dog/a.jpg", meta.sha256)


@pytest.mark.parametrize("change", ["one byte", "truncated", "appended"])
def test_source_changed_after_inspection_is_refused(tmp_path, change):
    path = tmp_path / "a.jpg"
    data = imagegen.jpeg(size=(40, 30))
    path.write_bytes(data)
    meta = _inspect(path, EncodeSettings(mode="passthrough"))
    changed = {"one byte": data[:100] + bytes([data[100] ^ 1]) + data[101:],
               "truncated": data[:-1],
               "appended": data + b"\0"}[change]
    path.write_bytes(changed)
    with pytest.raises(ShardsError, match="changed while the job ran"):
        ImageRecordMaker(EncodeSettings(mode="passthrough"))(meta)


@pytest.mark.parametrize("payload", [None, b"\xff\xd8 stored image"])
def test_image_meta_pickles_flat_and_round_trips(payload):
    meta = ImageMeta(SourceImage("/data/c/é.jpg", "c/é.jpg", "train", "c"), 3, "ab" * 32,
                     ImageInfo("jpeg", 300, 400, 3), 110_016, 2**62 + 5, 0xFFFFFFFF, payload)
    data = pickle.dumps(meta, pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(data) == meta
    assert pickle.loads(pickle.dumps(meta.source)) == meta.source
    # One global (the rebuilding function), not the three nested classes' names and fields.
    assert b"SourceImage" not in data and b"ImageInfo" not in data and b"label_index" not in data
    assert FastPrimitivesCoder().decode(FastPrimitivesCoder().encode(meta)) == meta
