"""CPU per image of our own per-image steps, timed outside Beam on the generated photos.

    python -m benchmarks.per_image structure [--size_mb 150] [--input DIR] [--rounds 5]
    python -m benchmarks.per_image done_lines [--size_mb 150] [--input DIR] [--rounds 5]
    python -m benchmarks.per_image meta_coding [--size_mb 150] [--input DIR] [--rounds 5]

Each case prints milliseconds of CPU per image (``time.thread_time``), the best of
``--rounds`` passes over every photo. To compare two versions, run it from each
checkout (``PYTHONPATH`` set to the checkout).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import sys
import time
from typing import Callable, Sequence

from benchmarks.common import Case, add_photo_flags, photo_root, run_case


def _photos(argv: Sequence[str], doc: str) -> tuple[list[str], int]:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_photo_flags(parser, 150)
    parser.set_defaults(rounds=5)
    args = parser.parse_args(argv)
    root = photo_root(args)
    return sorted(glob.glob(os.path.join(root, "*", "*.jpg"))), args.rounds


def _pass(call: Callable[[object], object], items: Sequence) -> Callable[[], float]:
    """A pass that calls ``call`` on each item; it returns the CPU seconds the calls took."""
    def one_pass() -> float:
        start = time.thread_time()
        for item in items:
            call(item)
        return time.thread_time() - start
    return one_pass


def _best(rounds: int, count: int, one_pass: Callable[[], float]) -> float:
    """Milliseconds per image of the fastest of ``rounds`` passes (each returns its CPU seconds)."""
    return min(one_pass() for _ in range(rounds)) / count * 1e3


_STRUCTURE_DOC = """The JPEG structure check (``structure.check_jpeg``) per photo, in cache and not.

"in cache": each photo's bytes hashed (sha256, not timed) just before its check, as a build
reads and hashes them; "cold": the photos checked one after the other, ~150 MB apart.
"""


def structure_main(argv: Sequence[str]) -> None:
    from transforms.images.structure import check_jpeg

    files, rounds = _photos(argv, _STRUCTURE_DOC)
    datas = []
    for path in files:
        with open(path, "rb") as fh:
            datas.append(fh.read())
    clock = time.thread_time

    cold = _pass(check_jpeg, datas)

    def warm() -> float:
        total = 0.0
        for data in datas:
            hashlib.sha256(data)
            start = clock()
            check_jpeg(data)
            total += clock() - start
        return total

    print(f"check_jpeg, {len(datas)} photos: {_best(rounds, len(datas), warm):.4f} ms/image in cache, "
          f"{_best(rounds, len(datas), cold):.4f} cold")


_DONE_LINES_DOC = """The input stamp, the done-list line and its append (``DoneLines``) per photo."""


def _metas(files: Sequence[str]) -> list:
    """An ImageMeta per photo, as inspection makes them (the fields a build of photos sets)."""
    from transforms.images.image_codec import ImageInfo
    from transforms.images.items import ImageMeta, SourceImage
    from transforms.tfrecord.run_files import RunSlice

    sources = [SourceImage(path, os.path.basename(path), "train", path.split(os.sep)[-2]) for path in files]
    return [ImageMeta(source=source, label_index=index % 100,
                      sha256=hashlib.sha256(source.path.encode()).hexdigest(),
                      info=ImageInfo("jpeg", 480, 640, 3), record_size=100_000 + index,
                      order_key=index * 0x9E3779B97F4A7C15 % (1 << 63),
                      run=RunSlice("/out/.staging/r/runs/w-1.run", index * 100_000, 100_000 + index))
            for index, source in enumerate(sources)]


def done_lines_main(argv: Sequence[str]) -> None:
    from transforms.shardset.resume import DoneLines, done_list_line, source_key
    from transforms.storage.resume_files import input_stamp

    files, rounds = _photos(argv, _DONE_LINES_DOC)
    metas = _metas(files)
    sources = [meta.source for meta in metas]
    keys = [source_key(source) for source in sources]
    stamps = [input_stamp(source.path) for source in sources]
    clock = time.thread_time

    stamp_pass = _pass(input_stamp, [source.path for source in sources])

    def line_pass() -> float:
        start = clock()
        for key, stamp, meta in zip(keys, stamps, metas):
            done_list_line(key, stamp, meta)
        return clock() - start

    def append_pass() -> float:
        lines = [done_list_line(key, stamp, meta) for key, stamp, meta in zip(keys, stamps, metas)]
        done = DoneLines()
        start = clock()
        for line in lines:
            done.append(line)
        return clock() - start

    count = len(sources)
    print(f"{count} photos, ms/image: input_stamp {_best(rounds, count, stamp_pass):.4f}, "
          f"done_list_line {_best(rounds, count, line_pass):.4f}, "
          f"DoneLines.append {_best(rounds, count, append_pass):.4f}")


_META_CODING_DOC = """An ImageMeta per photo encoded and decoded by Beam's coder of the packs it crosses.

A build's ImageMeta crosses three groupings packed (the duplicate check, the plan, the
shards), each an encoding and a decoding by ``FastPrimitivesCoder`` (pickle, through
``ImageMeta.__reduce__``). Prints ms/image of each, the best of ``--rounds``.
"""


def meta_coding_main(argv: Sequence[str]) -> None:
    from apache_beam.coders.coders import FastPrimitivesCoder

    files, rounds = _photos(argv, _META_CODING_DOC)
    metas = _metas(files)
    coder = FastPrimitivesCoder().get_impl()
    encoded = [coder.encode(meta) for meta in metas]
    assert [coder.decode(data) for data in encoded] == metas
    encode_pass, decode_pass = _pass(coder.encode, metas), _pass(coder.decode, encoded)
    count = len(metas)
    print(f"{count} photos, ms/image: encode {_best(rounds, count, encode_pass):.4f}, "
          f"decode {_best(rounds, count, decode_pass):.4f}, bytes {sum(map(len, encoded)) / count:.0f}")


CASES = {
    "structure": Case(structure_main, _STRUCTURE_DOC, ("--size_mb", "2", "--rounds", "1")),
    "done_lines": Case(done_lines_main, _DONE_LINES_DOC, ("--size_mb", "2", "--rounds", "1")),
    "meta_coding": Case(meta_coding_main, _META_CODING_DOC, ("--size_mb", "2", "--rounds", "1")),
}


if __name__ == "__main__":
    sys.exit(run_case(CASES, sys.argv[1:]))
