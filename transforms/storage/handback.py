"""What a job's workers hand back to the launcher (a plan's tally, verify's report), through storage.

Workers may run on other machines: it goes to a folder of the run's own under ``--temp_location``,
else in ``OUTPUT/.staging``. A missing file is an error, never read as empty.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from transforms.errors import ShardsError, UsageError
from transforms.shardset.naming import join_path
from transforms.storage.files import STORAGE_ERRORS, error_reason, read_if_present
from transforms.storage.folders import delete_tree
from transforms.storage.output_folder import staging_folder
from transforms.storage.paths import is_local
from transforms.storage.writing import check_writable

__all__ = ["HandBack", "handback_folder", "check_handback", "read_handed_back", "remove_handback"]

@dataclass(frozen=True)
class HandBack:
    """A run's folder for what its workers hand back (``created``: the highest local folder that holding
    it creates, removed with it; None on object stores, or when every folder above existed)."""

    folder: str
    created: str | None = None

    def path(self, name: str) -> str:
        """A file of the folder."""
        return join_path(self.folder, name)


def _first_missing(folder: str) -> str | None:
    path = os.path.abspath(folder)
    missing = None
    while not os.path.exists(path):
        missing, parent = path, os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def handback_folder(output_dir: str | None, temp_location: str | None, job: str) -> HandBack:
    """A new folder of this run under ``temp_location``, else in ``output_dir``'s staging (``ShardsError``: neither)."""
    root = temp_location or (staging_folder(output_dir) if output_dir else None)
    if root is None:
        raise ShardsError(f"{job} has nowhere its workers can hand back what they found: give "
                          "--temp_location (a folder on storage every worker reaches)")
    folder = join_path(root, f"{job}-{uuid.uuid4().hex}")
    return HandBack(folder, _first_missing(folder) if is_local(folder) else None)


def check_handback(handback: HandBack, job: str) -> None:
    """Writes and deletes a probe in the folder before the pipeline runs (``UsageError``: it cannot be written)."""
    probe = handback.path("probe")
    try:
        check_writable(probe)
    except STORAGE_ERRORS as err:
        raise UsageError(f"{job} cannot write {probe}, where its workers hand back what they found: "
                         f"{error_reason(err)}; give --temp_location (a folder every worker can write)") from err
    finally:
        remove_handback(handback)


def read_handed_back(path: str, what: str) -> bytes:
    """The bytes of a file the workers wrote (``ShardsError``: it is not there)."""
    data = read_if_present(path)
    if data is None:
        raise ShardsError(f"the {what} the workers write is missing: {path} (a worker that cannot "
                          "write there, or a runner whose workers did not run the job's last step)")
    return data


def remove_handback(handback: HandBack) -> None:
    """Deletes the folder and, on local disk, the empty folders above it that the run created."""
    delete_tree(handback.folder)
    if handback.created is None:
        return
    path = os.path.dirname(os.path.abspath(handback.folder))
    created = os.path.abspath(handback.created)
    while path == created or path.startswith(created.rstrip(os.sep) + os.sep):
        try:
            os.rmdir(path)
        except OSError:
            return
        path = os.path.dirname(path)
