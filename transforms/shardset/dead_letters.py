"""Dead letters: the inputs a job rejected, each with its reason, in ``dead_letters.jsonl``."""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = ["DeadLetter", "too_many_rejected"]


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
