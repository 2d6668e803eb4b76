"""Redis mode from Python, against a redis-server these tests start (the support kit).
Engines get deadlines that only bound a failure (conftest.PATIENT) wherever a test counts
on Redis answering; once a test has stopped Redis, an engine learns it at once (the
connection is refused), not at a deadline."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import ratewin
from conftest import PATIENT
from ratewin_testkit import RedisServer, wait_until


def test_two_engines_share_one_limit_exactly(redis):
    limit = ratewin.Limit(10, per=3600)
    with ratewin.Engine(redis.url, **PATIENT) as a, \
            ratewin.Engine(redis.url, **PATIENT) as b:
        decisions = [(a if i % 2 else b).try_acquire("shared", limit) for i in range(30)]
        assert sum(1 for d in decisions if d) == 10
        assert not any(d.degraded for d in decisions)
        for engine in (a, b):
            stats = engine.stats()
            assert stats["store"] is True and stats["store_available"] is True
            assert stats["writes_ok"] >= 1 and stats["writes_failed"] == 0
    keys = redis.cli("KEYS", "ratewin:{*")
    assert keys, "the counts live in Redis under the key prefix"


def test_two_engines_share_one_token_bucket_exactly(redis):
    # One unit back every 6 minutes: the burst is all the two engines admit between them.
    bucket = ratewin.Limit(10, per=3600, algorithm="token_bucket", burst=4)
    with ratewin.Engine(redis.url, **PATIENT) as a, \
            ratewin.Engine(redis.url, **PATIENT) as b:
        decisions = [(a if i % 2 else b).try_acquire("shared", bucket) for i in range(30)]
        assert sum(1 for d in decisions if d) == 4
        assert not any(d.degraded for d in decisions)
        assert all(d.limit == 4 for d in decisions)
        refused = b.try_acquire("shared", bucket)
        assert not refused and 0 < refused.retry_after <= 360


def test_two_engines_share_one_sliding_log_exactly(redis):
    log = ratewin.Limit(5, per=3600, algorithm="sliding_log")
    with ratewin.Engine(redis.url, **PATIENT) as a, \
            ratewin.Engine(redis.url, **PATIENT) as b:
        decisions = [(a if i % 2 else b).try_acquire("shared", log) for i in range(30)]
        assert sum(1 for d in decisions if d) == 5
        assert not any(d.degraded for d in decisions)
        refused = a.try_acquire("shared", log)
        # The oldest entry leaves an hour after it came.
        assert not refused and 3590 < refused.retry_after <= 3600
    # One sorted set for the resource, one member per unit.
    key = redis.cli("KEYS", "ratewin:{*}:log").strip()
    assert key and redis.cli("ZCARD", key) == "5"


def test_key_prefix_separates_applications(redis):
    limit = ratewin.Limit(3, per=3600)
    with ratewin.Engine(redis.url, key_prefix="app1", **PATIENT) as a, \
            ratewin.Engine(redis.url, key_prefix="app2", **PATIENT) as b:
        assert sum(1 for _ in range(5) if a.try_acquire("user", limit)) == 3
        assert sum(1 for _ in range(5) if b.try_acquire("user", limit)) == 3


@pytest.mark.parametrize("policy, allowed", [("local", True), ("open", True), ("closed", False)])
def test_failure_policy_when_redis_is_gone(redis, policy, allowed):
    limit = ratewin.Limit(100, per=3600, on_failure=policy)
    with ratewin.Engine(redis.url, **PATIENT) as engine:
        assert engine.try_acquire("r", limit).degraded is False
        redis.stop()
        decision = engine.try_acquire("r", limit)
        assert decision.degraded is True
        assert decision.allowed is allowed
        if not allowed:
            assert decision.retry_after >= 0.001
            assert int(decision.headers()["Retry-After"]) >= 1
        stats = engine.stats()
        assert stats["store_available"] is False
        assert stats["degraded"] >= 1 and stats["last_error"] != ""


def test_partitioned_splits_the_limit_among_live_engines_while_redis_is_gone(redis):
    limit = ratewin.Limit(20, per=3600, on_failure="partitioned")
    with ratewin.Engine(redis.url, **PATIENT) as a, \
            ratewin.Engine(redis.url, **PATIENT) as b:
        assert wait_until(lambda: (a.stats()["live_nodes"], b.stats()["live_nodes"]) == (2, 2),
                          interval=0.05), (a.stats(), b.stats())
        assert a.try_acquire("warm", limit) and b.try_acquire("warm", limit)
        redis.stop()
        for engine in (a, b):
            decisions = [engine.try_acquire("r", limit) for _ in range(30)]
            assert all(d.degraded for d in decisions[1:])
            # The first found Redis gone (admitted as local would); then half of 20.
            assert 10 <= sum(1 for d in decisions if d) <= 11
            assert decisions[-1].limit == 10


def test_the_gil_is_free_while_redis_keeps_a_call_waiting(redis):
    """A call blocked on a paused Redis (up to command_timeout) lets other threads run:
    the main thread ticks while it waits (holding the GIL, it would not tick at all)."""
    limit = ratewin.Limit(100, per=3600)
    timeout = 2.0
    with ratewin.Engine(redis.url, command_timeout=timeout) as engine:
        engine.try_acquire("warm", limit)  # connections are open
        span: list[float] = []
        ticks: list[float] = []
        done = threading.Event()

        def blocked_call() -> None:
            span.append(time.monotonic())
            engine.try_acquire("warm", limit)
            span.append(time.monotonic())
            done.set()

        redis.pause()
        try:
            worker = threading.Thread(target=blocked_call)
            worker.start()
            while not done.is_set():
                ticks.append(time.monotonic())
                time.sleep(0.001)
            worker.join()
        finally:
            redis.resume()
        start, end = span
        assert end - start >= timeout - 0.1, "the call waited for its deadline"
        inside = [t for t in ticks if start + 0.1 < t < end - 0.1]
        assert inside, "the main thread ran while the call waited"


def test_batched_write_mode_counts_in_memory_and_flushes(redis):
    limit = ratewin.Limit(1000, per=3600)
    with ratewin.Engine(redis.url, write_mode="batched", flush_interval=1,
                        **PATIENT) as batched:
        assert wait_until(lambda: batched.stats()["live_nodes"] == 1, interval=0.05)
        assert batched.try_acquire("b", limit)  # a cold limiter's first: written at once
        writes = redis.cli("INFO", "commandstats")
        assert all(batched.try_acquire("b", limit) for _ in range(100))
        assert batched.flush() is True
        stats = batched.stats()
        assert stats.flushes >= 1 and stats.flush_failures == 0
        assert stats.flushed_units == 100
        assert redis.cli("INFO", "commandstats") != writes
        with ratewin.Engine(redis.url, **PATIENT) as reader:
            assert reader.try_acquire("b", limit, cost=0).remaining == 1000 - 101
        # Admitted and not yet flushed when it closes: close() writes them.
        assert all(batched.try_acquire("b", limit) for _ in range(50))
    with ratewin.Engine(redis.url, **PATIENT) as reader:
        assert reader.try_acquire("b", limit, cost=0).remaining == 1000 - 151
    with pytest.raises(ValueError, match="write_mode"):
        ratewin.Engine(redis.url, write_mode="eventually")
    with pytest.raises(ValueError, match="flush_interval"):
        ratewin.Engine(redis.url, write_mode="batched", flush_interval=2)
    with ratewin.Engine() as local:
        assert local.flush() is True


def test_password_never_shows(tmp_path):
    server = RedisServer(tmp_path, tcp=False, unix=True, password="s3cret-pw")
    server.start()
    try:
        with ratewin.Engine(f"unix://:s3cret-pw@{server.socket}",
                            **PATIENT) as engine:
            assert "s3cret-pw" not in repr(engine)
            assert engine.redis is not None and str(server.socket) in engine.redis
            assert "s3cret-pw" not in engine.redis
            assert engine.try_acquire("x", ratewin.Limit(1, per=60)).degraded is False
        with ratewin.Engine(f"unix://:wrong-pw@{server.socket}") as engine:
            assert engine.try_acquire("x", ratewin.Limit(1, per=60)).degraded is True
            assert "wrong-pw" not in engine.stats()["last_error"]
            assert "wrong-pw" not in repr(engine)
    finally:
        server.stop()


def test_logger_hears_about_failures(redis):
    heard: list[tuple[str, str]] = []
    lock = threading.Lock()

    def logger(level: str, message: str) -> None:
        with lock:
            heard.append((level, message))

    limit = ratewin.Limit(5, per=3600)
    with ratewin.Engine(redis.url, **PATIENT, logger=logger) as engine:
        engine.try_acquire("a", limit)
        redis.stop()
        engine.try_acquire("a", limit)
    with lock:
        levels = {level for level, _ in heard}
        assert levels & {"warning", "error"}, heard
        assert all(level in {"debug", "info", "warning", "error"} for level in levels)
        assert all(isinstance(message, str) and message for _, message in heard)


def test_a_logger_that_raises_does_not_break_the_engine(redis, monkeypatch):
    def logger(level: str, message: str) -> None:
        raise RuntimeError("logger bug")

    reported: list[object] = []
    monkeypatch.setattr("sys.unraisablehook", lambda u: reported.append(u.exc_value))
    limit = ratewin.Limit(5, per=3600, on_failure="open")
    with ratewin.Engine(redis.url, **PATIENT, logger=logger) as engine:
        redis.stop()
        assert engine.try_acquire("a", limit).allowed
    assert reported and all(isinstance(e, RuntimeError) for e in reported)


def test_store_misconfiguration_is_said_plainly(tmp_path, caplog):
    """A missing or wrong password is one clear error (not an outage, not a clock problem),
    store_available is False from the start, and connect='require' fails fast."""
    server = RedisServer(tmp_path, tcp=False, unix=True, password="s3cret-pw")
    server.start()
    try:
        limit = ratewin.Limit(1, per=60)
        for url, words in ((f"unix://{server.socket}", "requires a password and none was given"),
                           (f"unix://:wrong-pw@{server.socket}", "refused the user or password")):
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="ratewin"):
                with ratewin.Engine(url, **PATIENT) as engine:
                    assert engine.stats()["store_available"] is False
                    # The start's report, then the background connection's (its login
                    # refused too): the error stays the plain one, not the PING's.
                    assert wait_until(lambda: sum(("NOAUTH" in r.getMessage() or
                                                   "WRONGPASS" in r.getMessage())
                                                  for r in list(caplog.records)) >= 2)
                    assert engine.stats()["store_available"] is False
                    assert words in engine.stats()["last_error"]
                    assert engine.try_acquire("x", limit).degraded is True
            errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
            assert errors and errors[0].levelno == logging.ERROR, errors
            assert words in errors[0].getMessage()
            assert all(words in r.getMessage() for r in caplog.records
                       if "NOAUTH" in r.getMessage() or "WRONGPASS" in r.getMessage())
            assert not any("TIME" in r.getMessage() for r in caplog.records)
            with pytest.raises(ratewin.StoreError, match=words):
                ratewin.Engine(url, connect="require", **PATIENT)
        with ratewin.Engine(f"unix://:s3cret-pw@{server.socket}", connect="require",
                            **PATIENT) as engine:
            assert engine.stats()["store_available"] is True
    finally:
        server.stop()
    with pytest.raises(ratewin.StoreError, match="cannot be used"):
        ratewin.Engine("redis://127.0.0.1:1", connect="require", connect_timeout=0.05)
    with pytest.raises(ValueError, match="connect"):
        ratewin.Engine(connect="eager")


def test_without_a_logger_records_go_to_the_ratewin_logger(redis, caplog):
    limit = ratewin.Limit(5, per=3600)
    with caplog.at_level(logging.INFO, logger="ratewin"):
        with ratewin.Engine(redis.url, **PATIENT) as engine:
            engine.try_acquire("a", limit)
            redis.stop()
            engine.try_acquire("a", limit)
    assert any(r.name == "ratewin" and r.levelno == logging.WARNING and "unreachable" in r.getMessage()
               for r in caplog.records), caplog.records
