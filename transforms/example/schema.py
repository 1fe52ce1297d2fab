"""The image Example schema: which features every record carries, and a checker."""

from __future__ import annotations

from typing import Collection, Mapping

from transforms.example.features import base_kind, feature_problems, is_list_type

__all__ = ["IMAGE_FEATURES", "IMAGE_FORMATS", "schema_problems", "spec_problems", "record_problems"]

# Feature name -> kind. Every record written by the build job has exactly these
# (shard sets built before image/source_format existed lack that one).
IMAGE_FEATURES: dict[str, str] = {
    "image/encoded": "bytes",
    "image/format": "bytes",
    "image/height": "int64",
    "image/width": "int64",
    "image/channels": "int64",
    "image/class/label": "int64",
    "image/class/text": "bytes",
    "image/filename": "bytes",
    "image/key/sha256": "bytes",
    "image/source_format": "bytes",
}
_OPTIONAL = ("image/source_format",)
_CORE = {name: kind for name, kind in IMAGE_FEATURES.items() if name not in _OPTIONAL}

IMAGE_FORMATS = ("jpeg", "png", "gif", "bmp", "tiff", "webp", "raw")


def schema_problems(decoded: Mapping[str, tuple[str, list]], lists: Collection[str] = ()) -> list[str]:
    """Returns what is wrong with a decoded Example (``codec.decode_example``) against ``IMAGE_FEATURES``,
    one message per problem; ``lists`` are keys that hold a list of any length (multi-label class keys)."""
    problems = []
    for name, kind in IMAGE_FEATURES.items():
        if name not in decoded:
            if name not in _OPTIONAL:
                problems.append(f"missing feature {name}")
            continue
        problems += feature_problems(name, f"{kind}_list" if name in lists else kind, *decoded[name])
    if not problems:
        fmt = decoded["image/format"][1][0]
        if fmt.decode("utf-8", "replace") not in IMAGE_FORMATS:
            problems.append(f"image/format {fmt!r} is not one of {', '.join(IMAGE_FORMATS)}")
        for name in ("image/height", "image/width", "image/channels"):
            if decoded[name][1][0] <= 0:
                problems.append(f"{name} is {decoded[name][1][0]}, expected > 0")
        if any(label < 0 for label in decoded["image/class/label"][1]):
            problems.append("image/class/label is negative")
        sha = decoded["image/key/sha256"][1][0]
        if len(sha) != 64 or any(c not in b"0123456789abcdef" for c in sha):
            problems.append("image/key/sha256 is not 64 lowercase hex characters")
    return problems


def spec_problems(decoded: Mapping[str, tuple[str, list]], spec: Mapping[str, str],
                  exact: bool = False) -> list[str]:
    """Returns the features of ``spec`` that a decoded Example lacks or holds with another kind (a
    plain type with another number of values than one, if ``exact``)."""
    problems = []
    for name, kind in spec.items():
        if name not in decoded:
            problems.append(f"missing feature {name}")
        elif is_list_type(kind) or exact:
            problems += feature_problems(name, kind, *decoded[name])
        elif decoded[name][0] != kind:
            problems.append(f"feature {name} is {decoded[name][0]}, expected {kind}")
    return problems


def record_problems(decoded: Mapping[str, tuple[str, list]], spec: Mapping[str, str]) -> list[str]:
    """Checks a decoded Example against a shard set's feature spec: the image schema's full checks
    where the spec includes it, else the spec's keys and kinds."""
    if all(base_kind(spec.get(name, "")) == kind for name, kind in _CORE.items()):
        extra = {name: kind for name, kind in spec.items() if name not in _CORE}
        lists = [name for name in _CORE if is_list_type(spec[name])]
        return schema_problems(decoded, lists) + spec_problems(decoded, extra, exact=True)
    return spec_problems(decoded, spec)
