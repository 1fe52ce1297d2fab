"""The public transforms import from ``transforms``; pure modules import without Beam."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import transforms


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("module", [
    "transforms", "transforms.errors", "transforms.tfrecord.framing", "transforms.tfrecord.record_ranges",
    "transforms.example.codec", "transforms.shardset.planning", "transforms.shardset.manifest",
    "transforms.images.image_codec", "transforms.images.inputs", "transforms.verify.checks",
])
def test_pure_modules_import_without_beam(module: str) -> None:
    assert not {m for m in _modules_after(f"import {module}") if m.split(".")[0] == "apache_beam"}


@pytest.mark.slow
def test_a_public_transform_loads_beam_on_first_use() -> None:
    loaded = _modules_after("from transforms import ReadFromTFRecords")
    assert "apache_beam" in loaded and "transforms.tfrecord_source" in loaded


def test_every_public_name_resolves_to_its_module() -> None:
    for name in transforms.__all__:
        value = getattr(transforms, name)
        module = importlib.import_module(transforms._EXPORTS[name])
        assert value is getattr(module, name)
        assert name in getattr(module, "__all__", ()), f"{module.__name__}.__all__ lacks {name}"
    assert set(transforms.__all__) <= set(dir(transforms))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchTransform'"):
        transforms.NoSuchTransform  # noqa: B018
