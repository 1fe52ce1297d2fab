"""Helpers shared by the reliability tests: folder snapshots and shard-set invariants."""

from __future__ import annotations

import hashlib
import json
import os

from crc32c import crc32c

from tests.shard_fixtures import shard_files
from transforms.tfrecord.file_hash import crc32c_text
from transforms.tfrecord.record_index import check_index
from transforms.errors import ManifestError
from transforms.shardset.manifest import Manifest
from transforms.shardset.shard_list import with_shard_list
from transforms.shardset.tfds_metadata import dataset_name

OUTPUT_NAMES = {"manifest.json", "shards.jsonl", "labels.txt", "dead_letters.jsonl"}
# tensorflow-datasets' metadata, beside uncompressed shard sets.
TFDS_NAMES = {"dataset_info.json", "features.json", "image.class.label.labels.txt"}


def tree_state(root: str) -> dict[str, tuple]:
    """Every entry under ``root`` (symlinks not followed): relative path -> what it is and holds."""
    state: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                state[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                state[rel] = ("dir",)
            else:
                with open(path, "rb") as fh:
                    state[rel] = ("file", hashlib.sha256(fh.read()).hexdigest())
    return state


def changed_outside(before: dict[str, tuple], after: dict[str, tuple], output: str) -> list[str]:
    """Paths added, removed or changed other than the output folder, its contents and its parents.

    Args:
        before: ``tree_state`` of a folder before a job ran.
        after: ``tree_state`` of the same folder after.
        output: The job's output folder, relative to that folder.
    """
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    parents = set()
    parent = os.path.dirname(output)
    while parent:
        parents.add(parent)
        parent = os.path.dirname(parent)
    return sorted(p for p in changed if p != output and not p.startswith(output + os.sep)
                  and not (p in parents and after.get(p) == ("dir",)))


def assert_only_shard_set(out: str) -> None:
    """The folder holds a published shard set and nothing else: no staging, no temporary file."""
    names = set(os.listdir(out))
    shards = set(shard_files(out))
    indexes = set(os.listdir(os.path.join(out, "index"))) if "index" in names else set()
    assert names - TFDS_NAMES == shards | OUTPUT_NAMES | ({"index"} if indexes else set()), sorted(names)
    listed = os.path.join(out, "shards.jsonl")
    keyed = set()  # the shards whose keys file the shard list states (all, for a set of this tool's images)
    if os.path.exists(listed):
        with open(listed, "rb") as fh:
            keyed = {entry["file"] for entry in map(json.loads, fh) if "keys_crc32c" in entry}
    assert indexes == {n + ".idx" for n in shards if n.endswith(".tfrecord")} | {n + ".keys" for n in keyed}


def folder_bytes(folder: str) -> dict[str, bytes]:
    """Name -> bytes of every file directly in ``folder`` and in its ``index/`` folder.

    ``dataset_info.json`` comes without its ``name``, which is the folder's own
    (tfds's dataset name), so that sets built into two folders compare equal.
    """
    out = {}
    for sub in ("", "index"):
        where = os.path.join(folder, sub)
        for name in sorted(os.listdir(where)) if os.path.isdir(where) else []:
            path = os.path.join(where, name)
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    data = fh.read()
                if not sub and name == "dataset_info.json":
                    info = json.loads(data)
                    assert info.pop("name") == dataset_name(folder), info
                    data = json.dumps(info, sort_keys=True).encode()
                out[f"{sub}/{name}" if sub else name] = data
    return out


def manifest_problems(folder: str, manifest_bytes: bytes) -> list[str]:
    """What is wrong between a manifest's bytes and the files in ``folder`` right now.

    Every listed shard must exist with the listed size and CRC32C (or sha256), and an
    uncompressed shard must have a ``.idx`` that matches it.
    """
    manifest = json.loads(manifest_bytes)
    problems = []
    if manifest["format_version"] >= 2:  # its shards are listed in shards.jsonl, which must match
        loaded = Manifest.loads(manifest_bytes)
        try:
            with open(os.path.join(folder, loaded.shards_file.file), "rb") as fh:
                loaded = with_shard_list(loaded, fh)
        except (OSError, ManifestError) as err:
            return [f"{loaded.shards_file.file}: {err}"]
        for name, split in manifest["splits"].items():
            split["shards"] = [entry.to_dict() for entry in loaded.splits[name].shards]
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            path = os.path.join(folder, shard["file"])
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
            except FileNotFoundError:
                problems.append(f"{shard['file']}: listed but missing")
                continue
            listed = shard["crc32c"] if "crc32c" in shard else shard["sha256"]
            found = crc32c_text(crc32c(data)) if "crc32c" in shard else hashlib.sha256(data).hexdigest()
            if (len(data), found) != (shard["bytes"], listed):
                problems.append(f"{shard['file']}: {len(data)} bytes that are not the listed ones")
            if shard["file"].endswith(".tfrecord"):
                try:
                    with open(os.path.join(folder, "index", shard["file"] + ".idx"), "rb") as fh:
                        index = fh.read()
                except FileNotFoundError:
                    problems.append(f"{shard['file']}.idx: missing")
                    continue
                check = check_index(index, len(data))
                if not check.usable:
                    problems.append(f"{shard['file']}.idx: does not match its shard")
    return problems
