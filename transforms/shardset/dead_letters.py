"""Dead letters: the inputs a job rejected, each with its reason, in ``dead_letters.jsonl``.

A run's dead letters are never held in one place: each worker stages sorted parts of at most
``PART_LETTERS``, each with a small ``RejectionSummary``; publishing merges the parts into
``dead_letters.jsonl`` in ``letter_order``, while the refusal checks use the merged summaries.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from typing import Iterable

__all__ = ["DEAD_LETTERS", "DeadLetter", "PART_LETTERS", "EXAMPLES", "IN_APPENDED_SET", "in_appended_set",
           "RejectionSummary", "DeadLetterPart", "letter_order", "line_order", "too_many_rejected", "Verdict",
           "rejection_verdict", "rejection_details", "rejection_problem"]

# The tag of the output of rejected inputs (``DeadLetter``) of every step that rejects some;
# their main outputs are "main".
DEAD_LETTERS = "dead_letters"
# Most dead letters in one staged part (a worker holds and sorts up to this many).
PART_LETTERS = 50_000
# Examples a refusal names (``rejection_details``).
EXAMPLES = 3
# What the duplicate_image dead letter of an image already in the set a run appends to says.
IN_APPENDED_SET = "of the set this run appends to"


@dataclass(frozen=True)
class DeadLetter:
    """A rejected input: where it was, why, and the error text."""

    path: str
    reason: str
    error: str

    def to_json(self) -> str:
        return json.dumps({"path": self.path, "reason": self.reason, "error": self.error},
                          ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, line: bytes | str) -> "DeadLetter":
        """The dead letter of one line of ``dead_letters.jsonl`` (``to_json``)."""
        obj = json.loads(line)
        return cls(obj["path"], obj["reason"], obj["error"])


def in_appended_set(letter: DeadLetter) -> bool:
    """True for the dead letter of an input already in the set a run appends to (not a bad input)."""
    return letter.reason == "duplicate_image" and letter.error.endswith(IN_APPENDED_SET)


def letter_order(letter: DeadLetter) -> tuple[str, str, str]:
    """The order of ``dead_letters.jsonl``: path, reason, error."""
    return (letter.path, letter.reason, letter.error)


def line_order(line: bytes) -> tuple[str, str, str]:
    """``letter_order`` of a line of ``dead_letters.jsonl``."""
    return letter_order(DeadLetter.from_json(line))


@dataclass(frozen=True)
class RejectionSummary:
    """What the refusal checks need of a set of dead letters, whatever their number: the count, the
    count per reason, the first letter (``letter_order``) of each reason and the first ``2 * EXAMPLES``."""

    count: int = 0
    by_reason: tuple[tuple[str, int], ...] = ()
    firsts: tuple[DeadLetter, ...] = ()
    earliest: tuple[DeadLetter, ...] = ()

    @classmethod
    def of(cls, letters: Iterable[DeadLetter]) -> "RejectionSummary":
        """The summary of some dead letters, read once."""
        counts: collections.Counter = collections.Counter()
        firsts: dict[str, DeadLetter] = {}
        earliest: list[DeadLetter] = []
        keep = 2 * EXAMPLES
        for letter in letters:
            counts[letter.reason] += 1
            first = firsts.get(letter.reason)
            if first is None or letter_order(letter) < letter_order(first):
                firsts[letter.reason] = letter
            earliest.append(letter)
            if len(earliest) > 16 * keep:  # trimmed now and then: a few letters are held
                earliest = sorted(earliest, key=letter_order)[:keep]
        return cls(sum(counts.values()), tuple(sorted(counts.items())),
                   tuple(firsts[r] for r in sorted(firsts)),
                   tuple(sorted(earliest, key=letter_order)[:keep]))

    @classmethod
    def merged(cls, summaries: Iterable["RejectionSummary"]) -> "RejectionSummary":
        """One summary of the dead letters of several."""
        summaries = list(summaries)
        counts: collections.Counter = collections.Counter()
        for summary in summaries:
            counts.update(dict(summary.by_reason))
        # Each summary's letters, once each: its earliest and those of its firsts not among them.
        picked = cls.of(letter for s in summaries
                        for letter in (*s.earliest, *(f for f in s.firsts if f not in s.earliest)))
        return cls(sum(s.count for s in summaries), tuple(sorted(counts.items())), picked.firsts,
                   picked.earliest)


@dataclass(frozen=True)
class DeadLetterPart:
    """Up to ``PART_LETTERS`` dead letters, sorted (``letter_order``) and staged by a worker as
    ``to_json`` lines; ``bad`` summarises those that are bad inputs (not ``in_appended_set``)."""

    path: str
    summary: RejectionSummary
    bad: RejectionSummary | None = None


def too_many_rejected(rejected: int, inputs: int, max_bad_fraction: float | None) -> bool:
    """True if more than ``max_bad_fraction`` of the inputs were rejected (``--max_bad_fraction``; None: no limit)."""
    return max_bad_fraction is not None and rejected > max_bad_fraction * inputs


@dataclass(frozen=True)
class Verdict:
    """What ``--max_bad_fraction`` makes of a run's rejections: the inputs judged (all but those already
    in the set appended to), the bad ones among them, and the ``kind``: ``publish``; ``nothing_new`` (an
    append whose inputs are all in the set already, or rejected within the fraction: it changes nothing
    and succeeds); ``no_inputs``; ``all_rejected``; ``too_many`` (more bad inputs than the fraction)."""

    kind: str
    inputs: int
    bad: int


def rejection_verdict(inputs: int, rejected: int, present: int = 0,
                      max_bad_fraction: float | None = None) -> Verdict:
    """The one rule of ``--max_bad_fraction``, for a build, an append and their plans. ``present`` of the
    ``rejected`` inputs are already in the set the run appends to (0 for a build): neither inputs nor bad
    inputs for the fraction (appending a folder that grew is the usual case)."""
    judged, bad = inputs - present, rejected - present
    if inputs == 0:
        return Verdict("no_inputs", 0, 0)
    if present and (judged == 0 or (bad == judged and not too_many_rejected(bad, inputs, max_bad_fraction))):
        return Verdict("nothing_new", judged, bad)  # nothing new but inputs as bad as before
    if bad >= judged:
        return Verdict("all_rejected", judged, bad)
    if too_many_rejected(bad, judged, max_bad_fraction):
        return Verdict("too_many", judged, bad)
    return Verdict("publish", judged, bad)


def rejection_details(summary: RejectionSummary) -> list[str]:
    """Lines saying why inputs were rejected: the count per reason, then at most ``EXAMPLES`` examples
    (the first of each of the most frequent reasons first)."""
    counts = dict(summary.by_reason)
    ranked = sorted(counts, key=lambda r: (-counts[r], r))
    lines = ["  rejected by reason: " + ", ".join(f"{r} {counts[r]}" for r in ranked)]
    first_of = {d.reason: d for d in summary.firsts}
    firsts = [first_of[r] for r in ranked]
    chosen = (firsts + [d for d in summary.earliest if d not in firsts])[:EXAMPLES]
    lines += [f"  e.g. {d.path}: {d.reason}: {d.error}" for d in chosen]
    return lines


def rejection_problem(inputs: int, written: int, summary: RejectionSummary, dead_path: str,
                      max_bad_fraction: float | None) -> str | None:
    """Why a run's shards (``written`` records) may not be published, or None; ``dead_path`` is named."""
    rejected = summary.count
    verdict = rejection_verdict(inputs, rejected, 0, max_bad_fraction).kind
    if verdict == "no_inputs":
        return "no input files or rows were found; check --input"
    if verdict == "all_rejected":
        return (f"no record could be written: all {inputs} inputs were rejected; nothing was "
                f"published; every rejected input is in {dead_path}")
    if verdict == "too_many":  # shards may not have been written
        return "\n".join([
            f"{rejected} of {inputs} inputs ({100.0 * rejected / inputs:.1f}%) were "
            f"rejected, more than --max_bad_fraction {max_bad_fraction:g}; nothing was "
            f"published; every rejected input is in {dead_path}",
            *rejection_details(summary)])
    if written + rejected != inputs:
        return (f"{inputs} inputs but {written} records written and {rejected} "
                "dead letters; refusing to publish an incomplete set")
    return None
