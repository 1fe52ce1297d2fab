"""Every reach into Apache Beam's internals, in one place, each with the Beam version it was checked on.

The rest of the project uses Beam's public API only. Each function here works
around a gap in that API and names what it touches; when Beam changes, this is
the one module to re-check. All were checked against apache-beam 2.77.0.
"""

from __future__ import annotations

import errno
import os
from typing import BinaryIO

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.options.pipeline_options import S3Options
from apache_beam.runners.runner import PipelineRunner
from apache_beam.utils.retry import PermanentException

try:  # present with apache-beam[aws]
    import botocore.config
    import botocore.exceptions
    from apache_beam.io.aws.clients.s3 import boto3_client as _boto3_client
    from apache_beam.io.aws.clients.s3.messages import S3ClientError as _S3ClientError
    from apache_beam.io.aws.s3io import S3Uploader as _S3Uploader
except ImportError:  # pragma: no cover - depends on the installed extras
    _S3Uploader = _boto3_client = None

__all__ = ["CHECKED_BEAM_VERSION", "local_runner", "local_workers", "use_anonymous_gcp_credentials", "close_written_file",
           "filesystem_options", "s3_boto3_client", "s3_read_client", "S3NoAnswerError", "gcs_storage_client",
           "S3_CONNECT_TIMEOUT_S", "S3_READ_TIMEOUT_S", "S3_READ_ATTEMPTS", "AUTO_WORKERS_MIN_BYTES",
           "workers_given", "choose_local_workers"]

CHECKED_BEAM_VERSION = "2.77.0"

# Bounds on each S3 call that reads an input (``s3_read_client``): seconds to connect, seconds
# to wait for bytes, and tries in all (botocore's "standard" retries, with their jittered backoff
# of at most 20 s between tries). An object whose HEAD gets no answer is given up after
# S3_READ_ATTEMPTS tries: at most 3 x (10 + 60) s plus the backoff, about 4 minutes when every
# try times out, a few seconds when connections are refused.
S3_CONNECT_TIMEOUT_S = 10
S3_READ_TIMEOUT_S = 60
S3_READ_ATTEMPTS = 3

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


# A local run of a job whose input is at least this large uses one worker process per usable
# core unless its flags say otherwise (``choose_local_workers``). Measured on 2 cores
# (BENCHMARKS.md, "Scaling benchmark"): a second worker process costs about 2 s of start-up and
# pays for itself from about 1 GB of input.
AUTO_WORKERS_MIN_BYTES = 1 << 30


def workers_given(options: PipelineOptions) -> bool:
    """True if the command line set ``--direct_num_workers`` or ``--direct_running_mode``.

    A value equal to Beam's default still counts as given. Reads the flags
    ``PipelineOptions`` keeps (``_flags``; Beam 2.77.0).
    """
    flags = getattr(options, "_flags", None) or ()
    return any(str(flag).split("=", 1)[0] in ("--direct_num_workers", "--direct_running_mode")
               for flag in flags)


def choose_local_workers(options: PipelineOptions, input_bytes: int | None, cores: int) -> str | None:
    """Gives a large local run one worker process per core, unless the flags chose; says so.

    On the DirectRunner, a run whose input is at least ``AUTO_WORKERS_MIN_BYTES``
    runs in ``multi_processing`` mode with ``cores`` workers; a smaller one stays
    in this process (Beam's default), where start-up costs least. Any
    ``--direct_num_workers`` or ``--direct_running_mode`` flag is kept as given,
    and other runners are left alone.

    Args:
        options: The run's options; changed in place when workers are chosen.
        input_bytes: The input's size (at least), or None when it is not known.
        cores: The cores this process may use.

    Returns:
        One line saying what was chosen, or None when nothing was changed.
    """
    if (local_workers(options) is None or workers_given(options) or input_bytes is None
            or input_bytes < AUTO_WORKERS_MIN_BYTES or cores < 2):
        return None
    direct = options.view_as(DirectOptions)
    direct.direct_running_mode = "multi_processing"
    direct.direct_num_workers = cores
    return (f"{input_bytes / (1 << 30):.1f} GiB or more of input: running {cores} worker processes, one per core "
            "(--direct_num_workers 1 keeps one process)")


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


def close_written_file(fh: BinaryIO) -> None:
    """Closes a file made by ``FileSystems.create``, also when nothing was written to it.

    Beam's S3 writer completes its multipart upload without a part when no
    byte was written, which S3 refuses with MalformedXML (apache/beam#21369);
    an empty shard, ``.idx`` or ``dead_letters.jsonl`` on s3:// gets one empty
    part, which S3 stores as an empty object. Touches the S3 writer's private
    ``_uploader`` and ``S3Uploader._write_to_s3`` (Beam 2.77.0).
    """
    uploader = getattr(getattr(fh, "raw", None), "_uploader", None)
    if (_S3Uploader is not None and isinstance(uploader, _S3Uploader) and fh.tell() == 0
            and not uploader.parts):
        uploader._write_to_s3(b"")
    fh.close()


def unbuffered(fh: BinaryIO) -> BinaryIO:
    """The stream below the read buffer of a file Beam's gs:// or s3:// file system opened.

    Beam wraps its ``filesystemio.DownloaderStream`` (one ranged request per
    read) in an ``io.BufferedReader`` of 16 MiB, so a small read there
    fetches 16 MiB. Reading the ``raw`` stream fetches what is asked for.
    Any other file object is returned as it is (Beam 2.77.0).
    """
    raw = getattr(fh, "raw", None)
    return raw if raw is not None and hasattr(raw, "readinto") and hasattr(raw, "seek") else fh


def filesystem_options() -> PipelineOptions:
    """Returns the pipeline options Beam's file systems are made from.

    ``FileSystems`` keeps the options of the running pipeline (set by
    ``beam.Pipeline`` and by ``FileSystems.set_options``) in its private
    ``_pipeline_options`` (Beam 2.77.0) and has no getter; without options
    set, Beam uses defaults, as this does.
    """
    return getattr(FileSystems, "_pipeline_options", None) or PipelineOptions([])


def s3_boto3_client():
    """Returns the boto3 S3 client Beam's S3 file system uses with the current options.

    Beam's S3 file system has no conditional put; the output lock needs one
    (``If-None-Match: *``). Touches ``S3IO.client`` (Beam's client wrapper) and
    its ``client`` attribute, the boto3 client made from ``--s3_endpoint_url``,
    the keys and the region (Beam 2.77.0).
    """
    from apache_beam.io.aws import s3io

    return s3io.S3IO(options=filesystem_options()).client.client


class S3NoAnswerError(OSError, PermanentException):
    """An S3 call that got no HTTP answer (endpoint unreachable, timed out, no credentials).

    A ``PermanentException``: Beam's retry decorators (``apache_beam.utils.retry``)
    do not try it again; botocore already tried it ``S3_READ_ATTEMPTS`` times.
    """


def s3_read_client(options: PipelineOptions):
    """Returns Beam's S3 client for reading inputs, its calls bounded in time and tries.

    Beam 2.77's ``boto3_client.Client`` makes its boto3 client without a
    ``Config`` (botocore's defaults: 60 s to connect, 60 s to read, several
    tries), and ``S3Downloader._get_object_metadata`` retries any error without
    an HTTP status 7 more times with exponential backoff from 5 s: an
    unreachable endpoint held each input about 10 minutes. This client is made
    from the same options (``S3Options``, as Beam's ``Client.__init__`` reads
    them) with ``S3_CONNECT_TIMEOUT_S``, ``S3_READ_TIMEOUT_S`` and
    ``S3_READ_ATTEMPTS``, and a HEAD that gets no HTTP answer raises
    ``S3NoAnswerError``, which Beam does not retry. It sets the attributes
    ``Client.__init__`` sets (``client``, ``_download_request``,
    ``_download_stream``, ``_download_pos``; Beam 2.77.0). Reads of object
    bytes keep Beam's retries, each try bounded by the same timeouts.

    Raises:
        RuntimeError: apache-beam[aws] is not installed.
    """
    if _boto3_client is None or _boto3_client.boto3 is None:
        raise RuntimeError("reading s3:// needs apache-beam[aws] (boto3)")
    return _BoundedS3Client(options.view_as(S3Options))


if _boto3_client is not None:
    class _BoundedS3Client(_boto3_client.Client):
        """Beam's S3 client with bounded timeouts and tries (``s3_read_client``)."""

        def __init__(self, s3: S3Options) -> None:  # pylint: disable=super-init-not-called
            config = botocore.config.Config(
                connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S,
                retries={"max_attempts": S3_READ_ATTEMPTS, "mode": "standard"})
            self.client = _boto3_client.boto3.session.Session().client(
                service_name="s3", region_name=s3.s3_region_name, api_version=s3.s3_api_version,
                use_ssl=not s3.s3_disable_ssl, verify=s3.s3_verify, endpoint_url=s3.s3_endpoint_url,
                aws_access_key_id=s3.s3_access_key_id, aws_secret_access_key=s3.s3_secret_access_key,
                aws_session_token=s3.s3_session_token, config=config)
            self._download_request = None
            self._download_stream = None
            self._download_pos = 0

        def get_object_metadata(self, request):
            try:
                return super().get_object_metadata(request)
            except _S3ClientError as err:
                cause = err.__context__  # Beam raises its error inside ``except`` of botocore's
                if err.code is None and isinstance(cause, botocore.exceptions.BotoCoreError):
                    raise S3NoAnswerError(
                        errno.EIO, f"S3 gave no answer in {S3_READ_ATTEMPTS} tries "
                                   f"({type(cause).__name__}: {cause})",
                        f"s3://{request.bucket}/{request.object}") from cause
                raise


def gcs_storage_client():
    """Returns the ``google.cloud.storage`` client Beam's GCS file system uses.

    Beam's GCS file system has no create-if-absent; the output lock needs one
    (``if_generation_match=0``). Touches ``GcsIO.client`` (Beam 2.77.0).
    """
    from apache_beam.io.gcp import gcsio

    return gcsio.GcsIO(pipeline_options=filesystem_options()).client
