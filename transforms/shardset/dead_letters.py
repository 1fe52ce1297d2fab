"""Dead letters: the inputs a job rejected, each with its reason, in ``dead_letters.jsonl``."""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from typing import Sequence

__all__ = ["DEAD_LETTERS", "DeadLetter", "too_many_rejected", "rejection_details", "rejection_problem"]

# The tag of the output of rejected inputs (``DeadLetter``) of every step that rejects some;
# their main outputs are "main".
DEAD_LETTERS = "dead_letters"


@dataclass(frozen=True)
class DeadLetter:
    """A rejected input: where it was, why, and the error text."""

    path: str
    reason: str
    error: str

    def to_json(self) -> str:
        return json.dumps({"path": self.path, "reason": self.reason, "error": self.error},
                          ensure_ascii=False, sort_keys=True)


def too_many_rejected(rejected: int, inputs: int, max_bad_fraction: float | None) -> bool:
    """True if more than ``max_bad_fraction`` of the inputs were rejected (``--max_bad_fraction``; None: no limit)."""
    return max_bad_fraction is not None and rejected > max_bad_fraction * inputs


def rejection_details(dead_letters: Sequence[DeadLetter], examples: int = 3) -> list[str]:
    """Lines saying why inputs were rejected: the count per reason, then a few examples.

    The examples are the first dead letter (by path) of each of the most
    frequent reasons, then further ones, up to ``examples`` lines.
    """
    counts = collections.Counter(d.reason for d in dead_letters)
    ranked = sorted(counts, key=lambda r: (-counts[r], r))
    lines = ["  rejected by reason: " + ", ".join(f"{r} {counts[r]}" for r in ranked)]
    ordered = sorted(dead_letters, key=lambda d: d.path)
    firsts = [next(d for d in ordered if d.reason == r) for r in ranked]
    chosen = (firsts + [d for d in ordered if d not in firsts])[:examples]
    lines += [f"  e.g. {d.path}: {d.reason}: {d.error}" for d in chosen]
    return lines


def rejection_problem(inputs: int, written: int, dead: Sequence[DeadLetter], dead_path: str,
                      max_bad_fraction: float | None) -> str | None:
    """Why a run's shards may not be published, from its counts of inputs and rejections; or None.

    Args:
        inputs: Inputs the run listed.
        written: Records its shards hold.
        dead: Its dead letters.
        dead_path: Where they are written (named in the refusal).
        max_bad_fraction: ``--max_bad_fraction``, or None for no limit.
    """
    if inputs == 0:
        return "no input files or rows were found; check --input"
    if len(dead) >= inputs:
        return (f"no record could be written: all {inputs} inputs were rejected; nothing was "
                f"published; every rejected input is in {dead_path}")
    if too_many_rejected(len(dead), inputs, max_bad_fraction):  # shards may not have been written
        return "\n".join([
            f"{len(dead)} of {inputs} inputs ({100.0 * len(dead) / inputs:.1f}%) were "
            f"rejected, more than --max_bad_fraction {max_bad_fraction:g}; nothing was "
            f"published; every rejected input is in {dead_path}",
            *rejection_details(dead)])
    if written + len(dead) != inputs:
        return (f"{inputs} inputs but {written} records written and {len(dead)} "
                "dead letters; refusing to publish an incomplete set")
    return None
