"""Everything the storage package takes from Beam: its file systems, their S3 and GCS clients.

``transforms/storage/`` imports nothing of Beam itself; the functions here work around gaps in
Beam's file system API, each naming what of Beam it touches (apache-beam 2.77.0). Every storage
call uses one client per worker process (``store_client``), and every S3 client Beam makes is
bounded in time and tries (``S3NoAnswerError``): docs/runners.md, "S3", says why and what it costs.
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
    _S3_CLIENT_ERRORS: tuple[type[Exception], ...] = (botocore.exceptions.ClientError,
                                                      botocore.exceptions.BotoCoreError)
except ImportError:  # pragma: no cover - depends on the installed extras
    _S3Uploader = _boto3_client = _S3FileSystem = None
    _S3_ERRORS = _S3_CLIENT_ERRORS = ()
try:  # present with apache-beam[gcp]
    from apache_beam.io.gcp.gcsfilesystem import GCSFileSystem as _GCSFileSystem
    from google.api_core.exceptions import GoogleAPICallError
    _GCS_CLIENT_ERRORS: tuple[type[Exception], ...] = (GoogleAPICallError,)
except ImportError:  # pragma: no cover - depends on the installed extras
    _GCSFileSystem = None
    _GCS_CLIENT_ERRORS = ()

__all__ = ["FileSystems", "FileSystem", "FileMetadata", "CompressionTypes", "BeamIOError", "set_options",
           "options_set", "store_client", "filesystem_of", "shared_s3io", "S3NoAnswerError", "STORE_CLIENT_ERRORS",
           "close_written_file", "unbuffered", "naming_s3_errors", "S3_CONNECT_TIMEOUT_S", "S3_READ_TIMEOUT_S",
           "S3_READ_ATTEMPTS"]

# Bounds on each S3 call: seconds to connect, seconds to wait for bytes, tries in all (botocore's
# "standard" retries): about 4 minutes when every try times out, seconds when refused.
S3_CONNECT_TIMEOUT_S = 10
S3_READ_TIMEOUT_S = 60
S3_READ_ATTEMPTS = 3
# What the store clients raise when a call is refused or unanswered (as installed).
STORE_CLIENT_ERRORS = _S3_CLIENT_ERRORS + _GCS_CLIENT_ERRORS

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
    """Makes Beam's file systems use ``options`` at once, as ``beam.Pipeline`` does when built."""
    FileSystems.set_options(options)


def options_set() -> PipelineOptions | None:
    """The options Beam's file systems were given in this process, or None (a bare SDK harness).

    Beam keeps them in the private ``FileSystems._pipeline_options`` (Beam 2.77.0), no getter.
    """
    return getattr(FileSystems, "_pipeline_options", None)


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
    options = options if options is not None else options_set() or PipelineOptions([])
    key = (kind, os.getpid(), _options_key(scheme, options))
    with _process_lock:
        found = _process.get(key)
        if found is None:
            found = _process[key] = make(options)
        return found


def store_client(scheme: str, options: PipelineOptions | None = None):
    """The client of this worker process for a store, made once per process and store settings.

    Args:
        scheme: ``"s3"``: a boto3 S3 client, made as Beam's from ``S3Options``, its calls bounded;
            ``"gs"``: the ``google.cloud.storage`` client Beam's GCS file system makes. Both may be
            used from any thread.
        options: The pipeline options; default: those Beam's file systems use.

    Raises:
        RuntimeError: ``s3``, and apache-beam[aws] is not installed.
    """
    if scheme not in ("s3", "gs"):
        raise ValueError(f"no client for {scheme}://")
    return _per_process("client", scheme, options, _new_s3_client if scheme == "s3" else _new_gcs_client)


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

    On s3:// and gs://, Beam's file system made once per process on this process's client (the
    same requests, results and errors); elsewhere ``FileSystems``, whose calls take the same arguments.
    """
    scheme = path.split("://", 1)[0] if "://" in path else None
    if scheme == "s3" and _S3FileSystem is not None:
        return _per_process("filesystem", "s3", None, _SharedS3FileSystem)
    if scheme == "gs" and _GCSFileSystem is not None:
        return _per_process("filesystem", "gs", None, _SharedGCSFileSystem)
    return FileSystems


def shared_s3io():
    """Beam's S3IO for this thread (its client keeps a download's state) on this process's client,
    its calls bounded in time and tries (``_BoundedS3Client``), rebuilt when the options change."""
    from apache_beam.io.aws import s3io

    options = options_set() or PipelineOptions([])
    cached = getattr(_local, "s3io", None)
    if cached is None or cached[0] is not options:
        cached = (options, s3io.S3IO(client=_BoundedS3Client(store_client("s3", options))))
        _local.s3io = cached
    return cached[1]


class S3NoAnswerError(OSError, PermanentException):
    """An S3 call that got no HTTP answer in ``S3_READ_ATTEMPTS`` tries: Beam's retry decorators do not retry it."""


if _boto3_client is not None:
    class _BoundedS3Client(_boto3_client.Client):
        """Beam's S3 client with bounded timeouts and tries, on a shared boto3 client.

        Beam 2.77's ``S3Downloader._get_object_metadata`` retries an error without an HTTP status 7
        more times; reads of object bytes keep Beam's retries, each try bounded by the same timeouts.
        Sets the attributes Beam's ``Client.__init__`` sets (Beam 2.77.0).
        """

        def __init__(self, client) -> None:  # pylint: disable=super-init-not-called
            self.client = client
            self._download_request = None
            self._download_stream = None
            self._download_pos = 0

    def _bounded(name: str):
        """Beam's ``Client.<name>(request)``, a call that got no HTTP answer raised as ``S3NoAnswerError``."""
        def call(self, request):
            with _no_answer_is_permanent(request):
                return getattr(super(_BoundedS3Client, self), name)(request)
        call.__name__ = name
        return call

    for _name in ("get_object_metadata", "list", "create_multipart_upload", "upload_part",
                  "complete_multipart_upload", "delete", "delete_batch", "copy"):
        setattr(_BoundedS3Client, _name, _bounded(_name))

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

    # Every client Beam's ``S3IO`` makes for itself is bounded (Beam 2.77.0: ``S3IO.__init__``
    # calls ``boto3_client.Client(options=...)``).
    _boto3_client.Client = _BoundedBeamS3Client


if _S3FileSystem is not None:
    class _SharedS3FileSystem(_S3FileSystem):
        """Beam 2.77's S3 file system's method bodies on this thread's ``shared_s3io``, not one per call.

        Its ``scheme`` is its own, so that ``FileSystems`` (which picks a ``FileSystem`` subclass
        by scheme) still finds Beam's alone for s3://.
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


def close_written_file(fh: BinaryIO) -> None:
    """Closes a file made by ``FileSystems.create``, also when nothing was written to it.

    Beam's S3 writer completes an upload without a part when no byte was written, which S3
    refuses with MalformedXML (apache/beam#21369): an empty file gets one empty part instead.
    Touches the writer's private ``_uploader`` and ``S3Uploader._write_to_s3`` (Beam 2.77.0).
    """
    uploader = getattr(getattr(fh, "raw", None), "_uploader", None)
    if (_S3Uploader is not None and isinstance(uploader, _S3Uploader) and fh.tell() == 0
            and not uploader.parts):
        uploader._write_to_s3(b"")
    fh.close()


def unbuffered(fh: BinaryIO) -> BinaryIO:
    """The stream below the 16 MiB read buffer of a file Beam's gs:// or s3:// file system opened.

    Reading it fetches what is asked for; any other file object is returned as it is (Beam 2.77.0).
    """
    raw = getattr(fh, "raw", None)
    return raw if raw is not None and hasattr(raw, "readinto") and hasattr(raw, "seek") else fh


@contextlib.contextmanager
def naming_s3_errors(path: str) -> Iterator[None]:
    """Raises Beam's S3 client errors inside the block as ``OSError``s naming ``path``.

    Beam raises ``S3ClientError`` (not an ``OSError``, not naming the object) for a refused read
    or upload: reads then become dead letters like unreadable local files.
    """
    try:
        yield
    except _S3_ERRORS as err:  # as the OSError a local read would raise
        code, why = getattr(err, "code", None), getattr(err, "message", err)
        if code is None:
            raise OSError(errno.EIO, f"S3 gave no answer: {why}", path) from err
        raise OSError(_ERRNO.get(code, errno.EIO), f"S3 answered {code}: {why}", path) from err
