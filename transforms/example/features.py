"""Typed extra features: their types and parsing from manifests (pure; ``wire`` encodes them).

docs/annotations.md says how JSON values and CSV cells (``--feature name:type``) are typed. A feature
some inputs lack is held as a list of 0 or 1 values (``optional_type``).
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

from transforms.errors import ShardsError, UsageError

__all__ = ["FEATURE_TYPES", "EMPTY_LIST", "LIST_SEPARATOR", "OPTIONAL", "FeatureValueError", "ManifestTyping",
           "base_kind", "is_list_type", "optional_type", "parse_feature_flags", "json_type", "from_json", "from_csv",
           "feature_problems", "name_problem", "undeclared_columns"]

FEATURE_TYPES = ("bytes", "int64", "float", "bytes_list", "int64_list", "float_list")
# The type of an empty JSON list before any row has given its key a type: it fits
# every list type, and a key that is empty in every row is stored as bytes_list.
EMPTY_LIST = "empty_list"
LIST_SEPARATOR = ";"
# Ends a declared type whose key may be missing (``--feature caption:bytes?``).
OPTIONAL = "?"
_INT64 = (-(1 << 63), (1 << 63) - 1)
_FLOAT32_MAX = 3.4028234663852886e38
_NAME = re.compile(r"^[^\x00-\x1f\x7f]+$")
# Keys that are not features in an input manifest, and the prefix of the build's own keys.
_RESERVED_KEYS = ("path", "label", "split", "objects")
_RESERVED_PREFIX = "image/"


class FeatureValueError(ShardsError):
    """A manifest value does not fit its feature's type (a ``bad_feature`` dead letter)."""


def base_kind(feature_type: str) -> str:
    """``int64_list`` -> ``int64``; a scalar type is its own kind."""
    return feature_type[:-5] if feature_type.endswith("_list") else feature_type


def is_list_type(feature_type: str) -> bool:
    return feature_type.endswith("_list")


def optional_type(feature_type: str) -> str:
    """The type records hold a feature of ``feature_type`` in when some inputs lack it: a list
    (``bytes`` -> ``bytes_list``; a list type is itself, ``EMPTY_LIST`` too)."""
    return feature_type if is_list_type(feature_type) else feature_type + "_list"  # EMPTY_LIST ends in _list


def name_problem(name: str) -> str | None:
    """Why a key cannot be an extra feature's name, or None."""
    if not name or not _NAME.match(name):
        return f"feature name {name!r} is empty or holds a control character"
    if name in _RESERVED_KEYS or name == "image" or name.startswith(_RESERVED_PREFIX):
        return f"feature name {name!r} is reserved (path, label, split, objects, image/...)"
    return None


def parse_feature_flags(flags: Sequence[str]) -> dict[str, str]:
    """Parses ``--feature name:type`` values; ``name:type?`` declares a key that may be missing.

    Returns:
        Name -> type, ``OPTIONAL`` kept at the end of an optional one's.

    Raises:
        UsageError: A value is not ``name:type``, names a reserved key or an unknown type, or names
            a feature twice.
    """
    declared: dict[str, str] = {}
    for flag in flags:
        name, sep, feature_type = flag.rpartition(":")
        if not sep:
            raise UsageError(f"--feature {flag!r} must be name:type, type one of {', '.join(FEATURE_TYPES)}")
        if problem := name_problem(name):
            raise UsageError(f"--feature {flag!r}: {problem}")
        if feature_type.removesuffix(OPTIONAL) not in FEATURE_TYPES:
            raise UsageError(f"--feature {flag!r}: type must be one of {', '.join(FEATURE_TYPES)}, "
                             f"followed by {OPTIONAL} for a key that may be missing")
        if name in declared:
            raise UsageError(f"--feature names {name!r} twice")
        declared[name] = feature_type
    return declared


# The feature type of a decoded JSON scalar (``json.loads`` gives these types exactly; a bool has none).
_JSON_SCALARS = {int: "int64", float: "float", str: "bytes"}


def json_type(value: object) -> str | None:
    """The feature type a JSON value implies; None if it implies none (bool, object, [])."""
    if isinstance(value, list):
        kinds = {_JSON_SCALARS.get(type(v)) for v in value}
        if not value or None in kinds:
            return None
        if kinds == {"int64", "float"}:
            return "float_list"
        return f"{kinds.pop()}_list" if len(kinds) == 1 else None
    return _JSON_SCALARS.get(type(value))


def _check_scalar(kind: str, value: object) -> object:
    """One value as stored in a list of ``kind``; raises FeatureValueError if it does not fit."""
    if kind == "bytes":
        if not isinstance(value, str):
            raise FeatureValueError(f"{value!r} is not a string")
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FeatureValueError(f"{value!r} is not a number")
    if kind == "int64":
        if not isinstance(value, int):
            raise FeatureValueError(f"{value!r} is not an integer")
        if not _INT64[0] <= value <= _INT64[1]:
            raise FeatureValueError(f"{value} is outside the int64 range")
        return value
    if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
        raise FeatureValueError(f"{value!r} is not a finite float32")
    return float(value)


def from_json(value: object, feature_type: str) -> tuple:
    """The values of a JSON value as a feature of ``feature_type``."""
    kind = base_kind(feature_type)
    if is_list_type(feature_type):
        if not isinstance(value, list):
            raise FeatureValueError(f"{value!r} is not a list (the feature is {feature_type})")
        return tuple(_check_scalar(kind, v) for v in value)
    if isinstance(value, list):
        raise FeatureValueError(f"a list where the feature is a single {feature_type}")
    return (_check_scalar(kind, value),)


def _parse_text(text: str, kind: str) -> object:
    if kind == "bytes":
        return text
    stripped = text.strip()
    try:
        return int(stripped) if kind == "int64" else float(stripped)
    except ValueError:
        raise FeatureValueError(f"{text!r} is not {'an integer' if kind == 'int64' else 'a number'}") from None


def from_csv(text: str, feature_type: str) -> tuple:
    """The values of a CSV cell as a feature of ``feature_type`` (list items split on ``;``)."""
    kind = base_kind(feature_type)
    if is_list_type(feature_type):
        items = text.split(LIST_SEPARATOR) if text.strip() else []
        return tuple(_check_scalar(kind, _parse_text(item, kind)) for item in items)
    return (_check_scalar(kind, _parse_text(text, kind)),)


class ManifestTyping:
    """Types the extra features of one input manifest, row by row, in file order.

    Declared types (``--feature``) are fixed; an undeclared JSON key takes the type of its first
    value. A declared optional single value is given as its list type (``optional_type``).
    """

    def __init__(self, declared: Mapping[str, str]) -> None:
        self.types: dict[str, str] = {name: t.removesuffix(OPTIONAL) for name, t in declared.items()}
        self._declared = frozenset(declared)
        self._optional = frozenset(name for name, t in declared.items() if t.endswith(OPTIONAL))

    def _given_as(self, name: str, feature_type: str) -> str:
        """The type a value of ``name`` is handed on as: a declared optional one's list type."""
        return optional_type(feature_type) if name in self._optional else feature_type

    def json_row(self, row: Mapping[str, object]) -> tuple[tuple[str, str, tuple], ...]:
        """``(name, type, values)`` of every extra key of a JSON object, sorted by name.

        Raises:
            FeatureValueError: A value does not fit; the message names the key.
        """
        out = []
        for name in sorted(k for k in row if k not in _RESERVED_KEYS):
            value = row[name]
            if value is None:
                continue
            if problem := name_problem(name):
                raise FeatureValueError(problem)
            feature_type = self.types.get(name) or json_type(value)
            if name in self._declared and is_list_type(feature_type) and not isinstance(value, list):
                value = [value]  # a single value of a declared list: a list of one
            if feature_type is None and value == []:
                out.append((name, EMPTY_LIST, ()))
                continue
            if feature_type is None:
                raise FeatureValueError(
                    f"key {name!r}: {value!r} has no feature type (use numbers, strings or a "
                    f"list of one of these, or declare it with --feature {name}:TYPE)")
            try:
                values = from_json(value, feature_type)
            except FeatureValueError as err:
                raise FeatureValueError(f"key {name!r} ({feature_type}): {err}") from None
            self.types.setdefault(name, feature_type)
            out.append((name, self._given_as(name, feature_type), values))
        return tuple(out)

    def csv_row(self, row: Mapping[str, str]) -> tuple[tuple[str, str, tuple], ...]:
        """``(name, type, values)`` of every declared column of a CSV row, sorted by name."""
        out = []
        for name in sorted(k for k in row if k not in _RESERVED_KEYS):
            feature_type = self.types.get(name)
            if feature_type is None:
                raise FeatureValueError(f"column {name!r} is not declared with --feature")
            if name in self._optional and not row[name].strip():
                continue  # an empty cell of a key that may be missing: missing
            try:
                values = from_csv(row[name], feature_type)
            except FeatureValueError as err:
                raise FeatureValueError(f"column {name!r} ({feature_type}): {err}") from None
            out.append((name, self._given_as(name, feature_type), values))
        return tuple(out)


def undeclared_columns(header: Sequence[str], declared: Mapping[str, str]) -> list[str]:
    """CSV columns that are neither ``path``, ``label``, ``split`` nor declared features."""
    return [name for name in header if name not in ("path", "label", "split") and name not in declared]


def feature_problems(name: str, feature_type: str, kind: str, values: Sequence) -> list[str]:
    """What is wrong with a decoded feature against its declared type."""
    want = base_kind(feature_type)
    if is_list_type(feature_type):
        if kind != want and not (kind == "none" and not values):
            return [f"feature {name} is {kind}, expected {want} (a {feature_type})"]
        return []
    if kind != want:
        return [f"feature {name} is {kind}, expected {want}"]
    if len(values) != 1:
        return [f"feature {name} has {len(values)} values, expected 1"]
    return []
