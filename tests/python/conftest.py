"""Shared fixtures. The package under test is the build tree's (build/python), unless
RATEWIN_PYTHONPATH names another directory; Redis tests start their own redis-server on
a Unix socket in a temporary directory and stop it by PID (a TLS one also serves TLS on a
free loopback port, with certificates made by tests/support/make_certs.sh)."""

from __future__ import annotations

import http.client
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("RATEWIN_PYTHONPATH", str(ROOT / "build" / "python")))

import ratewin  # noqa: E402


# The certificates of tests/support/make_certs.sh, as the server's tests make them.
sys.path.append(str(ROOT / "tests" / "server"))
from server_support import Certificates  # noqa: E402


class ServerTls:
    """How a RedisServer serves TLS: its certificate `name` (name.crt and name.key),
    trusting ca.crt for client certificates, which it requires if `auth_clients`."""

    def __init__(self, certificates: Certificates, name: str = "server",
                 auth_clients: bool = False) -> None:
        self.args = certificates.server_args(name, auth_clients)


def http_get(url: str, timeout: float = 30) -> tuple[int, "http.client.HTTPMessage", bytes]:
    """A GET's status, headers and body, whatever the status (urllib raises for 4xx)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.headers, refused.read()


def free_port() -> int:
    """A loopback port the kernel reported free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A private redis-server: no persistence, Unix socket only (no port to collide on),
    and with `tls` TLS on a free loopback port too (tls_port, tls_url), beside a plain one
    (port)."""

    def __init__(self, directory: pathlib.Path, password: str | None = None,
                 tls: ServerTls | None = None) -> None:
        self.directory = directory
        self.socket = directory / "redis.sock"
        self.password = password
        self.tls = tls
        self.tls_port = 0
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def tls_url(self) -> str:
        return f"rediss://127.0.0.1:{self.tls_port}"

    def start(self) -> None:
        # Ports picked free may be taken by the time the server binds them: then the
        # server exits, and others are tried.
        for _ in range(5 if self.tls else 1):
            tls_args: list[str] = []
            if self.tls:
                self.port = free_port()
                self.tls_port = free_port()
                while self.tls_port == self.port:
                    self.tls_port = free_port()
                tls_args = ["--tls-port", str(self.tls_port), "--bind", "127.0.0.1",
                            *self.tls.args]
            self.process = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--unixsocket", str(self.socket),
                 "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                 "--dir", str(self.directory), "--logfile", str(self.directory / "log"),
                 *(["--requirepass", self.password] if self.password else []), *tls_args],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while not self.answers():
                if time.monotonic() > deadline or self.process.poll() is not None:
                    break
                time.sleep(0.01)
            else:
                return
            self.stop()
        raise RuntimeError("redis-server did not start")

    def answers(self) -> bool:
        return self.cli("PING") == "PONG"

    def cli(self, *args: str) -> str:
        auth = ["--no-auth-warning", "-a", self.password] if self.password else []
        result = subprocess.run(["redis-cli", "-s", str(self.socket), *auth, *args],
                                capture_output=True, text=True, timeout=10)
        return result.stdout.strip()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None
        if self.socket.exists():
            self.socket.unlink()

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)


async def counting_loop_turns(awaitable):
    """Awaits `awaitable` while a task counts the turns the event loop makes meanwhile:
    (its result, the turns). Turns > 0 show the loop kept serving while it waited."""
    import asyncio

    turns = 0
    stop = False

    async def ticker() -> None:
        nonlocal turns
        while not stop:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    try:
        result = await awaitable
    finally:
        stop = True
        await task
    return result, turns


@pytest.fixture
def redis(tmp_path: pathlib.Path):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (cmd/setup.sh installs it)")
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.process is not None and server.process.poll() is None:
            server.resume()
        server.stop()


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed (cmd/setup.sh installs it)")
    return Certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture
def tls_redis(tmp_path: pathlib.Path, certificates: Certificates):
    """A redis-server serving TLS with server.crt (and its plain Unix socket, for cli())."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (cmd/setup.sh installs it)")
    server = RedisServer(tmp_path, tls=ServerTls(certificates))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def clock() -> ratewin.ManualClock:
    return ratewin.ManualClock(1_700_000_000)


@pytest.fixture
def engine(clock: ratewin.ManualClock):
    with ratewin.Engine(clock=clock) as e:
        yield e
