"""One folder of class folders, and the same files as every container input the build reads.

Each is made with the standard tools (``tarfile``, ``zipfile``, ``pyarrow``)
from a folder written by ``shard_fixtures.make_class_tree``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile

import pyarrow as pa
import pyarrow.parquet as pq

CLASSES = ("daisy", "rose", "tulip")


def files_of(root: str) -> list[str]:
    """Relative paths of every file below ``root``, sorted."""
    return sorted(os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
                  for folder, _, names in os.walk(root) for name in names)


def add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def make_tar(root: str, path: str, mode: str = "w") -> str:
    """``tar -C root -cf path .``: members ``./class/file`` (and the folders)."""
    with tarfile.open(path, mode) as archive:
        archive.add(root, arcname=".")
    return path


def make_zip(root: str, path: str) -> str:
    """A deflated zip of ``root``'s files (and a macOS ``__MACOSX/`` copy of one, hidden)."""
    rels = files_of(root)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel in rels:
            archive.write(os.path.join(root, rel), rel)
        folder, name = rels[0].rsplit("/", 1)
        archive.writestr(f"__MACOSX/{folder}/._{name}", b"\0\5\26\7 resource fork")
    return path


def make_tar_of_tars(root: str, path: str) -> str:
    """ImageNet's layout: one tar per class folder, named for the class, inside one tar."""
    with tarfile.open(path, "w") as outer:
        for label in sorted(os.listdir(root)):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as archive:
                for name in sorted(os.listdir(os.path.join(root, label))):
                    archive.add(os.path.join(root, label, name), arcname=name)
            add_bytes(outer, f"{label}.tar", inner.getvalue())
    return path


def make_shards(root: str, folder: str, shards: int = 2, classes=CLASSES) -> str:
    """WebDataset shards ``shard-000000.tar``..: ``KEY.jpg|png`` beside ``KEY.cls`` (the class index).

    Returns:
        The brace pattern naming them.
    """
    os.makedirs(folder, exist_ok=True)
    rels = files_of(root)
    for shard in range(shards):
        with tarfile.open(os.path.join(folder, f"shard-{shard:06d}.tar"), "w") as archive:
            for i, rel in enumerate(rels[shard::shards]):
                key = f"{shard:02d}{i:05d}"
                with open(os.path.join(root, rel), "rb") as fh:
                    add_bytes(archive, f"{key}.{rel.rsplit('.', 1)[1]}", fh.read())
                add_bytes(archive, f"{key}.cls", str(classes.index(rel.split("/")[0])).encode())
    return os.path.join(folder, f"shard-{{000000..{shards - 1:06d}}}.tar")


def make_parquet(root: str, path: str, hugging_face: bool = True, classes=CLASSES, row_group_size: int = 5,
                 rels=None) -> str:
    """The files as Parquet rows (``rels``: those of these relative paths only).

    ``hugging_face``: as ``datasets`` writes them: an ``image`` struct of
    ``bytes`` and ``path`` (the file's base name) and an integer ``label`` whose
    ``ClassLabel`` names are in the schema's metadata; else a binary ``image``
    and string ``label``.
    """
    rels = files_of(root) if rels is None else rels
    data = []
    for rel in rels:
        with open(os.path.join(root, rel), "rb") as fh:
            data.append(fh.read())
    if hugging_face:
        table = pa.table({"image": [{"bytes": d, "path": rel.rsplit("/", 1)[1]} for d, rel in zip(data, rels)],
                          "label": pa.array([classes.index(rel.split("/")[0]) for rel in rels], pa.int64())})
        features = {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": list(classes)}}
        table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
    else:
        table = pa.table({"image": pa.array(data, pa.binary()), "label": [rel.split("/")[0] for rel in rels]})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path
