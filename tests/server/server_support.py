"""Helpers for the ratewin-server end-to-end tests: a private redis-server on a free
loopback port, ratewin-server processes started on port 0 (the port read from the line
it prints once ready), and small HTTP clients (http.client, and raw sockets for what
http.client will not send). Everything started here is stopped by PID."""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import re
import select
import shutil
import signal
import socket
import subprocess
import textwrap
import time
from typing import Callable, Iterable, Mapping

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER = os.environ.get("RATEWIN_SERVER", str(ROOT / "build" / "cmd" / "ratewin-server"))
EXAMPLE_RULES = ROOT / "cmd" / "server" / "rules.example.yaml"

# "127.0.0.1:port", or ":::port" for a test that listens on [::] (its own --listen wins).
LISTENING = re.compile(rb"^ratewin-server listening on .*:(\d+) \((.*)\)\s*$")
GRPC_LISTENING = re.compile(rb"^ratewin-server gRPC listening on .*:(\d+) \((.*)\)\s*$")


def free_port() -> int:
    """A loopback port the kernel reported free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_up(*servers: "ServerProcess") -> None:
    """Waits until each server's engine is connected to Redis (it starts either way)."""
    for s in servers:
        assert wait_until(lambda s=s: s.get("/healthz").json()["store"] == "up", 3), s.log()


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.02):
    """Calls predicate until it returns something truthy (returned) or timeout passes
    (returns the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def write_rules(path: pathlib.Path, text: str, atomic: bool = False) -> pathlib.Path:
    """Writes a rules file (dedented): in place, or (atomic) by renaming a new file over
    it, so that a watcher never sees it half-written."""
    content = textwrap.dedent(text).lstrip("\n")
    if not atomic:
        path.write_text(content)
        return path
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(content)
    os.replace(temporary, path)
    return path


# --------------------------------------------------------------------------------------
# Redis


MAKE_CERTS = ROOT / "tests" / "support" / "make_certs.sh"


class Certificates:
    """The certificates of tests/support/make_certs.sh in `directory`: ca.crt,
    server.crt/.key (for 127.0.0.1 and localhost), client.crt/.key, expired.crt/.key,
    other-ca.crt and other.crt/.key (signed by other-ca)."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        subprocess.run(["bash", str(MAKE_CERTS), str(directory)], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)

    def __getitem__(self, name: str) -> str:
        return str(self.directory / name)

    def server_args(self, name: str = "server", auth_clients: bool = False) -> list[str]:
        """redis-server's TLS flags: the certificate `name` (name.crt, name.key), ca.crt
        trusted for client certificates, required if `auth_clients`."""
        return ["--tls-cert-file", self[f"{name}.crt"], "--tls-key-file", self[f"{name}.key"],
                "--tls-ca-cert-file", self["ca.crt"],
                "--tls-auth-clients", "yes" if auth_clients else "no"]


class RedisServer:
    """A private redis-server: no persistence, bound to 127.0.0.1 on a free port; with
    `tls_args` (Certificates.server_args()) it serves TLS on a second free port too
    (tls_port, tls_url), the plain port staying for ping() and command()."""

    def __init__(self, directory: pathlib.Path, extra_args: list[str] | None = None,
                 tls_args: list[str] | None = None, password: str | None = None) -> None:
        self.directory = directory
        self.port = 0
        self.tls_port = 0
        self.extra_args = extra_args or []
        self.tls_args = tls_args
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def tls_url(self) -> str:
        return f"rediss://127.0.0.1:{self.tls_port}"

    def start(self, same_port: bool = False) -> None:
        """Starts it on a free port (or again on the port it had: a restart)."""
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed")
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(5 if not same_port else 50):
            if not same_port:
                self.port = free_port()
                if self.tls_args is not None:
                    self.tls_port = free_port()
                    while self.tls_port == self.port:
                        self.tls_port = free_port()
            tls = ([] if self.tls_args is None
                   else ["--tls-port", str(self.tls_port), *self.tls_args])
            password = [] if self.password is None else ["--requirepass", self.password]
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(self.directory),
                 "--daemonize", "no", "--loglevel", "warning",
                 "--logfile", str(self.directory / "redis.log"), *tls, *password,
                 *self.extra_args],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while self.process.poll() is None and time.monotonic() < deadline:
                if self.ping():
                    return
                time.sleep(0.01)
            self.kill()  # exited (port taken) or never answered: try another port
            if same_port:
                time.sleep(0.1)
        raise RuntimeError("could not start redis-server")

    def command(self, *args: str, timeout: float = 1.0) -> bytes:
        """One command in RESP on a fresh connection; the raw reply."""
        payload = f"*{len(args)}\r\n".encode()
        for a in args:
            b = a.encode()
            payload += b"$%d\r\n%s\r\n" % (len(b), b)
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(payload)
            return s.recv(65536)

    def ping(self) -> bool:
        try:
            if self.password is not None:  # it serves once AUTH passes
                return self.command("AUTH", self.password, timeout=0.2).startswith(b"+OK")
            return self.command("PING", timeout=0.2).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """Ends it abruptly (SIGKILL) and reaps it."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
        self.process = None


# --------------------------------------------------------------------------------------
# ratewin-server


class ServerProcess:
    """One ratewin-server; stderr goes to a log file the tests can read."""

    def __init__(self, args: list[str], log_path: pathlib.Path, env: Mapping[str, str] | None = None):
        self.args = args
        self.log_path = log_path
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.grpc_port = 0  # with --grpc-listen
        self.banner = ""
        self.returncode: int | None = None

    def start(self, timeout: float = 10.0) -> "ServerProcess":
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [SERVER, "--listen", "127.0.0.1:0", *self.args],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                env=self.env)
        deadline = time.monotonic() + timeout
        m = self._banner(deadline, LISTENING)
        self.port = int(m.group(1))
        self.banner = m.group(0).decode().strip()
        if "--grpc-listen" in self.args:
            self.grpc_port = int(self._banner(deadline, GRPC_LISTENING).group(1))
        return self

    def _banner(self, deadline: float, pattern: re.Pattern[bytes]) -> re.Match[bytes]:
        """The next line on stdout, which must match `pattern`."""
        line = self._line(deadline)
        m = pattern.match(line)
        if m is None:
            self.kill()
            raise RuntimeError(f"unexpected line {line!r}")
        return m

    def _line(self, deadline: float) -> bytes:
        """The next line on stdout, by the deadline."""
        assert self.process is not None and self.process.stdout is not None
        line = b""
        fd = self.process.stdout.fileno()
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RuntimeError(f"ratewin-server did not start: {self.log()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1)
            if not chunk:  # exited
                self.wait(5)
                raise RuntimeError(
                    f"ratewin-server exited ({self.returncode}) before listening: {self.log()}")
            line += chunk
        return line

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        assert self.process is not None and self.process.poll() is None
        os.kill(self.process.pid, signum)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        self.returncode = self.process.wait(timeout=timeout)
        return self.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process is not None:
            self.returncode = self.process.returncode
            if self.process.stdout is not None:
                self.process.stdout.close()

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit in time. The exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return self.returncode

    # Convenience: HTTP against this server.
    def get(self, path: str = "/", headers: Mapping[str, str] | None = None, **kw) -> "Reply":
        return request(self.port, "GET", path, headers=headers, **kw)

    def call(self, method: str, path: str, **kw) -> "Reply":
        return request(self.port, method, path, **kw)

    def metrics(self) -> str:
        r = self.get("/metrics")
        assert r.status == 200, r
        return r.text

    def metric(self, name_and_labels: str) -> float | None:
        return metric_value(self.metrics(), name_and_labels)


def metric_value(text: str, name_and_labels: str) -> float | None:
    """The value of the sample written exactly `name{labels}` (or `name`), None if absent."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if head == name_and_labels:
            return float(value)
    return None


# --------------------------------------------------------------------------------------
# HTTP


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
            body: bytes | str | None = None, timeout: float = 5.0) -> Reply:
    """One request on a fresh connection."""
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

    def __init__(self, port: int, timeout: float = 5.0, source: str | None = None) -> None:
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


def raw_connect(port: int, timeout: float = 5.0) -> socket.socket:
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

    def closed(self, timeout: float = 2.0) -> bool:
        """True if the peer closes (EOF or reset) within timeout with nothing more sent."""
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


class RedisCluster:
    """A private Redis Cluster of `primaries` redis-servers (no replicas), joined with
    redis-cli --cluster create; `url` is a redis-cluster:// address of every node."""

    def __init__(self, directory: pathlib.Path, primaries: int = 3) -> None:
        self.nodes = [RedisServer(directory / f"node{i}",
                                  ["--cluster-enabled", "yes", "--cluster-node-timeout", "1000",
                                   "--cluster-require-full-coverage", "no"])
                      for i in range(primaries)]

    @property
    def url(self) -> str:
        return "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> None:
        for n in self.nodes:
            n.start()
        create = subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60, check=False)
        if create.returncode != 0:
            raise RuntimeError("redis-cli --cluster create failed: " + create.stdout.decode())
        ok = wait_until(lambda: all(b"cluster_state:ok" in n.command("CLUSTER", "INFO")
                                    for n in self.nodes), 30)
        if not ok:
            raise RuntimeError("the cluster did not become healthy")

    def stop(self) -> None:
        for n in self.nodes:
            n.kill()
