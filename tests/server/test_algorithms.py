"""The algorithm of a limit (rules' `algorithm:`) through ratewin-server in local mode:
strict_window refuses until the oldest subinterval has left the window where
sliding_window already admits again, fixed_window counts per window aligned on the
clock, so its Retry-After reaches to the end of that window and it admits max again at
once, token_bucket admits its burst at once and then one per window / max, and
sliding_log admits again when its oldest admission has left the window. The server
reads the real clock (CLOCK_REALTIME, as time.time() does), and each decision is placed
between the client's clock just before and just after it. The windows are seconds long,
so that each step that must come before a moment (a refill, a window's end) has a second
or more to spare when a busy machine makes it late: each test takes a few seconds."""

from __future__ import annotations

import math
import time

from ratewin_testkit import Client, write_rules

KEY = {"X-API-Key": "k"}


def timed(c: Client, path: str):
    """The reply, and the clock just before and just after it (the server decided in
    between)."""
    before = time.time()
    r = c.get(path, KEY)
    return r, before, time.time()


def retry_window(reply, before: float, after: float) -> tuple[float, float]:
    """Where the refused request's retry time (decision + retry_after) lies: the body gives
    the wait rounded up to the millisecond."""
    wait = reply.json()["retry_after_s"]
    return before + wait - 0.001, after + wait


def on_multiple(lo: float, hi: float, period: float, slack: float = 0.003) -> float | None:
    """A multiple of period in [lo - slack, hi + slack], if there is one."""
    k = math.ceil((lo - slack) / period)
    return k * period if k * period <= hi + slack else None


def sleep_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()))


def test_strict_window_refuses_until_the_oldest_subinterval_has_left(start_server, tmp_path):
    # The same limit twice, 4 per 4 s in two subintervals of 2 s.
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: sliding
            path: /sliding
            limits:
              - {name: l, max: 4, window: 4s, subintervals: 2}
          - name: strict
            path: /strict
            limits:
              - {name: l, max: 4, window: 4s, subintervals: 2, algorithm: strict_window}
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        # (Refused, both: nothing leaves either window until 2 s after the first.)
        got = {p: [timed(c, p) for _ in range(5)] for p in ("/sliding", "/strict")}
        for path, replies in got.items():
            assert [r.status for r, _, _ in replies] == [200] * 4 + [429], path
            assert [r.headers["x-ratelimit-remaining"] for r, _, _ in replies] == \
                ["3", "2", "1", "0", "0"], path
            # The same quota per window, whatever the algorithm.
            assert replies[0][0].headers["ratelimit-policy"] == f'"endpoint:{path[1:]}/l";q=4;w=4'
            refused = replies[4][0]
            assert refused.json()["limit"] == f"endpoint:{path[1:]}/l"
            assert refused.headers["retry-after"] == \
                str(max(1, math.ceil(refused.json()["retry_after_s"]))), refused
        # strict_window: the counts weigh in full until their subinterval has left the
        # window, so the retry time is a subinterval boundary, a window and at most one
        # subinterval after the first request.
        lo, hi = retry_window(*got["/strict"][4])
        strict_at = on_multiple(lo, hi, 2.0)
        assert strict_at is not None, (lo, hi)
        _, first_before, first_after = got["/strict"][0]
        assert first_before + 4.0 < strict_at <= first_after + 6.0 + 0.003, (got, strict_at)
        # sliding_window lets the oldest subinterval's counts in as it slides out: earlier.
        sliding_lo, sliding_hi = retry_window(*got["/sliding"][4])
        assert sliding_hi < strict_at - 0.2, (sliding_hi, strict_at)

        # Between the two, one admits and the other still refuses. (The refusal first, as
        # soon as the sliding window admits: the more time it has before strict_at.)
        sleep_until(sliding_hi + 0.02)
        r, before, after = timed(c, "/strict")
        assert r.status == 429, r
        assert r.headers["x-ratelimit-remaining"] == "0"
        assert on_multiple(*retry_window(r, before, after), 2.0) == strict_at
        assert c.get("/sliding", KEY).status == 200
        sleep_until(strict_at + 0.02)
        assert c.get("/strict", KEY).status == 200


def test_fixed_window_resets_all_at_once_at_the_window_boundary(start_server, tmp_path):
    # 3 per 4 s, fixed windows; the same as sliding_window for contrast.
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: fixed
            path: /fixed
            limits:
              - {name: l, max: 3, window: 4s, algorithm: fixed_window}
          - name: sliding
            path: /sliding
            limits:
              - {name: l, max: 3, window: 4s}
        """)
    server = start_server(rules=rules)
    # Start in the middle of a window (the fixed windows are the clock's, 4 s each): 2 s
    # for the requests before its end, and 2 s for those after it to come within 4 s of
    # the first.
    now = time.time()
    phase = now % 4.0
    if not 1.8 <= phase <= 2.2:
        sleep_until(now - phase + (2.0 if phase < 1.8 else 6.0))
    with Client(server.port) as c:
        first = time.time()
        end = math.floor(first / 4.0) * 4.0 + 4.0  # the end of the fixed window
        replies = [timed(c, "/fixed") for _ in range(4)]
        assert [r.status for r, _, _ in replies] == [200, 200, 200, 429], replies
        assert [r.headers["x-ratelimit-remaining"] for r, _, _ in replies] == ["2", "1", "0", "0"]
        for r, before, after in replies:
            # Every count is gone at the end of the fixed window.
            reset = int(r.headers["x-ratelimit-reset"])
            assert math.ceil(end - after) <= reset <= math.ceil(end - before), (r, end)
            assert r.headers["ratelimit-policy"] == '"endpoint:fixed/l";q=3;w=4', r
            assert r.headers["ratelimit"].endswith(f";t={reset}"), r
        refused = replies[3][0]
        assert refused.headers["retry-after"] == refused.headers["x-ratelimit-reset"], refused
        # The wait reaches exactly to the end of the fixed window.
        assert on_multiple(*retry_window(*replies[3]), 4.0) == end, (replies[3], end)
        assert [c.get("/sliding", KEY).status for _ in range(4)] == [200, 200, 200, 429]

        # Just after the boundary: the fixed window admits max again at once (2 x max
        # within a window), while the sliding window still holds what it counted.
        sleep_until(end + 0.02)
        again = [timed(c, "/fixed") for _ in range(4)]
        assert [r.status for r, _, _ in again] == [200, 200, 200, 429], again
        assert again[0][0].headers["x-ratelimit-remaining"] == "2"
        assert again[2][2] - first < 4.0
        assert on_multiple(*retry_window(*again[3]), 4.0) == end + 4.0
        assert c.get("/sliding", KEY).status == 429


def test_token_bucket_admits_its_burst_then_refills_one_per_interval(start_server, tmp_path):
    # 5 per 20 s, one every 4 s, with room for 3 at once; "big" has twice the rate and so
    # twice the burst (the multiplier scales both).
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          api:
            limits:
              - {name: rate, max: 5, window: 20s, algorithm: token_bucket, burst: 3}
        default_tier: api
        overrides:
          - {key: big, multiplier: 2}
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        replies = [timed(c, "/") for _ in range(4)]
        assert [r.status for r, _, _ in replies] == [200, 200, 200, 429], replies
        assert [r.headers["x-ratelimit-remaining"] for r, _, _ in replies] == ["2", "1", "0", "0"]
        _, first_before, first_after = replies[0]
        for taken, (r, before, after) in zip([1, 2, 3, 3], replies):
            # The limit is the burst, refilled in 12 s: q / w is no more than the rate.
            assert r.headers["x-ratelimit-limit"] == "3", r
            assert r.headers["ratelimit-policy"] == '"tier:api/rate";q=3;w=12', r
            # Full again once what was taken has refilled, 4 s a unit, less what refilled
            # since the first.
            full = 4 * taken
            assert full - math.ceil(after - first_before) <= \
                int(r.headers["x-ratelimit-reset"]) <= full, r
        assert replies[2][0].headers["ratelimit"] == \
            f'"tier:api/rate";r=0;t={replies[2][0].headers["x-ratelimit-reset"]}'
        refused, before, after = replies[3]
        wait = refused.json()["retry_after_s"]
        assert 0 < wait <= 4, refused
        assert refused.headers["retry-after"] == str(max(1, math.ceil(wait))), refused
        # One unit refills 4 s after the first was taken: the retry time is then (the
        # body's wait is rounded up to the millisecond).
        assert first_before + 4 - 0.002 <= after + wait, (replies, wait)
        assert before + wait <= first_after + 4 + 0.002, (replies, wait)

        sleep_until(after + wait + 0.02)
        r = c.get("/", KEY)
        assert r.status == 200, r
        assert r.headers["x-ratelimit-remaining"] == "0", r  # only one has refilled

        big = [c.get("/", {"X-API-Key": "big"}) for _ in range(7)]
        assert [r.status for r in big] == [200] * 6 + [429], big
        assert big[0].headers["x-ratelimit-limit"] == "6"
        assert big[0].headers["ratelimit-policy"] == '"tier:api/rate";q=6;w=12'
        assert big[6].json()["retry_after_s"] <= 2  # one every 2 s


def test_sliding_log_refuses_until_its_oldest_admission_has_left(start_server, tmp_path):
    # 3 per 4 s, exactly: the fourth waits for the first to be 4 s old.
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          api:
            limits:
              - {name: log, max: 3, window: 4s, algorithm: sliding_log}
        default_tier: api
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        first = timed(c, "/")
        time.sleep(2)
        rest = [timed(c, "/") for _ in range(3)]
        replies = [first] + rest
        assert [r.status for r, _, _ in replies] == [200, 200, 200, 429], replies
        assert [r.headers["x-ratelimit-remaining"] for r, _, _ in replies] == ["2", "1", "0", "0"]
        for r, _, _ in replies:
            assert r.headers["x-ratelimit-limit"] == "3", r
            assert r.headers["ratelimit-policy"] == '"tier:api/log";q=3;w=4', r
        refused, before, after = replies[3]
        # Allowed again once the first admission is 4 s old.
        lo, hi = retry_window(refused, before, after)
        _, first_before, first_after = first
        assert first_before + 4 - 0.003 <= hi and lo <= first_after + 4 + 0.003, (replies, lo, hi)
        sleep_until(hi + 0.02)
        r = c.get("/", KEY)
        assert r.status == 200, r
        assert c.get("/", KEY).status == 429  # the next leaves 2 s later
