"""The shard sink on the DirectRunner: any shard set written and published, with a job's manifest extras."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import pytest

from transforms.shard_sink import ExtrasFrom, PublishInputs, PublishShards, ShardOutput, ShardRecords, WriteShards
from transforms.shardset.manifest_extras import ManifestExtras
from transforms.shardset.ownership import PublishPolicy
from transforms.shardset.planning import SplitTotals
from transforms.storage.run_lock_files import acquire_lock

_RUN_ID = "d" * 32
_RECORDS = [(0, b"alpha", 0), (1, b"beta", 1), (2, b"gamma", 0)]  # (order, record, label)


def _record(item):
    return item[1], item[2]


def _order(item):
    return item[0]


def _count_labels(item):
    return [("label", str(item[2]))]


def _publish(folder: str, extras, sidecars=None) -> dict:
    """Writes ``_RECORDS`` in two shards of split ``train`` and publishes them; returns manifest.json."""
    os.makedirs(os.path.join(folder, ".staging", _RUN_ID))
    policy = PublishPolicy(_RUN_ID)
    acquire_lock(folder, policy, "build_shards")
    output = ShardOutput(folder, "none")
    with beam.Pipeline() as p:
        totals = p | "Totals" >> beam.Create([SplitTotals("train", sum(len(r) + 16 for _, r, _ in _RECORDS),
                                                          len(_RECORDS), 21, 2)])
        assigned = p | "Assigned" >> beam.Create([(("train", i % 2, 2), item) for i, item in enumerate(_RECORDS)])
        results = assigned | "Write" >> WriteShards(output, ShardRecords(_record, _order, tally_of=_count_labels),
                                                    _RUN_ID, totals)
        _ = p | "Publish" >> PublishShards(
            output, policy, PublishInputs(results, totals, (), p | "Labels" >> beam.Create([["a", "b"]]),
                                          p | "Inputs" >> beam.Create([len(_RECORDS)]),
                                          p | "Spec" >> beam.Create([{}])),
            {"created_by": "test", "options": {}, "seed": 0}, manifest_extras=extras(p), sidecars=sidecars)
    with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def _given(extras):
    return extras


def _sidecars(manifest) -> dict[str, bytes | None]:
    return {"classes.txt": f"{len(manifest.labels)} classes\n".encode()}


def _tally_fields(tallies) -> dict:
    counted: dict[str, int] = {}
    for (_, label), count in tallies:
        counted[label] = counted.get(label, 0) + count
    return {"images": {"by_label": dict(sorted(counted.items()))}}


@pytest.mark.slow
def test_one_element_of_extras_is_merged_into_the_manifest_with_its_files_and_the_sidecars(tmp_path) -> None:
    folder = str(tmp_path / "out")
    extras = ManifestExtras(fields={"object_labels": ((1, "cat"),)}, files={"found.txt": b"found\n"},
                            from_tallies=_tally_fields)
    manifest = _publish(folder, lambda p: ExtrasFrom(_given, {
        "extras": beam.pvalue.AsSingleton(p | "Extras" >> beam.Create([extras]))}), _sidecars)
    assert manifest["object_labels"] == [{"id": 1, "name": "cat"}]
    assert manifest["images"] == {"by_label": {"0": 2, "1": 1}}  # summed over both shards' tallies
    assert (tmp_path / "out" / "found.txt").read_bytes() == b"found\n"
    assert (tmp_path / "out" / "classes.txt").read_bytes() == b"2 classes\n"
    assert manifest["splits"]["train"]["records"] == 3


def _made(count: int, names: list[str]) -> dict:
    return {"images": {"made": {"views": count + len(names)}}}


@pytest.mark.slow
def test_extras_made_in_the_publish_step_from_side_inputs(tmp_path) -> None:
    def extras(p):
        return ExtrasFrom(_made, {"count": beam.pvalue.AsSingleton(p | "Count" >> beam.Create([4])),
                                  "names": beam.pvalue.AsList(p | "Names" >> beam.Create(["x", "y"]))})

    manifest = _publish(str(tmp_path / "out"), extras)
    assert manifest["images"] == {"made": {"views": 6}}
    assert not (tmp_path / "out" / "classes.txt").exists()


@pytest.mark.slow
def test_without_extras_the_manifest_has_no_images_or_object_labels(tmp_path) -> None:
    manifest = _publish(str(tmp_path / "out"), lambda p: None)
    assert not manifest.get("images") and not manifest.get("object_labels")
    assert manifest["splits"]["train"]["records"] == 3


class _ReadCounted:
    """A shard's grouped items that count how often they are read (each read decodes every item)."""

    def __init__(self, items) -> None:
        self.items, self.reads = list(items), 0

    def __iter__(self):
        self.reads += 1
        return iter(self.items)


def test_a_shard_s_items_are_read_once(tmp_path) -> None:
    from transforms.shard_sink import _WriteShardFn

    os.makedirs(tmp_path / ".staging" / _RUN_ID)
    fn = _WriteShardFn(ShardOutput(str(tmp_path), "none"), ShardRecords(_record, _order, tally_of=_count_labels), _RUN_ID)
    fn.setup()
    items = _ReadCounted(_RECORDS[::-1])
    try:
        result = fn._write((("train", 0, 1), items), [SplitTotals("train", 100, 3, 21, 1)])
    finally:
        fn.teardown()
    assert items.reads == 1
    assert result.stats.records == 3 and dict(result.tallies) == {("label", "0"): 2, ("label", "1"): 1}
