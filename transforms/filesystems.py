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

Every storage call the project makes itself uses one client per worker
process (``store_client``): Beam 2.77's S3 file system builds a new boto3
session and client for every call, about 0.28 s of CPU each, and its GCS
file system a new ``GcsIO`` and storage client. ``filesystem_of`` gives the
file system of a path as Beam's, except that on s3:// and gs:// it is made
once per process and its calls go through that client: Beam's ``S3IO`` per
thread (``shared_s3io``: Beam's client keeps a download's state, boto3's own
client is shared), one ``GcsIO`` per process. The boto3 client bounds each
call in time and tries (``s3_read_client``); errors are otherwise unchanged.
The clients are keyed by process id and options, and dropped in a forked
child (``os.register_at_fork``), so a forked worker makes its own.

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
import os
import threading
from typing import BinaryIO, Iterator

from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, FileSystem
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, S3Options
from apache_beam.utils.retry import PermanentException

try:  # present with apache-beam[aws]
    import botocore.config
    import botocore.exceptions
    from apache_beam.io.aws.clients.s3 import boto3_client as _boto3_client
    from apache_beam.io.aws.clients.s3.messages import S3ClientError as _S3ClientError
    from apache_beam.io.aws.s3filesystem import S3FileSystem as _S3FileSystem
    from apache_beam.io.aws.s3io import S3Uploader as _S3Uploader
    _S3_ERRORS: tuple[type[Exception], ...] = (_S3ClientError,)
except ImportError:  # pragma: no cover - depends on the installed extras
    _S3Uploader = _boto3_client = _S3FileSystem = None
    _S3_ERRORS = ()
try:  # present with apache-beam[gcp]
    from apache_beam.io.gcp.gcsfilesystem import GCSFileSystem as _GCSFileSystem
except ImportError:  # pragma: no cover - depends on the installed extras
    _GCSFileSystem = None

__all__ = ["FileSystems", "FileSystem", "FileMetadata", "CompressionTypes", "BeamIOError", "set_options",
           "filesystem_options", "options_set", "store_client", "filesystem_of", "shared_s3io", "s3_boto3_client",
           "s3_read_client",
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
# This process's clients and file systems: (kind, pid, options key) -> client.
_process: dict[tuple, object] = {}
_process_lock = threading.RLock()


def _forget_in_child() -> None:
    """A forked child makes its own clients (a client's connections are the parent's)."""
    global _process_lock, _local
    _process.clear()
    _process_lock = threading.RLock()
    _local = threading.local()


os.register_at_fork(after_in_child=_forget_in_child)


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


def _options_key(scheme: str, options: PipelineOptions) -> tuple:
    """What a store's client is made from: the options it reads, by value."""
    if scheme == "s3":
        s3 = options.view_as(S3Options)
        return (s3.s3_endpoint_url, s3.s3_region_name, s3.s3_api_version, s3.s3_disable_ssl, s3.s3_verify,
                s3.s3_access_key_id, s3.s3_secret_access_key, s3.s3_session_token)
    gcp = options.view_as(GoogleCloudOptions)
    return (gcp.project, gcp.impersonate_service_account, gcp.job_name, os.environ.get("STORAGE_EMULATOR_HOST"))


def _per_process(kind: str, scheme: str, options: PipelineOptions | None, make):
    """The ``kind`` object of this process for ``options``' store settings, made by ``make(options)`` once."""
    options = options if options is not None else filesystem_options()
    key = (kind, os.getpid(), _options_key(scheme, options))
    with _process_lock:
        found = _process.get(key)
        if found is None:
            found = _process[key] = make(options)
        return found


def store_client(scheme: str, options: PipelineOptions | None = None):
    """The client of this worker process for a store, made once per process and store settings.

    Args:
        scheme: ``"s3"``: a boto3 S3 client, its calls bounded in time and
            tries (``S3_CONNECT_TIMEOUT_S``, ``S3_READ_TIMEOUT_S``,
            ``S3_READ_ATTEMPTS``), made as Beam's from ``S3Options``; ``"gs"``:
            the ``google.cloud.storage`` client Beam's GCS file system makes.
            Both may be used from any thread.
        options: The pipeline options; default: those Beam's file systems use
            (``filesystem_options``).

    Raises:
        RuntimeError: ``s3``, and apache-beam[aws] is not installed.
    """
    if scheme == "s3":
        return _per_process("client", "s3", options, _new_s3_client)
    if scheme == "gs":
        return _per_process("client", "gs", options, _new_gcs_client)
    raise ValueError(f"no client for {scheme}://")


def _new_s3_client(options: PipelineOptions):
    if _boto3_client is None or _boto3_client.boto3 is None:
        raise RuntimeError("reading s3:// needs apache-beam[aws] (boto3)")
    s3 = options.view_as(S3Options)
    config = botocore.config.Config(
        connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S,
        retries={"total_max_attempts": S3_READ_ATTEMPTS, "mode": "standard"})
    return _boto3_client.boto3.session.Session().client(
        service_name="s3", region_name=s3.s3_region_name, api_version=s3.s3_api_version,
        use_ssl=not s3.s3_disable_ssl, verify=s3.s3_verify, endpoint_url=s3.s3_endpoint_url,
        aws_access_key_id=s3.s3_access_key_id, aws_secret_access_key=s3.s3_secret_access_key,
        aws_session_token=s3.s3_session_token, config=config)


def _new_gcs_client(options: PipelineOptions):
    from apache_beam.io.gcp.gcsio import create_storage_client

    return create_storage_client(options)


def filesystem_of(path: str):
    """What to call for ``path``'s ``create``, ``open``, ``exists``, ``delete`` and ``rename``.

    On s3:// and gs://, Beam's file system made once per process on this
    process's client (its calls are Beam's: the same requests, results and
    errors, without a new client per call); elsewhere ``FileSystems``, whose
    calls take the same arguments.
    """
    scheme = path.split("://", 1)[0] if "://" in path else None
    if scheme == "s3" and _S3FileSystem is not None:
        return _per_process("filesystem", "s3", None, _SharedS3FileSystem)
    if scheme == "gs" and _GCSFileSystem is not None:
        return _per_process("filesystem", "gs", None, _SharedGCSFileSystem)
    return FileSystems


def shared_s3io():
    """Beam's S3IO for this thread, on this process's boto3 client; rebuilt when the options change.

    Its client bounds each call in time and tries (``s3_read_client``), so an
    unreachable endpoint makes an input unreadable instead of holding it for
    Beam's ten minutes of retries. One per thread: Beam's client wrapper keeps
    the state of a download.
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
    """Returns this process's boto3 S3 client for the current options (``store_client``).

    Beam's S3 file system has no conditional put (the output lock needs
    ``If-None-Match: *``), no listing by level and no bounded range read.
    """
    return store_client("s3")


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
    return _BoundedS3Client(store_client("s3", options))


if _boto3_client is not None:
    class _BoundedS3Client(_boto3_client.Client):
        """Beam's S3 client with bounded timeouts and tries (``s3_read_client``), on a shared boto3 client."""

        def __init__(self, client) -> None:  # pylint: disable=super-init-not-called
            self.client = client
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
            super().__init__(store_client("s3", options))

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


if _S3FileSystem is not None:
    class _SharedS3FileSystem(_S3FileSystem):
        """Beam's S3 file system whose calls the project makes use this thread's ``shared_s3io``.

        Beam 2.77's methods make ``s3io.S3IO(options=...)`` (a boto3 session
        and client) per call; these are the same bodies on the shared one.
        Its ``scheme`` is its own, so that ``FileSystems`` (which picks the
        subclass of ``FileSystem`` whose scheme is the path's) still finds
        Beam's for s3:// and not two.
        """

        @classmethod
        def scheme(cls):
            return "tfrecord-shards-s3"

        def _path_open(self, path, mode, mime_type="application/octet-stream",
                       compression_type=CompressionTypes.AUTO):
            from apache_beam.io.filesystem import CompressedFile

            compression_type = FileSystem._get_compression_type(path, compression_type)
            mime_type = CompressionTypes.mime_type(compression_type, mime_type)
            raw_file = shared_s3io().open(path, mode, mime_type=mime_type)
            if compression_type == CompressionTypes.UNCOMPRESSED:
                return raw_file
            return CompressedFile(raw_file, compression_type=compression_type)

        def exists(self, path):
            try:
                return shared_s3io().exists(path)
            except Exception as e:  # noqa: BLE001 - Beam wraps every error in BeamIOError here
                raise BeamIOError("exists() operation failed", {path: e}) from e

        def metadata(self, path):
            try:
                status = shared_s3io()._status(path)
            except Exception as e:  # noqa: BLE001 - as Beam's S3FileSystem.metadata
                raise BeamIOError("Metadata operation failed", {path: e}) from e
            return FileMetadata(path, status["size"], status["last_updated"])

        def rename(self, source_file_names, destination_file_names):
            if len(source_file_names) != len(destination_file_names):
                raise BeamIOError("Unable to rename unequal number of sources and destinations")
            results = shared_s3io().rename_files(list(zip(source_file_names, destination_file_names)))
            failed = {(src, dest): error for src, dest, error in results if error is not None}
            if failed:
                raise BeamIOError("Rename operation failed", failed)

        def delete(self, paths):
            results = shared_s3io().delete_paths(paths)
            failed = {path: error for path, error in results.items() if error is not None}
            if failed:
                raise BeamIOError("Delete operation failed", failed)


if _GCSFileSystem is not None:
    class _SharedGCSFileSystem(_GCSFileSystem):
        """Beam's GCS file system on one ``GcsIO`` of this process (Beam 2.77 makes one, and a client, per call).

        Its ``scheme`` is its own, as ``_SharedS3FileSystem``'s.
        """

        @classmethod
        def scheme(cls):
            return "tfrecord-shards-gs"

        def _gcsIO(self):
            from apache_beam.io.gcp.gcsio import GcsIO

            return _per_process("gcsio", "gs", self._pipeline_options,
                                lambda options: GcsIO(storage_client=store_client("gs", options),
                                                      pipeline_options=options))


def gcs_storage_client():
    """Returns this process's ``google.cloud.storage`` client for the current options (``store_client``).

    Beam's GCS file system has no create-if-absent (the output lock needs
    ``if_generation_match=0``), no listing by level and no bounded range read.
    """
    return store_client("gs")


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
