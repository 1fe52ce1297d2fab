"""Writing files on local disk, gs:// and s3:// alike: created whole, written atomically, created exclusively.

Every file is closed so that an empty one is stored too (``close_written_file``). A write that
runs out of space fails with one line naming the folder, what the run needs and what was free
(``reporting_full_disk``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from typing import BinaryIO, Iterable, Iterator

from transforms.errors import PublishError
from transforms.filesystems import CompressionTypes, close_written_file, filesystem_of, naming_s3_errors, store_client
from transforms.shardset.naming import join_path
from transforms.shardset.planning import MIB
from transforms.storage.files import exists
from transforms.storage.folders import delete_files, rename_files
from transforms.storage.paths import STORES, bucket_key, is_local

__all__ = ["create", "written", "write_file", "put_object", "write_atomic", "FREE_SOME_SPACE", "shards_need",
           "is_no_space", "free_bytes", "reporting_full_disk", "create_exclusive",
           "create_exclusive_s3", "check_writable"]

# What a disk-full message asks for when the space a write needs is not known.
FREE_SOME_SPACE = "free some space"
# How a disk-full message starts (``reporting_full_disk``).
_NO_SPACE = "no space left in "


def create(path: str) -> BinaryIO:
    """Creates (or replaces) ``path`` for writing bytes as they are; close it with ``close_written_file``."""
    return filesystem_of(path).create(path, compression_type=CompressionTypes.UNCOMPRESSED)


@contextlib.contextmanager
def written(path: str) -> Iterator[BinaryIO]:
    """``path`` created for the block and closed when it ends (an empty file too); S3's errors name it."""
    with naming_s3_errors(path):
        fh = create(path)
        try:
            yield fh
        finally:
            close_written_file(fh)


def write_file(path: str, data: bytes | Iterable[bytes]) -> None:
    """Writes ``path`` whole: the bytes (one request on a store), or pieces streamed one after the other."""
    if isinstance(data, bytes) and path.startswith(STORES):
        put_object(path, data)
        return
    with written(path) as fh:
        for piece in [data] if isinstance(data, bytes) else data:
            fh.write(piece)


def free_bytes(folder: str) -> int | None:
    """Free bytes where ``folder`` lies (local disk), else None."""
    if not is_local(folder):
        return None
    path = os.path.abspath(folder)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def shards_need(needed: int | None) -> str:
    """What a disk-full message asks for: the space of the run's shards, if known."""
    return f"this run's shards need about {needed / MIB:.1f} MiB" if needed else FREE_SOME_SPACE


def is_no_space(message: str) -> bool:
    """True for a failure's line that ``reporting_full_disk`` wrote."""
    return message.startswith(_NO_SPACE)


@contextlib.contextmanager
def reporting_full_disk(folder: str, path: str, need: str = FREE_SOME_SPACE) -> Iterator[None]:
    """Raises a full disk (``ENOSPC``) as a one-line ``PublishError``: the folder, what the run needs, what is free."""
    try:
        yield
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        free = free_bytes(folder)
        have = f"; {free / MIB:.1f} MiB were free when writing failed" if free is not None else ""
        raise PublishError(f"{_NO_SPACE}{folder} writing {path}: {need}{have}") from err


def put_object(path: str, data: bytes) -> None:
    """Writes an s3:// or gs:// object whole in one request (``OSError`` naming the store's answer)."""
    bucket, key = bucket_key(path)
    if path.startswith("s3://"):
        import botocore.exceptions

        try:
            store_client("s3").put_object(Bucket=bucket, Key=key, Body=data)
        except botocore.exceptions.ClientError as err:
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            raise OSError(errno.EACCES if status == 403 else errno.EIO,
                          f"S3 answered {status} to PutObject: {err}", path) from err
        except botocore.exceptions.BotoCoreError as err:
            raise OSError(errno.EIO, f"S3 gave no answer to PutObject ({type(err).__name__}: {err})",
                          path) from err
        return
    from google.api_core import exceptions

    try:
        store_client("gs").bucket(bucket).blob(key).upload_from_string(data)
    except exceptions.GoogleAPICallError as err:
        raise OSError(errno.EACCES if err.code == 403 else errno.EIO, f"GCS answered {err.code}: {err}",
                      path) from err


def write_atomic(path: str, data: bytes | Iterable[bytes], staging: str) -> None:
    """Writes ``path`` through a temporary file in ``staging`` (a crash leaves it there, not beside the shards)
    and a rename; bytes on a store in one request (all or nothing). ``PublishError``: the disk is full."""
    if isinstance(data, bytes) and path.startswith(STORES):
        put_object(path, data)
        return
    temp = join_path(staging, f"{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex}.tmp")
    need = shards_need(len(data) if isinstance(data, bytes) else None)
    with reporting_full_disk(path.rsplit("/", 1)[0], temp, need):
        write_file(temp, data)
    rename_files([(temp, path)])


def check_writable(probe: str) -> None:
    """Creates ``probe``, writes a line to it and deletes it (``OSError``, ``BeamIOError``: refused)."""
    with written(probe) as fh:
        fh.write(b"probe\n")
    with naming_s3_errors(probe):
        delete_files([probe])


def create_exclusive(path: str, data: bytes) -> bool:
    """Creates ``path`` holding ``data`` unless it exists; True if this call created it (``O_EXCL``, or a
    conditional put after an existence check: some stores ignore the condition)."""
    if is_local(path):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return True
    if exists(path):
        return False
    if path.startswith("s3://"):
        return create_exclusive_s3(path, data)
    if path.startswith("gs://"):
        return _create_exclusive_gcs(path, data)
    write_file(path, data)  # any other store: existence checked above
    return True


def create_exclusive_s3(path: str, data: bytes) -> bool:
    """Puts an s3:// object with ``If-None-Match: *``; True if this call created it."""
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = bucket_key(path)
    client = store_client("s3")
    try:
        client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
    except BotoCoreError as err:  # no HTTP answer, after the client's tries
        raise OSError(errno.EIO, f"S3 gave no answer creating the lock ({type(err).__name__}: {err})",
                      path) from err
    except ClientError as err:
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status in (409, 412):  # 409: a concurrent conditional write won
            return False
        if status == 501:  # the store has no conditional put: existence was checked
            client.put_object(Bucket=bucket, Key=key, Body=data)
            return True
        raise OSError(f"S3 answered {status} creating the lock: {err}", path) from err
    return True


def _create_exclusive_gcs(path: str, data: bytes) -> bool:
    from google.api_core.exceptions import PreconditionFailed

    bucket, key = bucket_key(path)
    try:
        store_client("gs").bucket(bucket).blob(key).upload_from_string(data, if_generation_match=0)
    except PreconditionFailed:
        return False
    return True
