"""Unit tests of ``shardset.dead_letters``: the one rule of ``--max_bad_fraction``."""

from __future__ import annotations

import pytest

from transforms.shardset.dead_letters import Verdict, rejection_verdict


# (inputs, rejected, present, max_bad_fraction) -> verdict. ``present``: copies of images already
# in the set an append adds to; 0 for a build.
@pytest.mark.parametrize("counts, expected", [
    ((0, 0, 0, 0.1), Verdict("no_inputs", 0, 0)),
    ((10, 1, 0, 0.1), Verdict("publish", 10, 1)),
    ((10, 2, 0, 0.1), Verdict("too_many", 10, 2)),
    ((10, 10, 0, None), Verdict("all_rejected", 10, 10)),
    ((10, 9, 0, None), Verdict("publish", 10, 9)),
    # An append: 12 copies of published images, 12 new, 1 broken: 1 bad of 13.
    ((25, 13, 12, 0.1), Verdict("publish", 13, 1)),
    ((16, 13, 12, 0.1), Verdict("too_many", 4, 1)),  # 3 new, 1 broken
    ((12, 12, 12, 0.0), Verdict("nothing_new", 0, 0)),  # nothing but copies
    ((13, 13, 12, 0.5), Verdict("nothing_new", 1, 1)),  # copies and a reject within the fraction of all
    ((13, 13, 12, 0.05), Verdict("all_rejected", 1, 1)),  # copies and a reject over it
])
def test_the_rejection_verdict_counts_copies_in_the_set_as_no_inputs(counts, expected) -> None:
    assert rejection_verdict(*counts) == expected
