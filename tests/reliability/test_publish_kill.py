"""Reliability: a publish SIGKILLed before each of its file operations, then the same job run again.

Three publishes over a folder that holds an older set: a build that replaces
it (other shard names, a split dropped), a reshard (other shard count) and an
append (published shards renamed, one merged). ``STEPS`` lists every create,
rename and delete the publish makes in the folder, from the first file of the
new set it stages to the end (``test_the_steps_are_every_step_of_the_publish``
checks the list is whole against a traced uninterrupted run).

What a SIGKILL before a step leaves is the folder as the job had written it
then, with a lock naming a process that has ended. One uninterrupted run of
each publish in a subprocess (``tests.publish_snapshots``) copies its folder
aside just before each step of ``CASES``, then ends; each case starts from
its copy (``test_killed_before_a_publish_step_then_run_again``). That the copy
is what a kill leaves is checked by really killing the job, a subprocess
stopped before the step (``tests.pause_at``: a ``FileSystems`` operation, a
path pattern and which matching call) with SIGKILL, at one step of each
publish (``test_a_real_kill_leaves_what_the_snapshot_holds``: the same files,
by name and size, and the same run again from there). Then:

- a reader finds the old manifest, none, or the new one, each naming whole files;
- the job run again into the folder ends with the new set, byte-identical to
  an uninterrupted run, and nothing else (no staging, no journal);
- a rerun of the build reuses the killed run's finished shards (those its
  journal had already published are copied) and reads again only the inputs
  it rejected, whatever the step (once its staging is there).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from typing import NamedTuple

import pytest

from tests.publish_snapshots import generic
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


def _argv(argv: list[str], out: str) -> list[str]:
    return [out if a == "OUT" else a for a in argv]


def _pattern(out: str, name: str) -> str:
    """The regular expression of a ``generic`` name in ``out`` (``*``: 32 hex digits)."""
    return "^" + re.escape(out + "/") + re.escape(name).replace(r"\*", HEX) + "$"


def _publish_steps(seen: list[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """``(op, pattern, nth)`` of each operation from the first set file staged (``dead_letters.jsonl``) on."""
    start = next(i for i, (op, rel) in enumerate(seen)
                 if op == "create" and re.match(r"\.staging/[0-9a-f]{32}/dead_letters\.jsonl\.next\.", rel))
    steps, count = [], {}
    for i, (op, rel) in enumerate(seen):
        key = (op, generic(rel))
        count[key] = count.get(key, 0) + 1
        if i >= start:
            steps.append((*key, count[key]))
    return steps


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


# Every step of the three publishes is replayed with TFRS_EVERY_PUBLISH_STEP=1 (103 cases). By default,
# the build's first and last step of each phase (staged files, journal, commit record, old manifest,
# shards, set files, manifest, deletions), which are where one phase hands over to the next; reshard
# and append publish through the same executor, so for them the first step of each phase the journal
# carries out (where their plans differ from a build's: shards kept, merged or renamed).
EVERY_STEP = os.environ.get("TFRS_EVERY_PUBLISH_STEP") == "1"
CASES = [(name, *step) for name, steps in STEPS.items()
         for step in (steps if EVERY_STEP else _phase_ends(steps) if name == "build" else _journal_phase_starts(steps))]
# One step of each publish is also really killed: the journal just put in place, where every later
# step starts from.
KILLED = [(name, "os.rename", ".publishing.json", 1) for name in sorted(STEPS)]


class Scenario(NamedTuple):
    """A publish: its job, argv (``OUT`` for the folder), the older folder, the uninterrupted result,
    and what its traced uninterrupted run left: the folder, every step, and a copy before each case."""

    command: str
    argv: list[str]
    old: str
    reference: str
    traced: str
    steps: list[tuple[str, str, int]]
    snapshots: dict[tuple[str, str, int], str]


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> dict[str, Scenario]:
    """Name -> ``Scenario``: each publish run uninterrupted, and once traced with copies of its folder."""
    base = tmp_path_factory.mktemp("kill_publish")
    tree, day2 = str(base / "in"), str(base / "day2")
    make_class_tree(tree, per_class=3)
    make_class_tree(day2, classes=("lily",), per_class=3, broken=False, seed=2)
    from beam_jobs import build_shards, reshard

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
    plan = []
    for name, (command, argv, old) in found.items():
        reference = str(base / f"{name}_reference")
        shutil.copytree(old, reference)
        assert _job(command).run(_argv(argv, reference)) == 0
        traced = str(base / f"{name}_traced" / "out")  # its name goes into dataset_info.json
        shutil.copytree(old, traced)
        plan.append({"command": command, "argv": _argv(argv, traced), "out": traced,
                     "snapshots": str(base / f"{name}_snapshots"), "trace": str(base / f"{name}_trace.json"),
                     "steps": [step[1:] for step in CASES if step[0] == name]})
    with open(base / "plan.json", "w", encoding="utf-8") as fh:
        json.dump(plan, fh)
    done = subprocess.run([sys.executable, "-m", "tests.publish_snapshots", str(base / "plan.json")], cwd=REPO,
                          capture_output=True, text=True, timeout=WAIT_S, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    out = {}
    for (name, (command, argv, old)), run in zip(found.items(), plan):
        with open(run["trace"], encoding="utf-8") as fh:
            steps = _publish_steps([tuple(entry) for entry in json.load(fh)])
        snapshots = {tuple(step): os.path.join(run["snapshots"], str(i)) for i, step in enumerate(run["steps"])}
        out[name] = Scenario(command, argv, old, str(base / f"{name}_reference"), run["out"], steps, snapshots)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_steps_are_every_step_of_the_publish(scenarios, name) -> None:
    scenario = scenarios[name]
    assert scenario.steps == STEPS[name]
    assert folder_bytes(scenario.traced) == folder_bytes(scenario.reference)  # tracing changed nothing


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


def _files(folder: str) -> list[tuple[str, int | None]]:
    """``(generic name, size)`` of every file below ``folder``; the size of shards and their index files
    only (other files name the folder, whose path is another in another run)."""
    found = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            rel = generic(os.path.relpath(path, folder))
            sized = re.search(r"\.tfrecord(\.idx|\.keys)?$", rel)
            found.append((rel, os.lstat(path).st_size if sized else None))
    return sorted(found)


def _snapshot(scenario: Scenario, op: str, step: str, nth: int) -> str:
    snapshot = scenario.snapshots[(op, step, nth)]
    assert os.path.isdir(snapshot), (
        f"the traced run made no {op} of {step} (#{nth}): test_the_steps_are_every_step_of_the_publish says why")
    return snapshot


def _run_again(scenario: Scenario, out: str, seen: str, capsys, monkeypatch) -> None:
    """Runs the job again into ``out`` (``seen``: the manifest a reader found there) and checks the result."""
    staged = os.path.isdir(os.path.join(out, ".staging"))

    from transforms import inspect_images

    reads, names = [], {}  # the inputs read; each open descriptor's path
    open_local, read_opened = inspect_images.open_local, inspect_images._read_opened

    def opening(path):  # an input is opened for its resume stamp too: only a read counts
        fd, found = open_local(path)
        names[fd] = path
        return fd, found

    def reading(fd, *args):
        reads.append(names[fd])
        return read_opened(fd, *args)

    monkeypatch.setattr(inspect_images, "open_local", opening)
    monkeypatch.setattr(inspect_images, "_read_opened", reading)
    capsys.readouterr()
    status = _job(scenario.command).run(_argv(scenario.argv, out))
    stdout, err = capsys.readouterr()
    assert status == 0, err
    assert_only_shard_set(out)  # no staging, no journal, no temporary file
    assert folder_bytes(out) == folder_bytes(scenario.reference)
    if scenario.command == "build" and staged:  # the killed run's work is reused: only the rejected inputs are read
        assert sorted(os.path.basename(p) for p in reads) == ["cut.jpg", "empty.png", "notes.jpg"], stdout
        assert re.search(r"^  resumed: reused 9 of 12 inputs .* and 2 finished shards from", stdout, re.M), stdout
    if scenario.command == "append" and seen != "old":  # the journal was finished first: every input is there
        assert "Nothing to append" in stdout


@pytest.mark.slow
@pytest.mark.parametrize("name, op, step, nth", CASES,
                         ids=[f"{c[0]}-{i:02d}-{c[1]}-{c[2].rsplit('/', 1)[-1]}" for i, c in enumerate(CASES)])
def test_killed_before_a_publish_step_then_run_again(scenarios, tmp_path, capsys, monkeypatch, name, op, step,
                                                     nth) -> None:
    scenario = scenarios[name]
    out = str(tmp_path / "out")
    shutil.copytree(_snapshot(scenario, op, step, nth), out, symlinks=True)  # the folder as a kill leaves it
    seen = _reader_sees(out, scenario.old, scenario.reference)
    _run_again(scenario, out, seen, capsys, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("name, op, step, nth", KILLED, ids=[k[0] for k in KILLED])
def test_a_real_kill_leaves_what_the_snapshot_holds(scenarios, tmp_path, capsys, monkeypatch, name, op, step,
                                                    nth) -> None:
    scenario = scenarios[name]
    out = str(tmp_path / "out")
    shutil.copytree(scenario.old, out)
    marker, log = str(tmp_path / "stopped.json"), str(tmp_path / "job.log")
    proc = _start(scenario.command, _argv(scenario.argv, out), op, _pattern(out, step), nth, marker, log)
    try:
        stopped = _wait_for(marker, proc, log)
        assert stopped["op"] == op and re.match(_pattern(out, step), stopped["path"])
        seen = _reader_sees(out, scenario.old, scenario.reference)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert _reader_sees(out, scenario.old, scenario.reference) == seen  # the kill changed nothing
    assert _files(out) == _files(_snapshot(scenario, op, step, nth))  # the replayed cases start from this
    _run_again(scenario, out, seen, capsys, monkeypatch)
