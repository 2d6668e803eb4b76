"""Rate limiting through ratewin-server in local mode: the response headers and bodies,
tiers, overrides from the rules file, allow and deny lists, several limits per request
(all or nothing), several windows, scopes, and the shipped example rules."""

from __future__ import annotations

import math
import re
import time

from ratewin_testkit import EXAMPLE_RULES, Client, write_rules

# (5 in 5 s, not 5 a second: the requests below that count down together come within a
# window, however late a busy machine makes them.)
FREE_RULES = """
version: "limits-v1"
tiers:
  free:
    limits:
      - name: per-5s
        max: 5
        window: 5s
      - name: per-hour
        max: 1000
        window: 1h
        subintervals: 60
default_tier: free
"""

RATELIMIT = re.compile(r'^"([^"]+)";r=(\d+);t=(\d+)$')


def parse_policy(value: str) -> list[tuple[str, int, int]]:
    out = []
    for item in value.split(", "):
        m = re.fullmatch(r'"([^"]+)";q=(\d+);w=(\d+)', item)
        assert m, f"bad RateLimit-Policy item {item!r} in {value!r}"
        out.append((m.group(1), int(m.group(2)), int(m.group(3))))
    return out


def test_allowed_response_headers(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", FREE_RULES))
    r = server.get("/things/1?x=y", {"X-API-Key": "alice"})
    assert r.status == 200, r
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"ok": True, "endpoint": "/things/1", "tier": "free"}
    # The 5 s limit is the closest to refusing: it is the one described.
    assert r.headers["x-ratelimit-limit"] == "5"
    assert r.headers["x-ratelimit-remaining"] == "4"
    # (The count leaves with its subinterval: the window, and at most one of 10 more.)
    assert 5 <= int(r.headers["x-ratelimit-reset"]) <= 6
    assert "retry-after" not in r.headers
    assert "x-ratelimit-policy" not in r.headers
    assert r.headers["ratelimit-policy"] == (
        '"tier:free/per-5s";q=5;w=5, "tier:free/per-hour";q=1000;w=3600')
    m = RATELIMIT.match(r.headers["ratelimit"])
    assert m, r.headers["ratelimit"]
    assert m.group(1) == "tier:free/per-5s" and m.group(2) == "4"
    assert 5 <= int(m.group(3)) <= 6
    # Remaining counts down on the same key, and not on another key.
    with Client(server.port) as c:
        assert [c.get("/", {"X-API-Key": "alice"}).headers["x-ratelimit-remaining"]
                for _ in range(2)] == ["3", "2"]
        assert c.get("/", {"X-API-Key": "bob"}).headers["x-ratelimit-remaining"] == "4"


def test_rejected_response_has_429_body_and_retry_after(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - name: burst
                max: 2
                window: 10s
        default_tier: free
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        assert [c.get("/a", {"X-API-Key": "k"}).status for _ in range(2)] == [200, 200]
        r = c.get("/a", {"X-API-Key": "k"})
    assert r.status == 429, r
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    # The figures are in the headers; the body names the limit and the wait in ms.
    assert set(body) == {"error", "limit", "retry_after_s"}, body
    assert body["error"] == "rate limited"
    assert body["limit"] == "tier:free/burst"
    # At most the window plus one subinterval (the counts leave a subinterval at a time).
    assert 0 < body["retry_after_s"] <= 11
    assert body["retry_after_s"] <= int(r.headers["x-ratelimit-reset"])
    retry = int(r.headers["retry-after"])
    assert retry == max(1, math.ceil(body["retry_after_s"])), (retry, body)
    assert r.headers["x-ratelimit-limit"] == "2"
    assert r.headers["x-ratelimit-remaining"] == "0"
    assert 1 <= int(r.headers["x-ratelimit-reset"]) <= 11
    m = RATELIMIT.match(r.headers["ratelimit"])
    assert m and m.group(1) == "tier:free/burst" and m.group(2) == "0", r.headers["ratelimit"]
    assert r.headers["ratelimit-policy"] == '"tier:free/burst";q=2;w=10'


def test_retry_after_is_when_the_request_passes_again(start_server, tmp_path):
    # (A 3 s window: the second request comes before the first has left it, however late
    # a busy machine makes it.)
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          t:
            limits:
              - name: one
                max: 1
                window: 3s
        default_tier: t
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        assert c.get("/", {"X-API-Key": "k"}).status == 200
        rejected = c.get("/", {"X-API-Key": "k"})
        assert rejected.status == 429, rejected
        wait = rejected.json()["retry_after_s"]
        assert 0 < wait <= 3.3  # the window and a subinterval
        time.sleep(wait + 0.05)
        again = c.get("/", {"X-API-Key": "k"})
        assert again.status == 200, (wait, again)


def test_tiers_by_key_glob_first_match_and_default_tier(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: rps, max: 2, window: 10s}
          pro:
            limits:
              - {name: rps, max: 7, window: 10s}
          gold:
            limits:
              - {name: rps, max: 11, window: 10s}
        keys:
          - match: "pro_vip*"
            tier: gold
          - match: "pro_*"
            tier: pro
          - match: "legacy-????"
            tier: pro
        default_tier: free
        """)
    server = start_server(rules=rules)
    cases = {
        "pro_vip1": ("gold", "11"),
        "pro_abc": ("pro", "7"),      # the first matching entry wins
        "legacy-1234": ("pro", "7"),
        "legacy-12345": ("free", "2"),  # '?' is exactly one character
        "xpro_abc": ("free", "2"),      # a glob matches the whole key
        "someone": ("free", "2"),
    }
    for key, (tier, limit) in cases.items():
        r = server.get("/", {"X-API-Key": key})
        assert r.status == 200, (key, r)
        assert r.json()["tier"] == tier, key
        assert r.headers["x-ratelimit-limit"] == limit, key
        assert r.headers["ratelimit-policy"] == f'"tier:{tier}/rps";q={limit};w=10', key
    # pro_abc gets exactly 7 in the window, free keys 2.
    with Client(server.port) as c:
        statuses = [c.get("/", {"X-API-Key": "pro_abc"}).status for _ in range(8)]
    assert statuses == [200] * 6 + [429, 429]


def test_key_without_tier_and_no_default_counts_only_endpoint_limits(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          pro:
            limits:
              - {name: rps, max: 1, window: 10s}
        keys:
          - {match: "pro_*", tier: pro}
        endpoints:
          - name: search
            path: /search
            limits:
              - {name: burst, max: 2, window: 10s}
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        for _ in range(3):  # no tier, no endpoint: never limited
            r = c.get("/other", {"X-API-Key": "nobody"})
            assert r.status == 200 and r.headers["x-ratelimit-policy"] == "none", r
            assert r.json() == {"ok": True, "endpoint": "/other", "tier": ""}
            assert "x-ratelimit-limit" not in r.headers
        got = [c.get("/search", {"X-API-Key": "nobody"}) for _ in range(3)]
    assert [r.status for r in got] == [200, 200, 429]
    assert got[0].json() == {"ok": True, "endpoint": "search", "tier": ""}
    assert got[2].json()["limit"] == "endpoint:search/burst"


def test_client_key_sources(start_server, tmp_path):
    """X-API-Key wins over a bearer token, which wins over the client's address."""
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          by-header: {limits: [{name: l, max: 100, window: 10s}]}
          by-bearer: {limits: [{name: l, max: 200, window: 10s}]}
          by-address: {limits: [{name: l, max: 300, window: 10s}]}
        keys:
          - {match: "from-header", tier: by-header}
          - {match: "from-bearer", tier: by-bearer}
          - {match: "ip:127.0.0.1", tier: by-address}
        """)
    server = start_server(rules=rules)
    both = server.get("/", {"X-API-Key": "from-header", "Authorization": "Bearer from-bearer"})
    assert both.json()["tier"] == "by-header"
    assert server.get("/", {"Authorization": "Bearer from-bearer"}).json()["tier"] == "by-bearer"
    assert server.get("/", {"Authorization": "bearer   from-bearer "}).json()["tier"] == "by-bearer"
    # Not a bearer token: the address is the key.
    assert server.get("/", {"Authorization": "Basic from-bearer"}).json()["tier"] == "by-address"
    assert server.get("/").json()["tier"] == "by-address"


def test_overrides_in_the_rules_file(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: rps, max: 2, window: 10s}
          pro:
            limits:
              - {name: rps, max: 5, window: 10s}
              - {name: all, max: 1000, window: 10s, per: global}
        default_tier: free
        overrides:
          - key: vip
            multiplier: 3
          - key: solo
            limits:
              - {name: own, max: 4, window: 10s}
          - key: upgraded
            tier: pro
          - key: pro-vip
            tier: pro
            multiplier: 2.5
        """)
    server = start_server(rules=rules)

    def allowed(key: str, n: int) -> int:
        with Client(server.port) as c:
            return sum(c.get("/", {"X-API-Key": key}).status == 200 for _ in range(n))

    r = server.get("/", {"X-API-Key": "vip"})
    assert r.headers["x-ratelimit-limit"] == "6"
    assert r.headers["ratelimit-policy"] == '"tier:free/rps";q=6;w=10'
    assert allowed("vip", 8) == 5  # 6 in all

    r = server.get("/", {"X-API-Key": "solo"})
    assert r.headers["ratelimit-policy"] == '"override:solo/own";q=4;w=10', r
    assert allowed("solo", 6) == 3

    r = server.get("/", {"X-API-Key": "upgraded"})
    assert r.json()["tier"] == "pro"
    assert allowed("upgraded", 6) == 4

    # A multiplier scales the per-key limit but not the global one.
    r = server.get("/", {"X-API-Key": "pro-vip"})
    assert r.headers["ratelimit-policy"] == '"tier:pro/rps";q=12;w=10, "tier:pro/all";q=1000;w=10'

    # Other keys keep the tier's limit.
    assert allowed("plain", 4) == 2


def test_rules_override_multiplier_does_not_scale_endpoint_limits(start_server, tmp_path):
    """rules.example.yaml: an override's multiplier scales the key's own limits 'It does not
    scale endpoint limits, nor global limits'."""
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: rps, max: 10, window: 10s}
        default_tier: free
        endpoints:
          - name: login
            path: /login
            limits:
              - {name: per-key, max: 2, window: 10s}
        overrides:
          - key: vip
            multiplier: 3
        """)
    server = start_server(rules=rules)
    r = server.get("/login", {"X-API-Key": "vip"})
    assert r.status == 200, r
    assert r.headers["ratelimit-policy"] == (
        '"tier:free/rps";q=30;w=10, "endpoint:login/per-key";q=2;w=10')
    with Client(server.port) as c:
        more = [c.get("/login", {"X-API-Key": "vip"}).status for _ in range(4)]
    assert more == [200, 429, 429, 429]


def test_allow_and_deny_lists(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: rps, max: 1, window: 10s}
        default_tier: free
        allow:
          - "internal-*"
        deny:
          - "revoked_*"
          - "internal-compromised"
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        for _ in range(5):
            r = c.get("/", {"X-API-Key": "internal-billing"})
            assert r.status == 200, r
            assert r.headers["x-ratelimit-policy"] == "allow-list"
            assert "x-ratelimit-limit" not in r.headers and "ratelimit" not in r.headers
        denied = c.get("/", {"X-API-Key": "revoked_42"})
        assert denied.status == 403, denied
        assert denied.json() == {"error": "forbidden"}
        # deny wins over allow
        assert c.get("/", {"X-API-Key": "internal-compromised"}).status == 403
        # a deny-listed key uses up nothing (a denied request is not counted)
        statuses = [c.get("/", {"X-API-Key": "ordinary"}).status for _ in range(2)]
        assert statuses == [200, 429]
    assert server.metric('ratewin_server_requests_total{status="403",rule="deny"}') == 2
    assert server.metric('ratewin_server_requests_total{status="200",rule="allow"}') == 5


def test_api_key_cannot_pose_as_an_address(start_server, tmp_path):
    """Rules name addresses "ip:...": an API key spelled that way would get their allow
    entries, so it is refused."""
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: rps, max: 1, window: 10s}
        default_tier: free
        allow:
          - "ip:10.*"
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        r = c.get("/", {"X-API-Key": "ip:10.0.0.1"})
        assert r.status == 400, r
        assert "ip:" in r.json()["error"]
        r = c.get("/", {"Authorization": "Bearer ip:10.0.0.1"})
        assert r.status == 400, r
        # The connection's own address is not in 10.*: it is limited.
        assert [c.get("/").status for _ in range(2)] == [200, 429]


def test_refused_request_consumes_none_of_its_limits(start_server, tmp_path):
    """All or nothing: a request the endpoint refuses does not count against the tier."""
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 10, window: 1m}
        default_tier: free
        endpoints:
          - name: search
            path: /search
            limits:
              - {name: burst, max: 2, window: 1m}
        """)
    server = start_server(rules=rules)
    key = {"X-API-Key": "k"}
    with Client(server.port) as c:
        got = [c.get("/search", key) for _ in range(6)]
        assert [r.status for r in got] == [200, 200, 429, 429, 429, 429]
        assert all(r.json()["limit"] == "endpoint:search/burst" for r in got[2:])
        # Only the 2 admitted search requests used the tier's limit.
        r = c.get("/elsewhere", key)
        assert r.status == 200
        assert r.headers["ratelimit"].startswith('"tier:free/per-minute";r=7;'), r.headers
        assert r.headers["x-ratelimit-remaining"] == "7"
        # Exhausting the tier: exactly 7 more pass.
        assert sum(c.get("/elsewhere", key).status == 200 for _ in range(10)) == 7
        # Now the tier refuses, and it names itself.
        r = c.get("/elsewhere", key)
        assert r.status == 429 and r.json()["limit"] == "tier:free/per-minute"
        # Both refuse /search: the one named is the one that lasts longest.
        r = c.get("/search", key)
        assert r.status == 429, r
        assert r.json()["limit"] in ("tier:free/per-minute", "endpoint:search/burst")
        policy = r.headers["ratelimit-policy"]
        assert '"tier:free/per-minute"' in policy and '"endpoint:search/burst"' in policy


def test_tier_refusal_does_not_consume_endpoint_limit(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 2, window: 1m}
        keys:
          - {match: "limited", tier: free}
        endpoints:
          - name: search
            path: /search
            limits:
              - {name: shared, max: 3, window: 1m, per: global}
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        assert [c.get("/search", {"X-API-Key": "limited"}).status for _ in range(5)] == \
            [200, 200, 429, 429, 429]
        # the global endpoint counter took 2, not 5: one more for anybody, then none
        assert [c.get("/search", {"X-API-Key": "other"}).status for _ in range(2)] == [200, 429]


def test_several_windows_on_one_endpoint(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: upload
            path: /upload
            methods: [POST]
            limits:
              - {name: burst, max: 3, window: 3s}
              - {name: sustained, max: 5, window: 1m}
        """)
    server = start_server(rules=rules)
    key = {"X-API-Key": "k", "Content-Length": "0"}
    with Client(server.port) as c:
        first = [c.call("POST", "/upload", key) for _ in range(4)]
        assert [r.status for r in first] == [200, 200, 200, 429]
        assert first[0].headers["ratelimit-policy"] == (
            '"endpoint:upload/burst";q=3;w=3, "endpoint:upload/sustained";q=5;w=60')
        assert first[3].json()["limit"] == "endpoint:upload/burst"
        assert first[3].headers["ratelimit"].startswith('"endpoint:upload/burst";r=0;t=')
        # GET is not that endpoint: unlimited
        assert c.get("/upload", {"X-API-Key": "k"}).headers["x-ratelimit-policy"] == "none"
        time.sleep(int(first[3].headers["x-ratelimit-reset"]) + 0.05)
        second = [c.call("POST", "/upload", key) for _ in range(3)]
    assert [r.status for r in second] == [200, 200, 429]
    body = second[2].json()
    assert body["limit"] == "endpoint:upload/sustained"
    assert second[2].headers["x-ratelimit-limit"] == "5"
    assert second[2].headers["ratelimit"].startswith('"endpoint:upload/sustained";r=0;t=')
    assert second[1].headers["x-ratelimit-remaining"] == "0"


def test_scopes_key_endpoint_and_global(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          t:
            limits:
              - {name: per-endpoint, max: 2, window: 1m, per: endpoint}
              - {name: everyone, max: 5, window: 1m, per: global}
        default_tier: t
        endpoints:
          - {name: a, path: /a, limits: []}
          - {name: b, path: /b, limits: []}
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        # per endpoint: each (key, endpoint) has 2
        assert [c.get("/a", {"X-API-Key": "k1"}).status for _ in range(3)] == [200, 200, 429]
        assert [c.get("/b/x", {"X-API-Key": "k1"}).status for _ in range(3)] == [200, 200, 429]
        # global: 5 for everybody in the tier; k1 used 4 of them
        assert c.get("/a", {"X-API-Key": "k2"}).status == 200
        r = c.get("/a", {"X-API-Key": "k3"})
        assert r.status == 429 and r.json()["limit"] == "tier:t/everyone", r


def test_path_normalisation_cannot_dodge_an_endpoint(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: secret
            path: /secret
            limits:
              - {name: once, max: 1, window: 1m}
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        assert c.get("/secret", {"X-API-Key": "k"}).status == 200
        for dodge in ["//secret", "/public/../secret", "/./secret/", "/secret?x=1", "/secret/sub"]:
            r = c.get(dodge, {"X-API-Key": "k"})
            assert r.status == 429, (dodge, r)
        assert c.get("/secretx", {"X-API-Key": "k"}).status == 200  # whole segments only


def test_shipped_example_rules_load_and_apply(start_server):
    server = start_server(rules=EXAMPLE_RULES)
    assert "rules 2024-06-example@" in server.banner
    h = server.get("/healthz").json()
    assert h["rules"].startswith("2024-06-example@") and h["store"] == "none"
    r = server.get("/api/v1/search", {"X-API-Key": "someone"})
    assert r.status == 200 and r.json() == {"ok": True, "endpoint": "search", "tier": "free"}
    assert r.headers["ratelimit-policy"] == (
        '"tier:free/per-second";q=5;w=1, "tier:free/per-hour";q=1000;w=3600, '
        '"endpoint:search/burst";q=20;w=10, "endpoint:search/sustained";q=300;w=600')
    r = server.get("/", {"X-API-Key": "pro_acme"})  # pro, multiplier 3
    assert r.json()["tier"] == "pro"
    assert r.headers["ratelimit-policy"] == (
        '"tier:pro/per-second";q=150;w=1, "tier:pro/per-hour";q=150000;w=3600, '
        '"tier:pro/all-pro-keys";q=2000;w=1')
    r = server.get("/", {"X-API-Key": "ent_x"})
    assert r.json()["tier"] == "enterprise"
    # A fixed_window's policy is a quota per window like any other.
    assert r.headers["ratelimit-policy"] == (
        '"tier:enterprise/per-second";q=500;w=1, "tier:enterprise/per-day";q=10000000;w=86400')
    r = server.get("/", {"X-API-Key": "api_x"})
    assert r.json()["tier"] == "metered"
    # A token bucket: its burst is the limit, refilled in 5 s (q / w is 600 a minute).
    assert r.headers["x-ratelimit-limit"] == "50" and r.headers["x-ratelimit-remaining"] == "49"
    assert r.headers["ratelimit-policy"] == '"tier:metered/rate";q=50;w=5'
    assert server.get("/", {"X-API-Key": "partner-42"}).json()["tier"] == "enterprise"
    assert server.get("/", {"X-API-Key": "revoked_1"}).status == 403
    assert server.get("/", {"X-API-Key": "internal-compromised"}).status == 403
    assert server.get("/", {"X-API-Key": "internal-x"}).headers["x-ratelimit-policy"] == "allow-list"
    r = server.call("POST", "/api/v1/files", headers={"X-API-Key": "uploader"}, body=b"x")
    assert '"endpoint:upload/bytes";q=100;w=60' in r.headers["ratelimit-policy"]
    r = server.get("/", {"X-API-Key": "free-batch-job"})
    assert r.headers["ratelimit-policy"] == '"override:free-batch-job/per-minute";q=600;w=60'


def test_a_method_override_to_another_method_is_refused(start_server, tmp_path):
    """Before: `X-HTTP-Method-Override: POST` on a GET got past a POST-only endpoint's
    limit (for backends that honour it), and the other way round. Refused, 400, in
    gateway mode and in forward-auth checks."""
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: upload
            path: /upload
            methods: [POST]
            limits: [{name: uploads, max: 1, window: 1m}]
        """)
    server = start_server("--trust-proxy", "127.0.0.1", rules=rules)
    with Client(server.port) as c:
        assert c.call("POST", "/upload").status == 200
        assert c.call("POST", "/upload").status == 429
        for name in ["X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override"]:
            r = c.get("/upload", {name: "POST"})
            assert r.status == 400 and "method override" in r.json()["error"], r
            assert c.call("POST", "/upload", {name: "GET"}).status == 400
            assert c.call("POST", "/upload", {name: "post"}).status == 429  # the same method
            check = {"X-Forwarded-For": "192.0.2.1", "X-Original-Method": "GET",
                     "X-Original-URI": "/upload", name: "POST"}
            assert c.get("/ratewin/check", check).status == 400
        assert c.get("/upload").status == 200  # GET is not limited here
