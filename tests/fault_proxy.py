"""A loopback HTTP proxy that fails chosen requests: fault injection in front of a real server.

The proxy listens on 127.0.0.1 and forwards each request to the server
behind it, with ``Connection: close`` so that every request arrives on a
connection of its own and is seen here. A ``Fault`` names requests by
method and a regular expression on the request target (path and query);
the first ``times`` matching requests are answered with an HTTP error
status, or dropped (the connection is closed without an answer), instead
of being forwarded. Everything else reaches the server unchanged.

Every forwarded request is also counted in ``traffic`` (``Exchange``: its
method, target, whether it copies another object, and the bytes sent up to the
server and down from it), so a test or a benchmark can say what a job cost.
"""

from __future__ import annotations

import re
import select
import socket
import threading
from dataclasses import dataclass, field
from typing import Sequence

__all__ = ["Fault", "FaultProxy", "Exchange"]

_HOST = "127.0.0.1"
_MAX_HEAD = 1 << 16
_DROP_HEADERS = {"connection", "keep-alive", "proxy-connection"}


@dataclass
class Fault:
    """Requests to fail.

    Attributes:
        method: HTTP method (``GET``, ``PUT``, ``POST``, ``HEAD``, ``DELETE``).
        target: Regular expression searched in the request target.
        times: How many matching requests fail; the later ones are forwarded.
        status: HTTP status to answer with, or None to drop the connection.
        header: If set, a request header (lower-case name) that must be present.
    """

    method: str
    target: str
    times: int
    status: int | None = 500
    header: str | None = None
    failed: int = field(default=0, init=False)

    def matches(self, method: str, target: str, headers: dict[str, str]) -> bool:
        return (method == self.method and re.search(self.target, target) is not None
                and (self.header is None or self.header in headers) and self.failed < self.times)


@dataclass(frozen=True)
class Exchange:
    """One forwarded request: method, target, copy source header present, bytes up and down.

    ``up`` and ``down`` are the bytes on the wire, HTTP heads included;
    ``up_body`` and ``down_body`` those of the bodies alone.
    """

    method: str
    target: str
    copies: bool
    up: int
    down: int
    up_body: int
    down_body: int


class FaultProxy:
    """The proxy; use as a context manager. ``log`` holds ``(method, target, outcome)`` per request."""

    def __init__(self, upstream_port: int, faults: Sequence[Fault] = ()) -> None:
        self._upstream = (_HOST, upstream_port)
        self.faults = list(faults)
        self.log: list[tuple[str, str, str]] = []
        self.traffic: list[Exchange] = []
        self._lock = threading.Lock()
        self._server = socket.create_server((_HOST, 0))
        self.port = self._server.getsockname()[1]
        self._closed = threading.Event()
        self._open = 0
        self._settled = threading.Condition(self._lock)

    @property
    def url(self) -> str:
        return f"http://{_HOST}:{self.port}"

    def __enter__(self) -> "FaultProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._closed.set()
        self._server.close()

    def requests(self, method: str, target: str) -> list[str]:
        """Outcomes of the requests so far with this method and a target matching the pattern."""
        with self._lock:
            return [o for m, t, o in self.log if m == method and re.search(target, t)]

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            with self._lock:
                self._open += 1
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def settle(self, timeout: float = 30.0) -> None:
        """Waits until every connection accepted so far is done (its exchange counted in ``traffic``)."""
        with self._settled:
            if not self._settled.wait_for(lambda: self._open == 0, timeout):
                raise TimeoutError(f"{self._open} proxied requests still open after {timeout} s")

    def _handle(self, client: socket.socket) -> None:
        try:
            self._serve(client)
        except (ConnectionResetError, BrokenPipeError):
            pass  # a client gave up on a connection (its retry opens another): that connection ends here
        finally:
            with self._settled:
                self._open -= 1
                self._settled.notify_all()

    def _serve(self, client: socket.socket) -> None:
        with client:
            head, rest = self._read_head(client)
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            with self._lock:
                fault = next((f for f in self.faults if f.matches(method, target, headers)), None)
                if fault is not None:
                    fault.failed += 1
                outcome = ("forwarded" if fault is None else
                           "dropped" if fault.status is None else f"status {fault.status}")
                self.log.append((method, target, outcome))
            if fault is None:
                kept = [line for line in lines[1:] if line.partition(":")[0].strip().lower() not in _DROP_HEADERS]
                forwarded = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")
                up, down, down_head = self._forward(client, forwarded + rest)
                with self._lock:
                    self.traffic.append(Exchange(method, target, "x-amz-copy-source" in headers, up, down,
                                                 up - len(forwarded), down - down_head))
                return
            self._read_body(client, headers, rest)
            if fault.status is not None:
                body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>Injected{fault.status}</Code>"
                        f"<Message>fault injected by the test proxy</Message></Error>").encode()
                reply = (f"{version} {fault.status} Injected\r\nContent-Type: application/xml\r\n"
                         f"Content-Length: {0 if method == 'HEAD' else len(body)}\r\nConnection: close\r\n\r\n")
                client.sendall(reply.encode("latin-1") + (b"" if method == "HEAD" else body))

    @staticmethod
    def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk or len(data) > _MAX_HEAD:
                return None, b""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        return head, rest

    @staticmethod
    def _read_body(client: socket.socket, headers: dict[str, str], rest: bytes) -> None:
        """Reads a failed request's body, so the client has sent it all before the answer."""
        if "content-length" in headers:
            remaining = int(headers["content-length"]) - len(rest)
            while remaining > 0:
                chunk = client.recv(min(remaining, 65536))
                if not chunk:
                    return
                remaining -= len(chunk)
        elif "chunked" in headers.get("transfer-encoding", ""):
            while not rest.endswith(b"0\r\n\r\n"):
                chunk = client.recv(65536)
                if not chunk:
                    return
                rest += chunk

    def _forward(self, client: socket.socket, first: bytes) -> tuple[int, int, int]:
        """Relays one request and its answer; returns the bytes sent up, the bytes the server sent down,
        and the length of the answer's head.

        A client that stops reading (closes its connection early) does not stop
        the count: what the server goes on sending is read and counted.
        """
        up, down = len(first), 0
        head = b""
        head_end = None
        gone = False
        with socket.create_connection(self._upstream) as upstream:
            upstream.sendall(first)
            sockets = [client, upstream]
            while True:
                readable, _, _ = select.select(sockets, [], [], 60)
                if not readable:
                    return up, down, head_end or down
                for sock in readable:
                    try:
                        chunk = sock.recv(65536)
                    except (ConnectionResetError, BrokenPipeError):
                        chunk = b""
                    if not chunk:
                        if sock is upstream:
                            return up, down, head_end or down  # the answer is complete (Connection: close)
                        upstream.shutdown(socket.SHUT_WR)
                        sockets = [upstream]
                        continue
                    if sock is client:
                        up += len(chunk)
                        upstream.sendall(chunk)
                        continue
                    if head_end is None:
                        head += chunk
                        if b"\r\n\r\n" in head:
                            head_end = head.index(b"\r\n\r\n") + 4
                    down += len(chunk)
                    if not gone:
                        try:
                            client.sendall(chunk)
                        except (ConnectionResetError, BrokenPipeError):
                            gone = True
                            sockets = [upstream]
