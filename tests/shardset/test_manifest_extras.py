"""What a job hands the shard sink beside the shards: ``ManifestExtras`` merged and combined."""

from __future__ import annotations

from transforms.shardset.manifest_extras import ManifestExtras, as_extras, with_files


def test_a_plain_mapping_is_fields_only_and_none_is_nothing() -> None:
    assert as_extras({"images": {"a": 1}}) == ManifestExtras(fields={"images": {"a": 1}})
    assert as_extras(None) == ManifestExtras()
    extras = ManifestExtras(fields={"x": 1})
    assert as_extras(extras) is extras


def test_fields_from_the_summed_tallies_join_the_fixed_fields() -> None:
    def counts(tallies):
        return {"total": sum(n for _, n in tallies)}

    extras = ManifestExtras(fields={"object_labels": ((1, "cat"),)}, from_tallies=counts)
    assert extras.manifest_fields(iter([("a", 2), ("b", 3)])) == {"object_labels": ((1, "cat"),), "total": 5}
    assert ManifestExtras(fields={"x": 1}).manifest_fields([("a", 2)]) == {"x": 1}


def test_pipeline_files_join_the_manifest_files_and_none_removes() -> None:
    def from_manifest(manifest):
        return {"dataset_info.json": b"{}", "label_map.pbtxt": None}

    files = with_files(from_manifest, {"near_duplicates.jsonl": None, "extra.txt": b"x"})
    assert files("manifest") == {"dataset_info.json": b"{}", "label_map.pbtxt": None,
                                 "near_duplicates.jsonl": None, "extra.txt": b"x"}
    assert with_files(None, {"a": b"1"})("manifest") == {"a": b"1"}
    assert with_files(from_manifest, {}) is from_manifest
    assert with_files(None, {}) is None
