"""Helpers for end-to-end tests: small real image trees, running jobs, reading shards."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import zlib
from typing import Iterable

from PIL import Image

from transforms.example.codec import decode_example
from transforms.tfrecord.framing import iter_records
from transforms.images.samples import render_image


def image_bytes(label: str, fmt: str, rng: random.Random, min_side: int = 24, max_side: int = 96) -> bytes:
    """A small real image of a class, as JPEG or PNG bytes."""
    img = render_image(label, rng.randint(min_side, max_side), rng.randint(min_side, max_side), rng)
    out = io.BytesIO()
    img.save(out, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return out.getvalue()


def write(path: str, data: bytes) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def make_class_tree(root: str, classes: Iterable[str] = ("daisy", "rose", "tulip"),
                    per_class: int = 12, seed: int = 0, broken: bool = True, prefix: str = "") -> dict[str, str]:
    """Writes ROOT/<class>/<prefix><class>_<n>.jpg|png (every third a PNG) plus, if asked, broken files.

    Returns:
        Relative path -> expected outcome: the class name, or ``dead:<reason>``.
    """
    rng = random.Random(seed)
    expected = {}
    for label in classes:
        for i in range(per_class):
            fmt = "PNG" if i % 3 == 2 else "JPEG"
            rel = f"{label}/{prefix}{label}_{i:03d}.{'png' if fmt == 'PNG' else 'jpg'}"
            write(os.path.join(root, rel), image_bytes(label, fmt, rng))
            expected[rel] = label
    if broken:
        classes = list(classes)
        good = open(os.path.join(root, f"{classes[0]}/{prefix}{classes[0]}_000.jpg"), "rb").read()
        write(os.path.join(root, classes[0], "cut.jpg"), good[: len(good) // 2])
        expected[f"{classes[0]}/cut.jpg"] = "dead:truncated"
        write(os.path.join(root, classes[1], "notes.jpg"), b"just some text\n")
        expected[f"{classes[1]}/notes.jpg"] = "dead:not_an_image"
        write(os.path.join(root, classes[1], "empty.png"), b"")
        expected[f"{classes[1]}/empty.png"] = "dead:empty_file"
    return expected


def run_build(capsys, *argv: str) -> tuple[int, str, str]:
    """Runs the build job in this process; returns (exit status, stdout, stderr)."""
    from beam_jobs import build_shards

    capsys.readouterr()
    status = build_shards.run(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def load_manifest(output_dir: str) -> dict:
    """``manifest.json`` as a dict; for format 2 each split also gets ``shards``, its lines of
    ``shards.jsonl`` (read and checked with the tool's own reader)."""
    from transforms.shardset.manifest import Manifest
    from transforms.shardset.shard_list import read_shard_list

    with open(os.path.join(output_dir, "manifest.json"), "rb") as fh:
        data = fh.read()
    obj = json.loads(data)
    if obj["format_version"] >= 2:
        for split in obj["splits"].values():
            split["shards"] = []
        with open(os.path.join(output_dir, obj["shards"]["file"]), "rb") as fh:
            for split, entry in read_shard_list(Manifest.loads(data), fh):
                obj["splits"][split]["shards"].append(entry.to_dict())
    return obj


def write_v1_manifest(output_dir: str) -> bytes:
    """Rewrites a shard set's manifest in format 1 (every shard inside ``manifest.json``, no
    ``shards.jsonl``), as releases before format 2 wrote it; returns its bytes."""
    from transforms.shardset.manifest import _label_sort

    obj = load_manifest(output_dir)
    splits = {}
    for name, split in sorted(obj["splits"].items()):
        splits[name] = {"records": split["records"], "bytes": split["bytes"],
                        "label_counts": split["label_counts"], "shards": split["shards"]}
    assert all(list(s["label_counts"]) == sorted(s["label_counts"], key=_label_sort) for s in splits.values())
    old = {key: value for key, value in obj.items() if key not in ("splits", "shards")}
    old["format_version"] = 1
    old["splits"] = splits
    data = (json.dumps(old, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    with open(os.path.join(output_dir, "manifest.json"), "wb") as fh:
        fh.write(data)
    os.remove(os.path.join(output_dir, obj["shards"]["file"]))
    return data


def shard_bytes(path: str) -> bytes:
    """The uncompressed TFRecord stream of a shard file."""
    with open(path, "rb") as fh:
        data = fh.read()
    if path.endswith(".gz"):
        return gzip.decompress(data)
    if path.endswith(".zz"):
        return zlib.decompress(data)
    return data


def records(path: str) -> list[tuple[int, bytes]]:
    """(offset, data) of every record of a shard (any compression)."""
    data = shard_bytes(path)
    return list(iter_records(io.BytesIO(data), path, 0, len(data)))


def examples(path: str) -> list[dict]:
    """Decoded Examples of a shard, values unwrapped to single values."""
    out = []
    for _, data in records(path):
        out.append({k: v[1][0] if len(v[1]) == 1 else v[1] for k, v in decode_example(data).items()})
    return out


def sha256_file(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def crc32c_file(path: str) -> str:
    """The file's CRC32C as ``gsutil hash -c`` prints it (base64, big-endian), computed here apart."""
    import base64

    import crc32c

    with open(path, "rb") as fh:
        return base64.b64encode(crc32c.crc32c(fh.read()).to_bytes(4, "big")).decode("ascii")


def dead_letters(output_dir: str) -> list[dict]:
    with open(os.path.join(output_dir, "dead_letters.jsonl"), encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def shard_files(output_dir: str) -> list[str]:
    return sorted(n for n in os.listdir(output_dir) if ".tfrecord" in n and not n.endswith(".idx"))


def read_set_manifest(folder: str):
    """A shard set's complete ``Manifest`` (format 2: with its shard list, label counts included)."""
    from transforms.shardset.manifest import Manifest
    from transforms.shardset.shard_list import with_shard_list

    with open(os.path.join(folder, "manifest.json"), "rb") as fh:
        manifest = Manifest.loads(fh.read())
    if manifest.complete:
        return manifest
    with open(os.path.join(folder, manifest.shards_file.file), "rb") as fh:
        return with_shard_list(manifest, fh)


def write_set_manifest(folder: str, manifest) -> None:
    """Writes ``manifest.json`` and ``shards.jsonl`` of a complete ``Manifest`` (as fixed up by hand)."""
    import dataclasses

    from transforms.shardset.manifest import SplitEntry
    from tests.helpers import shard_list_bytes

    splits = {name: SplitEntry(name, split.shards) for name, split in manifest.splits.items()}
    data, lines = shard_list_bytes(dataclasses.replace(manifest, splits=splits))
    with open(os.path.join(folder, "shards.jsonl"), "wb") as fh:
        fh.write(lines)
    with open(os.path.join(folder, "manifest.json"), "wb") as fh:
        fh.write(data)


def build_records(tmp_path, capsys, inputs: dict[str, bytes], *flags: str) -> tuple[str, str, dict[str, dict]]:
    """Writes ``inputs`` (relative path -> bytes) under ``tmp_path/in`` and builds them into one
    shard; returns the output folder, stdout, and relative path -> record."""
    root = tmp_path / "in"
    for name, data in inputs.items():
        write(str(root / name), data)
    out = str(tmp_path / "out")
    status, stdout, stderr = run_build(capsys, "--input", str(root), "--output_dir", out,
                                       "--num_shards", "1", *flags)
    assert status == 0, stderr
    records = {ex["image/filename"].decode(): ex for name in shard_files(out)
               for ex in examples(os.path.join(out, name))}
    assert sorted(records) == sorted(inputs)
    return out, stdout, records
