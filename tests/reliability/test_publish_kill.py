"""Reliability: a publish SIGKILLed before each of its file operations, then the same job run again.

Three publishes over a folder that holds an older set: a build that replaces
it (other shard names, a split dropped), a reshard (other shard count) and an
append (published shards renamed, one merged). ``STEPS`` lists every create,
rename and delete the publish makes in the folder, from the first file of the
new set it stages to the end (``test_the_steps_are_every_step_of_the_publish``
traces an uninterrupted run and checks the list is whole). For each step the
job runs as a subprocess, stops before that operation (``tests.pause_at``:
a ``FileSystems`` operation, a path pattern and which matching call) and is
killed with SIGKILL. Then:

- a reader finds the old manifest, none, or the new one, each naming whole files;
- the job run again into the folder ends with the new set, byte-identical to
  an uninterrupted run, and nothing else (no staging, no journal);
- a rerun of the build reuses the killed run's finished shards (those its
  journal had already published are copied) and reads again only the inputs
  it rejected, whatever the step (once its staging is there).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from apache_beam.io.filesystems import FileSystems

from tests.reliability_support import assert_only_shard_set, folder_bytes, manifest_problems
from tests.shard_fixtures import make_class_tree

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAIT_S = 180.0
HEX = "[0-9a-f]{32}"  # run ids and temporary names
BUILD_NEW = ["--num_shards", "2", "--seed", "9", "--max_bad_fraction", "0.5", "--drop_other_splits"]
BUILD_OLD = ["--num_shards", "2", "--split_fractions", "train=0.5,validation=0.5", "--seed", "1",
             "--max_bad_fraction", "0.5"]
APPEND = ["--shard_size_mb", "0.02", "--seed", "3"]


def _job(command: str):
    from beam_jobs import append_shards, build_shards, reshard

    return {"build": build_shards, "reshard": reshard, "append": append_shards}[command]


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    """Name -> (command, argv with OUT for the folder, the older folder, reference: the uninterrupted result)."""
    base = tmp_path_factory.mktemp("kill_publish")
    tree, day2 = str(base / "in"), str(base / "day2")
    make_class_tree(tree, per_class=3)
    make_class_tree(day2, classes=("lily",), per_class=3, broken=False, seed=2)
    from beam_jobs import append_shards, build_shards, reshard

    built_old, src = str(base / "built_old"), str(base / "src")
    assert build_shards.run(["--input", tree, "--output_dir", built_old, *BUILD_OLD]) == 0
    assert build_shards.run(["--input", tree, "--output_dir", src, "--num_shards", "2", "--seed", "1",
                             "--max_bad_fraction", "0.5"]) == 0
    resharded_old = str(base / "resharded_old")
    assert reshard.run(["--input", src + "/train-*", "--output_dir", resharded_old, "--num_shards", "3",
                        "--split", "train"]) == 0
    appended_old = str(base / "appended_old")
    assert build_shards.run(["--input", tree, "--output_dir", appended_old, "--max_bad_fraction", "0.5",
                             *APPEND]) == 0
    found = {
        "build": ("build", ["--input", tree, "--output_dir", "OUT", *BUILD_NEW], built_old),
        "reshard": ("reshard", ["--input", src + "/train-*", "--output_dir", "OUT", "--num_shards", "2",
                                "--split", "train"], resharded_old),
        "append": ("append", ["--input", day2, "--output_dir", "OUT", *APPEND], appended_old),
    }
    out = {}
    for name, (command, argv, old) in found.items():
        reference = str(base / f"{name}_reference")
        shutil.copytree(old, reference)
        assert _job(command).run(_argv(argv, reference)) == 0
        out[name] = (command, argv, old, reference)
    return out


def _argv(argv: list[str], out: str) -> list[str]:
    return [out if a == "OUT" else a for a in argv]


def _generic(rel: str) -> str:
    """A name in the folder with its run ids and temporary names as ``*``."""
    return re.sub("[0-9a-f]{32}", "*", rel)


def _pattern(out: str, name: str) -> str:
    """The regular expression of a ``_generic`` name in ``out`` (``*``: 32 hex digits)."""
    return "^" + re.escape(out + "/") + re.escape(name).replace(r"\*", HEX) + "$"


@contextlib.contextmanager
def _traced(out: str):
    """Records ``(op, name in the folder)`` of every create, rename (each file) and delete call in ``out``."""
    seen: list[tuple[str, str]] = []
    create, delete, rename = FileSystems.create, FileSystems.delete, os.rename

    def traced_create(path, *args, **kwargs):
        if path.startswith(out + "/"):
            seen.append(("create", path[len(out) + 1:]))
        return create(path, *args, **kwargs)

    def traced_delete(paths, *args, **kwargs):
        mine = [p for p in paths if p.startswith(out + "/")]
        if mine:
            seen.append(("delete", min(_generic(p[len(out) + 1:]) for p in mine)))  # one call: one moment
        return delete(paths, *args, **kwargs)

    def traced_rename(source, target, *args, **kwargs):
        target = os.fspath(target)
        if target.startswith(out + "/"):
            seen.append(("os.rename", target[len(out) + 1:]))
        return rename(source, target, *args, **kwargs)

    FileSystems.create, FileSystems.delete = staticmethod(traced_create), staticmethod(traced_delete)
    os.rename = traced_rename
    try:
        yield seen
    finally:
        FileSystems.create, FileSystems.delete = staticmethod(create), staticmethod(delete)
        os.rename = rename


def _publish_steps(seen: list[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """``(op, pattern, nth)`` of each operation from the first set file staged (``dead_letters.jsonl``) on."""
    start = next(i for i, (op, rel) in enumerate(seen)
                 if op == "create" and re.match(r"\.staging/[0-9a-f]{32}/dead_letters\.jsonl\.next\.", rel))
    steps, count = [], {}
    for i, (op, rel) in enumerate(seen):
        key = (op, _generic(rel))
        count[key] = count.get(key, 0) + 1
        if i >= start:
            steps.append((*key, count[key]))
    return steps


def trace(command: str, argv: list[str], old: str, out: str) -> list[tuple[str, str, int]]:
    """The publish steps of the job run into a copy of ``old`` at ``out`` (left with the result)."""
    shutil.copytree(old, out)
    with _traced(out) as seen:
        assert _job(command).run(_argv(argv, out)) == 0
    return _publish_steps(seen)


def _staged_set_files(*sidecars: str) -> list[tuple[str, str, int]]:
    """Each file of the new set that is not a shard staged (a temporary file, renamed), in order."""
    steps = []
    for name in ("dead_letters.jsonl", "labels.txt", "shards.jsonl", *sidecars, "manifest.json"):
        steps += [("create", f".staging/*/{name}.next.*.tmp", 1), ("os.rename", f".staging/*/{name}.next", 1)]
    return steps


SIDECARS = ("dataset_info.json", "features.json", "image.class.label.labels.txt")


def _journal_carried_out(shards: list[str], removed: list[str], staged: str) -> list[tuple[str, str, int]]:
    """The journal written and carried out: old manifest deleted, shards renamed, set files, manifest last,
    the old set's files deleted (``removed``), then the journal and staging (``staged``: its first file by name)."""
    steps = [("create", ".staging/*/.publishing.json.*.tmp", 1), ("os.rename", ".publishing.json", 1),
             ("create", ".staging/*/publish.commit.*.tmp", 1), ("os.rename", ".staging/*/publish.commit", 1),
             ("delete", "manifest.json", 1)]
    for shard in shards:  # each with its .idx and its keys file
        steps += [("os.rename", shard, 1), ("os.rename", f"index/{shard}.idx", 1),
                  ("os.rename", f"index/{shard}.keys", 1)]
    steps += [("os.rename", name, 1) for name in ("dead_letters.jsonl", "labels.txt", "shards.jsonl", *SIDECARS)]
    steps.append(("os.rename", "manifest.json", 1))
    steps += [("delete", name, 1) for name in removed]  # one call: the old set's files
    steps += [("delete", ".publishing.json", 1), ("delete", staged, 1), ("delete", ".tfrecord-shards.lock", 1)]
    return steps


# Scenario -> every create, rename and delete of its publish in the folder, in order: (op, name, nth).
STEPS = {
    "build": _staged_set_files(*SIDECARS) + _journal_carried_out(
        [f"train-0000{i}-of-00002.tfrecord" for i in range(2)],
        ["index/validation-00000-of-00002.tfrecord.idx"],
        ".staging/*/dead_letters.jsonl.*.tmp"),  # the staged parts of its dead letters
    "reshard": _staged_set_files(*SIDECARS) + _journal_carried_out(
        [f"train-0000{i}-of-00002.tfrecord" for i in range(2)],
        ["index/train-00000-of-00003.tfrecord.idx"],
        ".staging/*/publish.commit"),
    "append": _staged_set_files(*SIDECARS) + _journal_carried_out(
        [f"train-0000{i}-of-00003.tfrecord" for i in range(3)], [], ".staging/*/publish.commit"),
}


def _phase(name: str) -> str:
    """What kind of file a step touches: a staged file, a shard or its index, a set file, or the file itself."""
    if name.startswith(".staging/"):
        return "staged"
    if ".tfrecord" in name:
        return "shard"
    if name in ("dead_letters.jsonl", "labels.txt", "shards.jsonl", *SIDECARS):
        return "set file"
    return name


def _phase_ends(steps: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The first and last step of each run of steps of one phase: where one phase of the publish meets the next."""
    phases = [_phase(name) for _, name, _ in steps]
    return [step for i, step in enumerate(steps)
            if i in (0, len(steps) - 1) or phases[i - 1] != phases[i] or phases[i + 1] != phases[i]]


def _journal_phase_starts(steps: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The first step of each phase once the journal is in place, up to its removal."""
    start = steps.index(("os.rename", ".publishing.json", 1))
    end = steps.index(("delete", ".publishing.json", 1))
    ends = _phase_ends(steps)
    return [step for step in steps[start:end + 1]
            if step in ends and (step == steps[start] or _phase(steps[steps.index(step) - 1][1]) != _phase(step[1]))]


# Every step of the three publishes is killed with TFRS_EVERY_PUBLISH_STEP=1 (103 cases). By default,
# the build's first and last step of each phase (staged files, journal, commit record, old manifest,
# shards, set files, manifest, deletions), which are where one phase hands over to the next; reshard
# and append publish through the same executor, so for them the first step of each phase the journal
# carries out (where their plans differ from a build's: shards kept, merged or renamed).
EVERY_STEP = os.environ.get("TFRS_EVERY_PUBLISH_STEP") == "1"
CASES = [(name, *step) for name, steps in STEPS.items()
         for step in (steps if EVERY_STEP else _phase_ends(steps) if name == "build" else _journal_phase_starts(steps))]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_steps_are_every_step_of_the_publish(scenarios, tmp_path, name) -> None:
    command, argv, old, reference = scenarios[name]
    out = str(tmp_path / "out")
    assert trace(command, argv, old, out) == STEPS[name]
    assert folder_bytes(out) == folder_bytes(reference)


def _start(command: str, argv: list[str], op: str, pattern: str, nth: int, marker: str,
           log: str) -> subprocess.Popen:
    job = [] if command == "build" else [command]  # a build runs as build_shards.run, as the rerun does
    with open(log, "wb") as fh:
        return subprocess.Popen([sys.executable, "-m", "tests.pause_at", op, pattern, str(nth), marker, "--",
                                 *job, *argv], cwd=REPO, stdout=fh, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


def _wait_for(marker: str, proc: subprocess.Popen, log: str) -> dict:
    deadline = time.monotonic() + WAIT_S
    while not os.path.exists(marker):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait(timeout=60)
            with open(log, "rb") as fh:
                pytest.fail(f"the job did not reach the step ({proc.returncode}):\n"
                            f"{fh.read()[-3000:].decode(errors='replace')}")
        try:
            proc.wait(timeout=0.01)
        except subprocess.TimeoutExpired:
            pass
    with open(marker, encoding="utf-8") as fh:
        return json.load(fh)


def _reader_sees(out: str, old: str, reference: str) -> str:
    """Which manifest a reader finds now: ``old``, ``none`` or ``new``; each must name whole files."""
    path = os.path.join(out, "manifest.json")
    if not os.path.exists(path):
        return "none"
    with open(path, "rb") as fh:
        data = fh.read()
    assert manifest_problems(out, data) == []
    for name, folder in (("old", old), ("new", reference)):
        with open(os.path.join(folder, "manifest.json"), "rb") as fh:
            if fh.read() == data:
                return name
    raise AssertionError(f"manifest.json is neither the old set's nor the new one's: {hashlib.sha256(data).hexdigest()}")


@pytest.mark.slow
@pytest.mark.parametrize("name, op, step, nth", CASES,
                         ids=[f"{c[0]}-{i:02d}-{c[1]}-{c[2].rsplit('/', 1)[-1]}" for i, c in enumerate(CASES)])
def test_killed_before_a_publish_step_then_run_again(scenarios, tmp_path, capsys, monkeypatch, name, op, step,
                                                     nth) -> None:
    command, argv, old, reference = scenarios[name]
    out = str(tmp_path / "out")
    shutil.copytree(old, out)
    marker, log = str(tmp_path / "stopped.json"), str(tmp_path / "job.log")
    proc = _start(command, _argv(argv, out), op, _pattern(out, step), nth, marker, log)
    try:
        stopped = _wait_for(marker, proc, log)
        assert stopped["op"] == op and re.match(_pattern(out, step), stopped["path"])
        seen = _reader_sees(out, old, reference)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert _reader_sees(out, old, reference) == seen  # the kill changed nothing
    staged = os.path.isdir(os.path.join(out, ".staging"))

    from transforms import inspect_images

    reads = []
    opened = inspect_images.open_for_read
    monkeypatch.setattr(inspect_images, "open_for_read", lambda path, *a, **k: reads.append(path) or
                        opened(path, *a, **k))
    capsys.readouterr()
    status = _job(command).run(_argv(argv, out))
    stdout, err = capsys.readouterr()
    assert status == 0, err
    assert_only_shard_set(out)  # no staging, no journal, no temporary file
    assert folder_bytes(out) == folder_bytes(reference)
    if command == "build" and staged:  # the killed run's work is reused: only the rejected inputs are read
        assert sorted(os.path.basename(p) for p in reads) == ["cut.jpg", "empty.png", "notes.jpg"], stdout
        assert re.search(r"^  resumed: reused 9 of 12 inputs .* and 2 finished shards from", stdout, re.M), stdout
    if command == "append" and seen != "old":  # the journal was finished first: every input is there
        assert "Nothing to append" in stdout
