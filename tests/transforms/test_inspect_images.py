"""Inspecting an image stages its record; the shard writer copies that record from the run file."""

from __future__ import annotations

import dataclasses
import types

import apache_beam as beam
import pytest
from apache_beam.utils.windowed_value import WindowedValue

from tests import imagegen
from transforms.example.codec import decode_example
from transforms.errors import ShardsError
from transforms.tfrecord.framing import framed_size
from transforms.tfrecord.run_files import FramedRecord
from transforms.images.items import ImageMeta, SourceImage
from transforms.images.records import EncodeSettings
from tests.helpers import image_example
from transforms.inspect_images import ImageRecordMaker, RecordStaging, _InspectImageFn

_LABELS = ["cat", "dog"]


def _inspect(path, settings: EncodeSettings, out: str) -> ImageMeta:
    """The ImageMeta of one bundle of one input, its record staged in a run file under ``out``."""
    source = SourceImage(str(path), "dog/a.jpg", "train", "dog")
    fn = _InspectImageFn(settings, seed=7, staging=RecordStaging(out, "run"))
    fn.setup()
    fn.start_bundle()
    emitted = list(fn.process(source, beam.transforms.window.GlobalWindow(), 0, labels=_LABELS))
    emitted += list(fn.finish_bundle() or ())
    fn.teardown()
    [meta] = [o.value if isinstance(o, WindowedValue) else o.value.value for o in emitted]
    assert isinstance(meta, ImageMeta) and meta.run is not None
    return meta


@pytest.mark.parametrize("mode", ["passthrough", "reencode", "raw"])
def test_the_record_copied_from_the_run_file_is_the_image_example(tmp_path, mode):
    path = tmp_path / "a.jpg"
    path.write_bytes(imagegen.jpeg(size=(40, 30)))
    meta = _inspect(path, EncodeSettings(mode=mode), str(tmp_path / "out"))
    maker = ImageRecordMaker()
    maker.plan([meta])
    framed, label = maker(meta)
    maker.close()
    assert isinstance(framed, FramedRecord) and label == 1
    assert len(framed.data) == meta.record_size
    assert framed.key == meta.sha256  # the shard's keys file takes it without reading the record
    record = framed.data[12:-4]  # the framing's length and CRCs around it
    assert framed_size(len(record)) == meta.record_size
    [stored] = decode_example(record)["image/encoded"][1]
    if mode == "passthrough":  # the source's bytes as they are
        assert stored == path.read_bytes()
    assert record == image_example(stored, meta.info, 1, "dog", "dog/a.jpg", meta.sha256)


def test_a_record_of_another_size_than_planned_is_refused(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(imagegen.jpeg(size=(40, 30)))
    meta = _inspect(path, EncodeSettings(mode="passthrough"), str(tmp_path / "out"))
    with pytest.raises(ShardsError, match="planned"):
        ImageRecordMaker()(dataclasses.replace(meta, record_size=meta.record_size + 1))


def _calls() -> tuple[int, int]:
    """The read and write system calls this process made so far (``/proc/self/io``: ``syscr``, ``syscw``),
    reading it too."""
    with open("/proc/self/io", encoding="ascii") as fh:
        found = dict(line.split(":") for line in fh)
    return int(found["syscr"]), int(found["syscw"])


def test_a_local_input_is_read_in_one_read_of_its_stated_size(tmp_path) -> None:
    # A read of up to --max_image_mb would allocate (and free) that much for every input: the read
    # asks for the size stated and one byte more (to see growth), and the bytes come back whole. Its
    # first bytes are peeked (it is longer than the head) and nothing else is read: no file object's
    # buffer, no second read to see the end.
    from transforms import inspect_images

    data = b"\xff\xd8\xff" + bytes(range(256)) * 600
    path = tmp_path / "photo.jpg"
    path.write_bytes(data)
    inspect_images.read_source(str(path), max_bytes=256 << 20)  # what it imports the first time is read
    first = _calls()[0]
    own = _calls()[0] - first  # the reads of /proc/self/io itself
    before = _calls()[0]
    assert inspect_images.read_source(str(path), max_bytes=256 << 20) == data
    assert _calls()[0] - before - own == 2  # the 16 bytes peeked, then one read (4 before)


@pytest.mark.parametrize("start", [b"\x89PNG\r\n\x1a\n", b"tiny"], ids=["image_magic", "small_at_stat"])
def test_a_local_file_that_grows_after_its_size_was_read_is_read_no_further_than_the_limit(
        tmp_path, monkeypatch, start) -> None:
    # Memory stays bounded whatever one input does: a file still being written, 8 bytes when its size
    # was read and 3 MB when read, is refused at --max_image_mb, not read whole.
    from transforms import inspect_images
    from transforms.errors import ImageError

    path = tmp_path / "growing.png"
    path.write_bytes(start + b"\0" * (3 << 20))
    opened = inspect_images.open_local
    monkeypatch.setattr(inspect_images, "open_local",  # 8 bytes at its fstat
                        lambda where: (opened(where)[0], types.SimpleNamespace(st_size=8)))
    with pytest.raises(ImageError) as err:
        inspect_images.read_source(str(path), max_bytes=1 << 20)
    assert err.value.reason == "too_large"
