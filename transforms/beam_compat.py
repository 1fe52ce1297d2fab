"""Every reach into Apache Beam's internals, in one place, each with the Beam version it was checked on.

The rest of the project uses Beam's public API only. Each function here works
around a gap in that API and names what it touches; when Beam changes, this
module and ``transforms/filesystems.py`` (the reaches into Beam's file
systems and their S3 and GCS clients, which only the storage package may
touch) are the ones to re-check. All were checked against apache-beam 2.77.0.
"""

from __future__ import annotations

import os

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner

__all__ = ["CHECKED_BEAM_VERSION", "local_runner", "local_workers", "use_anonymous_gcp_credentials",
           "AUTO_WORKERS_MIN_BYTES", "WORKER_BYTES", "local_workers_for", "bytes_worth_counting",
           "workers_given", "choose_local_workers"]

CHECKED_BEAM_VERSION = "2.77.0"

_DIRECT_NAMES = (None, "DirectRunner", "direct", "SwitchingDirectRunner")


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


def local_workers(options: PipelineOptions) -> int | None:
    """How many SDK workers a DirectRunner run shares this machine's cores among, else None.

    ``--direct_num_workers`` (0: one per CPU, as Beam reads it) in the
    ``multi_threading`` and ``multi_processing`` modes; 1 ``in_memory``.
    None for every other runner, whose workers may run elsewhere.
    """
    standard = options.view_as(StandardOptions)
    if standard.runner not in _DIRECT_NAMES or options.get_all_options().get("prism_location"):
        return None
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory":
        return 1
    return direct.direct_num_workers or os.cpu_count() or 1


# A local run of a job whose input is at least this large runs in worker processes unless its
# flags say otherwise (``choose_local_workers``). Measured on 2 cores (BENCHMARKS.md, "Scaling
# benchmark"): a second worker process costs about 2 s of start-up and pays for itself from
# about 1 GB of input.
AUTO_WORKERS_MIN_BYTES = 1 << 30
# Such a run gets one worker process per this many input bytes, up to one per usable core. Each
# process costs ~3.7 CPU s of start-up; measured on 16 cores (BENCHMARKS.md, "On 16 cores"), the
# 1.32 GB photo set built in 10.4 s wall and 31 CPU s with 4 workers, 12.5 s and 78 CPU s with 16,
# and 13.1 s with one; verified in 6.8 s with 4 workers and 10.4 s with 16.
WORKER_BYTES = 256 << 20


def local_workers_for(input_bytes: int, cores: int) -> int:
    """Worker processes for a local run of ``input_bytes`` (at least 2, at most ``cores``)."""
    return max(2, min(cores, input_bytes // WORKER_BYTES))


def bytes_worth_counting(cores: int) -> int:
    """How many input bytes a job need count to choose its workers: past this, one per core."""
    return max(AUTO_WORKERS_MIN_BYTES, cores * WORKER_BYTES)


def workers_given(options: PipelineOptions) -> bool:
    """True if the command line set ``--direct_num_workers`` or ``--direct_running_mode``.

    A value equal to Beam's default still counts as given. Reads the flags
    ``PipelineOptions`` keeps (``_flags``; Beam 2.77.0).
    """
    flags = getattr(options, "_flags", None) or ()
    return any(str(flag).split("=", 1)[0] in ("--direct_num_workers", "--direct_running_mode")
               for flag in flags)


def choose_local_workers(options: PipelineOptions, input_bytes: int | None, cores: int) -> str | None:
    """Gives a large local run worker processes for its size, unless the flags chose; says so.

    On the DirectRunner, a run whose input is at least ``AUTO_WORKERS_MIN_BYTES``
    runs in ``multi_processing`` mode with one worker per ``WORKER_BYTES`` of
    input, at least 2 and at most ``cores`` (``local_workers_for``); a smaller
    one stays in this process (Beam's default), where start-up costs least.
    Any ``--direct_num_workers`` or ``--direct_running_mode`` flag is kept as
    given, and other runners are left alone.

    Args:
        options: The run's options; changed in place when workers are chosen.
        input_bytes: The input's size (at least: counting may stop at
            ``bytes_worth_counting(cores)``), or None when it is not known.
        cores: The cores this process may use.

    Returns:
        One line saying what was chosen, or None when nothing was changed.
    """
    if (local_workers(options) is None or workers_given(options) or input_bytes is None
            or input_bytes < AUTO_WORKERS_MIN_BYTES or cores < 2):
        return None
    workers = local_workers_for(input_bytes, cores)
    direct = options.view_as(DirectOptions)
    direct.direct_running_mode = "multi_processing"
    direct.direct_num_workers = workers
    size = f"{input_bytes / (1 << 30):.1f} GiB{' or more' if workers == cores else ''}"
    return (f"{size} of input: running {workers} worker processes, one per {WORKER_BYTES >> 20} MiB "
            "up to one per core (--direct_num_workers 1 keeps one process)")


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


def use_anonymous_gcp_credentials() -> None:
    """Makes Beam's GCS client connect anonymously at once (for ``--no_auth``).

    Touches ``apache_beam.internal.gcp.auth._Credentials`` (Beam 2.77.0), Beam's
    per-process credential cache: marked as looked up, with no credentials, it
    gives the anonymous client Beam otherwise falls back to after about 24 s of
    retried credential lookups on a machine without Google credentials.
    """
    from apache_beam.internal.gcp import auth

    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials = None
        auth._Credentials._credentials_init = True
