"""Decoding a record's image with the decoders a trainer uses, for ``verify --decode_with`` (pure).

A record TensorFlow decodes may still be refused, or decoded to another size, by the reader a
training job uses (docs/verify.md). Each decoder's library is imported only when it is used; one
that is not installed is named at the start (``missing_decoders``), before any record is read.
"""

from __future__ import annotations

import importlib.util
import io
from typing import Callable, Mapping, Sequence

__all__ = ["DECODERS", "parse_decoders", "missing_decoders", "decoder_problems"]

# Decoder name -> the module that must be importable, and how to install it.
DECODERS: dict[str, tuple[str, str]] = {
    "tf": ("tensorflow", "pip install tensorflow (or this project's [compat] extra)"),
    "pillow": ("PIL", "pip install pillow"),
    "torchvision": ("torchvision", "pip install torch torchvision"),
    "dali": ("nvidia.dali", "see NVIDIA DALI's installation guide"),
}


def parse_decoders(text: str) -> tuple[str, ...]:
    """``tf,pillow`` -> ``("tf", "pillow")``, each name once, in the order given.

    Raises:
        ValueError: A name is not one of ``DECODERS``, or none is given.
    """
    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    unknown = [name for name in names if name not in DECODERS]
    if unknown or not names:
        raise ValueError(f"--decode_with takes decoders among {', '.join(DECODERS)}, separated by commas; "
                         f"got {text!r}")
    return names


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package (nvidia) is missing
        return False


def missing_decoders(names: Sequence[str]) -> list[str]:
    """One line for each named decoder whose library is not installed; empty when all are."""
    return [f"--decode_with {name}: {DECODERS[name][0]} is not installed ({DECODERS[name][1]})"
            for name in names if not _installed(DECODERS[name][0])]


def _tf_size(data: bytes) -> tuple[int, int]:
    import tensorflow as tf

    shape = tf.io.decode_image(data, channels=3, expand_animations=False).shape
    return int(shape[0]), int(shape[1])


def _pillow_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        img.load()
        return img.height, img.width


def _torchvision_size(data: bytes) -> tuple[int, int]:
    import torch
    from torchvision.io import ImageReadMode, decode_image

    tensor = decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
    return int(tensor.shape[-2]), int(tensor.shape[-1])


_dali_pipeline = None


def _dali_size(data: bytes) -> tuple[int, int]:
    global _dali_pipeline
    import numpy as np
    from nvidia.dali import fn, pipeline_def, types

    if _dali_pipeline is None:
        @pipeline_def(batch_size=1, num_threads=1, device_id=None)
        def decode():
            encoded = fn.external_source(name="encoded", dtype=types.UINT8)
            return fn.decoders.image(encoded, device="cpu", output_type=types.RGB)

        _dali_pipeline = decode()
        _dali_pipeline.build()
    try:
        _dali_pipeline.feed_input("encoded", [np.frombuffer(data, dtype=np.uint8)])
        (out,) = _dali_pipeline.run()
    except Exception:
        _dali_pipeline = None  # a failure ends a DALI pipeline: the next image gets a new one
        raise
    shape = out.at(0).shape
    return int(shape[0]), int(shape[1])


_SIZE_OF: dict[str, Callable[[bytes], tuple[int, int]]] = {
    "tf": _tf_size, "pillow": _pillow_size, "torchvision": _torchvision_size, "dali": _dali_size,
}


def decoder_problems(features: Mapping[str, tuple[str, list]], names: Sequence[str]) -> list[str]:
    """One line, naming the decoder, for each of ``names`` (installed ``DECODERS``) that refuses a record's
    image or decodes it to another height and width than the record's (a ``raw`` record has none)."""
    encoded = features["image/encoded"][1][0]
    if features.get("image/format", ("bytes", [b""]))[1][0] == b"raw":
        return []
    stated = (features["image/height"][1][0], features["image/width"][1][0])
    problems = []
    for name in names:
        try:
            size = _SIZE_OF[name](encoded)
        except Exception as err:  # each library raises its own types for an image it refuses
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            problems.append(f"{name} refuses the image: {type(err).__name__}: {first}")
            continue
        if size != stated:
            problems.append(f"{name} decodes it to {size[0]}x{size[1]} (HxW); the record says "
                            f"{stated[0]}x{stated[1]}")
    return problems
