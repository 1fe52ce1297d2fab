"""The job's file system options, carried to the workers by the DoFns and sources that use storage.

A worker started as a container's boot starts it (``sdk_worker_main``) is
given the pipeline's options and hands them to Beam's file systems; a bare
SDK harness (Beam's worker pool without ``--container_executable``, or any
harness started without ``PIPELINE_OPTIONS``) is not, and its S3 file system
then fails with "Must provide one of client or options" and its GCS one
without the job's credentials. So every DoFn and source of this project that
reaches storage mixes in ``CarriesStorageOptions``: it is pickled with the
options the launcher's file systems were given, and unpickling it on a worker
whose file systems have none gives them those. A worker that has options
(Dataflow's, Flink's container, the DirectRunner) keeps its own.
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
