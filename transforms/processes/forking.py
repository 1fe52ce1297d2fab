"""Programs started as forks of one process that has already loaded their modules, not each a new Python.

A process started once (``start_forking``) loads the modules named, runs the set-up functions named, then
waits. Each ``fork(env)`` asks it for a child (``os.fork``, a few ms) that takes ``env`` as its environment,
this process's standard output and error as they are at that moment (sent over a Unix socket), and runs
the named main function; its exit status comes back as ``subprocess.Popen`` gives it. The forking process
never runs a program itself, so every child starts from the same state. It ends with ``stop_forking`` or
when this process does (its socket closes), killing any child left. ``beam_compat`` starts the local
runner's worker processes this way.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Callable, Iterator, Sequence

__all__ = ["ForkedProgram", "start_forking", "stop_forking", "in_use", "fork", "main"]

# How long a forking process may take to load its modules before the caller starts its program itself.
READY_SECONDS = 120
_lock = threading.Lock()
_forker: "_Forker | None" = None
_users = 0  # blocks inside ``in_use`` now


class ForkedProgram:
    """A child of the forking process; answers ``subprocess.Popen``'s ``pid``, ``returncode``, ``wait``,
    ``poll`` and ``kill``."""

    def __init__(self, pid: int, status: socket.socket) -> None:
        self.pid, self.returncode, self._status = pid, None, status

    def wait(self) -> int:
        """Waits for the program to end; its exit status (a negative signal number if killed)."""
        if self.returncode is None:
            reply = _line(self._status)  # None: the forking process ended first, killing the program
            self._status.close()
            self.returncode = -signal.SIGKILL if reply is None else int(reply)
        return self.returncode

    def poll(self) -> int | None:
        """The exit status if the program ended, else None."""
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            return self.wait()
        return self.returncode

    def kill(self) -> None:
        """Kills the program, if it still runs."""
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class _Forker:
    """This process's end of the forking process."""

    def __init__(self, plan: dict[str, Any]) -> None:
        here, there = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"import {__name__} as m; m.main({there.fileno()})", json.dumps(plan)],
            pass_fds=[there.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        there.close()
        self.socket, self.ready, self._sending = here, None, threading.Lock()

    def wait_ready(self) -> bool:
        """Whether the forking process loaded its modules and waits for requests (once)."""
        with self._sending:
            if self.ready is None:
                self.socket.settimeout(READY_SECONDS)
                try:
                    self.ready = _line(self.socket) == b"ready"
                except OSError:  # a time-out too
                    self.ready = False
                self.socket.settimeout(None)
            return self.ready

    def fork(self, env: dict[str, str]) -> ForkedProgram:
        """Asks for a child with ``env`` and this process's standard output and error as they are now."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        body = json.dumps(env).encode()
        fds = [1, 2, theirs.fileno()]
        try:
            with self._sending:
                self.socket.sendmsg([len(body).to_bytes(8, "big"), body],
                                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        finally:
            theirs.close()
        pid = _line(mine)
        if pid is None:
            mine.close()
            raise OSError("the forking process ended")
        return ForkedProgram(int(pid), mine)

    def close(self) -> None:
        self.socket.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _line(sock: socket.socket) -> bytes | None:
    """The next line on ``sock`` (one of this module's short answers, read a byte at a time), or None at its end."""
    line = b""
    while not line.endswith(b"\n"):
        byte = sock.recv(1)
        if not byte:
            return None
        line += byte
    return line[:-1]


def start_forking(preload: Sequence[str], setup: Sequence[str], main: str) -> None:
    """Starts the forking process now, unless one runs (it loads while this process goes on).

    Args:
        preload: Modules it loads (one that fails to load is left to the child).
        setup: Functions (``module:function``) it calls once they are loaded.
        main: The function (``module:function``) each child calls with ``sys.argv``; the child ends
            as a program whose main returned (status 0), raised ``SystemExit`` or failed (status 1).
    """
    global _forker
    with _lock:
        if hasattr(os, "fork") and (_forker is None or _forker.process.poll() is not None):
            try:
                _forker = _Forker({"preload": list(preload), "setup": list(setup), "main": main})
            except OSError:
                _forker = None


def fork(env: dict[str, str]) -> ForkedProgram | None:
    """A child of the forking process with ``env``; None when none runs or it cannot answer."""
    with _lock:
        forker = _forker
    if forker is None or not forker.wait_ready():
        return None
    try:
        return forker.fork(env)
    except OSError:
        return None


@contextlib.contextmanager
def in_use() -> Iterator[None]:
    """Within the block the forking process is in use: it ends once the last block that uses it ends (two
    pipelines run at once in one process share it, and neither's end kills the other's workers)."""
    global _users
    with _lock:
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            last = _users == 0
        if last:
            stop_forking()


def stop_forking() -> None:
    """Ends the forking process (and any child of it left), if one runs; the process's end does too."""
    global _forker
    with _lock:
        forker, _forker = _forker, None
    if forker is not None:
        forker.close()


atexit.register(stop_forking)


# -- the forking process -----------------------------------------------------------------------------


def main(fd: int) -> None:
    """The forking process: carries out ``sys.argv[1]``'s plan (``start_forking``), then forks a child for
    each request on ``fd``."""
    plan = json.loads(sys.argv[1])
    for name in plan["preload"]:
        try:
            importlib.import_module(name)
        except Exception:  # a module that loads only in its own program: the child loads what it needs
            pass
    for name in plan["setup"]:
        _function(name)()
    program = _function(plan["main"])
    gc.collect()
    gc.freeze()  # what was loaded stays shared with the children, not copied on their first collection
    launcher = socket.socket(fileno=fd)
    launcher.sendall(b"ready\n")
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the launcher's (and the children's) to act on
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
            if len(fds) != 3:  # not a request this module sends: closing its descriptors answers it
                for extra in fds:
                    os.close(extra)
                continue
            pid = os.fork()
            if pid == 0:
                _run_child(program, env, fds, [launcher, *statuses.values()], [wake_read, wake_write])
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
    """One request: the child's environment and three descriptors (stdout, stderr, status); None at EOF."""
    fds = array.array("i")
    head, ancillary, _, _ = launcher.recvmsg(8, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    head = _exactly(launcher, head, 8)
    body = _exactly(launcher, b"", int.from_bytes(head, "big")) if head else None
    if body is None:
        return None
    return json.loads(body), list(fds)


def _exactly(launcher: socket.socket, start: bytes, size: int) -> bytes | None:
    """``start`` and what follows it on ``launcher`` up to ``size`` bytes; None if it closes first."""
    while len(start) < size:
        chunk = launcher.recv(size - len(start))
        if not chunk:
            return None
        start += chunk
    return start


def _report_ended(statuses: dict[int, socket.socket]) -> None:
    """Tells the launcher the exit status of each child that ended (as ``Popen.returncode`` gives it)."""
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


def _function(name: str) -> Callable[..., Any]:
    """The function ``module:function`` names."""
    module, function = name.split(":")
    return getattr(importlib.import_module(module), function)


def _run_child(main: Callable[..., Any], env: dict[str, str], fds: list[int], sockets: list[socket.socket],
               pipe: list[int]) -> None:
    """In the child: takes its environment and standard output and error, and runs ``main``.

    It never returns: the program's end (``SystemExit``, or an exception printed as Python prints it) ends
    the process as it would end a new Python, with its ``atexit`` functions run and its threads joined.
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
    sys.argv = [main.__module__]
    main(sys.argv)
    raise SystemExit(0)
