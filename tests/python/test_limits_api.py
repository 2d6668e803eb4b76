"""Limit strings, limits that count apart unless scoped together, several limits at once,
reset and refund: the everyday patterns of limits / flask-limiter users."""

from __future__ import annotations

import asyncio
import math

import pytest

import ratewin
from conftest import PATIENT


# ---- two limits never share counts unless asked ---------------------------------------

def test_per_route_limits_count_apart(engine):
    login = ratewin.Limit(3, per=60)
    api = ratewin.Limit(100, per=60)
    for _ in range(5):
        assert engine.try_acquire("client", api)
    first = engine.try_acquire("client", login)
    assert first.allowed and first.remaining == 2
    assert engine.try_acquire("client", api).remaining == 94


def test_a_shared_scope_counts_together(engine):
    low = ratewin.Limit(3, per=60, scope="uploads")
    high = ratewin.Limit(100, per=60).with_scope("uploads")
    assert low.scope == "uploads" and high.scope == "uploads"
    assert ratewin.Limit(3, per=60).scope is None
    assert engine.try_acquire("k", high, 3)
    assert not engine.try_acquire("k", low)
    # with_max keeps what was counted: an override that raises a limit.
    base = ratewin.Limit(2, per=60)
    assert engine.try_acquire("u", base, 2)
    assert not engine.try_acquire("u", base)
    raised = base.with_max(5)
    assert engine.try_acquire("u", raised).remaining == 2


def test_scope_must_be_a_nonempty_str():
    with pytest.raises(TypeError, match="scope"):
        ratewin.Limit(1, per=1, scope=3)
    with pytest.raises(ValueError, match="scope"):
        ratewin.Limit(1, per=1, scope="")


# ---- algorithms -------------------------------------------------------------------------

WINDOWS = ("sliding_window", "strict_window", "fixed_window")
ALGORITHMS = WINDOWS + ("token_bucket", "sliding_log")


def test_each_algorithm_decides_its_own_way(engine, clock):
    # The same burst at the start of a second (the manual clock starts on one), then the
    # same requests at the same times: the algorithms differ in how the subinterval
    # leaving the window counts.
    sliding, strict, fixed = (ratewin.Limit(10, per=1, algorithm=a) for a in WINDOWS)
    assert (sliding.resolution, strict.resolution, fixed.resolution) == (0.1, 0.1, 1.0)
    for limit in (sliding, strict, fixed):
        for _ in range(10):
            assert engine.try_acquire("k", limit)
        assert not engine.try_acquire("k", limit)
    # Limits of different algorithms count apart (each has its own scope).
    assert engine.try_acquire("other", sliding, 0).remaining == 10
    # 1 ms before the fixed window ends, every one refuses; the fixed window opens again
    # at its end.
    clock.advance(0.999)
    assert not engine.try_acquire("k", sliding) and not engine.try_acquire("k", strict)
    refused = engine.try_acquire("k", fixed)
    assert not refused and refused.retry_after == pytest.approx(0.001, abs=1e-9)
    # At its end the fixed window starts afresh; the burst's subinterval has only begun
    # to leave the sliding window (9 of its 10 weigh for 10 ms more), and the strict
    # window counts it in full until it has left, 100 ms on.
    clock.advance(0.001)
    fresh = engine.try_acquire("k", fixed)
    assert fresh and fresh.remaining == 9 and fresh.reset_after == pytest.approx(1.0)
    assert engine.try_acquire("k", sliding).retry_after == pytest.approx(0.01, abs=1e-9)
    assert engine.try_acquire("k", strict).retry_after == pytest.approx(0.1, abs=1e-9)
    # Half of it has left: the sliding window counts 5 of the 10 by overlap, but discounts
    # a trailing count by at most max / 4, so 8, and admits; the strict window refuses
    # until it has left.
    clock.advance(0.05)
    half = engine.try_acquire("k", sliding)
    assert half and half.remaining == 1
    assert engine.try_acquire("k", strict).retry_after == pytest.approx(0.05, abs=1e-9)
    clock.advance(0.05)
    assert engine.try_acquire("k", strict).remaining == 9


def test_a_named_scope_counts_together_whatever_the_algorithms(engine, clock):
    strict = ratewin.Limit(10, per=1, scope="shared", algorithm="strict_window")
    sliding = ratewin.Limit(10, per=1, scope="shared")
    assert engine.try_acquire("k", strict, 10)
    clock.advance(1.05)
    assert not engine.try_acquire("k", strict)
    assert engine.try_acquire("k", sliding).remaining == 1  # (8 of the 10 count: see above)


def test_algorithms_by_name_or_enum():
    assert ratewin.Limit(10, per=60).algorithm == "sliding_window"
    assert [a.value for a in ratewin.Algorithm] == list(ALGORITHMS)
    for member in ratewin.Algorithm:
        limit = ratewin.Limit(10, per=60, algorithm=member)
        assert limit.algorithm == member.value and limit.algorithm == member
        assert type(limit.algorithm) is str
        assert limit == ratewin.Limit(10, per=60, algorithm=member.value)
        assert str(member) == member.value and f"{member}" == member.value
    assert ratewin.Algorithm("strict_window") is ratewin.Algorithm.STRICT_WINDOW
    # A fixed window's resolution is its window, given or not.
    fixed = ratewin.Limit(10, per=60, algorithm="fixed_window")
    assert (fixed.resolution, fixed.subintervals) == (60.0, 1)
    assert fixed == ratewin.Limit(10, per=60, resolution=60, algorithm="fixed_window")
    assert ratewin.Limit(1, per=4294967.295, algorithm="fixed_window").per == 4294967.295
    # The same window with another algorithm is another limit; with_max keeps it.
    assert ratewin.Limit(10, per=60, algorithm="strict_window") != ratewin.Limit(10, per=60)
    assert ratewin.Limit(10, per=60, algorithm="strict_window").with_max(5).algorithm == \
        "strict_window"
    assert len({ratewin.Limit(10, per=60, algorithm=a) for a in ALGORITHMS * 2}) == 5


@pytest.mark.parametrize("kwargs, error, words", [
    ({"algorithm": "leaky_bucket"}, ValueError,
     "^algorithm must be one of sliding_window, strict_window, fixed_window, token_bucket, "
     "sliding_log, got 'leaky_bucket'$"),
    ({"algorithm": "Sliding_Window"}, ValueError, "got 'Sliding_Window'"),
    ({"algorithm": ""}, ValueError, "got ''$"),
    ({"algorithm": 1}, TypeError, "algorithm must be a str, not int"),
    ({"algorithm": None}, TypeError, "algorithm must be a str"),
    ({"algorithm": "fixed_window", "resolution": 6}, ValueError,
     r"^Limit: algorithm='fixed_window' has one subinterval, the whole window \(per=60.0 s\): "
     r"resolution=6.0 s says otherwise; leave it out$"),
    ({"algorithm": "fixed_window", "per": 60 * 86400}, ValueError,
     r"per=5184000.0 s is longer than 4294967.295 s, the longest for algorithm='fixed_window'"),
    ({"algorithm": "fixed_window", "per": 4294967.296, "resolution": 4294967.296},
     ValueError, "longest for algorithm='fixed_window'"),
    ({"algorithm": "sliding_log", "resolution": 6}, ValueError,
     r"algorithm='sliding_log' has one subinterval, the whole window \(per=60.0 s\): "
     r"resolution=6.0 s says otherwise"),
    ({"algorithm": "sliding_log", "max": 4097}, ValueError,
     r"max=4097 is more than 4096 for algorithm='sliding_log'"),
])
def test_algorithm_errors_in_pythons_terms(kwargs, error, words):
    kwargs.setdefault("per", 60)
    with pytest.raises(error, match=words) as raised:
        ratewin.Limit(kwargs.pop("max", 10), **kwargs)
    assert "ms" not in str(raised.value) and "ratewin::" not in str(raised.value)
    # The same window as a sliding or strict window is fine.
    if "longest" in words:
        del kwargs["algorithm"]
        kwargs.pop("resolution", None)
        assert ratewin.Limit(10, algorithm="strict_window", **kwargs)


def test_a_sliding_log_is_exact(engine, clock):
    log = ratewin.Limit(3, per=1, algorithm="sliding_log")
    assert (log.algorithm, log.resolution, log.burst) == ("sliding_log", 1.0, 3)
    assert repr(log) == "Limit(3, per=1.0, algorithm='sliding_log')"
    for _ in range(3):
        assert engine.try_acquire("k", log)
        clock.advance(0.1)
    refused = engine.try_acquire("k", log)
    # The first unit leaves 1 s after it came: 0.7 s from now; the last, 0.9 s from now.
    assert not refused and refused.retry_after == pytest.approx(0.7, abs=1e-9)
    assert refused.reset_after == pytest.approx(0.9, abs=1e-9)
    clock.advance(0.7)
    passed = engine.try_acquire("k", log)
    assert passed and passed.remaining == 0
    assert engine.try_acquire("k", log, 0).remaining == 0
    assert engine.refund("k", log, 1) == 1
    assert engine.try_acquire("k", log, 0).remaining == 1
    assert log.with_max(4096).max == 4096
    with pytest.raises(ValueError, match="^Limit.with_max: max=4097 is more than 4096 for "
                       "algorithm='sliding_log'"):
        log.with_max(4097)


# ---- token buckets ----------------------------------------------------------------------

def test_a_token_bucket_passes_its_burst_then_one_every_per_over_max(engine, clock):
    # 10 a second, 4 at once: one unit comes back every 100 ms.
    bucket = ratewin.Limit(10, per=1, algorithm="token_bucket", burst=4)
    assert (bucket.max, bucket.burst, bucket.algorithm) == (10, 4, "token_bucket")
    for n in range(4):
        d = engine.try_acquire("k", bucket)
        assert d and d.limit == 4 and d.remaining == 3 - n
        assert d.reset_after == pytest.approx(0.1 * (n + 1), abs=1e-9)
    refused = engine.try_acquire("k", bucket)
    assert not refused and refused.limit == 4 and refused.remaining == 0
    assert refused.retry_after == pytest.approx(0.1, abs=1e-9)
    assert refused.reset_after == pytest.approx(0.4, abs=1e-9)
    # X-RateLimit-Limit is the burst, the most admitted at once, not max.
    assert refused.headers() == {"X-RateLimit-Limit": "4", "X-RateLimit-Remaining": "0",
                                 "X-RateLimit-Reset": "1", "Retry-After": "1"}
    # retry_after is exact: 1 ms early it says 1 ms; then one passes, and the next one
    # 100 ms later.
    clock.advance(0.099)
    assert engine.try_acquire("k", bucket).retry_after == pytest.approx(0.001, abs=1e-9)
    clock.advance(0.001)
    assert engine.try_acquire("k", bucket)
    assert engine.try_acquire("k", bucket).retry_after == pytest.approx(0.1, abs=1e-9)
    clock.advance(0.1)
    assert engine.try_acquire("k", bucket)
    assert not engine.try_acquire("k", bucket)
    # 250 ms on, two and a half units are back: a cost of 3 waits exactly 50 ms, 2 pass.
    clock.advance(0.25)
    three = engine.try_acquire("k", bucket, 3)
    assert not three and three.remaining == 2
    assert three.retry_after == pytest.approx(0.05, abs=1e-9)
    assert engine.try_acquire("k", bucket, 2)
    # More than the burst never passes, though it is within max.
    never = engine.try_acquire("k", bucket, 5)
    assert not never and not never.can_ever_pass and never.retry_after == math.inf
    assert "Retry-After" not in never.headers()
    # Full again: the whole burst, nothing to wait for.
    clock.advance(0.35)
    full = engine.try_acquire("k", bucket, 0)
    assert full.remaining == 4 and full.reset_after == 0
    # Refund and reset work on a bucket too.
    assert engine.try_acquire("k", bucket, 4)
    assert engine.refund("k", bucket, 1) == 1
    assert engine.try_acquire("k", bucket, 0).remaining == 1
    assert engine.reset("k", bucket)
    assert engine.try_acquire("k", bucket, 0).remaining == 4


def test_a_token_buckets_burst_defaults_to_max(engine):
    bucket = ratewin.Limit(10, per=1, algorithm=ratewin.Algorithm.TOKEN_BUCKET)
    assert bucket.burst == 10 and bucket.algorithm == ratewin.Algorithm.TOKEN_BUCKET
    # Its resolution is its window, given or not.
    assert (bucket.resolution, bucket.subintervals) == (1.0, 1)
    assert bucket == ratewin.Limit(10, per=1, resolution=1, algorithm="token_bucket")
    # burst=max is the default: the same limit, the same hash, the same bucket.
    same = ratewin.Limit(10, per=1, algorithm="token_bucket", burst=10)
    assert same == bucket and hash(same) == hash(bucket)
    assert engine.try_acquire("k", bucket, 10)
    refused = engine.try_acquire("k", same)
    assert not refused and refused.limit == 10
    assert refused.retry_after == pytest.approx(0.1, abs=1e-9)
    # Another burst is another limit, counted apart; so is a window of the same max.
    other = ratewin.Limit(10, per=1, algorithm="token_bucket", burst=4)
    assert other != bucket and hash(other) != hash(bucket)
    assert engine.try_acquire("k", other, 0).remaining == 4
    assert engine.try_acquire("k", ratewin.Limit(10, per=1), 0).remaining == 10
    # A burst may exceed max: more at once, the same rate after.
    big = ratewin.Limit(10, per=1, algorithm="token_bucket", burst=25)
    assert big.burst == 25 and engine.try_acquire("k", big, 25).limit == 25
    # The windows' burst is their max.
    assert [ratewin.Limit(7, per=60, algorithm=a).burst for a in WINDOWS] == [7, 7, 7]


def test_with_max_keeps_a_token_buckets_burst():
    small = ratewin.Limit(10, per=1, algorithm="token_bucket", burst=4)
    assert small.with_max(20).burst == 4 and small.with_max(20).max == 20
    assert small.with_max(20).algorithm == "token_bucket"
    # A burst left at max follows max.
    assert ratewin.Limit(10, per=1, algorithm="token_bucket").with_max(20).burst == 20
    # A new max that would make the bucket too slow to refill is refused.
    slowest = ratewin.Limit(10, per=60, algorithm="token_bucket", burst=715827)
    with pytest.raises(ValueError, match=r"^Limit.with_max: algorithm='token_bucket' with max=9 "
                       r"and per=60.0 s takes longer than 4294967.295 s \(about 49.7 days\) to "
                       r"refill burst=715827"):
        slowest.with_max(9)


def test_token_buckets_of_a_named_scope_share_their_time(engine, clock):
    slow = ratewin.Limit(10, per=1, algorithm="token_bucket", scope="buckets")
    fast = ratewin.Limit(20, per=1, algorithm="token_bucket", scope="buckets")
    window = ratewin.Limit(20, per=1, algorithm="fixed_window", scope="buckets")
    assert engine.try_acquire("k", slow, 10)
    # A backlog of 1 s is the whole of either bucket: the fast one waits one of its units.
    refused = engine.try_acquire("k", fast)
    assert not refused and refused.retry_after == pytest.approx(0.05, abs=1e-9)
    # A window of that scope counts apart.
    assert engine.try_acquire("k", window, 0).remaining == 20


def test_try_acquire_all_with_a_token_bucket(engine):
    window = ratewin.Limit(100, per=60)
    bucket = ratewin.Limit(10, per=1, algorithm="token_bucket", burst=2)
    assert engine.try_acquire_all("k", [window, bucket], cost=2)
    refused = engine.try_acquire_all("k", [window, bucket])
    assert refused.refused == 1 and refused.decision.limit == 2
    assert refused.headers()["X-RateLimit-Limit"] == "2"
    assert refused.retry_after == pytest.approx(0.1, abs=1e-9)
    # The refused request counted against neither.
    assert engine.try_acquire("k", window, 0).remaining == 98


@pytest.mark.parametrize("kwargs, error, words", [
    ({"burst": 4, "algorithm": "sliding_window"}, ValueError,
     "^Limit: burst applies to algorithm='token_bucket' only, not to "
     "algorithm='sliding_window': leave it out$"),
    ({"burst": 4, "algorithm": "fixed_window"}, ValueError, "not to algorithm='fixed_window'"),
    ({"burst": None, "algorithm": "strict_window", "resolution": 7}, ValueError,
     "resolution=7.0 s does not divide per=60.0 s"),
    ({"burst": 0}, ValueError, "^burst must be 1 or more, got 0$"),
    ({"burst": -1}, ValueError, "burst must be 1 or more, got -1"),
    ({"burst": 2**32}, ValueError, "^Limit: burst must be from 1 to 4294967295, got 4294967296$"),
    ({"burst": "4"}, TypeError, "^burst must be an int, not str$"),
    ({"burst": True}, TypeError, "burst must be an int, not bool"),
    ({"burst": 4.0}, TypeError, "burst must be an int, not float"),
    ({"resolution": 6}, ValueError,
     r"^Limit: algorithm='token_bucket' has one subinterval, the whole window \(per=60.0 s\): "
     r"resolution=6.0 s says otherwise; leave it out$"),
    # One unit every 6 s: 715828 of them take longer than 2^32 - 1 ms to come back.
    ({"burst": 715828}, ValueError,
     r"^Limit: algorithm='token_bucket' with max=10 and per=60.0 s takes longer than "
     r"4294967.295 s \(about 49.7 days\) to refill burst=715828 \(burst x per / max\)$"),
    ({"per": 60 * 86400}, ValueError,
     r"^Limit: algorithm='token_bucket' with max=10 and per=5184000.0 s takes longer than "
     r"4294967.295 s \(about 49.7 days\) to refill its burst \(max, when burst is not given\): "
     r"give a smaller burst$"),
    ({"per": 367 * 86400, "burst": 1}, ValueError, "366 days"),
])
def test_token_bucket_errors_in_pythons_terms(kwargs, error, words):
    kwargs.setdefault("per", 60)
    kwargs.setdefault("algorithm", "token_bucket")
    with pytest.raises(error, match=words) as raised:
        ratewin.Limit(10, **kwargs)
    assert "ms" not in str(raised.value) and "ratewin::" not in str(raised.value)


def test_the_slowest_token_buckets():
    assert ratewin.Limit(10, per=60, algorithm="token_bucket", burst=715827).burst == 715827
    assert ratewin.Limit(1000, per=49 * 86400, algorithm="token_bucket", burst=1).burst == 1
    assert ratewin.Limit(1, per=4294967.295, algorithm="token_bucket").per == 4294967.295


# ---- limit strings ----------------------------------------------------------------------

@pytest.mark.parametrize("text, max, per", [
    ("10/second", 10, 1),
    ("10/seconds", 10, 1),
    ("10 per second", 10, 1),
    ("  5 / Minute ", 5, 60),
    ("100 per 5 minutes", 100, 300),
    ("100/5minutes", 100, 300),
    ("1000/hour", 1000, 3600),
    ("1000 per day", 1000, 86400),
    ("2/2 days", 2, 172800),
    ("3/month", 3, 30 * 86400),
    ("1 per year", 1, 365 * 86400),
])
def test_parse_reads_the_usual_grammar(text, max, per):
    limit = ratewin.parse(text)
    assert limit == ratewin.Limit(max, per=per)


def test_parse_takes_a_policy_and_a_scope():
    limit = ratewin.parse("3/minute", on_failure="closed", scope="login")
    assert limit.on_failure == ratewin.FailurePolicy.CLOSED and limit.scope == "login"


@pytest.mark.parametrize("text, words", [
    ("", "cannot read"),
    ("ten/second", "cannot read"),
    ("10", "cannot read"),
    ("10/fortnight", "unknown unit 'fortnight'"),
    ("0/second", "at least 1"),
    ("1/0 seconds", "window of 0"),
    ("10/second extra", "cannot read"),
    ("99999999999/second", "count must be from 1 to 4294967295, got 99999999999"),
    ("1/400 days", "366 days"),
])
def test_parse_errors_say_what_is_wrong(text, words):
    with pytest.raises(ValueError, match=words):
        ratewin.parse(text)
    with pytest.raises(TypeError):
        ratewin.parse(10)  # type: ignore[arg-type]


def test_parse_many_splits_on_semicolons_commas_and_bars():
    assert ratewin.parse_many("10/second; 1000/day") == [
        ratewin.Limit(10, per=1), ratewin.Limit(1000, per=86400)]
    assert ratewin.parse_many("1/second, 2/minute | 3/hour") == [
        ratewin.Limit(1, per=1), ratewin.Limit(2, per=60), ratewin.Limit(3, per=3600)]
    assert ratewin.parse_many("7/second") == [ratewin.Limit(7, per=1)]
    with pytest.raises(ValueError, match="no limit"):
        ratewin.parse_many(" ; ")
    with pytest.raises(ValueError, match="empty limit"):
        ratewin.parse_many("1/second;;2/day")
    with pytest.raises(ValueError, match="fortnight"):
        ratewin.parse_many("1/second; 2/fortnight")


# ---- several limits at once -------------------------------------------------------------

def test_try_acquire_all_is_all_or_nothing(engine, clock):
    burst, daily = ratewin.parse_many("2/second; 5/day")
    got = [engine.try_acquire_all("k", [burst, daily]) for _ in range(3)]
    assert [bool(d) for d in got] == [True, True, False]
    assert got[0].refused is None and got[0].allowed and len(got[0]) == 2
    assert [d.remaining for d in got[1].decisions] == [0, 3]
    refused = got[2]
    assert refused.refused == 0 and not refused.allowed
    # The day limit would have admitted it: its own answer, nothing counted (3 of 5 left).
    assert refused.decisions[1].allowed and refused.decisions[1].remaining == 3
    assert refused.decision.limit == 2 and 0 < refused.retry_after <= 1.1
    assert refused.headers()["X-RateLimit-Limit"] == "2"
    assert "Retry-After" in refused.headers()
    # The refused request counted against neither: the day has 3 left.
    clock.advance(2)
    ok = engine.try_acquire_all("k", [burst, daily])
    assert ok and ok.decision.limit == 2  # (the fewest left: 1 of 2, against 2 of 5)
    assert ok.decisions[1].remaining == 2


def test_try_acquire_all_takes_any_iterable_and_refuses_nonsense(engine):
    assert engine.try_acquire_all("k", (lim for lim in ratewin.parse_many("5/second"))).allowed
    with pytest.raises(ValueError, match="empty"):
        engine.try_acquire_all("k", [])
    with pytest.raises(TypeError, match="limits must hold ratewin.Limit objects or limit "
                                        "strings, not int"):
        engine.try_acquire_all("k", [ratewin.Limit(5, per=1), 5])
    with pytest.raises(TypeError, match="an iterable of them, not int"):
        engine.try_acquire_all("k", 5)
    with pytest.raises(TypeError, match="not bytes"):
        engine.try_acquire_all("k", b"5/second")
    with pytest.raises(ValueError, match="limits: unknown unit 'fortnight'"):
        engine.try_acquire_all("k", ["5/second", "1/fortnight"])
    over = engine.try_acquire_all("k", [ratewin.Limit(2, per=1)], cost=3)
    assert not over and over.retry_after == math.inf


def test_every_method_taking_a_limit_takes_limit_strings(engine):
    """One input language: strings wherever a Limit is taken, several where several can
    be (all or nothing, as try_acquire_all)."""
    assert engine.try_acquire("s", "3/minute").remaining == 2
    assert engine.try_acquire("s", ratewin.parse("3/minute")).remaining == 1  # the same
    # Several at once: all or nothing; the Decision shown is the outcome's.
    got = [engine.try_acquire("m", "2/second; 5/day") for _ in range(3)]
    assert [bool(d) for d in got] == [True, True, False]
    assert got[2].limit == 2
    assert engine.try_acquire("m", ["5/day"], 0).remaining == 3  # the refused one: not counted
    assert engine.try_acquire_all("m", "5/day", 0).decision.remaining == 3
    # refund and reset under several: each of them.
    assert engine.refund("m", "2/second; 5/day", 1) == 1
    assert engine.try_acquire("m", "5/day", 0).remaining == 4
    assert engine.reset("m", ["2/second", ratewin.parse("5/day")]) is True
    assert engine.try_acquire("m", "5/day", 0).remaining == 5
    with engine.limiter("h", "2/minute") as handle:
        assert handle.try_acquire().remaining == 1
    assert engine.capacity("2/minute") == engine.capacity(ratewin.parse("2/minute"))
    assert engine.acquire("w", "1/minute", timeout=0).allowed
    assert not engine.acquire("w", "1/minute", timeout=0)

    async def waited():
        first = await engine.try_acquire_async("a", "1/minute; 10/day")
        second = await engine.acquire_async("a", "1/minute; 10/day", timeout=0)
        return first, second

    first, second = asyncio.run(waited())
    assert first and not second
    # What is not one limit says so, where only one can be.
    with pytest.raises(ValueError, match="limit: .* names 2 limits; this call takes one"):
        engine.limiter("h", "1/second; 2/day")
    with pytest.raises(ValueError, match="limit: unknown unit 'fortnight'"):
        engine.try_acquire("s", "1/fortnight")
    with pytest.raises(TypeError, match="limit must be a ratewin.Limit or a limit string"):
        engine.capacity(60)  # type: ignore[arg-type]


# ---- reset and refund -------------------------------------------------------------------

def test_reset_clears_a_login_counter(engine):
    login = ratewin.Limit(3, per=60)
    for _ in range(3):
        assert engine.try_acquire("alice", login)
    assert not engine.try_acquire("alice", login)
    assert engine.reset("alice", login) is True
    assert engine.try_acquire("alice", login).remaining == 2


def test_refund_gives_back_what_did_not_count(engine):
    limit = ratewin.Limit(10, per=60)
    assert engine.try_acquire("w", limit, 8)
    assert engine.refund("w", limit, 5) == 5
    assert engine.try_acquire("w", limit, 0).remaining == 7
    assert engine.refund("w", limit, 100) == 3
    assert engine.refund("nobody", limit) == 0
    with pytest.raises(ValueError, match="cost"):
        engine.refund("w", limit, -1)


def test_reset_and_refund_reach_redis(redis):
    redis_url = redis.url
    limit = ratewin.Limit(3, per=60)
    with ratewin.Engine(redis_url, key_prefix="rr", **PATIENT) as a, \
            ratewin.Engine(redis_url, key_prefix="rr", **PATIENT) as b:
        for _ in range(3):
            assert a.try_acquire("alice", limit)
        assert not b.try_acquire("alice", limit)
        assert a.reset("alice", limit) is True
        with ratewin.Engine(redis_url, key_prefix="rr", **PATIENT) as c:
            assert c.try_acquire("alice", limit).remaining == 2
            assert c.refund("alice", limit) == 1
        with ratewin.Engine(redis_url, key_prefix="rr", **PATIENT) as d:
            assert d.try_acquire("alice", limit, 0).remaining == 3


# ---- errors in Python's terms -----------------------------------------------------------

@pytest.mark.parametrize("make, words", [
    (lambda: ratewin.Limit(3, per=1, resolution=0.3),
     "resolution=0.3 s does not divide per=1.0 s"),
    (lambda: ratewin.Limit(3, per=1, resolution=0.0003), "at least 0.001 s .* got 0.0003"),
    (lambda: ratewin.Limit(3, per=400 * 86400), "366 days"),
    (lambda: ratewin.Limit(3, per=100000, resolution=1), "100000 subintervals.*coarser"),
    (lambda: ratewin.Limit(-1, per=1), "max must be 1 or more, got -1"),
    (lambda: ratewin.Limit(2**32, per=1), "^Limit: max must be from 1 to 4294967295, got 4294967296$"),
    (lambda: ratewin.Engine(command_timeout=0.0001), "command_timeout .* at least 0.001 s"),
    (lambda: ratewin.Engine(max_limiters=0), "max_limiters must be 1 or more, got 0"),
])
def test_errors_name_python_arguments_in_seconds(make, words):
    with pytest.raises(ValueError, match=words) as error:
        make()
    assert "ms" not in str(error.value).replace("milliseconds", "")
    assert "ratewin::" not in str(error.value)


def test_cost_errors_say_what_was_given(engine):
    with pytest.raises(ValueError, match="cost must be 0 or more, got -1"):
        engine.try_acquire("k", ratewin.Limit(1, per=1), cost=-1)


def test_signatures_name_real_types():
    """help() shows what each argument takes, not pybind11's "handle"."""
    from ratewin import _ratewin

    seen = 0
    for cls in (ratewin.Engine, ratewin.Limit, ratewin.Limiter, ratewin.ManualClock,
                ratewin.Decisions):
        for name, member in vars(cls).items():
            doc = getattr(member, "__doc__", None) or ""
            if callable(member) and "(" in doc.split("\n", 1)[0]:
                seen += 1
                assert "handle" not in doc.split("\n", 1)[0], f"{cls.__name__}.{name}: {doc}"
    assert "handle" not in _ratewin.hash.__doc__.split("\n", 1)[0]
    assert seen >= 15


# ---- names, not hashes ------------------------------------------------------------------

def test_limiters_keep_the_name_they_were_given(engine):
    limit = ratewin.Limit(5, per=60)
    with engine.limiter("tenant:7", limit) as named, engine.limiter(42, limit) as numbered:
        assert named.name == "tenant:7" and "'tenant:7'" in repr(named)
        assert named.resource == ratewin.hash("tenant:7")
        assert numbered.name is None and "resource=42 " in repr(numbered)


def test_redis_key_finds_a_names_key(redis):
    limit = ratewin.Limit(5, per=60)
    with ratewin.Engine(redis.url, key_prefix="named", **PATIENT) as engine:
        assert engine.try_acquire("alice", limit)
        key = engine.redis_key("alice", limit)
        assert key is not None and key.startswith("named:{") and key.endswith(":w")
        assert redis.cli("EXISTS", key) == "1"
        assert engine.redis_key("bob", limit) != key
        assert engine.redis_key("alice", ratewin.Limit(6, per=60)) != key  # another limit
    with ratewin.Engine() as local:
        assert local.redis_key("alice", limit) is None


def test_a_slow_token_bucket_with_a_small_burst():
    # 10 per 60 days cannot refill max within 2^32 ms, but a burst of 1 refills in 6 days.
    limit = ratewin.Limit(10, 60 * 86400, algorithm="token_bucket", burst=1)
    assert limit.burst == 1
    assert eval(repr(limit), vars(ratewin)) == limit


# ---- shadow mode --------------------------------------------------------------------------

@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_limit_in_shadow_counts_as_if_it_enforced_but_never_refuses(engine, clock, algorithm):
    enforcing = ratewin.Limit(3, per=1, algorithm=algorithm)
    shadow = ratewin.Limit(3, per=1, algorithm=algorithm, mode="shadow")
    assert shadow.mode == "shadow" and shadow.mode == ratewin.Mode.SHADOW
    assert enforcing.mode == "enforce" and shadow != enforcing
    assert shadow == enforcing.with_mode("shadow") and shadow.with_mode(ratewin.Mode.ENFORCE) == enforcing
    assert "mode='shadow'" in repr(shadow)
    for _ in range(5):
        e = engine.try_acquire("enforced", enforcing)
        s = engine.try_acquire("shadowed", shadow)
        assert s.allowed and bool(s)
        assert s.would_reject == (not e.allowed) and not e.would_reject
        assert (s.remaining, s.retry_after) == (e.remaining, e.retry_after)
        if s.would_reject:
            assert "Retry-After" not in s.headers() and "would_reject=True" in repr(s)
        clock.advance(0.05)
    # Switched to enforce, it keeps the shadow's counts.
    assert not engine.try_acquire("shadowed", shadow.with_mode("enforce"))
    stats = engine.stats()
    assert stats["would_reject"] == 2 and stats["rejected"] == 3


def test_a_limit_in_shadow_never_refuses_a_group(engine):
    shadow = ratewin.Limit(1, per=60, mode="shadow")
    enforcing = ratewin.Limit(5, per=60)
    assert engine.try_acquire_all("k", [shadow, enforcing])
    both = engine.try_acquire_all("k", [shadow, enforcing])
    assert both.allowed and both.refused is None
    assert both.decisions[0].would_reject and not both.decisions[1].would_reject
    # What the group describes is the enforcing limit's decision.
    assert both.index == 1 and both.decision.remaining == 3


@pytest.mark.parametrize("mode, error, words", [
    ("dry_run", ValueError, "^mode must be 'enforce' or 'shadow', got 'dry_run'$"),
    (1, TypeError, "mode must be a str, not int"),
])
def test_a_bad_mode_is_refused(mode, error, words):
    with pytest.raises(error, match=words):
        ratewin.Limit(1, per=1, mode=mode)
    with pytest.raises(error, match=words):
        ratewin.Limit(1, per=1).with_mode(mode)
