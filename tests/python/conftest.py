"""Shared fixtures. The package under test is the build tree's (build/python), unless
RATEWIN_PYTHONPATH names another directory; Redis tests start their own redis-server on
a Unix socket in a temporary directory and stop it by PID."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("RATEWIN_PYTHONPATH", str(ROOT / "build" / "python")))

import ratewin  # noqa: E402


class RedisServer:
    """A private redis-server: no persistence, Unix socket only (no port to collide on)."""

    def __init__(self, directory: pathlib.Path, password: str | None = None) -> None:
        self.directory = directory
        self.socket = directory / "redis.sock"
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", "0", "--unixsocket", str(self.socket),
             "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
             "--dir", str(self.directory), "--logfile", str(self.directory / "log"),
             *(["--requirepass", self.password] if self.password else [])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.answers():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.01)

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


@pytest.fixture
def clock() -> ratewin.ManualClock:
    return ratewin.ManualClock(1_700_000_000)


@pytest.fixture
def engine(clock: ratewin.ManualClock):
    with ratewin.Engine(clock=clock) as e:
        yield e
