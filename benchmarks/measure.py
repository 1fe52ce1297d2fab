"""Run one command as a subprocess and measure its wall time and peak memory.

Two memory figures, because Beam's ``multi_processing`` mode runs its workers
as child processes:

- ``rss_tree``: the peak of the summed RSS of the process and all its
  descendants, sampled every 20 ms with psutil (a peak shorter than that can
  be missed; pages shared between processes are counted once per process);
- ``rss_process``: the largest peak RSS of any single process of the tree, as
  the kernel reports it to ``wait4`` (exact; ``/usr/bin/time -v`` reports the
  same figure).
"""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import psutil

_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
__all__ = ["Measurement", "checkout_env", "run_measured", "add_photo_flags", "photo_root", "machine",
           "interleaved_rounds", "medians", "ratio_table"]

_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Measurement:
    """What one run of a command took."""

    seconds: float
    cpu_seconds: float  # user + system, of the process and its waited-for descendants
    rss_tree: int  # bytes
    rss_process: int  # bytes
    returncode: int
    output: str


def _tree_rss(root: psutil.Process) -> int:
    total = 0
    try:
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass  # exited between listing and reading
    return total


def run_measured(cmd: Sequence[str], cwd: str, log_path: str, env: dict | None = None) -> Measurement:
    """Runs ``cmd``; its stdout and stderr go to ``log_path`` (and are returned)."""
    with open(log_path, "wb") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env)
        peak = [0]
        done = threading.Event()

        def poll() -> None:
            try:
                root = psutil.Process(proc.pid)
            except psutil.Error:
                return
            while not done.is_set():
                peak[0] = max(peak[0], _tree_rss(root))
                done.wait(_POLL_SECONDS)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        done.set()
        poller.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    with open(log_path, "r", errors="replace") as fh:
        output = fh.read()
    return Measurement(seconds, usage.ru_utime + usage.ru_stime, peak[0], usage.ru_maxrss * 1024,
                       proc.returncode, output)


def checkout_env() -> dict[str, str]:
    """This process's environment with this checkout first on ``PYTHONPATH``.

    The commands measured, and the worker processes Beam starts for them,
    then import this checkout's code whatever is installed.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([_CHECKOUT] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def add_photo_flags(parser, size_mb: float) -> None:
    """The flags every photo benchmark takes: ``--size_mb`` (of generated photos), ``--input``, ``--rounds``."""
    parser.add_argument("--size_mb", type=float, default=size_mb)
    parser.add_argument("--input", default=None, help="A photo folder to use instead of the generated one.")
    parser.add_argument("--rounds", type=int, default=3)


def photo_root(args) -> str:
    """The photo folder a benchmark reads: ``--input``, else generated photos of ``--size_mb``."""
    if args.input:
        return args.input
    from benchmarks import photos  # here: it needs the bench extra's packages

    return photos.dataset(args.size_mb).root


def machine() -> dict:
    """The machine a benchmark ran on: cores, memory, CPU model, Python, and the load when it started."""
    cpu = platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as fh:
            names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"cores": os.cpu_count(), "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu": cpu, "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}


def interleaved_rounds(cases: Mapping[str, Callable[[str], list[str]]], rounds: int, tmp: str, env: dict,
                       before: Callable[[str, str], None] | None = None,
                       after: Callable[[str, str], None] | None = None) -> dict[str, list[tuple[float, float]]]:
    """Runs every case once a round, the cases interleaved, each a fresh process into an empty ``tmp/out``.

    Args:
        cases: Each case's command, given its output folder.
        rounds: Rounds.
        tmp: A scratch folder (the output folder and the log go there).
        env: The commands' environment.
        before: Called with the case's name and output folder before it runs (untimed).
        after: Called with the same after it ran (untimed; raise ``SystemExit`` to stop).

    Returns:
        Each case's (wall, CPU) seconds, a pair a round.

    Raises:
        SystemExit: A case failed (its output's end is said).
    """
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, command in cases.items():
            out = os.path.join(tmp, "out")
            shutil.rmtree(out, ignore_errors=True)
            if before is not None:
                before(name, out)
            measured = run_measured(command(out), _CHECKOUT, os.path.join(tmp, "log"), env=env)
            if measured.returncode != 0:
                raise SystemExit(f"{name} failed: {measured.output[-2000:]}")
            if after is not None:
                after(name, out)
            found[name].append((measured.seconds, measured.cpu_seconds))
    return found


def medians(found: Mapping[str, Sequence[tuple[float, float]]]) -> dict[str, tuple[float, float]]:
    """Each case's median wall and median CPU seconds (of ``interleaved_rounds``'s pairs)."""
    return {name: (statistics.median(s for s, _ in runs), statistics.median(c for _, c in runs))
            for name, runs in found.items()}


def ratio_table(title: str, median: Mapping[str, tuple[float, float]], baseline: str, label: str) -> str:
    """A Markdown table of each case's median wall and CPU seconds and their ratios to ``baseline``'s.

    Args:
        title: The first header cell.
        median: Each case's (wall, CPU) seconds (``medians``).
        baseline: The case the ratios are to.
        label: What the ratio columns call the baseline ("wall / LABEL's").
    """
    wall0, cpu0 = median[baseline]
    lines = [f"| {title} | wall s | CPU s | wall / {label}'s | CPU / {label}'s |", "|---|---:|---:|---:|---:|"]
    for name, (wall, cpu) in median.items():
        lines.append(f"| {name.replace('|', chr(92) + '|')} | {wall:.2f} | {cpu:.2f} | {wall / wall0:.2f} | "
                     f"{cpu / cpu0:.2f} |")
    return "\n".join(lines)
