"""Many Python threads on one engine count exactly what one thread counts: the engine
is thread-safe and the GIL is released around every decision."""

from __future__ import annotations

import threading

import ratewin


def run_threads(count: int, target) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def allowed_by(engine: ratewin.Engine, threads: int, calls: int, limit: ratewin.Limit,
               resources: int) -> tuple[int, list[int]]:
    allowed = [0] * threads
    per_resource = [0] * resources
    lock = threading.Lock()

    def work(i: int) -> None:
        mine = [0] * resources
        for n in range(calls):
            r = (n + i) % resources
            if engine.try_acquire(f"res:{r}", limit):
                mine[r] += 1
        with lock:
            for r, v in enumerate(mine):
                per_resource[r] += v
        allowed[i] = sum(mine)

    run_threads(threads, work)
    return sum(allowed), per_resource


def test_threads_give_the_totals_of_one_thread(clock):
    limit = ratewin.Limit(5_000, per=60)
    calls, resources = 6_000, 3
    with ratewin.Engine(clock=clock) as one:
        total_one, per_one = allowed_by(one, 1, calls * 8, limit, resources)
    with ratewin.Engine(clock=clock) as many:
        total_many, per_many = allowed_by(many, 8, calls, limit, resources)
        stats = many.stats()
    # 48,000 requests over 3 resources of 5,000 each: exactly 15,000 pass either way.
    assert total_one == total_many == 15_000
    assert per_one == per_many == [5_000] * resources
    assert stats["allowed"] == 15_000 and stats["rejected"] == 8 * calls - 15_000


def test_threads_on_one_limiter_handle(clock):
    limit = ratewin.Limit(1_000, per=10)
    with ratewin.Engine(clock=clock) as engine, engine.limiter("hot", limit) as hot:
        passed = [0] * 4

        def work(i: int) -> None:
            passed[i] = sum(1 for _ in range(700) if hot.try_acquire())

        run_threads(4, work)
        assert sum(passed) == 1_000
        assert engine.try_acquire("hot", limit).remaining == 0


def test_threads_closing_the_engine_midway_raise_closed_error_only(clock):
    limit = ratewin.Limit(10**9, per=60)
    engine = ratewin.Engine(clock=clock)
    errors: list[BaseException] = []
    started = threading.Barrier(5)

    def work(i: int) -> None:
        started.wait()
        try:
            while True:
                engine.try_acquire(f"k{i}", limit)
        except ratewin.ClosedError:
            pass
        except BaseException as e:  # noqa: BLE001 - any other error fails the test
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait()
    engine.close()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()
    assert errors == []
