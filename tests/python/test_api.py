"""The Python API: limits, decisions, engines, limiters, hashing, errors."""

from __future__ import annotations

import collections.abc
import datetime
import importlib
import inspect
import math
import pathlib
import re

import pytest

import ratewin
from ratewin import _ratewin

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_version_is_the_c_headers():
    header = (ROOT / "capi" / "ratewin.h").read_text()
    parts = [re.search(rf"#define RATEWIN_VERSION_{p} (\d+)", header).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    assert ratewin.__version__ == ".".join(parts)


def test_errors_form_a_hierarchy():
    assert issubclass(ratewin.Error, Exception)
    assert issubclass(ratewin.ClosedError, ratewin.Error)


# ---- hash ---------------------------------------------------------------------------

def test_hash_is_xxh3_64_of_utf8():
    assert ratewin.hash("") == 0x2D06800538D394C2  # the XXH3 specification's value
    assert ratewin.hash("héllo") == ratewin.hash("héllo".encode())
    assert ratewin.hash("a") != ratewin.hash("b")
    assert ratewin.hash(42) == 42  # an id is its own name
    assert ratewin.hash(2**64 - 1) == 2**64 - 1


@pytest.mark.parametrize("bad, error", [
    (1.5, TypeError), (None, TypeError), (True, TypeError), (["a"], TypeError),
    (-1, ValueError), (2**64, ValueError),
])
def test_hash_refuses_other_types_and_ranges(bad, error):
    with pytest.raises(error):
        ratewin.hash(bad)


def test_hash_refuses_unencodable_strings():
    with pytest.raises(UnicodeEncodeError):
        ratewin.hash("\ud800")


# ---- Limit --------------------------------------------------------------------------

def test_long_windows_in_float_seconds_are_whole_milliseconds():
    # 17173907.786 s is not exact in binary; times 1000 it lands a rounding step away
    # from a whole number, which must still count as whole.
    limit = ratewin.Limit(1, per=17173907.786, resolution=2453415.398)  # 7 subintervals
    assert limit.per == 17173907.786 and limit.subintervals == 7


def test_limits_read_naturally():
    limit = ratewin.Limit(100, per=60)
    assert (limit.max, limit.per, limit.resolution, limit.subintervals) == (100, 60.0, 6.0, 10)
    assert limit.on_failure == ratewin.FailurePolicy.LOCAL
    assert ratewin.Limit(5, per=datetime.timedelta(minutes=15)).per == 900.0
    assert ratewin.Limit(5, 1.5, 0.25).subintervals == 6
    assert ratewin.Limit(5, per=0.1).resolution == 0.01  # floats within a millionth of a ms
    # Resolution chosen when per / 10 ms is not whole: per / d, d the largest divisor < 10.
    assert ratewin.Limit(1, per=0.014).resolution == 0.002
    closed = ratewin.Limit(5, per=60, on_failure="closed")
    assert closed.on_failure == ratewin.FailurePolicy.CLOSED
    assert ratewin.Limit(5, per=60, on_failure=ratewin.FailurePolicy.OPEN).on_failure == \
        ratewin.FailurePolicy.OPEN


@pytest.mark.parametrize("args, kwargs, error, words", [
    ((0, 60), {}, ValueError, "max"),
    ((2**32, 60), {}, ValueError, "max"),
    ((-1, 60), {}, ValueError, "max"),
    ((True, 60), {}, TypeError, "max"),
    (("10", 60), {}, TypeError, "max"),
    ((10, 0), {}, ValueError, "per"),
    ((10, -5), {}, ValueError, "per"),
    ((10, math.nan), {}, ValueError, "per"),
    ((10, math.inf), {}, ValueError, "per"),
    ((10, 0.0015), {}, ValueError, "milliseconds"),
    ((10, "60"), {}, TypeError, "per"),
    ((10, 60, 7), {}, ValueError, "divide"),
    ((10, 100, 0.001), {}, ValueError, "subintervals"),
    ((10, datetime.timedelta(microseconds=1500)), {}, ValueError, "milliseconds"),
    ((10, 60), {"on_failure": "sometimes"}, ValueError, "on_failure"),
    ((10, 60), {"on_failure": 2}, TypeError, "on_failure"),
    ((10, 60), {"on_failure": "\ud800"}, ValueError, "on_failure"),
    ((10, 3600.0004), {}, ValueError, "milliseconds"),
    ((10, 1000.0005), {}, ValueError, "milliseconds"),
    ((10, 10**400), {}, ValueError, "per"),
])
def test_bad_limits_are_clear_errors(args, kwargs, error, words):
    with pytest.raises(error, match=words):
        ratewin.Limit(*args, **kwargs)


def test_limits_are_values():
    a = ratewin.Limit(100, per=60)
    assert a == ratewin.Limit(100, per=60, resolution=6)
    assert a != ratewin.Limit(101, per=60)
    assert a != ratewin.Limit(100, per=60, on_failure="open")
    assert hash(a) == hash(ratewin.Limit(100, per=60.0))
    assert len({a, ratewin.Limit(100, 60), ratewin.Limit(100, 60, 1)}) == 2
    # with_max keeps the limit's scope (it counts with `a`): not a plain limit of 5.
    assert a.with_max(5).max == 5
    assert a.with_max(5) != ratewin.Limit(5, per=60)
    assert a.with_max(100) == a
    assert a.with_scope("s") == ratewin.Limit(100, per=60, scope="s")
    assert hash(a.with_scope("s")) != hash(a)
    with pytest.raises(ValueError):
        a.with_max(0)


def test_limit_repr_reads_back():
    for limit in (ratewin.Limit(100, per=60), ratewin.Limit(3, 1.5, 0.25, on_failure="closed"),
                  ratewin.Limit(3, per=60, scope="login"),
                  ratewin.Limit(3, per=10, on_failure="open").with_max(9),
                  ratewin.Limit(3, per=10, algorithm="strict_window"),
                  ratewin.Limit(3, per=10, algorithm="fixed_window", scope="login"),
                  ratewin.Limit(3, per=10, on_failure="closed",
                                algorithm=ratewin.Algorithm.FIXED_WINDOW).with_max(9),
                  ratewin.Limit(3, per=10, algorithm="token_bucket"),
                  ratewin.Limit(3, per=10, algorithm="token_bucket", burst=3),
                  ratewin.Limit(3, per=10, algorithm="token_bucket", burst=5, scope="login"),
                  ratewin.Limit(3, per=10, algorithm="token_bucket", burst=2).with_max(9),
                  ratewin.Limit(3, per=10, algorithm="token_bucket", burst=9).with_max(9),
                  ratewin.Limit(3, per=10, algorithm="token_bucket").with_max(9)):
        text = repr(limit)
        assert text.startswith("Limit(")
        back = eval(text, {"Limit": ratewin.Limit})
        assert back == limit and back.scope == limit.scope and back.burst == limit.burst
        assert ("algorithm=" in text) == (limit.algorithm != "sliding_window")
    assert repr(ratewin.Limit(3, per=10, algorithm="fixed_window")) == \
        "Limit(3, per=10.0, resolution=10.0, algorithm='fixed_window')"
    # A token bucket's burst shows when it is not max.
    assert repr(ratewin.Limit(3, per=10, algorithm="token_bucket", burst=3)) == \
        "Limit(3, per=10.0, algorithm='token_bucket')"
    assert repr(ratewin.Limit(3, per=10, algorithm="token_bucket", burst=5)) == \
        "Limit(3, per=10.0, algorithm='token_bucket', burst=5)"
    assert repr(ratewin.Limit(3, per=10, algorithm="token_bucket", burst=9).with_max(9)) == \
        "Limit(3, per=10.0, algorithm='token_bucket', burst=9).with_max(9)"


def test_failure_policies():
    assert {p.name for p in ratewin.FailurePolicy.__members__.values()} == \
        {"LOCAL", "OPEN", "CLOSED", "PARTITIONED"}
    for name in ("local", "open", "closed", "partitioned"):
        assert ratewin.Limit(1, per=1, on_failure=name).on_failure.name == name.upper()
    assert "on_failure='partitioned'" in repr(ratewin.Limit(1, per=1, on_failure="partitioned"))
    with pytest.raises(ValueError, match="'local', 'open', 'closed' or 'partitioned'"):
        ratewin.Limit(1, per=1, on_failure="split")


def test_partitioned_options(clock):
    with ratewin.Engine(clock=clock, partition_share=2, partitioned_unknown="closed") as e:
        assert e.stats()["live_nodes"] == 0
    with ratewin.Engine(clock=clock, partitioned_unknown=ratewin.FailurePolicy.LOCAL):
        pass
    with pytest.raises(ValueError, match="partition_share"):
        ratewin.Engine(clock=clock, partition_share=0)
    with pytest.raises(TypeError, match="partition_share must be a number"):
        ratewin.Engine(clock=clock, partition_share="1")
    with pytest.raises(ValueError, match="partitioned_unknown"):
        ratewin.Engine(clock=clock, partitioned_unknown="open")


# ---- Decisions on a local engine ----------------------------------------------------

def test_decisions_count_and_explain(engine, clock):
    limit = ratewin.Limit(3, per=10, resolution=1)
    for left in (2, 1, 0):
        d = engine.try_acquire("user:1", limit)
        assert d and d.allowed and not d.degraded
        assert (d.limit, d.remaining, d.reset_after, d.retry_after) == (3, left, 11.0, 0.0)
    rejected = engine.try_acquire("user:1", limit)
    assert not rejected
    # All three counts are in the first subinterval. A trailing count is discounted by at
    # most max / 4, nothing for a max of 3: one more fits once that subinterval has left
    # the window, 11 s on.
    assert rejected.retry_after == pytest.approx(11, abs=1e-8)
    assert rejected.can_ever_pass
    assert rejected.headers() == {
        "X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": "11", "Retry-After": "11"}
    clock.advance(rejected.retry_after + 0.001)
    assert engine.try_acquire("user:1", limit)


def test_decision_repr_and_headers_of_an_admission(engine):
    d = engine.try_acquire("k", ratewin.Limit(10, per=1))
    assert repr(d) == ("Decision(allowed=True, limit=10, remaining=9, reset_after=1.1, "
                       "retry_after=0.0, degraded=False)")
    assert d.headers() == {"X-RateLimit-Limit": "10", "X-RateLimit-Remaining": "9",
                           "X-RateLimit-Reset": "2"}


def test_cost_zero_asks_and_a_cost_above_max_never_passes(engine):
    limit = ratewin.Limit(5, per=60)
    assert engine.try_acquire("c", limit, cost=0).remaining == 5
    assert engine.try_acquire("c", limit, cost=2).remaining == 3
    assert engine.try_acquire("c", limit, 0).remaining == 3
    never = engine.try_acquire("c", limit, cost=6)
    assert not never and not never.can_ever_pass
    assert never.retry_after == math.inf
    assert "Retry-After" not in never.headers()


@pytest.mark.parametrize("cost, error", [(-1, ValueError), (2**64, ValueError),
                                         (1.0, TypeError), ("1", TypeError)])
def test_bad_costs(engine, cost, error):
    with pytest.raises(error, match="cost"):
        engine.try_acquire("c", ratewin.Limit(5, per=60), cost)


def test_resources_by_name_bytes_or_id_share_counts(engine):
    limit = ratewin.Limit(3, per=60)
    assert engine.try_acquire("tenant", limit).remaining == 2
    assert engine.try_acquire(b"tenant", limit).remaining == 1
    assert engine.try_acquire(ratewin.hash("tenant"), limit).remaining == 0
    with pytest.raises(TypeError, match="resource"):
        engine.try_acquire(3.0, limit)
    with pytest.raises(ValueError, match="limit: cannot read 'not a limit' as a limit"):
        engine.try_acquire("x", "not a limit")
    with pytest.raises(TypeError, match="limit must be a ratewin.Limit, a limit string"):
        engine.try_acquire("x", 3)


def test_limits_of_other_windows_count_apart(engine):
    engine.try_acquire("r", ratewin.Limit(1, per=60))
    assert engine.try_acquire("r", ratewin.Limit(1, per=60)).allowed is False
    assert engine.try_acquire("r", ratewin.Limit(1, per=30)).allowed is True


# ---- Engine lifecycle and options ---------------------------------------------------

def test_engine_stats(engine):
    limit = ratewin.Limit(1, per=60)
    engine.try_acquire("a", limit)
    engine.try_acquire("a", limit)
    s = engine.stats()
    assert (s["allowed"], s["rejected"], s["degraded"], s["limiters"]) == (1, 1, 0, 1)
    assert s["max_limiters"] == 1_000_000
    assert s["max_memory"] == 256 << 20 and 0 < s["memory"] < s["max_memory"]
    assert s["overflowed"] == 0
    assert s["store"] is False and s["store_available"] is False
    assert s["last_error"] == "" and s["write_p50"] == 0.0
    assert set(s) >= {"evictions", "pinned", "writes_ok", "sync_rounds", "clock_offset"}
    # A Stats: attributes, and a read-only mapping of the same names.
    assert isinstance(s, ratewin.Stats) and isinstance(s, collections.abc.Mapping)
    assert dict(s) == s.to_dict() and len(s) == len(s.keys()) == len(set(s))
    assert all(getattr(s, name) == s[name] for name in s)
    assert s.allowed == 1 and s.write_p99 == 0.0 and s.store is False
    assert s["evictions_active"] == 0
    with pytest.raises(KeyError):
        s["nothing"]
    assert repr(s).startswith("Stats(store=False, store_available=False, allowed=1, ")


def test_memory_bound_and_live_evictions(clock):
    # 64 KiB hold a few limiters of 3600 subintervals; while they all still count, a new
    # resource evicts one, whose counts are kept as a ghost its resource starts from again.
    engine = ratewin.Engine(max_memory=64 * 1024, clock=clock)
    hourly = ratewin.Limit(2, per=3600, resolution=1)
    fit = engine.capacity(hourly)
    assert 1 <= fit < 8
    assert engine.capacity(ratewin.Limit(2, per=1)) > 100
    for i in range(fit):
        assert engine.try_acquire(f"k{i}", hourly, cost=2).allowed
    assert [engine.try_acquire(f"new{i}", hourly).allowed for i in range(4)] == [True] * 4
    s = engine.stats()
    assert s["overflowed"] == 0 and s["evictions"] == 0 and s["evictions_active"] >= 4
    assert s["memory"] <= 64 * 1024
    for i in range(fit):  # each kept its count, held or as a ghost
        assert not engine.try_acquire(f"k{i}", hourly).allowed
    assert ratewin.Engine(max_memory=16384).capacity(ratewin.Limit(1, per=65.535, resolution=0.001)) == 0


def test_engine_is_a_context_manager_and_closes_once():
    with ratewin.Engine() as engine:
        assert not engine.closed and engine.redis is None
        assert repr(engine) == "<ratewin.Engine local>"
    assert engine.closed and repr(engine) == "<ratewin.Engine closed>"
    engine.close()  # idempotent
    with pytest.raises(ratewin.ClosedError):
        engine.try_acquire("a", ratewin.Limit(1, per=1))
    with pytest.raises(ratewin.ClosedError):
        engine.stats()
    with pytest.raises(ratewin.ClosedError):
        engine.limiter("a", ratewin.Limit(1, per=1))


@pytest.mark.parametrize("kwargs, error, words", [
    ({"max_limiters": 0}, ValueError, "max_limiters"),
    ({"max_memory": 16383}, ValueError, "max_memory"),
    ({"command_timeout": 0}, ValueError, "command_timeout"),
    ({"connect_timeout": -1}, ValueError, "connect_timeout"),
    ({"connect_timeout": datetime.timedelta(days=2)}, ValueError, "connect_timeout"),
    ({"sync_settle": 0.0001}, ValueError, "sync_settle"),
    ({"max_connections": 0}, ValueError, "max_connections"),
    ({"key_prefix": "a{b}"}, ValueError, "key_prefix"),
    ({"redis": "http://localhost"}, ValueError, "Redis URL"),
    ({"redis": 6379}, TypeError, "redis"),
    ({"clock": 5}, TypeError, "clock"),
    ({"logger": "stderr"}, TypeError, "logger"),
    ({"redis": "redis://\ud800"}, ValueError, "redis"),
    ({"key_prefix": b"app"}, TypeError, "key_prefix"),
    ({"sync_clock": 0}, TypeError, "sync_clock"),
    ({"sync_clock": None}, TypeError, "sync_clock"),
    ({"command_timeout": 10**400}, ValueError, "command_timeout"),
])
def test_bad_options_are_clear_errors(kwargs, error, words):
    with pytest.raises(error, match=words):
        ratewin.Engine(**kwargs)


def test_options_are_keywords():
    with pytest.raises(TypeError):
        ratewin.Engine(None, "prefix")  # key_prefix is keyword-only


def test_bad_redis_url_errors_hide_the_password():
    with pytest.raises(ValueError) as caught:
        ratewin.Engine("redis://alice:s3cret@host:0")
    assert "s3cret" not in str(caught.value)


def test_engines_and_limiters_close_at_exit():
    engine = ratewin.Engine()
    limiter = engine.limiter("x", ratewin.Limit(1, per=1))
    _ratewin._close_all()  # what the package's atexit hook does first
    assert engine.closed and limiter.closed


# ---- Manual clock -------------------------------------------------------------------

def test_manual_clock():
    c = ratewin.ManualClock(100)
    assert c.now() == 100.0 and repr(c) == "ManualClock(100.0)"
    c.advance(0.25)
    c.advance(datetime.timedelta(milliseconds=750))
    assert c.now() == 101.0
    c.set(5)
    assert c.now() == 5.0
    with pytest.raises(ValueError):
        c.advance(-1)
    with pytest.raises(TypeError):
        c.advance("1")
    late = ratewin.ManualClock(4.6e9)
    with pytest.raises(ValueError, match="2116"):
        late.advance(4.6e9)  # would wrap a 64-bit nanosecond count
    assert late.now() == 4.6e9
    with pytest.raises(ValueError, match="2116"):
        ratewin.ManualClock(4.7e9)


# ---- Limiters -----------------------------------------------------------------------

def test_limiters(engine):
    limit = ratewin.Limit(2, per=60)
    with engine.limiter("hot", limit) as limiter:
        assert limiter.resource == ratewin.hash("hot") and limiter.limit == limit
        assert engine.stats()["pinned"] == 1
        assert limiter.try_acquire().remaining == 1
        assert engine.try_acquire("hot", limit).remaining == 0  # the same counts
        assert not limiter.try_acquire()
        assert re.fullmatch(r"<ratewin.Limiter resource='hot' Limit\(2, .*\)>", repr(limiter))
    assert limiter.closed and engine.stats()["pinned"] == 0
    with pytest.raises(ratewin.ClosedError):
        limiter.try_acquire()


def test_a_limiter_outlives_its_engine():
    engine = ratewin.Engine()
    limiter = engine.limiter("k", ratewin.Limit(1, per=60))
    engine.close()
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    limiter.close()


# ---- Documentation ------------------------------------------------------------------

PUBLIC_CLASSES = [ratewin.Engine, ratewin.Limit, ratewin.Decision, ratewin.Decisions,
                  ratewin.Limiter,
                  ratewin.ManualClock, ratewin.FailurePolicy, ratewin.Error,
                  ratewin.ClosedError]


def test_everything_has_a_docstring():
    undocumented = []
    for cls in PUBLIC_CLASSES:
        if not (cls.__doc__ or "").strip():
            undocumented.append(cls.__name__)
        for name, member in vars(cls).items():
            if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
                continue
            if cls is ratewin.FailurePolicy and name in ("name", "value"):
                continue  # pybind11's enum machinery
            if callable(member) or isinstance(member, property):
                if not (member.__doc__ or "").strip():
                    undocumented.append(f"{cls.__name__}.{name}")
    for fn in (ratewin.hash, _ratewin._close_all, _ratewin._at_exit, _ratewin._cxx_loop):
        if not (fn.__doc__ or "").strip():
            undocumented.append(fn.__name__)
    for module in (ratewin, importlib.import_module("ratewin.wsgi"),
                   importlib.import_module("ratewin.asgi")):
        if not (module.__doc__ or "").strip():
            undocumented.append(module.__name__)
        for name in getattr(module, "__all__", []):
            if not (getattr(module, name).__doc__ or "").strip():
                undocumented.append(f"{module.__name__}.{name}")
    assert undocumented == []


def test_every_class_has_its_own_repr(engine):
    limit = ratewin.Limit(1, per=1)
    objects = [engine, limit, engine.try_acquire("x", limit), engine.limiter("y", limit),
               engine.try_acquire_all("z", [limit]),
               ratewin.ManualClock(), ratewin.FailurePolicy.OPEN]
    for obj in objects:
        assert " object at 0x" not in repr(obj), type(obj)
    assert inspect.getdoc(ratewin)
