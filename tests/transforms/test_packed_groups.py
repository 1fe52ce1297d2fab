"""GroupPacked: the same groups as a GroupByKey, with a few elements per key crossing the shuffle."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam import coders
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from transforms.images.items import SourceImage
from transforms.packed_groups import GroupPacked, PackFn


def _pairs(n: int) -> list[tuple[str, SourceImage]]:
    return [(f"k{i % 5}", SourceImage(f"/in/{i % 5}/{i:05d}.png", f"{i:05d}.png", "train", "a", f"m.csv:{i}"))
            for i in range(n)]


@pytest.mark.parametrize("compress", [False, True])
def test_groups_equal_a_group_by_key_and_read_twice(compress):
    pairs = _pairs(1_000)
    expected = {}
    for key, value in pairs:
        expected.setdefault(key, []).append(value)

    def twice(keyed):
        key, values = keyed
        first, second = list(values), list(values)  # iterable twice, same values
        return key, sorted(first, key=lambda s: s.path), first == second

    with TestPipeline() as p:
        grouped = (p | beam.Create(pairs) | GroupPacked(pack_bytes=2048, held_bytes=8_000, compress=compress)
                   | beam.Map(twice))
        assert_that(grouped, equal_to([(k, sorted(v, key=lambda s: s.path), True) for k, v in expected.items()]))


def test_a_bundle_sends_a_few_packs_per_key_not_one_element_per_value():
    pairs = _pairs(2_000)
    coder = coders.registry.get_coder(object)
    with TestPipeline() as p:
        packs = p | beam.Create(pairs, reshuffle=False) | beam.ParDo(PackFn(coder))
        count = packs | beam.combiners.Count.Globally()
        assert_that(count, equal_to([5]))  # 5 keys, each pack under 1 MiB: one pack per key
