"""Real servers for integration tests, started once per session on 127.0.0.1.

Registered as a pytest plugin by ``conftest.py``:

- ``s3_server``: moto's S3 API server (``moto_server``, from ``moto[server]``);
- ``gcs_server``: ``gcp-storage-emulator``, with ``STORAGE_EMULATOR_HOST`` set
  for the session so every GCS client in the process talks to it;
- ``job_server``: Beam's local job service, the portable job API a Flink job
  server also speaks;
- ``worker_pool``: Beam's SDK worker pool for ``--environment_type EXTERNAL``,
  started in a mount namespace of its own with a private ``/tmp`` (as a
  Dataflow or Flink container has): its workers share no temporary folder with
  the process that launches the job, and are bare SDK harnesses (no container
  boot hands them the pipeline's options).

Each is a subprocess on a free loopback port; a fixture waits until the port
accepts connections (bounded), and stops the process at the end.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Iterator, Sequence

import pytest

HOST = "127.0.0.1"
_START_TIMEOUT_S = 60.0
_POLL_S = 0.05


@dataclass(frozen=True)
class Server:
    """A running server: its process and where it listens."""

    process: subprocess.Popen
    port: int

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1.0).close()
        return True
    except OSError:
        return False


def start_server(argv: Sequence[str], port: int, log_path: str, env: dict[str, str] | None = None) -> Server:
    """Starts ``argv`` and returns once ``port`` accepts connections.

    Waits at most ``_START_TIMEOUT_S``; between tries it waits on the process,
    so a server that exits at once fails the fixture with its log.
    """
    log = open(log_path, "wb")
    process = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=env)
    log.close()
    for _ in range(int(_START_TIMEOUT_S / _POLL_S)):
        if _accepts(port):
            return Server(process, port)
        try:
            status = process.wait(timeout=_POLL_S)
        except subprocess.TimeoutExpired:
            continue
        with open(log_path, "rb") as fh:
            raise RuntimeError(f"{argv[0]} exited with {status}:\n{fh.read().decode(errors='replace')}")
    stop_server(process)
    raise RuntimeError(f"{' '.join(argv)} did not listen on {HOST}:{port} in {_START_TIMEOUT_S:.0f} s")


def stop_server(process: subprocess.Popen) -> None:
    """Stops a server started by ``start_server``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def venv_script(name: str) -> str:
    """The console script ``name`` installed beside this Python, else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    found = beside if os.path.exists(beside) else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed; pip install -e '.[test]'")
    return found


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[Server]:
    """moto's S3 server on loopback."""
    port = free_port()
    log = str(tmp_path_factory.mktemp("moto") / "server.log")
    server = start_server([venv_script("moto_server"), "-H", HOST, "-p", str(port)], port, log)
    yield server
    stop_server(server.process)


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory) -> Iterator[Server]:
    """gcp-storage-emulator on loopback; ``STORAGE_EMULATOR_HOST`` points at it."""
    port = free_port()
    log = str(tmp_path_factory.mktemp("gcs") / "server.log")
    server = start_server([venv_script("gcp-storage-emulator"), "start", "--host", HOST,
                           "--port", str(port), "--in-memory"], port, log)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("STORAGE_EMULATOR_HOST", server.url)
        yield server
    stop_server(server.process)


@pytest.fixture(scope="session")
def job_server(tmp_path_factory) -> Iterator[Server]:
    """Beam's local job service (the portable job API) on loopback."""
    port = free_port()
    log = str(tmp_path_factory.mktemp("jobservice") / "server.log")
    server = start_server([sys.executable, "-m", "apache_beam.runners.portability.local_job_service_main",
                           "--port", str(port)], port, log)
    yield server
    stop_server(server.process)


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A private /tmp: the mount namespace of a container, on this machine (needs root, or user namespaces).
_PRIVATE_TMP = "mount -t tmpfs tmpfs /tmp"


def _private_tmp_keeping(paths: Sequence[str]) -> str:
    """Shell commands giving a mount namespace a tmpfs on /tmp in which ``paths`` under /tmp (this
    repository, its virtualenv, when a clone lies there) are still seen, bound from the old /tmp
    (held at /mnt, in the namespace only); nothing else of the old /tmp is."""
    kept = sorted({os.path.realpath(path) for path in paths
                   if os.path.realpath(path).startswith("/tmp/")})
    if not kept:
        return _PRIVATE_TMP
    steps = ["mount --bind /tmp /mnt", _PRIVATE_TMP]
    for path in kept:
        old = "/mnt/" + path[len("/tmp/"):]
        steps += [f"mkdir -p {shlex.quote(path)}", f"mount --bind {shlex.quote(old)} {shlex.quote(path)}"]
    return " && ".join(steps)


def unshare_refused() -> str | None:
    """Why this machine refuses a mount namespace with a private /tmp, or None."""
    if shutil.which("unshare") is None:
        return "no unshare command on this machine"
    done = subprocess.run(["unshare", "-m", "sh", "-c", _PRIVATE_TMP], capture_output=True, text=True,
                          timeout=30, check=False)
    return None if done.returncode == 0 else f"this machine refuses 'unshare -m' with a tmpfs on /tmp: {done.stderr.strip()}"


BOOT = os.path.join(REPO, "tests", "worker_boot.py")


def start_worker_pool(log_path: str, env: dict[str, str] | None = None, boot: bool = False) -> Server:
    """Starts Beam's worker pool (``worker_pool_main``) in a mount namespace with a private /tmp.

    Its workers get this Python first on their ``PATH`` and this repository on
    ``PYTHONPATH``, and reach S3 only through what the job's options say
    (``AWS_EC2_METADATA_DISABLED``: no metadata server). ``env``: more
    environment for the pool and its workers. ``boot``: workers start through
    ``tests/worker_boot.py`` (the pool's ``--container_executable``, as a
    container's boot is started) instead of the pool's ``python -c``; both give
    a bare SDK harness, and the boot script's pause hook (``TFRS_WORKER_PAUSE_AT``)
    can stop a worker at a chosen file operation.
    """
    port = free_port()
    full = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                PYTHONPATH=REPO, AWS_EC2_METADATA_DISABLED="true", **(env or {}))
    private = _private_tmp_keeping([REPO, sys.prefix, sys.base_prefix])
    command = (f"{private} && exec {sys.executable} -m apache_beam.runners.worker.worker_pool_main "
               f"--service_port={port}" + (f" --container_executable={shlex.quote(BOOT)}" if boot else ""))
    return start_server(["unshare", "-m", "sh", "-c", command], port, log_path, env=full)


@pytest.fixture(scope="session")
def worker_pool(tmp_path_factory) -> Iterator[Server]:
    """Beam's worker pool (``worker_pool_main``) whose workers see a /tmp of their own.

    Workers are started by the pool as ``python -c 'SdkHarness(...).run()'``
    (``start_worker_pool``).
    """
    refused = unshare_refused()
    if refused:
        pytest.skip(refused)
    server = start_worker_pool(str(tmp_path_factory.mktemp("workerpool") / "server.log"))
    yield server
    stop_server(server.process)
