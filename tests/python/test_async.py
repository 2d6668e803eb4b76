"""Decisions awaited on asyncio, and waiting until admitted (threads and asyncio)."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

import ratewin
from conftest import PATIENT, counting_loop_turns
from ratewin_testkit import PATIENCE


def test_try_acquire_async_in_local_mode_answers_at_once(engine):
    limit = ratewin.Limit(1, per=60)

    async def main():
        first = await engine.try_acquire_async("k", limit)
        second = await engine.try_acquire_async("k", limit)
        both = await engine.try_acquire_all_async("j", [limit, ratewin.Limit(5, per=1)])
        return first, second, both

    first, second, both = asyncio.run(main())
    assert first.allowed and not second.allowed and both.allowed and len(both) == 2


def test_try_acquire_async_with_redis_is_exact_and_keeps_the_loop_free(redis):
    limit = ratewin.Limit(25, per=60)

    async def main():
        with ratewin.Engine(redis.url, key_prefix="aio", **PATIENT) as a, \
                ratewin.Engine(redis.url, key_prefix="aio", **PATIENT) as b:
            got, ticks = await counting_loop_turns(asyncio.gather(*(
                (a if i % 2 else b).try_acquire_async("shared", limit) for i in range(40))))
            assert a.stats()["degraded"] == 0 and b.stats()["degraded"] == 0
            with ratewin.Engine(redis.url, key_prefix="aio", **PATIENT) as c:
                left = c.try_acquire("shared", limit, 0).remaining
        return got, ticks, left

    got, ticks, left = asyncio.run(main())
    assert sum(map(bool, got)) == 25
    assert ticks > 0
    assert left == 0  # the refused writes were given back: exactly 25 counted


def test_a_cancelled_await_gives_its_admission_back(redis):
    limit = ratewin.Limit(5, per=60)

    async def main(engine):
        written = engine.stats()["writes_ok"]
        task = asyncio.create_task(engine.try_acquire_async("c", limit, 2))
        await asyncio.sleep(0)  # the write is out
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Its reply comes (the write is counted) and, the loop still running, the count
        # goes back.
        deadline = time.monotonic() + PATIENCE
        while (engine.stats()["writes_ok"] == written
               or engine.try_acquire("c", limit, 0).remaining != 5):
            assert time.monotonic() < deadline, engine.stats()
            await asyncio.sleep(0.01)

    with ratewin.Engine(redis.url, key_prefix="cancel", **PATIENT) as engine:
        assert engine.try_acquire("warm", limit)  # connected
        asyncio.run(main(engine))
        assert engine.try_acquire("c", limit, 0).remaining == 5


def test_acquire_waits_its_turn_and_polls_little(engine, virtual_waits):
    """Eight threads, 16 calls to a 10-per-second limit: all admitted, in about the time
    the rate gives, and the engine asked about twice per admission, not once per thread
    per slot freed. (The waits are on the engine's manual clock: the time taken is what
    acquire asked to sleep, not what a busy machine made of it.)"""
    limit = ratewin.parse("10/second")
    admitted = []
    lock = threading.Lock()

    def worker():
        for _ in range(2):
            d = engine.acquire("vendor", limit, timeout=PATIENCE)
            with lock:
                admitted.append(bool(d))

    started = virtual_waits.now()
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * PATIENCE)
    took = virtual_waits.now() - started
    stats = engine.stats()
    assert admitted == [True] * 16
    assert 0.4 < took < 1.5, took  # 10 at once, 6 more as the window slides
    assert stats["allowed"] == 16
    assert stats["rejected"] <= 16, stats["rejected"]


def test_acquire_gives_up_at_the_timeout_or_when_it_can_never_pass(engine, virtual_waits):
    limit = ratewin.Limit(1, per=60)
    assert engine.acquire("k", limit)
    started = virtual_waits.now()
    late = engine.acquire("k", limit, timeout=0.2)
    assert not late and late.retry_after > 50
    assert virtual_waits.now() == started  # it knew at once that 0.2 s is too short
    never = engine.acquire("j", limit, cost=2, timeout=10)
    assert not never and never.retry_after == math.inf
    with pytest.raises(ValueError, match="timeout"):
        engine.acquire("k", limit, timeout=-1)
    with pytest.raises(TypeError, match="timeout"):
        engine.acquire("k", limit, timeout="1")  # type: ignore[arg-type]


def test_acquire_async_lines_up_tasks(engine, virtual_waits):
    limit = ratewin.parse("20/second")

    async def main():
        started = virtual_waits.now()
        got = await asyncio.gather(*(engine.acquire_async("t", limit, timeout=PATIENCE)
                                     for _ in range(30)))
        return got, virtual_waits.now() - started

    got, took = asyncio.run(main())
    stats = engine.stats()
    assert all(got) and len(got) == 30
    assert 0.3 < took < 1.5, took
    assert stats["rejected"] <= 30
