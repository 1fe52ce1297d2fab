"""Starts the local runner's worker processes by forking one that has already loaded Beam's SDK worker.

With ``--direct_running_mode multi_processing`` Beam 2.77 starts each SDK worker as a new Python
(``python -m apache_beam.runners.worker.sdk_worker_main``) that loads Beam and the job's modules again:
1.5-2 CPU s a worker here, 3.7 on a 16-core Xeon, where 16 workers cost a build more than its work
(BENCHMARKS.md, "Scaling benchmark"). Here one process, started once per launching process while the
pipeline is still being built, loads them; each worker is a fork of it (``os.fork``, a few ms). A forked
worker gets what Beam would have given the new process: the environment Beam built for it, the launcher's
standard output and error as they are at that moment (sent over a Unix socket), and the same exit status.
Only the process that forks is started by ``subprocess``: it never runs a pipeline's code, so every
worker starts from the same state. If it cannot be started, Beam's own way is used.

The forking process ends when the launcher does (its socket closes), killing any worker left.
"""

from __future__ import annotations

import array
import atexit
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Sequence

__all__ = ["ForkedWorker", "start_forking", "popen_or_fork", "serve"]

# Beam's own command line for a worker process (fn_runner.FnApiRunner, ``multi_processing``).
SDK_WORKER_COMMAND = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"
SDK_WORKER_MODULE = "apache_beam.runners.worker.sdk_worker_main"
# Packages whose loaded modules the forking process loads too, so that workers unpickle the job at once.
PRELOADED_PACKAGES = ("transforms", "beam_jobs")

_lock = threading.Lock()
_forker: "_Forker | None" = None


class ForkedWorker:
    """A worker forked by the forking process; answers as much of ``subprocess.Popen`` as Beam uses."""

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid, self.returncode, self._status = pid, None, status

    def wait(self) -> int:
        """Waits for the worker to end; its exit status (a negative signal number if killed)."""
        if self.returncode is None:
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = self._status.recv(64)
                if not chunk:  # the forking process ended first: it killed the worker
                    reply = b"-9\n"
                    break
                reply += chunk
            self._status.close()
            self.returncode = int(reply)
        return self.returncode

    def poll(self) -> int | None:
        """The exit status if the worker ended, else None."""
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            return self.wait()
        return self.returncode

    def kill(self) -> None:
        """Kills the worker, if it still runs."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class _Forker:
    """The launcher's end of the forking process."""

    def __init__(self, modules: Sequence[str]) -> None:
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"import {__name__} as m; m.serve({there.fileno()})", *modules],
            pass_fds=[there.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        there.close()
        self.socket, self.ready = here, None

    def wait_ready(self) -> bool:
        """Whether the forking process loaded its modules and waits for requests (once)."""
        if self.ready is None:
            try:
                self.ready = self.socket.recv(6) == b"ready\n"
            except OSError:
                self.ready = False
        return self.ready

    def fork(self, env: dict[str, str]) -> ForkedWorker:
        """Asks for a worker with ``env`` and this process's standard output and error as they are now."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        body = json.dumps(env).encode()
        fds = [1, 2, theirs.fileno()]
        self.socket.sendmsg([len(body).to_bytes(8, "big"), body],
                            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        theirs.close()
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = mine.recv(64)
            if not chunk:
                raise OSError("the process that forks workers ended")
            reply += chunk
        return ForkedWorker(int(reply), mine)

    def close(self) -> None:
        self.socket.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_forking() -> None:
    """Starts the forking process now (it loads its modules while the pipeline is built), unless started."""
    global _forker
    with _lock:
        if _forker is None or _forker.process.poll() is not None:
            modules = [SDK_WORKER_MODULE] + sorted(name for name in sys.modules
                                                   if name.split(".")[0] in PRELOADED_PACKAGES)
            try:
                _forker = _Forker(modules)
            except OSError:
                _forker = None
                return
            atexit.register(_forker.close)


def popen_or_fork(args: Any, *rest: Any, env: dict[str, str] | None = None, **kwargs: Any) -> Any:
    """``subprocess.Popen``, but Beam's default worker command is a fork of the forking process when it runs."""
    if args == SDK_WORKER_COMMAND and env is not None and not rest and kwargs == {"shell": True}:
        with _lock:
            forker = _forker
        if forker is not None and forker.wait_ready():
            try:
                return forker.fork(env)
            except OSError:
                pass  # Beam's own way, below
    return subprocess.Popen(args, *rest, env=env, **kwargs)


# -- the forking process -----------------------------------------------------------------------------


def serve(fd: int) -> None:
    """The forking process: loads ``sys.argv[1:]``'s modules, then forks a worker for each request on ``fd``."""
    from transforms import beam_compat

    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except Exception:  # a module that loads only in its own program: the worker loads what it needs
            pass
    beam_compat.install_construction_memos()
    import gc

    gc.collect()
    gc.freeze()  # what was loaded stays shared with the workers, not copied on their first collection
    launcher = socket.socket(fileno=fd)
    launcher.sendall(b"ready\n")
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the launcher's (and the workers') to act on
    statuses: dict[int, socket.socket] = {}
    while True:
        readable = select.select([launcher, wake_read], [], [])[0]
        if wake_read in readable:
            os.read(wake_read, 512)
            _report_ended(statuses)
        if launcher in readable:
            request = _receive(launcher)
            if request is None:
                break
            env, fds = request
            pid = os.fork()
            if pid == 0:
                _run_worker(env, fds, [launcher, *statuses.values()], [wake_read, wake_write])
            os.close(fds[0])
            os.close(fds[1])
            status = socket.socket(fileno=fds[2])
            statuses[pid] = status
            status.sendall(f"{pid}\n".encode())
    for pid in statuses:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os._exit(0)


def _receive(launcher: socket.socket) -> tuple[dict[str, str], list[int]] | None:
    """One request: the worker's environment and three descriptors (stdout, stderr, status); None at EOF."""
    fds = array.array("i")
    head, ancillary, _, _ = launcher.recvmsg(8, socket.CMSG_SPACE(3 * fds.itemsize))
    if len(head) < 8:
        return None
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    size, body = int.from_bytes(head, "big"), b""
    while len(body) < size:
        chunk = launcher.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body), list(fds)


def _report_ended(statuses: dict[int, socket.socket]) -> None:
    """Tells the launcher the exit status of each worker that ended (as ``Popen.returncode`` gives it)."""
    while statuses:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        reply = statuses.pop(pid, None)
        if reply is not None:
            try:
                reply.sendall(f"{code}\n".encode())
            except OSError:  # the launcher stopped waiting for it
                pass
            reply.close()


def _run_worker(env: dict[str, str], fds: list[int], sockets: list[socket.socket], pipe: list[int]) -> None:
    """In the forked worker: becomes what Beam's new process would have been and runs the SDK worker.

    It never returns: the worker's end (``SystemExit``, or an exception printed as Python prints it) ends
    the process as it would end Beam's new one, with its ``atexit`` functions run and its threads joined.
    """
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for own in sockets:
        own.close()
    for fd in [*pipe, fds[2]]:
        os.close(fd)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    os.close(fds[0])
    os.close(fds[1])
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [SDK_WORKER_MODULE]
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)
    raise SystemExit(0)
