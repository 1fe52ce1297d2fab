"""Everything the storage package takes from Beam: its file systems, their S3 and GCS clients.

``transforms/storage/`` holds the storage rules (listing, opening, staging,
publishing) and imports nothing of Beam itself: it takes Beam's public file
system API (``FileSystems``, ``FileSystem``, ``FileMetadata``,
``CompressionTypes``, ``BeamIOError``) from here. The functions here work
around gaps in that API, reaching into Beam's S3 and GCS clients and the
files its file systems write; each names what it touches, so that when Beam
changes this is the one module of storage to re-check. All were checked against apache-beam 2.77.0
(``transforms.beam_compat.CHECKED_BEAM_VERSION``); the reaches into Beam's
runners and options live in ``transforms/beam_compat.py``.

s3:// reads reuse one Beam ``S3IO`` per thread (``shared_s3io``): Beam
2.77's S3 file system builds a new boto3 session and client for every call,
about 0.28 s of CPU per file, which would dominate reading many small
images. The shared ``S3IO`` is Beam's own, made from the same pipeline
options (measured against an S3 API server on loopback: 0.28 s -> 0.009 s of
CPU per 100 KB object); its client bounds each call in time and tries
(``s3_read_client``), errors are otherwise unchanged.

Every other S3 client Beam's file system makes (listing, uploads, renames,
deletions of the output folder) is the same bounded client: importing this
module makes ``boto3_client.Client`` it (``_bound_beam_s3_clients``). A call
that gets no HTTP answer (connection refused, timed out) after botocore's
``S3_READ_ATTEMPTS`` tries raises ``S3NoAnswerError``, naming the endpoint and
the object, which Beam's retry decorators do not retry: an unreachable S3
output ends the job in seconds (connection refused) or at most
``S3_READ_ATTEMPTS`` x (``S3_CONNECT_TIMEOUT_S`` + ``S3_READ_TIMEOUT_S``) s plus
botocore's backoff per call, instead of Beam's minutes of retries.
"""

from __future__ import annotations

import contextlib
import errno
import threading
from typing import BinaryIO, Iterator

from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, S3Options
from apache_beam.utils.retry import PermanentException

try:  # present with apache-beam[aws]
    import botocore.config
    import botocore.exceptions
    from apache_beam.io.aws.clients.s3 import boto3_client as _boto3_client
    from apache_beam.io.aws.clients.s3.messages import S3ClientError as _S3ClientError
    from apache_beam.io.aws.s3io import S3Uploader as _S3Uploader
    _S3_ERRORS: tuple[type[Exception], ...] = (_S3ClientError,)
except ImportError:  # pragma: no cover - depends on the installed extras
    _S3Uploader = _boto3_client = None
    _S3_ERRORS = ()

__all__ = ["FileSystems", "FileSystem", "FileMetadata", "CompressionTypes", "BeamIOError", "set_options", "filesystem_options",
           "options_set", "shared_s3io", "s3_boto3_client", "s3_read_client",
           "S3NoAnswerError", "gcs_storage_client", "close_written_file", "unbuffered", "naming_s3_errors",
           "S3_CONNECT_TIMEOUT_S", "S3_READ_TIMEOUT_S", "S3_READ_ATTEMPTS"]

# Bounds on each S3 call that reads an input (``s3_read_client``): seconds to connect, seconds
# to wait for bytes, and tries in all (botocore's "standard" retries, with their jittered backoff
# of at most 20 s between tries). An object whose HEAD gets no answer is given up after
# S3_READ_ATTEMPTS tries: at most 3 x (10 + 60) s plus the backoff, about 4 minutes when every
# try times out, a few seconds when connections are refused.
S3_CONNECT_TIMEOUT_S = 10
S3_READ_TIMEOUT_S = 60
S3_READ_ATTEMPTS = 3

_ERRNO = {403: errno.EACCES, 404: errno.ENOENT}
_local = threading.local()


def set_options(options: PipelineOptions) -> None:
    """Makes Beam's file systems use ``options`` at once, as ``beam.Pipeline`` does when it is built.

    The checks a job makes before building its pipeline then reach s3://
    with ``--s3_endpoint_url`` and the S3 keys given.
    """
    FileSystems.set_options(options)


def options_set() -> PipelineOptions | None:
    """The options Beam's file systems were given in this process, or None.

    None in a bare SDK harness (Beam's worker pool started without a
    container's boot, which ``sdk_worker_main`` alone configures), where Beam
    makes its S3 and GCS file systems without any options
    (``FileSystems._pipeline_options``, Beam 2.77.0).
    """
    return getattr(FileSystems, "_pipeline_options", None)


def filesystem_options() -> PipelineOptions:
    """Returns the pipeline options Beam's file systems are made from.

    ``FileSystems`` keeps the options of the running pipeline (set by
    ``beam.Pipeline`` and by ``FileSystems.set_options``) in its private
    ``_pipeline_options`` (Beam 2.77.0) and has no getter; without options
    set, Beam uses defaults, as this does.
    """
    return getattr(FileSystems, "_pipeline_options", None) or PipelineOptions([])


def shared_s3io():
    """Beam's S3IO for this thread, rebuilt when the pipeline options change.

    Its client bounds each call in time and tries (``s3_read_client``), so an
    unreachable endpoint makes an input unreadable instead of holding it for
    Beam's ten minutes of retries.
    """
    from apache_beam.io.aws import s3io

    # FileSystems keeps the options of the running pipeline (set by beam.Pipeline and
    # by the job before it builds one); its filesystems are made from them the same way.
    options = filesystem_options()
    cached = getattr(_local, "s3io", None)
    if cached is None or cached[0] is not options:
        cached = (options, s3io.S3IO(client=s3_read_client(options)))
        _local.s3io = cached
    return cached[1]


def s3_boto3_client():
    """Returns the boto3 S3 client Beam's S3 file system uses with the current options.

    Beam's S3 file system has no conditional put (the output lock needs
    ``If-None-Match: *``) and no listing by level. Touches ``S3IO.client``
    (Beam's client wrapper) and its ``client`` attribute, the boto3 client
    made from ``--s3_endpoint_url``, the keys and the region (Beam 2.77.0).
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
                retries={"total_max_attempts": S3_READ_ATTEMPTS, "mode": "standard"})
            self.client = _boto3_client.boto3.session.Session().client(
                service_name="s3", region_name=s3.s3_region_name, api_version=s3.s3_api_version,
                use_ssl=not s3.s3_disable_ssl, verify=s3.s3_verify, endpoint_url=s3.s3_endpoint_url,
                aws_access_key_id=s3.s3_access_key_id, aws_secret_access_key=s3.s3_secret_access_key,
                aws_session_token=s3.s3_session_token, config=config)
            self._download_request = None
            self._download_stream = None
            self._download_pos = 0

        def get_object_metadata(self, request):
            with _no_answer_is_permanent(request):
                return super().get_object_metadata(request)

        def list(self, request):
            with _no_answer_is_permanent(request):
                return super().list(request)

        def create_multipart_upload(self, request):
            with _no_answer_is_permanent(request):
                return super().create_multipart_upload(request)

        def upload_part(self, request):
            with _no_answer_is_permanent(request):
                return super().upload_part(request)

        def complete_multipart_upload(self, request):
            with _no_answer_is_permanent(request):
                return super().complete_multipart_upload(request)

        def delete(self, request):
            with _no_answer_is_permanent(request):
                return super().delete(request)

        def delete_batch(self, request):
            with _no_answer_is_permanent(request):
                return super().delete_batch(request)

        def copy(self, request):
            with _no_answer_is_permanent(request):
                return super().copy(request)

    class _BoundedBeamS3Client(_BoundedS3Client):
        """``_BoundedS3Client`` made as Beam's ``S3IO`` makes its client: from pipeline options or a dict."""

        def __init__(self, options) -> None:
            if not isinstance(options, PipelineOptions):
                options = PipelineOptions.from_dictionary(dict(options or {}))
            super().__init__(options.view_as(S3Options))

    @contextlib.contextmanager
    def _no_answer_is_permanent(request) -> Iterator[None]:
        """Raises a Beam S3 error that got no HTTP answer as ``S3NoAnswerError`` naming the endpoint."""
        try:
            yield
        except _S3ClientError as err:
            cause = err.__context__  # Beam raises its error inside ``except`` of botocore's
            if err.code is None and isinstance(cause, botocore.exceptions.BotoCoreError):
                bucket = getattr(request, "bucket", None) or getattr(request, "src_bucket", "")
                key = getattr(request, "object", None) or getattr(request, "prefix", None) or \
                    getattr(request, "src_key", "") or ""
                raise S3NoAnswerError(errno.EIO, f"S3 gave no answer in {S3_READ_ATTEMPTS} tries "
                                                 f"({type(cause).__name__}: {cause})",
                                      f"s3://{bucket}/{key}") from cause
            raise

    def _bound_beam_s3_clients() -> None:
        """Makes every client Beam's ``S3IO`` makes for itself a ``_BoundedBeamS3Client`` (Beam 2.77.0:
        ``S3IO.__init__`` calls ``boto3_client.Client(options=...)``)."""
        _boto3_client.Client = _BoundedBeamS3Client

    _bound_beam_s3_clients()


def gcs_storage_client():
    """Returns the ``google.cloud.storage`` client Beam's GCS file system uses.

    Beam's GCS file system has no create-if-absent (the output lock needs
    ``if_generation_match=0``) and no listing by level. Touches
    ``GcsIO.client`` (Beam 2.77.0).
    """
    from apache_beam.io.gcp.gcsio import GcsIO

    return GcsIO(pipeline_options=filesystem_options()).client


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


def _os_error(path: str, err: Exception) -> OSError:
    """An S3 client error as the OSError a local read would raise, naming the object.

    Beam's S3 client raises ``S3ClientError`` (not an ``OSError``) for any
    answer but 404 on opening, e.g. 403 when the object may not be read,
    and its message does not name the object.
    """
    code = getattr(err, "code", None)
    if code is None:
        return OSError(errno.EIO, f"S3 gave no answer: {getattr(err, 'message', err)}", path)
    return OSError(_ERRNO.get(code, errno.EIO), f"S3 answered {code}: {getattr(err, 'message', err)}", path)


@contextlib.contextmanager
def naming_s3_errors(path: str) -> Iterator[None]:
    """Raises Beam's S3 client errors inside the block as ``OSError``s naming ``path``.

    Beam's S3 client raises ``S3ClientError`` (not an ``OSError``) for a refused
    read or upload, with a message naming the S3 operation and status but not
    the object; reads then become dead letters like unreadable local files, and
    a refused upload's one-line failure names the object.
    """
    try:
        yield
    except _S3_ERRORS as err:
        raise _os_error(path, err) from err
