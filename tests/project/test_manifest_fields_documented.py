"""docs/output.md's tables name every key the code writes to ``manifest.json`` and ``shards.jsonl``.

The manifest is made here with every optional part filled in (boxes, an append, near-duplicates,
every ``images`` counter, a split's ``built_from``, a shard with every hash), so a key the code
starts writing fails this test until the table names it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from transforms.images.build_manifest import image_count_fields
from transforms.images.near_duplicates import near_duplicates_summary
from transforms.shardset.manifest import Manifest, ShardEntry, SplitEntry
from tests.helpers import shard_list_bytes
from transforms.shardset.shard_list import shard_line

OUTPUT_MD = Path(__file__).resolve().parents[2] / "docs" / "output.md"


def documented_keys(heading: str, doc: Path = OUTPUT_MD) -> set[str]:
    """The backticked keys in the first column of the table under ``## heading`` in ``doc``."""
    text = "\n" + doc.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    keys: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            keys.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    return keys


NESTED = ("images", "near_duplicates", "shards")  # objects whose own keys the table names


def key_paths(manifest: dict) -> set[str]:
    """Every key of a ``manifest.json`` object as a dotted path; a split's name is written ``NAME``."""
    paths = set(manifest)
    for key in NESTED:
        paths |= {f"{key}.{inner}" for inner in manifest.get(key, {})}
    for split in manifest["splits"].values():
        paths |= {f"splits.NAME.{inner}" for inner in split}
    return paths


def full_manifest() -> Manifest:
    """A manifest with every optional part present."""
    shard = ShardEntry("train-00000-of-00001.tfrecord", 2, 300, "a" * 64, {"0": 2},
                       crc32c="4waSgw==", index_crc32c="4waSgw==")
    counted = [((counter, "png"), 1) for counter in
               ("source_formats", "converted", "tf_undecodable", "png_chunks_fixed", "exif_oriented",
                "exif_orientation_kept", "stored_formats", "channels", "boxes")]
    images = image_count_fields(counted)["images"]
    near = near_duplicates_summary("report", 6, [], [(5, 3)], 1)
    return Manifest(created_by="build_shards", options={"format": "tfrecord"}, seed=1, compression="none",
                    feature_spec={"image/encoded": "bytes"}, labels=["cat"],
                    splits={"train": SplitEntry("train", [shard])}, dead_letters=1, images=images,
                    built_from={"train": ["photos/"]}, written_splits=["train"], appended={"train": 1},
                    object_labels=[(1, "person")], near_duplicates=near)


def test_every_manifest_key_the_code_writes_is_in_the_table() -> None:
    manifest_json, _ = shard_list_bytes(full_manifest())
    written = key_paths(json.loads(manifest_json))
    assert {"images.boxes", "near_duplicates.pairs", "splits.NAME.built_from", "appended"} <= written
    assert sorted(written - documented_keys("`manifest.json`")) == []


def test_every_shard_list_key_the_code_writes_is_in_the_table() -> None:
    entry = ShardEntry("t.tfrecord", 1, 10, "a" * 64, {"0": 1}, crc32c="4waSgw==", index_crc32c="4waSgw==")
    written = set(json.loads(shard_line("train", 0, entry)))
    assert {"sha256", "crc32c", "index_crc32c"} <= written
    assert sorted(written - documented_keys("`shards.jsonl`")) == []


def test_the_table_reader_takes_only_its_sections_first_column(tmp_path) -> None:
    doc = tmp_path / "output.md"
    doc.write_text("## `shards.jsonl`\n\n| key | type |\n|---|---|\n| `split`, `index` | `x` |\n\n"
                   "## Next\n\n| `file` | y |\n")
    assert documented_keys("`shards.jsonl`", doc) == {"split", "index"}
