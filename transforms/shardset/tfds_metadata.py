"""tensorflow-datasets metadata for a shard set, so ``tfds.builder_from_directory(OUT)`` loads it (pure).

Every feature is named by its Example key, at the top level, so that ``as_supervised=True`` gives
``(image/encoded, image/class/label)``; ``image/encoded`` is an ``Image`` feature when every record
holds a JPEG or PNG the last run counted. tfds reads uncompressed shards only.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping

from transforms.example.features import base_kind, is_list_type

__all__ = ["DATASET_INFO_NAME", "FEATURES_NAME", "DATASET_NAME", "tfds_files",
           "TEMPLATES", "labels_file_name", "is_tfds_file", "dataset_name", "dataset_name_problem", "tfds_problem"]

DATASET_INFO_NAME = "dataset_info.json"
FEATURES_NAME = "features.json"
DATASET_NAME = "tfrecord_shards"  # the name of a set whose folder name gives none
# Each shard file format's template, our shard names in tfds's terms (naming.shard_file_name).
TEMPLATES = {"tfrecord": "{SPLIT}-{SHARD_X_OF_Y}.tfrecord",
             "array_record": "{SPLIT}-{SHARD_INDEX}-of-{NUM_SHARDS}.array_record"}
_VERSION = "1.0.0"
_PACKAGE = "tensorflow_datasets.core.features."
_DTYPES = {"bytes": "string", "int64": "int64", "float": "float32"}
_IMAGE_KEY, _LABEL_KEY, _OBJECT_LABEL_KEY = "image/encoded", "image/class/label", "image/object/class/label"
_CLASS_KEYS = (_LABEL_KEY, _OBJECT_LABEL_KEY)
# What tfds's Image feature decodes: one frame of these formats, and the channels each allows.
_IMAGE_CHANNELS = {"jpeg": ("1", "3"), "png": ("1", "2", "3", "4")}
# tfds's dataset names: snake_case (tensorflow_datasets.core.naming), which we also ask of --name.
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

_LABELS_SUFFIX = ".labels.txt"


def labels_file_name(key: str) -> str:
    """tfds's names file of a top-level class-label feature: ``image/class/label`` -> ``image.class.label.labels.txt``
    (as ``tfds.features.feature.convert_feature_name_to_filename`` names it)."""
    return key.replace("/", ".") + _LABELS_SUFFIX


def is_tfds_file(name: str) -> bool:
    """True for a file name ``tfds_files`` writes (a reader of shards skips these)."""
    return name in (DATASET_INFO_NAME, FEATURES_NAME) or name.endswith(_LABELS_SUFFIX)


def dataset_name_problem(name: str) -> str | None:
    """Why ``name`` is not a tfds dataset name (snake_case: ``flowers_2024``), or None."""
    return None if _NAME.match(name) else (f"{name!r} is not a tensorflow-datasets name: use lower-case "
                                           "letters, digits and _, starting with a letter")


def dataset_name(folder: str) -> str:
    """The tfds name of a set in ``folder``: its last path part in snake_case (``out/Coco-Val`` -> ``coco_val``)."""
    last = folder.rstrip("/").rsplit("/", 1)[-1]
    name = re.sub(r"[^a-z0-9]+", "_", last.lower()).strip("_")
    if name and not name[0].isalpha():
        name = "ds_" + name
    return name or DATASET_NAME


def tfds_problem(compression: str) -> str | None:
    """Why tfds cannot read a set of ``compression`` shards, or None."""
    return None if compression == "none" else (f"tensorflow-datasets cannot read {compression} shards (its "
                                               "reader opens TFRecords uncompressed): no tfds files written; "
                                               "--compression none for tfds")


def _tensor(feature_type: str) -> dict[str, Any]:
    shape = {"dimensions": ["-1"]} if is_list_type(feature_type) else {}
    return {"pythonClassName": _PACKAGE + "tensor_feature.Tensor",
            "tensor": {"shape": shape, "dtype": _DTYPES[base_kind(feature_type)], "encoding": "none"}}


def _class_label(count: int, feature_type: str) -> dict[str, Any]:
    label = {"pythonClassName": _PACKAGE + "class_label_feature.ClassLabel",
             "classLabel": {"numClasses": str(count)}}
    if not is_list_type(feature_type):
        return label
    return {"pythonClassName": _PACKAGE + "sequence_feature.Sequence",
            "sequence": {"feature": label, "length": "-1"}}


def _image(images: Mapping[str, Mapping[str, int]]) -> dict[str, Any] | None:
    """tfds's ``Image`` feature for the manifest's ``images`` counts, or None where tfds cannot decode them all."""
    formats = {fmt for fmt, n in images.get("stored_formats", {}).items() if n}
    channels = {c for c, n in images.get("channels", {}).items() if n}
    if not formats or not formats <= set(_IMAGE_CHANNELS) or images.get("tf_undecodable"):
        return None
    image: dict[str, Any] = {"dtype": "uint8"}
    if len(formats) == 1:
        image["encodingFormat"] = next(iter(formats))
    fits = all(c in _IMAGE_CHANNELS[fmt] for fmt in formats for c in channels)
    depth = next(iter(channels)) if len(channels) == 1 and fits else "-1"
    image["shape"] = {"dimensions": ["-1", "-1", depth]}
    return {"pythonClassName": _PACKAGE + "image_feature.Image", "image": image}


def _class_names(manifest) -> dict[str, list[str]]:
    """Class-label key -> its names, for the keys tfds can show as ``ClassLabel``."""
    names = {}
    if manifest.labels:
        names[_LABEL_KEY] = list(manifest.labels)
    ids = [class_id for class_id, _ in manifest.object_labels]
    if manifest.object_labels and ids == list(range(len(ids))):
        names[_OBJECT_LABEL_KEY] = [name for _, name in manifest.object_labels]
    return names


def _features(spec: Mapping[str, str], image: dict[str, Any] | None,
              names: Mapping[str, list[str]]) -> dict[str, Any]:
    """The ``FeaturesDict`` JSON of a feature spec, every key a feature of its own."""
    features = {}
    for key in sorted(spec):
        feature_type = spec[key]
        if key == _IMAGE_KEY and image is not None and feature_type == "bytes":
            features[key] = image
        elif key in names and base_kind(feature_type) == "int64":
            features[key] = _class_label(len(names[key]), feature_type)
        else:
            features[key] = _tensor(feature_type)
    return {"pythonClassName": _PACKAGE + "features_dict.FeaturesDict",
            "featuresDict": {"features": features}}


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def tfds_files(manifest, name: str | None = None) -> dict[str, bytes | None]:
    """tfds's files for a shard set's ``Manifest``, name -> bytes (None: one this set does not have, for
    the publisher to remove); ``name``: the dataset's (None: ``DATASET_NAME``)."""
    none: dict[str, bytes | None] = {name: None for name in (
        DATASET_INFO_NAME, FEATURES_NAME, *(labels_file_name(key) for key in _CLASS_KEYS),
        # the names files of sets written before features were top-level (removed when rebuilt)
        *(key.replace("/", "-") + _LABELS_SUFFIX for key in _CLASS_KEYS))}
    spec = dict(manifest.feature_spec)
    if tfds_problem(manifest.compression) or not spec or any(
            base_kind(kind) not in _DTYPES for kind in spec.values()):
        return none
    names = _class_names(manifest)
    # The images counts are the last run's: they say nothing of the splits it kept.
    counted = manifest.written_splits is not None and set(manifest.splits) <= set(manifest.written_splits)
    features = _features(spec, _image(manifest.images or {}) if counted else None, names)
    splits = [{"name": name,
               "numBytes": str(split.bytes),
               "shardLengths": [str(shard.records) for shard in split.shards],
               "filepathTemplate": TEMPLATES[manifest.file_format]}
              for name, split in sorted(manifest.splits.items())]
    name = name or DATASET_NAME
    kind = {"tfrecord": "TFRecord", "array_record": "ArrayRecord"}[manifest.file_format]
    info = {"name": name, "version": _VERSION, "fileFormat": manifest.file_format,
            "description": f"{kind} shards written by {manifest.created_by}.",
            "moduleName": "tfrecord_shards", "splits": splits}
    if _IMAGE_KEY in spec and _LABEL_KEY in names and _LABEL_KEY in spec:
        info["supervisedKeys"] = {"tuple": {"items": [{"featureKey": _IMAGE_KEY}, {"featureKey": _LABEL_KEY}]}}
    files = {**none, DATASET_INFO_NAME: _json(info), FEATURES_NAME: _json(features)}
    for key, labels in names.items():
        if key in spec and base_kind(spec[key]) == "int64":
            files[labels_file_name(key)] = "".join(f"{label}\n" for label in labels).encode("utf-8")
    return files
