"""The command line as a person meets it: help, the tfrecord-shards command, failures, progress.

Jobs run through ``beam_jobs.cli.main.main`` (what the ``tfrecord-shards``
console script calls) with the real runner and real files, in the test's
process (``tfrs``: its file descriptors 1 and 2 captured, so what worker
processes print is seen too). Where the process itself is the point (the
exit status as the shell sees it, Ctrl-C, ``python -m``, help answered before
Beam is imported, a run in a fresh process) they run as subprocesses through
``python -m beam_jobs.cli.main`` (``command``; the installed script points at
the main checkout, so tests use the module).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import signal
import subprocess
import sys

import pytest

from beam_jobs.cli import jobs, main as cli
from beam_jobs.cli.declared import flag_parser
from beam_jobs.cli.flags import RunOptions, ShardingOptions
from tests.helpers import sigint_as_in_a_terminal
from tests.shard_fixtures import load_manifest, make_class_tree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRESS = re.compile(r"^(build|verify|reshard): [a-z ]+: \d+")


def command(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs ``tfrecord-shards ARGV`` (as ``python -m beam_jobs.cli.main``) and returns the result."""
    return subprocess.run([sys.executable, "-m", "beam_jobs.cli.main", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


@pytest.fixture()
def tfrs(capfd):
    """Runs ``tfrecord-shards ARGV`` in this process (``cli.main``) and returns how it ended, as ``command`` does."""

    def run(*argv: str) -> subprocess.CompletedProcess:
        capfd.readouterr()
        try:
            status = cli.main(list(argv))
        except SystemExit as stop:  # what the console script would exit with
            status = stop.code if isinstance(stop.code, int) else 1
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["tfrecord-shards", *argv], status, out, err)

    return run


def real_flags(*classes, only: tuple[str, ...] | None = None) -> list[argparse.Action]:
    """The flags an options class really defines, read from an argparse parser it fills."""
    parser = argparse.ArgumentParser(add_help=False)
    for cls in classes:
        cls._add_argparse_args(parser)
    return [a for a in parser._actions if only is None or a.dest in only]


def job_flags(command_name: str) -> list[argparse.Action]:
    module = __import__(cli.COMMANDS[command_name][0], fromlist=["HELP"])
    spec = module.HELP
    return (real_flags(ShardingOptions, only=spec.shared) + real_flags(*spec.options)
            + real_flags(RunOptions))


def shown_default(action: argparse.Action) -> str | None:
    default = action.default
    if default is None or default is False:
        return None
    return "x".join(map(str, default)) if isinstance(default, tuple) else str(default)


@pytest.mark.parametrize("name", ["build", "plan", "verify", "reshard"])
def test_help_lists_every_flag_with_its_default(name, capsys):
    module = __import__(cli.COMMANDS[name][0], fromlist=["run"])
    assert module.run(["--help"], prog=f"tfrecord-shards {name}") == 0  # as cli.main runs it
    text = capsys.readouterr().out
    flags = job_flags(name)
    assert len(flags) >= 8
    for action in flags:
        flag = action.option_strings[0]
        lines = text.split(flag + " ", 1)[1] if flag + " " in text else text.split(flag + "\n", 1)[1]
        entry = lines.split("\n  --", 1)[0]  # up to the next flag
        assert re.search(r"\w{3}", entry), f"{flag} has no meaning in --help"
        default = shown_default(action)
        if default is not None:
            assert f"(default: {default})" in " ".join(entry.split()), (flag, entry)
    assert "--help_beam" in text
    for title in ("inputs:", "output:", "messages:"):
        assert title in text


@pytest.mark.parametrize("name", ["build", "plan", "reshard"])
def test_publishing_jobs_show_every_shared_flag(name):
    # Build and reshard use every flag ShardingOptions defines; their help must list each.
    module = __import__(cli.COMMANDS[name][0], fromlist=["HELP"])
    assert {a.dest for a in real_flags(ShardingOptions)} - set(module.HELP.shared) == set()


@pytest.mark.parametrize("name", ["inspect", "sample"])
def test_help_of_argparse_commands_lists_every_flag(name, capsys):
    module = __import__(cli.COMMANDS[name][0], fromlist=["_parser"])
    assert module.run(["--help"], prog=f"tfrecord-shards {name}") == 0
    text = capsys.readouterr().out
    for action in flag_parser({"inspect": jobs.INSPECT, "sample": jobs.SAMPLE}[name])._actions:
        label = action.option_strings[0] if action.option_strings else action.dest
        assert label in text
        if action.option_strings and shown_default(action) and action.dest != "help":
            assert f"default: {shown_default(action)}" in " ".join(text.split())


def test_beam_help_lists_beams_options(capsys):
    from beam_jobs import build_shards

    assert build_shards.run(["--help_beam"], prog="tfrecord-shards build") == 0
    text = capsys.readouterr().out
    assert "--runner" in text and "--direct_num_workers" in text


@pytest.mark.slow
def test_help_through_python_m_lists_flags():
    """``python -m beam_jobs.build_shards --help`` printed only ``usage: build_shards.py [-h]``."""
    done = subprocess.run([sys.executable, "-m", "beam_jobs.build_shards", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "--shard_size_mb" in done.stdout and "--max_bad_fraction" in done.stdout


def test_setup_declares_the_console_script():
    tree = ast.parse(open(os.path.join(ROOT, "setup.py"), encoding="utf-8").read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "setup")
    entry_points = ast.literal_eval(next(k.value for k in call.keywords if k.arg == "entry_points"))
    assert entry_points == {"console_scripts": ["tfrecord-shards = beam_jobs.cli.main:main"]}
    module, func = entry_points["console_scripts"][0].split("= ")[1].split(":")
    assert getattr(__import__(module, fromlist=[func]), func) is cli.main


def test_command_help_lists_subcommands():
    done = command("--help")
    assert done.returncode == 0
    for name in ("build", "plan", "verify", "reshard", "inspect", "sample"):
        assert re.search(rf"^  {name}\s", done.stdout, re.M)
    unknown = command("bild")
    assert unknown.returncode == 2 and "unknown command 'bild'" in unknown.stderr


@pytest.mark.cpu_budget(20.0)  # the fast tier's quick run of each command, each in a fresh process
def test_every_subcommand_runs(tmp_path):
    data, out, again = tmp_path / "data", tmp_path / "out", tmp_path / "again"
    sample = command("sample", "--output", str(data), "--size_mb", "1")
    assert sample.returncode == 0, sample.stderr
    build = command("build", "--input", str(data), "--output_dir", str(out), "--shard_size_mb", "0.4")
    assert build.returncode == 0, build.stderr
    assert "Published" in build.stdout
    manifest = load_manifest(str(out))
    verify = command("verify", "--output_dir", str(out))
    assert verify.returncode == 0 and verify.stdout.startswith("OK:"), verify.stderr
    first = manifest["splits"]["train"]["shards"][0]["file"]
    inspect = command("inspect", str(out / first), "--limit", "1")
    assert inspect.returncode == 0 and "image/class/label" in inspect.stdout
    reshard = command("reshard", "--input", str(out / "train-*"), "--output_dir", str(again),
                      "--num_shards", "1")
    assert reshard.returncode == 0, reshard.stderr
    assert json.loads((again / "manifest.json").read_text())["records"] == manifest["records"]
    # Beam's INFO lines stay off the terminal by default; the per-shard lines do not.
    assert "Converting string literal type hint" not in build.stderr
    assert "wrote shard" in build.stderr and "wrote shard" in reshard.stderr


@pytest.fixture(scope="module")
def broken_tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("broken"))
    make_class_tree(root, per_class=4)  # with a few broken files
    return root


MULTI_PROCESSING = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], MULTI_PROCESSING], ids=["in_process", "multi_processing"])
def test_refusal_ends_with_one_line_and_lists_reasons(broken_tree, tmp_path, extra, tfrs):
    """Worker processes print a failing bundle's traceback to their stderr: it must not show."""
    done = tfrs("build", "--input", broken_tree, "--output_dir", str(tmp_path / "out"), *extra)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("build_shards: staged work kept in ")  # what the failed run left, last
    assert lines[-2].startswith("build_shards: failed: ") and "--max_bad_fraction" in lines[-2]
    dead = [json.loads(line) for line in (tmp_path / "out" / "dead_letters.jsonl").read_text().splitlines()]
    reasons = sorted({d["reason"] for d in dead})
    by_reason = next(line for line in lines if line.startswith("  rejected by reason: "))
    for reason in reasons:
        assert f"{reason} {sum(d['reason'] == reason for d in dead)}" in by_reason
    examples = [line for line in lines if line.startswith("  e.g. ")]
    assert 1 <= len(examples) <= 3
    for line in examples:
        assert any(line == f"  e.g. {d['path']}: {d['reason']}: {d['error']}" for d in dead)


@pytest.mark.slow
def test_failure_shows_traceback_only_when_asked(tmp_path, tfrs):
    """A failure inside the pipeline: one line by default, Beam's traceback with --verbose."""
    bad = tmp_path / "rows.csv"
    bad.write_text("path,label\nmissing.jpg,a\n")
    args = ("build", "--input", str(bad), "--output_dir", str(tmp_path / "out"))
    quiet = tfrs(*args)
    assert quiet.returncode == 1
    assert "Traceback" not in quiet.stderr and "ERROR apache_beam" not in quiet.stderr
    *_, cause, kept = quiet.stderr.strip().splitlines()
    assert cause.startswith("build_shards: failed: ") and kept.startswith("build_shards: staged work kept in ")
    loud = tfrs(*args, "--verbose")
    assert loud.returncode == 1 and "Traceback" in loud.stderr
    *_, cause, kept = loud.stderr.strip().splitlines()
    assert cause.startswith("build_shards: failed: ") and kept.startswith("build_shards: staged work kept in ")


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], MULTI_PROCESSING], ids=["in_process", "multi_processing"])
def test_build_reports_progress_before_it_finishes(tmp_path, extra, tfrs):
    data, out = tmp_path / "data", tmp_path / "out"
    assert tfrs("sample", "--output", str(data), "--size_mb", "3").returncode == 0
    done = tfrs("build", "--input", str(data), "--output_dir", str(out), "--shard_size_mb", "1",
                   "--progress_interval", "0.2", *extra)
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stderr.splitlines() if PROGRESS.match(line)]
    assert progress, done.stderr
    assert any(re.search(r"of \d+ (inputs|records)", line) for line in progress)
    assert all(re.search(r"\d B|KiB|MiB", line) for line in progress if "listing" not in line)
    # The per-shard lines, logged in worker processes with multi_processing, are shown; Beam's
    # worker chatter ("Discarding unparseable args") is not.
    assert "wrote shard train-00000-of-" in done.stderr
    assert "Worker: " not in done.stderr and "WARNING" not in done.stderr


@pytest.mark.slow
def test_verify_and_reshard_report_progress(tmp_path, tfrs):
    data, out, again = tmp_path / "data", tmp_path / "out", tmp_path / "again"
    assert tfrs("sample", "--output", str(data), "--size_mb", "3").returncode == 0
    assert tfrs("build", "--input", str(data), "--output_dir", str(out), "--shard_size_mb", "1",
                   "--progress_interval", "30").returncode == 0
    verify = tfrs("verify", "--output_dir", str(out), "--decode_images", "--progress_interval", "0.2")
    assert verify.returncode == 0, verify.stderr
    checking = [line for line in verify.stderr.splitlines() if line.startswith("verify: checking records: ")]
    assert checking, verify.stderr
    # G4: a shard set's manifest gives the total, hence the percentage
    total = load_manifest(str(out))["records"]
    assert all(re.match(rf"verify: checking records: \d+ of {total} records \(\d+%\)", line)
               for line in checking), checking
    reshard = tfrs("reshard", "--input", str(out / "train-*"), "--output_dir", str(again),
                      "--progress_interval", "0.2")
    assert reshard.returncode == 0, reshard.stderr
    assert any(PROGRESS.match(line) and line.startswith("reshard: ") for line in reshard.stderr.splitlines())


@pytest.mark.slow
def test_job_modules_run_as_before(tmp_path):
    """``python -m beam_jobs.X`` keeps working (a job module must not be imported twice)."""
    data, out = tmp_path / "data", tmp_path / "out"

    def module(name: str, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", f"beam_jobs.{name}", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)

    assert module("make_sample_data", "--output", str(data), "--size_mb", "0.5").returncode == 0
    build = module("build_shards", "--input", str(data), "--output_dir", str(out))
    assert build.returncode == 0 and "Published" in build.stdout, build.stderr
    verify = module("verify_shards", "--output_dir", str(out))
    assert verify.returncode == 0 and verify.stdout.startswith("OK:"), verify.stderr
    shard = load_manifest(str(out))["splits"]["train"]["shards"][0]["file"]
    inspect = module("inspect_shard", str(out / shard), "--limit", "1")
    assert inspect.returncode == 0, inspect.stderr
    reshard = module("reshard", "--input", str(out / "train-*"), "--output_dir", str(tmp_path / "again"))
    assert reshard.returncode == 0, reshard.stderr


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("small")
    make_class_tree(str(root / "data"), per_class=2, broken=False)
    (root / "file.txt").write_text("not a folder\n")
    return root


def _bad_flags(root) -> list[tuple[list[str], str]]:
    data, out = str(root / "data"), str(root / "out")
    image = os.path.join(data, "daisy", sorted(os.listdir(os.path.join(data, "daisy")))[0])
    return [
        (["build", "--input", data, "--output_dir", out, "--direct_num_workers", "-1"],
         "--direct_num_workers"),
        (["build", "--input", "", "--output_dir", out], "--input"),
        (["build", "--input", data, "--output_dir", out, "--class_names", ""], "--class_names"),
        (["build", "--input", image, "--output_dir", out], "--input"),
        (["verify", "--output_dir", data, "--report", "/proc/no-such-folder/report.json"], "--report"),
        (["sample", "--output", str(root / "s"), "--size_mb", "-1"], "--size_mb"),
        (["sample", "--output", str(root / "file.txt")], "--output"),
        (["inspect", "/dev/zero"], "/dev/zero"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("case", range(8))
def test_bad_flag_is_one_line_and_exit_2_before_reading(small_tree, case, tfrs):
    """A13: each bad flag is refused before the job reads anything, in one line naming it."""
    argv, flag = _bad_flags(small_tree)[case]
    done = tfrs(*argv)
    assert done.returncode == 2, (argv, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "error: " in lines[0] and flag in lines[0], (argv, done.stderr)
    assert not (small_tree / "out").exists() and not (small_tree / "s").exists()


@pytest.mark.slow
def test_lock_path_that_is_a_folder_is_one_line(small_tree, tmp_path, tfrs):
    """A12: a folder where the run's lock goes is refused in one line, not a traceback."""
    out = tmp_path / "out"
    (out / ".tfrecord-shards.lock").mkdir(parents=True)
    done = tfrs("build", "--input", str(small_tree / "data"), "--output_dir", str(out))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert ".tfrecord-shards.lock" in lines[0] and lines[0].startswith("build_shards: error: ")
    assert (out / ".tfrecord-shards.lock").is_dir()  # not the tool's: left alone


@pytest.mark.slow
def test_sample_with_more_broken_files_than_images(tmp_path, tfrs):
    """A12: broken files go into class folders no image went to."""
    done = tfrs("sample", "--output", str(tmp_path / "s"), "--size_mb", "0.001", "--broken", "4")
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(tmp_path / "s")) == ["daisy", "rose", "tulip"]
    assert sum(len(files) for _, _, files in os.walk(tmp_path / "s")) == 1 + 4


def _interrupted_at(tmp_path, op: str, pattern: str, argv: list[str], sig: int = signal.SIGINT,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs ``tfrecord-shards ARGV`` paused before a file operation (``tests.pause_at``), sends
    ``sig`` there, lets it go on, and returns how it ended. ``env``: more environment."""
    marker = str(tmp_path / "paused.json")
    proc = subprocess.Popen([sys.executable, "-m", "tests.pause_at", op, pattern, "1", marker, "--",
                             *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})},
                            preexec_fn=sigint_as_in_a_terminal)
    try:
        while not os.path.exists(marker):
            try:
                proc.wait(timeout=0.05)
                pytest.fail(f"ended ({proc.returncode}) before pausing:\n{proc.stderr.read()}")
            except subprocess.TimeoutExpired:
                pass
        proc.send_signal(sig)
        open(marker + ".go", "w").close()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow
@pytest.mark.parametrize("op, pattern", [("match", "data"), ("create", "train-")],
                         ids=["starting", "writing_shards"])
def test_ctrl_c_prints_one_line_and_exits_130(small_tree, tmp_path, op, pattern):
    """A12: Ctrl-C while the job starts or while it writes: no traceback, one line, status 130."""
    out = tmp_path / "out"
    done = _interrupted_at(tmp_path, op, pattern,
                           ["build", "--input", str(small_tree / "data"), "--output_dir", str(out)])
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "failed" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert not any(line.startswith(("build_shards:", "tfrecord-shards:")) for line in lines[:-1])
    left = sorted(os.listdir(out)) if out.exists() else []
    if op == "match":  # nothing staged yet
        assert lines[-1] == "build_shards: interrupted: nothing was published; staging removed"
        assert left == [] or left == [".staging"] and os.listdir(out / ".staging") == [], left
    else:  # the finished work is kept for a rerun to resume (tests/e2e/test_resume.py); the lock is gone
        assert lines[-1] == (f"build_shards: interrupted: nothing was published; the finished work is kept in "
                             f"{out}/.staging: run the same command again to resume")
        assert left == [".staging"], left
        assert [os.path.exists(os.path.join(out, ".staging", run, "resume.json"))
                for run in os.listdir(out / ".staging")] == [True]


@pytest.mark.slow
def test_sigterm_stops_a_build_as_ctrl_c_does_and_leaves_no_temporary_files(small_tree, tmp_path):
    """``timeout``, ``kill``, ``docker stop``, Kubernetes and Slurm stop a job with SIGTERM: the job says
    so in one line, keeps its finished work for the rerun, releases its lock, exits 143 (128 + 15) and
    leaves nothing in the temporary folder."""
    out, temp = tmp_path / "out", tmp_path / "temp"
    temp.mkdir()
    done = _interrupted_at(tmp_path, "create", "train-",
                           ["build", "--input", str(small_tree / "data"), "--output_dir", str(out)],
                           sig=signal.SIGTERM, env={"TMPDIR": str(temp)})
    assert done.returncode == 143, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"build_shards: interrupted: nothing was published; the finished work is kept in "
        f"{out}/.staging: run the same command again to resume")
    assert sorted(os.listdir(out)) == [".staging"]  # no lock left
    assert os.listdir(temp) == []


# The job runs as the ``tfrecord-shards`` script runs it (``sys.exit(main())``, its output a pipe), and the
# process signals itself at the moment the job's own Ctrl-C and SIGTERM handlers are gone: the job has
# published and printed its summary, and the process has not ended yet.
_SIGNAL_AFTER_THE_JOB = """
import os, signal, sys
from beam_jobs.cli import harness
from beam_jobs.cli.main import main

restore = harness._Interrupts.__exit__

def restored_then_signalled(self, *exc):
    ended = restore(self, *exc)
    os.kill(os.getpid(), int(os.environ["SIGNAL_AFTER_THE_JOB"]))
    return ended

harness._Interrupts.__exit__ = restored_then_signalled
sys.argv = ["tfrecord-shards", *sys.argv[1:]]
sys.exit(main())
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl_c"])
def test_a_signal_after_the_job_published_keeps_its_summary_and_its_status(small_tree, tmp_path, sig):
    """A SIGTERM or Ctrl-C that comes once the job has published and said so, while its process ends,
    loses nothing: the summary already written to a pipe reaches the reader, and the process ends at once
    with the job's status. No line says the run was interrupted before it published."""
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", _SIGNAL_AFTER_THE_JOB, "build", "--input",
                           str(small_tree / "data"), "--output_dir", str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "SIGNAL_AFTER_THE_JOB": str(int(sig))},
                          preexec_fn=sigint_as_in_a_terminal)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "Published" in done.stdout, done.stdout
    assert "interrupted" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert load_manifest(str(out))["records"] == 6


@pytest.mark.slow
@pytest.mark.parametrize("job", ["reshard", "verify"])
def test_dry_run_on_the_local_runner_is_refused_and_nothing_runs(tmp_path, job, tfrs):
    """Beam ignores --dry_run on the DirectRunner: the job ran and republished.

    A build is refused too, naming tfrecord-shards plan (tests/e2e/test_plan_build.py).
    """
    from tests.shard_fixtures import make_class_tree

    make_class_tree(str(tmp_path / "in"), classes=("rose",), per_class=2, broken=False)
    out = tmp_path / "out"
    argv = {"reshard": ["--input", str(tmp_path / "in" / "rose" / "*"), "--output_dir", str(out)],
            "verify": ["--output_dir", str(tmp_path / "in")]}[job]
    done = tfrs(job, *argv, "--dry_run", "True")
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--dry_run" in lines[0] and "DataflowRunner" in lines[0], done.stderr
    assert not out.exists()


_FAILING_THREADS = """
import threading
from beam_jobs.cli.harness import _Interrupts

def fail(message):
    raise RuntimeError(message)

with _Interrupts() as interrupts:
    thread = threading.Thread(target=fail, args=("before the ctrl-c",))
    thread.start()
    thread.join()
    interrupts.seen = True  # what the SIGINT handler records
    thread = threading.Thread(target=fail, args=("Worker subprocess exited with return code -2",))
    thread.start()
    thread.join()
"""


@pytest.mark.slow
def test_after_a_ctrl_c_the_runners_failing_threads_print_nothing():
    """A terminal's Ctrl-C also stops multi_processing workers; the runner's threads watching them
    then raise (`Worker subprocess exited with return code -2`). Only the job's line may show."""
    done = subprocess.run([sys.executable, "-c", _FAILING_THREADS], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), check=True)
    assert "before the ctrl-c" in done.stderr  # a thread failing for another reason is still shown
    assert "return code -2" not in done.stderr


@pytest.mark.parametrize("command", [["beam_jobs.cli.main", "build", "--help"], ["beam_jobs.cli.main", "--help"],
                                     ["beam_jobs.build_shards", "--help"]])
def test_help_read_by_a_reader_that_stops_early_ends_without_a_traceback(command):
    # `tfrecord-shards build --help | head`: head closes the pipe; the help's writes then fail.
    child = subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": ROOT})
    child.stdout.close()  # the reader went away before a byte was written
    err = child.stderr.read().decode()
    assert child.wait(timeout=60) == 0, err
    assert err == "", err
