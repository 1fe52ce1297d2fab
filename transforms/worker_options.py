"""The job's file system options, carried to the workers by the DoFns and sources that use storage.

A bare SDK harness (started without ``PIPELINE_OPTIONS``) gives Beam's file systems no options:
its S3 file system fails with "Must provide one of client or options", its GCS one lacks the
job's credentials. Every DoFn and source that reaches storage mixes in ``CarriesStorageOptions``:
unpickled on a worker whose file systems have no options, it gives them the launcher's.
"""

from __future__ import annotations

from typing import Any

from transforms.filesystems import options_set, set_options

__all__ = ["CarriesStorageOptions"]

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
