"""Run files: framed records written once, where they are first made, and copied into shards later.

The worker that reads and checks an image also frames its record and appends it to a run file of
its own (one per bundle, in the run's staging folder); only the record's place travels on, as a
``RunSlice``. Once shards are planned, each shard's records are copied from the run files as they
are (``transforms.storage.runs`` opens the files).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO, Sequence

from transforms.errors import RecordError
from transforms.tfrecord.framing import HEADER_SIZE, OVERHEAD, frame_parts, masked_crc32c, parse_header

__all__ = ["RUNS_DIR", "RunSlice", "RunFileWriter", "FramedRecord", "checked_record"]

# The folder below a run's staging folder that holds its run files.
RUNS_DIR = "runs"


@dataclass(frozen=True)
class RunSlice:
    """Where one framed record lies in a run file (``path``): the byte ``offset`` of its header and its
    framed ``length`` (header, data and footer)."""

    path: str
    offset: int
    length: int


@dataclass(frozen=True)
class FramedRecord:
    """A record's bytes already in the TFRecord framing (header, data, footer), as a writer copies them.

    ``key``: the record's ``image/key/sha256`` where its maker knows it (the image's sha256 it was made with),
    so that the shard's keys file takes it without reading the record; None: read from the record.
    """

    data: bytes
    key: str | None = None


class RunFileWriter:
    """Appends framed records to one run file (``fh``, at its start; ``path``) and says where each one lies."""

    def __init__(self, fh: BinaryIO, path: str) -> None:
        self._fh = fh
        self.path = path
        self._offset = 0

    @property
    def size(self) -> int:
        """Bytes appended so far."""
        return self._offset

    def append(self, parts: Sequence[bytes]) -> RunSlice:
        """Frames the record ``b"".join(parts)`` and appends it, without joining the parts."""
        header, footer = frame_parts(parts)
        start = self._offset
        for piece in (header, *parts, footer):
            if piece:
                self._fh.write(piece)
                self._offset += len(piece)
        return RunSlice(self.path, start, self._offset - start)


def checked_record(framed: bytes, where: RunSlice) -> bytes:
    """Returns ``framed`` after checking its length and CRCs, so that a run file damaged on disk
    never reaches a shard; ``RecordError`` when the bytes are short or a length or CRC does not match."""
    if len(framed) != where.length or len(framed) < OVERHEAD:
        raise RecordError(where.path, where.offset, "truncated",
                          f"run file gave {len(framed)} of {where.length} bytes")
    length = parse_header(framed[:HEADER_SIZE])
    if length is None or length + OVERHEAD != len(framed):
        raise RecordError(where.path, where.offset, "bad_length", "run file record header does not match")
    if masked_crc32c(memoryview(framed)[HEADER_SIZE:-4]) != int.from_bytes(framed[-4:], "little"):
        raise RecordError(where.path, where.offset, "crc_mismatch", "run file record data CRC does not match")
    return framed
