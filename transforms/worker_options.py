"""The job's file system options, carried to the workers by the DoFns and sources that use storage.

A bare SDK harness (started without ``PIPELINE_OPTIONS``) gives Beam's file systems no options:
its S3 file system fails with "Must provide one of client or options", its GCS one lacks the
job's credentials. Every DoFn and source that reaches storage mixes in ``CarriesStorageOptions``:
unpickled on a worker whose file systems have no options, it gives them the launcher's.
``StageInPartsFn`` stages a step's findings (dead letters, problems) where they are found.
"""

from __future__ import annotations

from typing import Any, Callable

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from transforms.filesystems import options_set, set_options

__all__ = ["CarriesStorageOptions", "StageInPartsFn"]

_KEY = "_storage_options"


class CarriesStorageOptions:
    """A mixin: pickled with the launcher's file system options; unpickled, sets them where none are."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state[_KEY] = options_set()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        options = state.pop(_KEY, None)
        self.__dict__.update(state)
        if options is not None and options_set() is None:
            set_options(options)


class StageInPartsFn(CarriesStorageOptions, beam.DoFn):
    """item -> part: each bundle's items, staged by ``stage(items)`` in parts of at most ``size``."""

    def __init__(self, stage: Callable[[list], Any], size: int) -> None:
        self._stage_items = stage
        self._size = size

    def start_bundle(self):
        self._items = []

    def process(self, item):
        self._items.append(item)
        if len(self._items) >= self._size:
            yield self._stage()

    def finish_bundle(self):
        if self._items:
            yield GlobalWindows.windowed_value(self._stage())

    def _stage(self):
        items, self._items = self._items, []
        return self._stage_items(items)
