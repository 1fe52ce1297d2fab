"""Reliability: the build job SIGKILLed at moments spread over a run, then run again.

Every scenario starts from a folder holding an older shard set (train and
validation, 4 shards each) and runs the build job (train only, 4 shards: the
same names as the old train shards, other bytes) as a subprocess. The job is
killed with SIGKILL from outside:

- at known moments, by ``tests.pause_at``: the job stops before a chosen file
  operation (while writing shards to staging, and before each step of
  publishing, the renames done by the publish step itself or handed out to
  the parallel step ``MoveStaged``), the test checks the folder while
  nothing moves, and kills it;
- at fractions of a measured uninterrupted run, wherever the job then is.

Throughout, a watcher thread reads every ``manifest.json`` it sees and checks
each listed shard (present, listed size and sha256, ``.idx`` matching) against
the files present at that moment. After the kill the job runs again into the
same folder, and the folder must then be byte-identical to an uninterrupted
run into an empty folder, with nothing temporary left.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.reliability_support import assert_only_shard_set, folder_bytes, manifest_problems
from tests.shard_fixtures import make_class_tree, run_build

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# --drop_other_splits: the older set's validation split goes (else a run keeps other splits).
FLAGS = ["--num_shards", "4", "--max_bad_fraction", "0.2", "--seed", "9", "--drop_other_splits"]
# The older set: train shards under the same names with other bytes, and validation shards
# the new run does not have (stale, to be deleted).
OLD_FLAGS = ["--num_shards", "4", "--split_fractions", "train=0.5,validation=0.5",
             "--max_bad_fraction", "0.2", "--seed", "1"]
WAIT_S = 180.0  # bound on waiting for a subprocess to reach a moment
POLL_S = 0.01

# (id, FileSystems op, path pattern, nth match, the manifest present when stopped there
#  (the old set's, none, or the new one), new train shards in place, old validation shards left);
# the publish's journal is carried out by its commit step (finish_journal: 8 shard renames, fewer
# than PARALLEL_MOVES) except in the "handed_out" cases (move_chunk: in MoveStaged, a chunk a
# rename). The set's other files (dead letters first) follow the shards, manifest.json last; the
# old set's files are deleted once the new manifest is in place.
PAUSES = [
    ("staging_half_written", "create", r"/\.staging/", 5, "old", 0, 4),  # shard + .idx: 2 of 4 staged
    ("publish_remove_old_manifest", "delete", r"/manifest\.json$", 1, "old", 0, 4),
    ("publish_second_shard", "os.rename", r"/train-\d+-of-00004\.tfrecord$", 2, "none", 1, 4),
    ("handed_out_first_shard", "os.rename", r"/train-\d+-of-00004\.tfrecord$", 1, "none", 0, 4),
    ("handed_out_third_shard", "os.rename", r"/train-\d+-of-00004\.tfrecord$", 3, "none", 2, 4),
    ("publish_dead_letters", "rename", r"/dead_letters\.jsonl$", 1, "none", 4, 4),
    ("publish_manifest", "rename", r"/manifest\.json$", 1, "none", 4, 4),
    ("handed_out_delete_stale", "delete", r"/validation-", 1, "new", 4, 4),
    ("publish_delete_stale", "delete", r"/validation-", 1, "new", 4, 4),
    ("publish_clear_staging", "delete", r"/\.staging(/|$)", 1, "new", 4, 0),
]
FRACTIONS = [0.8]


class ManifestWatcher(threading.Thread):
    """Checks every manifest.json seen in a folder against the files present at that moment.

    A problem counts only if the manifest stayed in place (same inode and
    change time) while its shards were checked; a manifest removed or
    replaced in the meantime no longer speaks for the folder.
    """

    def __init__(self, folder: str) -> None:
        super().__init__(daemon=True)
        self._folder = folder
        self._done = threading.Event()
        self.manifests: set[str] = set()
        self.checks = 0
        self.problems: list[str] = []

    def _stamp(self, path: str):
        stat = os.stat(path)
        return stat.st_ino, stat.st_ctime_ns, stat.st_size

    def check_once(self) -> None:
        path = os.path.join(self._folder, "manifest.json")
        try:
            before = self._stamp(path)
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return
        try:
            problems = manifest_problems(self._folder, data)
        except (ValueError, KeyError) as err:  # not a whole manifest
            problems = [f"manifest.json unreadable: {err}"]
        try:
            stayed = self._stamp(path) == before
        except FileNotFoundError:
            stayed = False
        if stayed:
            self.checks += 1
            self.manifests.add(hashlib.sha256(data).hexdigest())
            self.problems += problems

    def run(self) -> None:
        while not self._done.is_set():
            self.check_once()
            self._done.wait(POLL_S)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=30)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The input tree, an uninterrupted run's output (the reference) and an older shard set."""
    base = tmp_path_factory.mktemp("kill")
    tree = str(base / "in")
    make_class_tree(tree, per_class=8)
    reference, old = str(base / "reference"), str(base / "old")
    from beam_jobs import build_shards

    assert build_shards.run(["--input", tree, "--output_dir", reference, *FLAGS]) == 0
    assert build_shards.run(["--input", tree, "--output_dir", old, *OLD_FLAGS]) == 0
    return tree, reference, old


def _start(argv: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "wb") as fh:
        return subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def _log_tail(log: str) -> str:
    with open(log, "rb") as fh:
        return fh.read()[-3000:].decode(errors="replace")


def _wait_for(path: str, proc: subprocess.Popen, log: str) -> dict:
    """Waits (bounded) until the paused job has written its marker."""
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(path):
        if proc.poll() is not None:
            pytest.fail(f"the job ended ({proc.returncode}) before the moment was reached:\n{_log_tail(log)}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the job did not reach the moment in {WAIT_S:.0f} s:\n{_log_tail(log)}")
        try:
            proc.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            pass
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _kill(proc: subprocess.Popen) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def _manifest_state(out: str, old: str, reference: str) -> str:
    path = os.path.join(out, "manifest.json")
    if not os.path.exists(path):
        return "none"
    data = open(path, "rb").read()
    assert manifest_problems(out, data) == []
    if data == open(os.path.join(old, "manifest.json"), "rb").read():
        return "old"
    assert data == open(os.path.join(reference, "manifest.json"), "rb").read()
    return "new"


def _shards_in_place(out: str, reference: str) -> tuple[int, int]:
    """(train shards holding the new run's bytes, validation shards of the old set left)."""
    new = sum(1 for n in os.listdir(reference) if n.endswith(".tfrecord")
              and os.path.exists(os.path.join(out, n))
              and open(os.path.join(out, n), "rb").read() == open(os.path.join(reference, n), "rb").read())
    return new, sum(1 for n in os.listdir(out) if n.startswith("validation-") and n.endswith(".tfrecord"))


def _rerun_and_compare(capsys, tree: str, out: str, reference: str, watcher: ManifestWatcher) -> None:
    status, _, err = run_build(capsys, "--input", tree, "--output_dir", out, *FLAGS)
    watcher.stop()
    assert status == 0, err
    assert watcher.problems == [], watcher.problems
    assert watcher.checks > 0  # the watcher did look at manifests
    assert_only_shard_set(out)  # no .staging, no temporary file
    assert folder_bytes(out) == folder_bytes(reference)


@pytest.mark.slow
@pytest.mark.parametrize("name, op, pattern, nth, manifest, new, old_left", PAUSES, ids=[p[0] for p in PAUSES])
def test_killed_at_a_known_moment_then_rerun(inputs, tmp_path, capsys, name, op, pattern, nth, manifest,
                                             new, old_left) -> None:
    tree, reference, old = inputs
    out = str(tmp_path / "out")
    shutil.copytree(old, out)
    watcher = ManifestWatcher(out)
    watcher.start()
    marker, log = str(tmp_path / "stopped.json"), str(tmp_path / "job.log")
    handed_out = name.startswith("handed_out_")
    proc = _start(["-m", "tests.pause_at", op, pattern, str(nth), marker, "--",
                   "--input", tree, "--output_dir", out, *FLAGS], log,
                  env={"PAUSE_AT_MOVE_CHUNK": "1"} if handed_out else None)
    try:
        stopped = _wait_for(marker, proc, log)
        assert stopped["op"] == op and stopped["pid"] == proc.pid
        if op == "os.rename":  # stopped in the step that was meant to rename
            assert ("move_chunk" if handed_out else "finish_journal") in stopped["stack"], stopped["stack"]
        if name == "handed_out_delete_stale":
            assert "commit_publish" in stopped["stack"], stopped["stack"]
        watcher.check_once()
        assert _manifest_state(out, old, reference) == manifest, name
        assert _shards_in_place(out, reference) == (new, old_left)
    finally:
        if proc.poll() is None:
            _kill(proc)
    assert _manifest_state(out, old, reference) == manifest  # the kill changed nothing
    _rerun_and_compare(capsys, tree, out, reference, watcher)


@pytest.fixture(scope="module")
def full_run_seconds(inputs, tmp_path_factory) -> float:
    """How long an uninterrupted run of the job takes as a subprocess."""
    tree, reference, _ = inputs
    out = str(tmp_path_factory.mktemp("timed") / "out")
    log = out + ".log"
    started = time.monotonic()
    proc = _start(["-m", "beam_jobs.build_shards", "--input", tree, "--output_dir", out, *FLAGS], log)
    assert proc.wait(timeout=WAIT_S) == 0, _log_tail(log)
    seconds = time.monotonic() - started
    assert folder_bytes(out) == folder_bytes(reference)
    return seconds


@pytest.mark.slow
@pytest.mark.parametrize("fraction", FRACTIONS)
def test_killed_at_a_fraction_of_a_run_then_rerun(inputs, full_run_seconds, tmp_path, capsys, fraction) -> None:
    tree, reference, old = inputs
    out = str(tmp_path / "out")
    shutil.copytree(old, out)
    watcher = ManifestWatcher(out)
    watcher.start()
    log = str(tmp_path / "job.log")
    proc = _start(["-m", "beam_jobs.build_shards", "--input", tree, "--output_dir", out, *FLAGS], log)
    try:
        proc.wait(timeout=fraction * full_run_seconds)  # returns early only if the job ends first
    except subprocess.TimeoutExpired:
        _kill(proc)
    else:
        assert proc.returncode == 0, _log_tail(log)
    _manifest_state(out, old, reference)  # whichever manifest is there matches the files
    _rerun_and_compare(capsys, tree, out, reference, watcher)
