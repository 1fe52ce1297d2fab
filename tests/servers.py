"""Real servers for integration tests, started once per session on 127.0.0.1.

Registered as a pytest plugin by ``conftest.py``:

- ``s3_server``: moto's S3 API server (``moto_server``, from ``moto[server]``);
- ``gcs_server``: ``gcp-storage-emulator``, with ``STORAGE_EMULATOR_HOST`` set
  for the session so every GCS client in the process talks to it;
- ``job_server``: Beam's local job service, the portable job API a Flink job
  server also speaks.

Each is a subprocess on a free loopback port; a fixture waits until the port
accepts connections (bounded), and stops the process at the end.
"""

from __future__ import annotations

import os
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


def start_server(argv: Sequence[str], port: int, log_path: str) -> Server:
    """Starts ``argv`` and returns once ``port`` accepts connections.

    Waits at most ``_START_TIMEOUT_S``; between tries it waits on the process,
    so a server that exits at once fails the fixture with its log.
    """
    log = open(log_path, "wb")
    process = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
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
