"""The cross-decoder check: TensorFlow's reference of a built set, and the block means it compares."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from benchmarks import consumer_decode
from tests.shard_fixtures import make_class_tree, run_build


def test_reference_holds_tf_decodes_at_the_recorded_sizes(tmp_path, capsys):
    make_class_tree(str(tmp_path / "in"), per_class=3, broken=False)
    status, _, err = run_build(capsys, "--input", str(tmp_path / "in"), "--output_dir", str(tmp_path / "out"))
    assert status == 0, err
    ref = consumer_decode.reference([str(tmp_path / "out" / "*.tfrecord")])
    assert sorted(ref) == sorted(f"{label}/{label}_{i:03d}.{'png' if i == 2 else 'jpg'}"
                                 for label in ("daisy", "rose", "tulip") for i in range(3))
    for entry in ref.values():
        assert entry["shape"] == entry["recorded"]
        assert len(entry["blocks"]) == 16 * 16 * 3 and len(entry["sha256"]) == 64
    assert {entry["format"] for entry in ref.values()} == {"jpeg", "png"}


@pytest.mark.parametrize("shape", [(1, 1, 3), (5, 40, 3), (64, 48, 3)])
def test_block_means_of_a_flat_image_are_its_value_and_defined_for_tiny_images(shape):
    blocks = consumer_decode._blocks(np.full(shape, 77, dtype=np.uint8))
    assert len(blocks) == 768 and all(not math.isnan(v) and v == 77 for v in blocks)


def test_block_means_tell_a_turned_image_from_its_original():
    image = np.zeros((64, 64, 3), dtype=np.uint8)
    image[:32] = 200  # top half bright
    upright, turned = consumer_decode._blocks(image), consumer_decode._blocks(np.rot90(image, 2))
    assert max(abs(a - b) for a, b in zip(upright, turned)) == 200


def test_one_of_reference_and_check_is_required(tmp_path):
    for both in ([], ["--reference", str(tmp_path / "r.json"), "--check", str(tmp_path / "r.json")]):
        with pytest.raises(SystemExit) as stop:
            consumer_decode.main(["--shards", str(tmp_path / "*.tfrecord"), *both])
        assert stop.value.code == 2
    assert not os.listdir(tmp_path)
