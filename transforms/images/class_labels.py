"""What a label means, the same in every input kind: an integer is a class index, other text a class name (pure).

A label that is an integer (or text that is one once stripped: ``" 7 "``, ``007``, ``+7``) is a
class index in every input kind. Without ``--class_names``/``--labels_file`` an index is named by
its number, and the build's classes are ``0`` to the largest index; with them, it is the name at
that index. Any other text is a class name. A listing that mixes the two is refused, as is an
index far above the number of inputs (before any list is built).
"""

from __future__ import annotations

import re
from typing import AbstractSet, Iterable, Sequence

from transforms.errors import UsageError

__all__ = ["MIN_INDEX_BOUND", "INDICES_PER_INPUT", "class_label", "class_labels_of", "is_index", "index_bound",
           "index_order_problem", "refuse_white_space_twins", "class_list"]

# An index at or above max(MIN_INDEX_BOUND, INDICES_PER_INPUT x inputs) is refused without --class_names.
MIN_INDEX_BOUND = 1000
INDICES_PER_INPUT = 10
_INTEGER = re.compile(r"([+-]?)([0-9]+)")
_CANONICAL = re.compile(r"0|[1-9][0-9]*")
# Digits of an index compared as a number; a longer one is above any bound (no int() of its text).
_DIGITS = 18


def _shown(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:20]}...{text[-8:]} ({len(text)} characters)"


def class_label(value, class_names: Sequence[str] | None = None) -> tuple[str | None, str]:
    """The class name of one label value, as every input kind reads it.

    Args:
        class_names: The names integer labels index; None: an index is named by its number,
            without sign or leading zeros.

    Returns:
        ``(name, "")``, or ``(None, why)`` for a negative index, an index outside
        ``class_names``, or a value that is neither an integer nor text.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None, f"label {value!r} is neither a class index nor a class name"
    text = str(value) if isinstance(value, int) else value
    match = _INTEGER.fullmatch(text.strip())
    if match is None:
        return text, ""
    digits = match.group(2).lstrip("0") or "0"
    if match.group(1) == "-" and digits != "0":
        return None, f"class index {_shown(text.strip())} is negative"
    if class_names is None:
        return digits, ""
    if len(digits) > _DIGITS or int(digits) >= len(class_names):
        return None, f"class index {_shown(digits)} is outside the {len(class_names)} class names given"
    return class_names[int(digits)], ""


def class_labels_of(values: Sequence, class_names: Sequence[str] | None = None) -> tuple[tuple[str, ...], str]:
    """``class_label`` of each label of a multi-label input: ``(names, "")``, or ``((), why)`` of the first refused."""
    names = []
    for value in values:
        name, why = class_label(value, class_names)
        if name is None:
            return (), why
        names.append(name)
    return tuple(names), ""


def is_index(name: str) -> bool:
    """True if a class name stands for an integer class index (``class_label`` wrote it: ``0``, ``17``)."""
    return _CANONICAL.fullmatch(name) is not None


def index_bound(inputs: int) -> int:
    """The smallest index refused without ``--class_names`` in a listing of ``inputs`` inputs."""
    return max(MIN_INDEX_BOUND, INDICES_PER_INPUT * inputs)


def index_order_problem(names: Sequence[str]) -> str | None:
    """Why a class list cannot name integer labels (a name that is an integer other than its own
    index), or None."""
    for index, name in enumerate(names):
        found = _INTEGER.fullmatch(name.strip())
        if found is not None and (found.group(1) == "-" or (found.group(2).lstrip("0") or "0") != str(index)):
            return (f"class {_shown(name)!r} is at index {index}: an integer label is a class index, so a "
                    "class named by an integer must be at that index (list the names from index 0 in order)")
    return None


def refuse_white_space_twins(names: Iterable[str]) -> None:
    """Refuses one class written two ways: names that differ only in the white space around them
    (``cat`` and `` cat``, from the CSV rows ``a.jpg,cat`` and ``b.jpg, cat``). A name is kept as written,
    so they would be two classes.

    Raises:
        UsageError: Naming the first such pair in sorted order.
    """
    first: dict[str, str] = {}
    twins = [(first.setdefault(name.strip(), name), name) for name in sorted(names)]
    twins = [pair for pair in twins if pair[0] != pair[1]]
    if twins:
        one, other = min(twins)
        raise UsageError(f"class names {_shown(one)!r} and {_shown(other)!r} differ only in the white space around "
                         "them: one class written two ways (a CSV row 'path, label'?); write each label the same way "
                         "in every input")


def class_list(names: AbstractSet[str], inputs: int) -> tuple[str, ...]:
    """The classes of a listing of ``inputs`` inputs without ``--class_names``, from the names they gave
    (``class_label`` of each label): the names sorted, or ``0`` to the largest index.

    Raises:
        UsageError: Some labels are indices and others names; two names differ only in the white space
            around them; or the largest index is ``index_bound(inputs)`` or more.
    """
    refuse_white_space_twins(names)
    indices = [name for name in names if is_index(name)]
    if not indices:
        return tuple(sorted(names))
    if len(indices) < len(names):
        word = min(name for name in names if not is_index(name))
        number = min(indices, key=lambda n: (len(n), n))
        raise UsageError(f"labels mix class indices and class names (e.g. {number} and {_shown(word)!r}): an "
                         "integer label is a class index; give --class_names (or --labels_file) listing every "
                         "class in index order, or label every input by name")
    largest = max(indices, key=lambda n: (len(n), n))
    bound = index_bound(inputs)
    if len(largest) > _DIGITS or int(largest) >= bound:
        raise UsageError(f"class index {_shown(largest)} is far above the {inputs} inputs listed (an index of "
                         f"{bound} or more would make that many classes); give --class_names (or --labels_file) "
                         "naming the classes, or fix the labels")
    return tuple(str(i) for i in range(int(largest) + 1))
