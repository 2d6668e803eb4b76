"""Shared fixtures. The package under test is the build tree's (build/python), unless
RATEWIN_PYTHONPATH names another directory. Redis (or Valkey), certificates and the other
shared fixtures are the support kit's (tests/support/ratewin_testkit/plugin.py); this
tree's Redis servers listen on a Unix socket in a temporary directory (no port to collide
on), a TLS one on free loopback ports too."""

from __future__ import annotations

import os
import pathlib
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("RATEWIN_PYTHONPATH", str(ROOT / "build" / "python")))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import ratewin  # noqa: E402
from ratewin_testkit import PATIENCE  # noqa: E402

pytest_plugins = ["ratewin_testkit.plugin"]

# The deadlines of an engine on a Redis a test started, which is bound to answer: they
# only bound a failure (the engine's own, 0.5 s to connect and 0.1 s a command, are a busy
# machine's ordinary delays, and would make its decisions degraded). A test of what an
# engine does when Redis is slow or gone gives its own.
PATIENT = {"connect_timeout": PATIENCE, "command_timeout": PATIENCE}


@pytest.fixture
def redis_unix_socket() -> bool:
    """The redis and tls_redis fixtures' servers listen on a Unix socket (their url)."""
    return True


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
def clock() -> ratewin.ManualClock:
    return ratewin.ManualClock(1_700_000_000)


@pytest.fixture
def virtual_waits(clock: ratewin.ManualClock, monkeypatch: pytest.MonkeyPatch):
    """Engine.acquire and acquire_async wait on `clock` (give it to the engine too): their
    sleeps advance it instead of taking real time, and their deadlines are read off it.
    So how long they waited is what they asked to wait, however busy the machine is.
    (Waiters for their turn in line still wait on events, bounded by the time left.)"""
    import asyncio

    from ratewin import _waiting

    real_asyncio_sleep = asyncio.sleep

    async def asyncio_sleep(seconds: float) -> None:
        clock.advance(seconds)
        await real_asyncio_sleep(0)

    monkeypatch.setattr(_waiting, "time", types.SimpleNamespace(
        monotonic=clock.now, sleep=clock.advance))
    names = {name: getattr(asyncio, name) for name in asyncio.__all__}
    monkeypatch.setattr(_waiting, "asyncio", types.SimpleNamespace(**{
        **names, "sleep": asyncio_sleep}))
    return clock


@pytest.fixture
def engine(clock: ratewin.ManualClock):
    with ratewin.Engine(clock=clock) as e:
        yield e
