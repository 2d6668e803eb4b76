"""Small HTTP clients for the tests: http.client on a fresh or a kept-alive connection,
raw sockets for what http.client will not send, urllib for a URL, and a Prometheus
sample's value."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Iterable, Mapping

from .waiting import PATIENCE


class Reply:
    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = status
        self.header_list = headers
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.headers}, {self.body[:300]!r})"


def request(port: int, method: str = "GET", path: str = "/", headers: Mapping[str, str] | None = None,
            body: bytes | str | None = None, timeout: float = PATIENCE) -> Reply:
    """One request to 127.0.0.1:port on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=dict(headers or {}))
        r = conn.getresponse()
        data = r.read()
        return Reply(r.status, r.getheaders(), data)
    finally:
        conn.close()


class Client:
    """Requests on one keep-alive connection."""

    def __init__(self, port: int, timeout: float = PATIENCE, source: str | None = None) -> None:
        # `source`: another loopback address (127.0.0.x) to connect from.
        self.conn = http.client.HTTPConnection(
            "127.0.0.1", port, timeout=timeout,
            source_address=(source, 0) if source else None)

    def call(self, method: str, path: str, headers: Mapping[str, str] | None = None,
             body: bytes | str | None = None) -> Reply:
        self.conn.request(method, path, body=body, headers=dict(headers or {}))
        r = self.conn.getresponse()
        data = r.read()
        return Reply(r.status, r.getheaders(), data)

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> Reply:
        return self.call("GET", path, headers)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def raw_connect(port: int, timeout: float = PATIENCE) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class RawReader:
    """Reads HTTP/1.1 responses (with Content-Length) off a raw socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self.buffer += chunk
        return True

    def response(self) -> Reply:
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before a response; got {self.buffer!r}")
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        version, status, *_ = lines[0].split(" ", 2)
        assert version == "HTTP/1.1", lines[0]
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
        length = int({k.lower(): v for k, v in headers}.get("content-length", "0"))
        while len(self.buffer) < length:
            if not self._fill():
                raise ConnectionError("closed mid-body")
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Reply(int(status), headers, body)

    def closed(self, timeout: float = PATIENCE) -> bool:
        """True if the peer closes (EOF or reset) within timeout with nothing more sent.
        (A test that checks a connection stays open gives the time it must stay open.)"""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
        if chunk:
            self.buffer += chunk
            return False
        return True


def raw_get(path: str, headers: Iterable[tuple[str, str]] = (), host: str = "test") -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def http_get(url: str, timeout: float = PATIENCE) -> tuple[int, "http.client.HTTPMessage", bytes]:
    """A GET's status, headers and body, whatever the status (urllib raises for 4xx)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers, refused.read()


def metric_value(text: str, name_and_labels: str) -> float | None:
    """The value of the sample written exactly `name{labels}` (or `name`), None if absent."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if head == name_and_labels:
            return float(value)
    return None
