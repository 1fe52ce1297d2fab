"""Run a module as ``__main__`` and write what its process used, for ``benchmarks/scaling.py``.

    python -m benchmarks.child_usage USAGE_JSON [--count_stages] MODULE [ARG ...]

Runs ``python -m MODULE ARG ...`` in this same process (``runpy``, so the module
sees the ``sys.argv`` and ``__name__`` it would see on its own), then writes
``USAGE_JSON`` with:

- ``self_cpu``: user + system seconds of this process, every thread
  (``getrusage(RUSAGE_SELF)``), taken after the module returned;
- ``children_cpu``: user + system seconds of every descendant that ended and
  was waited for (``getrusage(RUSAGE_CHILDREN)``: Beam's ``multi_processing``
  workers, a ``multiprocessing.Pool``'s processes, and their own children);
- ``unreaped_cpu`` and ``unreaped``: descendants still alive at that moment
  (none expected), with the CPU seconds psutil reads for them and their
  waited-for children, so nothing is lost silently;
- with ``--count_stages``, ``stages``: for each pipeline the FnApiRunner ran,
  the number of fused stages it executed (the length of the stage list
  ``FnApiRunner.run_stages`` receives, the figure Beam's runner also records as
  its ``__num_fused_stages`` counter), and ``stage_names``.

``--count_stages`` wraps ``apache_beam.runners.portability.fn_api_runner.
fn_runner.FnApiRunner.run_stages`` (checked on apache-beam 2.77.0); without it
Beam is not imported here, so a baseline without Beam pays nothing for it.
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

__all__ = ["main"]


def _count_stages(stages: list[dict]) -> None:
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    original = fn_runner.FnApiRunner.run_stages

    def run_stages(self, stage_context, stage_list):
        stages.append({"stages": len(stage_list), "stage_names": [s.name for s in stage_list]})
        return original(self, stage_context, stage_list)

    fn_runner.FnApiRunner.run_stages = run_stages


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def _unreaped() -> tuple[int, float]:
    import psutil

    alive, seconds = 0, 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue  # ended in between; its time went to whoever waited for it
        alive += 1
        seconds += times.user + times.system + times.children_user + times.children_system
    return alive, seconds


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, rest = argv[0], argv[1:]
    stages: list[dict] = []
    if rest[0] == "--count_stages":
        _count_stages(stages)
        rest = rest[1:]
    module, args = rest[0], rest[1:]
    sys.argv = [module] + args
    status = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as ended:
        code = ended.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
        status = code if isinstance(code, int) else (0 if code is None else 1)
    usage = {"self_cpu": _cpu(resource.getrusage(resource.RUSAGE_SELF)),
             "children_cpu": _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))}
    usage["unreaped"], usage["unreaped_cpu"] = _unreaped()
    if stages:
        usage["pipelines"] = stages
    with open(out, "w") as fh:
        json.dump(usage, fh)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
