"""Shared fixtures. The package under test is the build tree's (build/python), unless
RATEWIN_PYTHONPATH names another directory. Redis (or Valkey), certificates and the other
shared fixtures are the support kit's (tests/support/ratewin_testkit/plugin.py); this
tree's Redis servers listen on a Unix socket in a temporary directory (no port to collide
on), a TLS one on free loopback ports too."""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, os.environ.get("RATEWIN_PYTHONPATH", str(ROOT / "build" / "python")))
sys.path.insert(0, str(ROOT / "tests" / "support"))

import ratewin  # noqa: E402

pytest_plugins = ["ratewin_testkit.plugin"]


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
def engine(clock: ratewin.ManualClock):
    with ratewin.Engine(clock=clock) as e:
        yield e
