"""Runner plumbing shared by the jobs: option defaults and readable failure messages."""

from __future__ import annotations

import logging
import re
from typing import Sequence

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (DirectOptions, GoogleCloudOptions, PipelineOptions,
                                                  StandardOptions)
from apache_beam.runners.runner import PipelineRunner

from transforms.errors import ShardsError

__all__ = ["prepare_options", "unknown_flags", "local_runner", "error_summary"]

_DIRECT_NAMES = (None, "DirectRunner", "direct", "SwitchingDirectRunner")

_PROJECT_ERROR = re.compile(
    r"(?:transforms\.errors\.)?(ShardsError|UsageError|RecordError|ExampleError|ImageError|"
    r"ManifestError|PlanError|PublishError): (.+)")


_STEP_SUFFIX = re.compile(r"\s*\[while running '[^']*'\]\s*$")


def prepare_options(options: PipelineOptions) -> PipelineOptions:
    """Returns the options a job runs with (Beam's own flags are left as given).

    Makes ``FileSystems`` use these options at once, as ``beam.Pipeline`` does
    later, so the checks a job makes before building its pipeline reach s3://
    with ``--s3_endpoint_url`` and the S3 keys given. With ``--no_auth``,
    Beam's GCS filesystem connects anonymously, as Beam's Dataflow client
    already does for that flag; without it, a process with no Google
    credentials retries the credential lookup for about 24 s before falling
    back to the same anonymous client. A GCS emulator
    (``STORAGE_EMULATOR_HOST``) needs no credentials.
    """
    FileSystems.set_options(options)
    if options.view_as(GoogleCloudOptions).no_auth:
        from apache_beam.internal.gcp import auth  # Beam's per-process credential cache

        with auth._Credentials._credentials_lock:
            auth._Credentials._credentials = None
            auth._Credentials._credentials_init = True
    return options


def unknown_flags(options: PipelineOptions, argv: Sequence[str]) -> list[str]:
    """Returns the arguments in ``argv`` that no options class (Beam's or a job's) defines.

    Beam drops such arguments with a warning, so a misspelt flag
    (``--decode-images``) or a path given without its flag would be ignored;
    a job can refuse them instead. Beam's own warning is silenced here.
    """
    parsers = []
    log = logging.getLogger("apache_beam.options.pipeline_options")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        options.get_all_options(add_extra_args_fn=parsers.append)
    finally:
        log.setLevel(level)
    return parsers[0].parse_known_args(list(argv))[1]


def local_runner(options: PipelineOptions) -> PipelineRunner | None:
    """Returns the runner object for a DirectRunner run, or None to let Beam pick.

    Beam 2.77's DirectRunner first tries to download the Prism runner and falls
    back to its in-process FnApiRunner when that fails, which costs a network
    round trip (or a DNS time-out) on machines without internet. For batch
    jobs the jobs go straight to that same FnApiRunner, with the same options
    (``--direct_num_workers``, ``--direct_running_mode``). ``--runner
    PrismRunner``, or ``--prism_location``, still selects Prism.

    The data plane between the runner and its thread or process workers does
    not flush on a timer (see ``_without_timed_flushes``).
    """
    standard = options.view_as(StandardOptions)
    if standard.runner not in _DIRECT_NAMES or standard.streaming:
        return None
    if options.get_all_options().get("prism_location"):
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    options.view_as(DirectOptions)  # registers the direct options for encoding
    _without_timed_flushes()
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def _without_timed_flushes() -> None:
    """Stops the local runner's data plane from sending output on a timer.

    In Beam 2.77 the FnApiRunner's gRPC data plane (thread workers, and the
    runner's side of process workers) sends each output stream every
    ``DATA_BUFFER_TIME_LIMIT_MS`` (1 s) from a timer thread, also halfway
    through an element being written, while the receiving side decodes every
    chunk as whole elements (``GroupingBuffer.append``,
    ``DataInputOperation.process_encoded``). Under load a job then fails at
    random, e.g. with ``Invalid PaneInfoEncoding``. With the limit at 0, as
    Beam's process workers have it by default, a stream is sent when full or
    closed, always between elements. A batch job loses nothing by it: timed
    flushes only lower latency for streaming.
    """
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0


def error_summary(err: BaseException) -> str:
    """Returns one line saying why a pipeline failed.

    Runners wrap errors raised in workers in their own exception types and add
    stack traces to the message; the project's own error, if any, is the line
    a user needs.
    """
    text = str(err)
    found = _PROJECT_ERROR.findall(text)
    if isinstance(err, ShardsError):
        message = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    elif found:
        message = found[-1][1]
    else:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        message = f"{type(err).__name__}: {lines[-1] if lines else ''}"
    while _PROJECT_ERROR.match(message):  # runners may repeat the type name
        message = _PROJECT_ERROR.match(message).group(2)
    return _STEP_SUFFIX.sub("", message).strip()
