"""Decisions awaited on asyncio, and waiting until admitted (threads and asyncio)."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest

import ratewin
from conftest import counting_loop_turns


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
        with ratewin.Engine(redis.url, key_prefix="aio") as a, \
                ratewin.Engine(redis.url, key_prefix="aio") as b:
            got, ticks = await counting_loop_turns(asyncio.gather(*(
                (a if i % 2 else b).try_acquire_async("shared", limit) for i in range(40))))
            assert a.stats()["degraded"] == 0 and b.stats()["degraded"] == 0
            with ratewin.Engine(redis.url, key_prefix="aio") as c:
                left = c.try_acquire("shared", limit, 0).remaining
        return got, ticks, left

    got, ticks, left = asyncio.run(main())
    assert sum(map(bool, got)) == 25
    assert ticks > 0
    assert left == 0  # the refused writes were given back: exactly 25 counted


def test_a_cancelled_await_gives_its_admission_back(redis):
    limit = ratewin.Limit(5, per=60)

    async def main(engine):
        task = asyncio.create_task(engine.try_acquire_async("c", limit, 2))
        await asyncio.sleep(0)  # the write is out
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.3)  # its reply comes, and the count goes back

    with ratewin.Engine(redis.url, key_prefix="cancel") as engine:
        assert engine.try_acquire("warm", limit)  # connected
        asyncio.run(main(engine))
        assert engine.try_acquire("c", limit, 0).remaining == 5


def test_acquire_waits_its_turn_and_polls_little():
    """Eight threads, 16 calls to a 10-per-second limit: all admitted, in about the time
    the rate gives, and the engine asked about twice per admission, not once per thread
    per slot freed."""
    limit = ratewin.parse("10/second")
    with ratewin.Engine() as engine:
        admitted = []
        lock = threading.Lock()

        def worker():
            for _ in range(2):
                d = engine.acquire("vendor", limit, timeout=10)
                with lock:
                    admitted.append(bool(d))

        started = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        took = time.monotonic() - started
        stats = engine.stats()
    assert admitted == [True] * 16
    assert 0.4 < took < 3, took  # 10 at once, 6 more as the window slides
    assert stats["allowed"] == 16
    assert stats["rejected"] <= 16, stats["rejected"]


def test_acquire_gives_up_at_the_timeout_or_when_it_can_never_pass():
    limit = ratewin.Limit(1, per=60)
    with ratewin.Engine() as engine:
        assert engine.acquire("k", limit)
        started = time.monotonic()
        late = engine.acquire("k", limit, timeout=0.2)
        assert not late and late.retry_after > 50
        assert time.monotonic() - started < 0.5  # it knew at once that 0.2 s is too short
        never = engine.acquire("j", limit, cost=2, timeout=10)
        assert not never and never.retry_after == math.inf
        with pytest.raises(ValueError, match="timeout"):
            engine.acquire("k", limit, timeout=-1)
        with pytest.raises(TypeError, match="timeout"):
            engine.acquire("k", limit, timeout="1")  # type: ignore[arg-type]


def test_acquire_async_lines_up_tasks():
    limit = ratewin.parse("20/second")

    async def main(engine):
        started = time.monotonic()
        got = await asyncio.gather(*(engine.acquire_async("t", limit, timeout=10)
                                     for _ in range(30)))
        return got, time.monotonic() - started

    with ratewin.Engine() as engine:
        got, took = asyncio.run(main(engine))
        stats = engine.stats()
    assert all(got) and len(got) == 30
    assert 0.3 < took < 3, took
    assert stats["rejected"] <= 30
