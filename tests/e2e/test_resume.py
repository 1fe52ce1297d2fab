"""Resume: a build killed (SIGKILL) or interrupted (Ctrl-C), then run again with the same flags.

The job runs as a subprocess and is stopped at a known moment by
``tests.pause_at`` (before a chosen file operation), then killed; the rerun
runs in this process. Every rerun must publish a folder byte-identical to an
uninterrupted build of the same inputs into another folder, leave nothing
temporary, and say in its summary how much it reused: the inputs the done
lists of the killed run name and the finished shards it staged. A rerun with
other flags reuses nothing, and an input changed between the runs is read
again. Unit tests of ``shardset.resume`` (the done lists, fingerprints,
done shard records) come first.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc

import pytest

from beam_jobs.cli.harness import KEPT_LINE
from tests.helpers import sigint_as_in_a_terminal
from tests.reliability_support import assert_only_shard_set, folder_bytes
from tests.shard_fixtures import run_build
from tests.trees import Part
from transforms.images.image_codec import ImageInfo
from transforms.images.items import ImageMeta, SourceImage
from transforms.shardset.resume import (DONE_PIECE_BYTES, DoneLines, RunMarker, ShardDone, changed_flags, context_key,
                                        done_list_header, done_list_line,
                                        fingerprint, parse_done_list, shard_content_key, source_key)
from transforms.storage.resume_files import write_done_list
from tests.helpers import done_list
from transforms.tfrecord.run_files import RunSlice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLAGS = ["--num_shards", "4", "--max_bad_fraction", "0.2", "--seed", "9"]
TWO_WORKERS = ["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"]  # two bundles
WAIT_S = 180.0
STAGED_SHARD = r"/train-\d+-of-00004\.tfrecord\.[0-9a-f]{32}\.tmp$"
DONE_LIST = r"\.run\.done$"
KEPT = "build_shards: " + KEPT_LINE
RESUMED = re.compile(r"^  resumed: reused ([\d,]+) of ([\d,]+) inputs \(\d+ MiB\) and (\d+) finished shards? "
                     r"from the interrupted run ([0-9a-f]{32})$", re.M)


# --- shardset.resume, pure -------------------------------------------------------------------


def _meta(path: str = "/in/rose/a.jpg", split: str = "train", extra=()) -> ImageMeta:
    return ImageMeta(SourceImage(path, "rose/a.jpg", split, "rose"), 1, "ab" * 32,
                     ImageInfo("jpeg", 10, 20, 3, "", True, ""), 1234, -(1 << 62) + 7, extra,
                     RunSlice("/out/.staging/r/runs/f.run", 100, 1234))


def test_a_bundle_holds_its_done_list_compressed_and_writes_the_same_bytes() -> None:
    entries = [(f"key{i}", (1000 + i, 5, 6), _meta(path=f"/in/rose/{i:05d}.jpg")) for i in range(2_000)]
    held = DoneLines()
    for key, stamp, meta in entries:
        held.append(done_list_line(key, stamp, meta))
    expected = list(done_list("f.run", 5000, "ctx", entries))
    assert held.count == 2_000 and expected[0] == done_list_header("f.run", 5000, "ctx")
    assert sum(len(c) for c in held._chunks) * 5 < sum(len(line) for line in expected)  # small while held
    assert b"".join(held.pieces()) == b"".join(expected[1:])


def test_a_done_list_is_written_in_pieces_never_joined(tmp_path) -> None:
    # 20,000 lines (~8 MiB): the bundle holds them compressed and writes them a piece at a time, so
    # writing holds about one piece, not the whole list twice (joined, then joined with its header).
    entries = [(f"key{i}", (1000 + i, 5, 6), _meta(path=f"/in/rose/{i:05d}.jpg")) for i in range(20_000)]
    held = DoneLines()
    for key, stamp, meta in entries:
        held.append(done_list_line(key, stamp, meta))
    expected = b"".join(done_list("f.run", 5000, "ctx", entries))
    run = str(tmp_path / "f.run")
    tracemalloc.start()
    try:
        write_done_list(run, itertools.chain([done_list_header("f.run", 5000, "ctx")], held.pieces()))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    with open(run + ".done", "rb") as fh:
        assert fh.read() == expected
    assert len(expected) > 6 * 2**20 and peak < 3 * DONE_PIECE_BYTES


def test_done_lines_come_back_in_bounded_pieces_holding_every_line() -> None:
    held = DoneLines()
    lines = [done_list_line(f"key{i}", (i, 5, 6), _meta(path=f"/in/rose/{i:05d}.jpg")) for i in range(8_000)]
    for line in lines:
        held.append(line)
    pieces = list(held.pieces(piece_bytes=64 * 1024))
    assert len(pieces) > 10 and max(len(p) for p in pieces) <= 64 * 1024
    assert b"".join(pieces) == b"".join(lines)


def test_a_done_list_round_trips_and_matches_only_the_same_input_stamp_and_context() -> None:
    source = SourceImage("/in/rose/a.jpg", "rose/a.jpg", "", "rose")  # split by content: chosen when read
    meta = _meta(extra=(("weight", "float", (0.1, 1e-300)), ("caption", "bytes", (b"\x00\xff",))))
    context = context_key(["daisy", "rose"], None)
    lines = list(done_list("f.run", 5000, context, [(source_key(source), (1234, 5, 6), meta)]))
    [entry] = parse_done_list(iter(lines), "/elsewhere/runs", 5000)
    assert entry.meta.extra == meta.extra and entry.meta.run == RunSlice("/elsewhere/runs/f.run", 100, 1234)
    assert entry.for_source(source) == ImageMeta(**{**meta.__dict__, "source": SourceImage(
        "/in/rose/a.jpg", "rose/a.jpg", "train", "rose"), "run": entry.meta.run})
    assert entry.matches(source, (1234, 5, 6), context)
    assert not entry.matches(source, (1234, 7, 6), context)  # modified since: mtime
    assert not entry.matches(source, (1234, 5, 8), context)  # or inode (replaced by another file)
    assert not entry.matches(source, None, context)  # cannot be stated now
    assert not entry.matches(source, (1234, 5, 6), context_key(["rose"], None))  # other class list
    relabelled = SourceImage("/in/rose/a.jpg", "rose/a.jpg", "", "daisy")
    assert not entry.matches(relabelled, (1234, 5, 6), context)  # the listing says otherwise now
    # A run file of another size (damaged, or not this one), or none: nothing is reused from it.
    assert list(parse_done_list(iter(lines), "/r", 4999)) == []
    assert list(parse_done_list(iter(lines), "/r", None)) == []
    # A list cut short keeps the whole lines before the cut.
    two = list(done_list("f.run", 5000, context, [(source_key(source), (1, 2, 3), meta)] * 2))
    cut = two[:2] + [two[2][:-5]]
    assert len(list(parse_done_list(iter(cut), "/r", 5000))) == 1


def test_the_fingerprint_covers_the_flags_that_change_output_and_not_max_bad_fraction() -> None:
    options = {"input": ["a", "b"], "jpeg_quality": 95, "num_shards": None, "max_bad_fraction": 0.01}
    same = fingerprint(options, "0.1.0")
    assert fingerprint({**options, "max_bad_fraction": 0.5}, "0.1.0") == same
    assert fingerprint({**options, "jpeg_quality": 80}, "0.1.0") != same
    assert fingerprint({**options, "input": ["b", "a"]}, "0.1.0") != same
    assert fingerprint(options, "0.2.0") != same
    assert changed_flags(options, {**options, "jpeg_quality": 80, "max_bad_fraction": 0.3}) == [
        "--jpeg_quality 95 -> 80"]
    marker = RunMarker("f" * 32, same, options)
    assert RunMarker.loads(marker.dumps()) == marker


def test_a_shard_content_key_ignores_where_records_lie_and_a_done_shard_round_trips() -> None:
    a, b = _meta("/in/a.jpg"), _meta("/in/b.jpg")
    b = ImageMeta(**{**b.__dict__, "source": SourceImage("/in/b.jpg", "rose/b.jpg", "train", "rose"),
                     "sha256": "cd" * 32})
    key = shard_content_key(("train", 0, 4), "none", [a, b])
    # Where an input lies does not enter its record; its name, label or bytes do.
    elsewhere = ImageMeta(**{**a.__dict__, "source": SourceImage("/copy/a.jpg", "rose/a.jpg", "train", "rose")})
    assert shard_content_key(("train", 0, 4), "none", [elsewhere, b]) == key
    for changed in ({"label_index": 2}, {"sha256": "ee" * 32}, {"extra": (("w", "float", (0.5,)),)},
                    {"source": SourceImage("/in/a.jpg", "rose/a2.jpg", "train", "rose")}):
        assert shard_content_key(("train", 0, 4), "none", [ImageMeta(**{**a.__dict__, **changed}), b]) != key
    moved = ImageMeta(**{**a.__dict__, "run": RunSlice("/other.run", 0, 1234)})
    assert shard_content_key(("train", 0, 4), "none", [moved, b]) == key
    assert shard_content_key(("train", 0, 4), "none", [b, a]) != key
    assert shard_content_key(("train", 0, 4), "gzip", [a, b]) != key
    assert shard_content_key(("train", 1, 4), "none", [a, b]) != key
    done = ShardDone("train-00000-of-00004.tfrecord", "/o/.staging/r/s.tmp", "/o/.staging/r/i.tmp",
                     2, 2500, None, "4waSgw==", "AAAAAA==", content=key, key=("train", 0, 4), label_counts={"1": 2})
    assert ShardDone.loads(done.dumps(), "/o/.staging/r") == done


def test_an_input_stamp_is_local_size_mtime_and_inode_and_none_on_a_store(tmp_path) -> None:
    from transforms.storage.resume_files import input_stamp

    path = tmp_path / "a.jpg"
    path.write_bytes(b"12345")
    found = os.stat(path)
    assert input_stamp(str(path)) == (5, found.st_mtime_ns, found.st_ino)
    assert input_stamp(str(tmp_path / "gone.jpg")) is None
    assert input_stamp("gs://bucket/a.jpg") is None and input_stamp("s3://bucket/a.jpg") is None  # no request


# --- the real job, killed and run again --------------------------------------------------------


# The inputs (3 classes of 8 images and 3 broken files) and an uninterrupted build's folder (tests/trees.py).
TREE = (Part(per_class=8, broken=True),)
BUILD = tuple(FLAGS)


def _log_tail(log: str) -> str:
    with open(log, "rb") as fh:
        return fh.read()[-3000:].decode(errors="replace")


def _done_lists(out: str) -> list[str]:
    return glob.glob(os.path.join(out, ".staging", "*", "runs", "*.run.done"))


def _stopped_at(tmp_path, op: str, pattern: str, nth: int, argv: list[str], sig: int = signal.SIGKILL,
                until=None, env: dict[str, str] | None = None) -> dict:
    """Runs the build as a subprocess until it stops before the ``nth`` ``op`` on ``pattern``,
    then, once ``until()`` holds (other threads may still finish what they do), sends ``sig``
    (SIGINT: lets it go on, as a Ctrl-C there would); returns the marker. ``env``: more
    environment (``tests.pause_at``'s knobs)."""
    marker, log = str(tmp_path / "stopped.json"), str(tmp_path / "job.log")
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "tests.pause_at", op, pattern, str(nth), marker, "--",
                                 *argv], cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, preexec_fn=sigint_as_in_a_terminal)
    try:
        deadline = time.monotonic() + WAIT_S
        while not os.path.exists(marker):
            if proc.poll() is not None:
                pytest.fail(f"the job ended ({proc.returncode}) before the moment:\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(f"the job did not reach the moment in {WAIT_S:.0f} s:\n{_log_tail(log)}")
            try:
                proc.wait(timeout=0.01)
            except subprocess.TimeoutExpired:
                pass
        with open(marker, encoding="utf-8") as fh:
            stopped = json.load(fh)
        while until is not None and not until():
            if time.monotonic() > deadline:
                pytest.fail(f"the job stopped, but not where the test needs it:\n{_log_tail(log)}")
            try:
                proc.wait(timeout=0.01)
            except subprocess.TimeoutExpired:
                pass
        os.kill(proc.pid, sig)
        if sig == signal.SIGINT:
            open(marker + ".go", "w").close()
            assert proc.wait(timeout=WAIT_S) == 130, _log_tail(log)
        else:
            assert proc.wait(timeout=60) == -sig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return stopped


def _left_by_the_killed_run(out: str) -> tuple[int, int]:
    """(inputs named by whole done lists, finished shards with a done record) in ``out``: staged, or
    renamed into the folder by the killed run's publish journal (the rerun finishes it first)."""
    inputs = 0
    for path in _done_lists(out):
        with open(path, "rb") as fh:
            inputs += len(fh.read().splitlines()) - 1  # the header
    shards = []
    for path in glob.glob(os.path.join(out, ".staging", "*", "*.tmp.done")):
        with open(path, "rb") as fh:
            published = os.path.join(out, json.load(fh)["file"])
        journal = os.path.exists(os.path.join(out, ".publishing.json"))
        if os.path.exists(path[:-len(".done")]) or (journal and os.path.exists(published)):
            shards.append(path)
    return inputs, len(shards)


def _rerun(capsys, inputs: str, out: str, *flags: str) -> str:
    status, stdout, err = run_build(capsys, "--input", inputs, "--output_dir", out, *flags)
    assert status == 0, err
    assert_only_shard_set(out)  # no staging, no temporary file left
    return stdout


# (id, op, pattern, nth, extra flags of the killed run, inputs reused: all / some, shards reused)
MOMENTS = [
    # Two bundles inspect at once: stopped before the second's done list is in place, once the first's is.
    ("during_inspect", "rename", DONE_LIST, 2, TWO_WORKERS, "some", 0),
    ("between_inspect_and_write", "create", STAGED_SHARD, 1, [], "all", 0),
    ("during_writes", "create", STAGED_SHARD, 3, [], "all", 2),
    # One shard renamed by the journal: the rerun finishes it, then reuses all four (the published ones copied).
    ("during_publish", "os.rename", r"/train-\d+-of-00004\.tfrecord$", 2, [], "all", 4),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, op, pattern, nth, extra, inputs_reused, shards_reused", MOMENTS,
                         ids=[m[0] for m in MOMENTS])
def test_a_killed_build_resumes_and_publishes_the_same_bytes(built, tmp_path, capsys, name, op, pattern, nth,
                                                             extra, inputs_reused, shards_reused) -> None:
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    stopped = _stopped_at(tmp_path, op, pattern, nth, ["--input", inputs, "--output_dir", out, *FLAGS, *extra],
                          until=(lambda: len(_done_lists(out)) == 1) if name == "during_inspect" else None)
    run_id = stopped["path"].split("/.staging/")[1].split("/")[0] if "/.staging/" in stopped["path"] else None
    left_inputs, left_shards = _left_by_the_killed_run(out)
    stdout = _rerun(capsys, inputs, out, *FLAGS)
    assert folder_bytes(out) == folder_bytes(reference)
    found = RESUMED.search(stdout)
    assert found, stdout
    reused, total, shards, resumed_run = int(found[1]), int(found[2]), int(found[3]), found[4]
    assert total == 27  # every input, also those it reused: written + dead-lettered
    assert (reused, shards) == (left_inputs, left_shards) == (left_inputs, shards_reused)
    if inputs_reused == "all":
        assert reused == 24  # the 3 broken ones are read again
    else:
        assert 0 < reused < 24
    assert run_id is None or resumed_run == run_id


@pytest.mark.slow
def test_a_build_stopped_by_ctrl_c_keeps_its_work_and_resumes(built, tmp_path, capsys) -> None:
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    _stopped_at(tmp_path, "create", STAGED_SHARD, 3, ["--input", inputs, "--output_dir", out, *FLAGS],
                sig=signal.SIGINT)
    assert not os.path.exists(os.path.join(out, ".tfrecord-shards.lock"))  # released; the staging is kept
    stdout = _rerun(capsys, inputs, out, *FLAGS)
    assert folder_bytes(out) == folder_bytes(reference)
    found = RESUMED.search(stdout)
    assert found and (found[1], found[3]) == ("24", "2"), stdout


@pytest.mark.slow
def test_a_build_stopped_by_ctrl_c_while_reading_keeps_the_inputs_it_finished(built, tmp_path, capsys) -> None:
    # Ctrl-C while the inputs are read, one bundle reading them all: the records it finished are
    # in run files closed every few records, each with its done list, and the rerun reuses them.
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    _stopped_at(tmp_path, "read", "^" + re.escape(inputs) + "/", 20, ["--input", inputs, "--output_dir", out, *FLAGS],
                sig=signal.SIGINT, until=lambda: len(_done_lists(out)) >= 2, env={"PAUSE_AT_DONE_EVERY": "4"})
    left_inputs, _ = _left_by_the_killed_run(out)
    stdout = _rerun(capsys, inputs, out, *FLAGS)
    assert folder_bytes(out) == folder_bytes(reference)
    found = RESUMED.search(stdout)
    assert found, stdout
    assert 0 < int(found[1]) == left_inputs < 24 and found[2] == "27", stdout


@pytest.mark.slow
@pytest.mark.parametrize("other", [["--num_shards", "3"], ["--jpeg_quality", "80"]], ids=["num_shards", "jpeg_quality"])
def test_a_rerun_with_other_flags_reuses_nothing(shared, tree, tmp_path, capsys, caplog, other) -> None:
    inputs = tree
    out = str(tmp_path / "out")
    _stopped_at(tmp_path, "create", STAGED_SHARD, 3, ["--input", inputs, "--output_dir", out, *FLAGS])
    flags = [*FLAGS, *other]
    status, stdout, err = run_build(capsys, "--input", inputs, "--output_dir", out, *flags)
    assert status == 0, err
    assert "resumed" not in stdout
    assert re.search(r"not resuming the interrupted run [0-9a-f]{32}: it was started with "
                     + re.escape(f"{other[0]} ") + r"\S+ -> " + re.escape(other[1]) + "; its staging was removed",
                     caplog.text), caplog.text
    assert_only_shard_set(out)
    fresh = shared.build(inputs, *flags, folder="fresh")  # an uninterrupted build with those flags
    assert_only_shard_set(fresh)
    assert folder_bytes(out) == folder_bytes(fresh)


@pytest.mark.slow
def test_an_input_changed_between_the_runs_is_read_again(tree, tmp_path, capsys) -> None:
    inputs = tree
    mine = str(tmp_path / "in")
    shutil.copytree(inputs, mine)
    out, fresh = str(tmp_path / "out"), str(tmp_path / "fresh")
    _stopped_at(tmp_path, "create", STAGED_SHARD, 3, ["--input", mine, "--output_dir", out, *FLAGS])
    # Same size, other bytes (another image of the tree), a later mtime.
    changed, other = os.path.join(mine, "rose", "rose_000.jpg"), os.path.join(mine, "rose", "rose_001.jpg")
    data = open(other, "rb").read()
    size = os.path.getsize(changed)
    data = data[:size] if len(data) >= size else data + b"\0" * (size - len(data))
    with open(changed, "r+b") as fh:
        fh.write(data)
    os.utime(changed, ns=(time.time_ns(), os.stat(changed).st_mtime_ns + 10**9))
    stdout = _rerun(capsys, mine, out, *FLAGS)
    found = RESUMED.search(stdout)
    assert found and found[1] == "23", stdout  # every other input reused
    _rerun(capsys, mine, fresh, *FLAGS)
    assert folder_bytes(out) == folder_bytes(fresh)


@pytest.mark.slow
def test_a_run_file_damaged_since_fails_every_rerun_until_fresh_starts_over(built, tmp_path, capsys) -> None:
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    _stopped_at(tmp_path, "create", STAGED_SHARD, 1, ["--input", inputs, "--output_dir", out, *FLAGS])
    [run_file] = glob.glob(os.path.join(out, ".staging", "*", "runs", "*.run"))
    with open(run_file, "r+b") as fh:  # a byte inside a record, as a disk that lost a write would leave
        fh.seek(os.path.getsize(run_file) // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))
    status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, *FLAGS)
    assert status == 1
    *_, failed, kept = err.strip().splitlines()
    assert "was damaged in its run file" in failed, err
    assert kept == KEPT.format(staging=os.path.join(out, ".staging")), err  # a failure removes nothing
    assert os.path.exists(run_file)
    stdout = _rerun(capsys, inputs, out, *FLAGS, "--fresh")  # --fresh: what the runs left is removed
    assert "resumed" not in stdout
    assert folder_bytes(out) == folder_bytes(reference)


def _failing_from(monkeypatch, pattern: str, nth: int) -> list[str]:
    """Makes every ``FileSystems.create`` on a path matching ``pattern``, from the ``nth`` on, raise
    ``OSError`` inside the pipeline's steps (the runner's side); returns the paths created before."""
    from apache_beam.io.filesystems import FileSystems

    create, created = FileSystems.create, []

    def failing(path, *args, **kwargs):
        if re.search(pattern, path):
            if len(created) + 1 >= nth:
                raise OSError(5, "injected write failure", path)
            created.append(path)
        return create(path, *args, **kwargs)

    monkeypatch.setattr(FileSystems, "create", staticmethod(failing))
    return created


@pytest.mark.slow
def test_a_build_that_fails_in_its_workers_keeps_its_staging_and_the_rerun_resumes_it(
        built, tmp_path, capsys, monkeypatch) -> None:
    inputs, reference = built.root, built.out
    out = str(tmp_path / "out")
    with monkeypatch.context() as patch:
        created = _failing_from(patch, STAGED_SHARD, 3)
        status, _, err = run_build(capsys, "--input", inputs, "--output_dir", out, *FLAGS)
    assert status == 1 and len(created) == 2, err
    *_, failed, kept = err.strip().splitlines()
    assert "injected write failure" in failed, err
    assert kept == KEPT.format(staging=os.path.join(out, ".staging")), err
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    assert not os.path.exists(os.path.join(out, ".tfrecord-shards.lock"))  # released; the staging is kept
    left_inputs, left_shards = _left_by_the_killed_run(out)
    assert (left_inputs, left_shards) == (24, 2)
    stdout = _rerun(capsys, inputs, out, *FLAGS)
    assert folder_bytes(out) == folder_bytes(reference)  # the bytes of a clean build
    found = RESUMED.search(stdout)
    assert found and (found[1], found[3]) == ("24", "2"), stdout