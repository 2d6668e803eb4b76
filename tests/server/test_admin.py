"""The admin API without Redis: authentication, and temporary per-key overrides (an
absolute limit or a multiplier, with a time to live) applied locally."""

from __future__ import annotations

import json
import secrets
import time

from ratewin_testkit import Client, RawReader, raw_connect, wait_until, write_rules

TOKEN = "admin-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

RULES = """
version: "admin-v1"
tiers:
  free:
    limits:
      - {name: per-minute, max: 2, window: 1m}
      - {name: everyone, max: 1000, window: 1m, per: global}
default_tier: free
endpoints:
  - name: search
    path: /search
    limits:
      - {name: burst, max: 3, window: 1m}
"""


def post_override(server, body: dict, headers=AUTH):
    return server.call("POST", "/admin/overrides", headers={**headers, "Content-Type": "application/json"},
                       body=json.dumps(body))


def test_admin_api_is_404_without_admin_token(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES))
    for method, path in [("GET", "/admin/rules"), ("POST", "/admin/reload"),
                         ("GET", "/admin/overrides"), ("POST", "/admin/overrides"), ("GET", "/admin")]:
        r = server.call(method, path, headers={"Authorization": "Bearer anything"}, body=b"{}")
        assert r.status == 404, (method, path, r)
        assert "error" in r.json()
    assert server.get("/", {"X-API-Key": "k"}).status == 200


def test_admin_token_from_environment(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES),
                          env={"RATEWIN_ADMIN_TOKEN": "from-env"})
    assert server.get("/admin/rules", {"Authorization": "Bearer from-env"}).status == 200
    assert server.get("/admin/rules", AUTH).status == 401


def test_admin_needs_the_right_bearer_token(start_server, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", RULES)
    server = start_server(rules=path, admin_token=TOKEN)
    wrong = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
        {"X-API-Key": TOKEN},
    ]
    for i, headers in enumerate(wrong):
        # From an address of its own each: 10 wrong tokens a minute lock an address out.
        with Client(server.port, source=f"127.0.0.{10 + i}") as c:
            for method, target in [("GET", "/admin/rules"), ("POST", "/admin/overrides"),
                                   ("POST", "/admin/reload")]:
                r = c.call(method, target, headers=headers, body=b'{"key":"k","limit":100}')
                assert r.status == 401, (headers, target, r)
                assert r.headers["www-authenticate"].startswith("Bearer")
    # Nothing was changed by the refused calls.
    assert server.get("/admin/overrides", AUTH).json()["overrides"] == []

    r = server.get("/admin/rules", AUTH)
    assert r.status == 200, r
    body = r.json()
    assert body["version"].startswith("admin-v1@")
    assert body["path"] == str(path)
    assert body["last_error"] == ""
    assert set(body["rules"]["tiers"]) == {"free"}
    assert body["rules"]["default_tier"] == "free"
    assert server.get("/admin/nothing-here", AUTH).status == 404
    assert server.metric('ratewin_server_requests_total{status="401",rule="admin"}') == 21


def test_admin_token_guessing_is_limited_per_address(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    with Client(server.port, source="127.0.0.50") as c:
        for _ in range(10):
            assert c.get("/admin/rules", {"Authorization": "Bearer guess"}).status == 401
        r = c.get("/admin/rules", {"Authorization": "Bearer guess"})
        assert r.status == 429, r
        assert int(r.headers["retry-after"]) > 0
        # Locked out, even with the right token...
        assert c.get("/admin/rules", AUTH).status == 429
    # ...from that address only.
    assert server.get("/admin/rules", AUTH).status == 200


def pipelined(port: int, requests: list[bytes]) -> list:
    """Sends the requests on one connection, 500 at a time, and reads every response."""
    replies = []
    with raw_connect(port) as s:
        reader = RawReader(s)
        for at in range(0, len(requests), 500):
            batch = requests[at:at + 500]
            s.sendall(b"".join(batch))
            replies += [reader.response() for _ in batch]
    return replies


def admin_get(token: str, forwarded: str | None = None) -> bytes:
    lines = ["GET /admin/rules HTTP/1.1", "Host: t", f"Authorization: Bearer {token}"]
    if forwarded is not None:
        lines.append(f"X-Forwarded-For: {forwarded}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_admin_lockout_holds_through_a_flood_of_new_keys(start_server, tmp_path):
    """The lockout is not a limiter of the engine's: keys flooding the limiter table
    cannot give it back (when it was, the engine evicted it for them: 3,150 wrong tokens
    answered 401 in 5 s). What the flood itself gets depends on the engine's policy for
    a full table, not on the lockout."""
    server = start_server("--max-limiters", "1000", admin_token=TOKEN,
                          rules=write_rules(tmp_path / "rules.yaml", """
                              tiers:
                                free: {limits: [{name: per-minute, max: 2, window: 1m}]}
                              default_tier: free
                              """))
    with Client(server.port, source="127.0.0.60") as c:
        assert [c.get("/admin/rules", {"Authorization": "Bearer guess"}).status
                for _ in range(11)] == [401] * 10 + [429]
        for _ in range(3):
            flood = [f"GET /x HTTP/1.1\r\nHost: t\r\nX-API-Key: {secrets.token_hex(8)}\r\n\r\n"
                     .encode() for _ in range(3000)]
            assert {r.status for r in pipelined(server.port, flood)} <= {200, 429}
            # (Full of live limiters, the engine evicts them into ghosts: within the bound.)
            assert server.metric("ratewin_engine_limiters") <= 1000
            r = c.get("/admin/rules", AUTH)
            assert r.status == 429, r
            assert 0 < int(r.headers["retry-after"]) <= 60
            assert c.get("/admin/rules", {"Authorization": "Bearer guess"}).status == 429
    assert server.get("/admin/rules", AUTH).status == 200  # another address


def test_admin_lockout_is_keyed_on_the_trusted_client_address(start_server, tmp_path):
    server = start_server("--trust-proxy", "127.0.0.1", admin_token=TOKEN,
                          rules=write_rules(tmp_path / "rules.yaml", RULES))
    # Behind the trusted proxy (127.0.0.1), 203.0.113.5 guesses.
    replies = pipelined(server.port, [admin_get("guess", "203.0.113.5")] * 11)
    assert [r.status for r in replies] == [401] * 10 + [429]
    assert pipelined(server.port, [admin_get(TOKEN, "203.0.113.5")])[0].status == 429
    # The proxy's other clients are not locked out, nor the proxy itself.
    assert pipelined(server.port, [admin_get(TOKEN, "203.0.113.6")])[0].status == 200
    assert pipelined(server.port, [admin_get(TOKEN)])[0].status == 200
    # A client's own X-Forwarded-For entries do not move it: the right-most one counts.
    replies = pipelined(server.port, [admin_get(TOKEN, "198.51.100.1, 203.0.113.5")])
    assert replies[0].status == 429
    # IPv6 clients are counted by /64.
    replies = pipelined(server.port, [admin_get("guess", f"2001:db8:0:7::{i + 1:x}")
                                      for i in range(11)])
    assert [r.status for r in replies] == [401] * 10 + [429]
    assert pipelined(server.port, [admin_get(TOKEN, "2001:db8:0:7:ffff::1")])[0].status == 429
    assert pipelined(server.port, [admin_get(TOKEN, "2001:db8:0:8::1")])[0].status == 200
    # From a peer that is not a trusted proxy, the header is ignored: the peer is keyed.
    with Client(server.port, source="127.0.0.61") as c:
        r = c.get("/admin/rules", {**AUTH, "X-Forwarded-For": "203.0.113.5"})
        assert r.status == 200, r
        assert [c.get("/admin/rules", {"Authorization": "Bearer guess",
                                       "X-Forwarded-For": f"203.0.113.{i}"}).status
                for i in range(11)] == [401] * 10 + [429]
    assert pipelined(server.port, [admin_get(TOKEN, "203.0.113.7")])[0].status == 200


def test_admin_lockout_table_full_never_refuses_the_right_token(start_server, tmp_path):
    """The table holds 16384 addresses: when all have a wrong token in the last minute, a
    new address's wrong token is refused uncounted, rather than evicting another's
    lockout. Before, its right token was refused too: wrong tokens from 16,384 addresses
    locked the admin out from any new one."""
    server = start_server("--trust-proxy", "127.0.0.1", admin_token=TOKEN,
                          rules=write_rules(tmp_path / "rules.yaml", RULES))
    locked = [admin_get("guess", "198.51.100.1")] * 10
    guesses = [admin_get("guess", f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}")
               for i in range(16383)]
    replies = pipelined(server.port, locked + guesses)
    assert all(r.status == 401 for r in replies)
    assert server.metric("ratewin_server_admin_lockout_addresses") == 16384
    r = pipelined(server.port, [admin_get("guess", "192.0.2.200")])[0]
    assert r.status == 429 and "try later" in r.json()["error"], r
    assert 0 < int(r.headers["retry-after"]) <= 60
    assert pipelined(server.port, [admin_get(TOKEN, "192.0.2.201")])[0].status == 200
    # The locked-out address stays locked; those in the table go on as before.
    assert pipelined(server.port, [admin_get(TOKEN, "198.51.100.1")])[0].status == 429
    assert pipelined(server.port, [admin_get(TOKEN, "10.0.0.5")])[0].status == 200
    assert server.metric("ratewin_server_admin_lockout_addresses") == 16384


def test_admin_override_limit_and_multiplier_apply_locally(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    assert server.get("/admin/overrides", AUTH).json() == {"shared": False, "overrides": []}

    r = post_override(server, {"key": "alice", "limit": 5})
    assert r.status == 200, r
    o = r.json()["override"]
    assert o["key"] == "alice" and o["limit"] == 5 and 3590 <= o["expires_in_s"] <= 3600
    r = post_override(server, {"key": "bob", "multiplier": 2.5, "ttl_s": 60})
    assert r.status == 200, r
    listed = server.get("/admin/overrides", AUTH).json()
    assert listed["shared"] is False
    assert [(x["key"], x.get("limit"), x.get("multiplier")) for x in listed["overrides"]] == [
        ("alice", 5, None), ("bob", None, 2.5)]
    assert server.metric("ratewin_server_overrides") == 2

    with Client(server.port) as c:
        # alice: an absolute limit of 5 on her per-key limits; the global one is unchanged.
        got = [c.get("/", {"X-API-Key": "alice"}) for _ in range(6)]
        assert [r.status for r in got] == [200] * 5 + [429]
        assert got[0].headers["ratelimit-policy"] == (
            '"tier:free/per-minute";q=5;w=60, "tier:free/everyone";q=1000;w=60')
        assert got[5].headers["x-ratelimit-limit"] == "5"
        # bob: 2 * 2.5 = 5
        assert sum(c.get("/", {"X-API-Key": "bob"}).status == 200 for _ in range(7)) == 5
        # carol: no override, 2
        assert sum(c.get("/", {"X-API-Key": "carol"}).status == 200 for _ in range(4)) == 2

        # Removing alice's override: back to 2, and her 5 counts are over that.
        r = server.call("DELETE", "/admin/overrides", headers=AUTH, body=json.dumps({"key": "alice"}))
        assert r.status == 200 and r.json() == {"removed": True}, r
        r = c.get("/", {"X-API-Key": "alice"})
        assert r.status == 429 and r.headers["x-ratelimit-limit"] == "2", r
        # A larger limit for her lets her through again.
        assert post_override(server, {"key": "alice", "limit": 7}).status == 200
        assert [c.get("/", {"X-API-Key": "alice"}).status for _ in range(3)] == [200, 200, 429]


def test_admin_override_applies_to_the_keys_own_limits_only(start_server, tmp_path):
    """An override acts on the key's own limits counted per key or per endpoint, as a
    multiplier in the rules file would: not on global limits, nor on endpoint limits."""
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 2, window: 1m}
              - {name: per-endpoint, max: 2, window: 1m, per: endpoint}
              - {name: everyone, max: 1000, window: 1m, per: global}
        default_tier: free
        endpoints:
          - name: search
            path: /search
            limits:
              - {name: burst, max: 3, window: 1m}
        """)
    server = start_server(rules=rules, admin_token=TOKEN)
    assert post_override(server, {"key": "dave", "limit": 5}).status == 200
    assert post_override(server, {"key": "erin", "multiplier": 2}).status == 200
    with Client(server.port) as c:
        got = [c.get("/search", {"X-API-Key": "dave"}) for _ in range(5)]
        assert got[0].headers["ratelimit-policy"] == (
            '"tier:free/per-minute";q=5;w=60, "tier:free/per-endpoint";q=5;w=60, '
            '"tier:free/everyone";q=1000;w=60, "endpoint:search/burst";q=3;w=60')
        assert [r.status for r in got] == [200, 200, 200, 429, 429]
        assert got[3].json()["limit"] == "endpoint:search/burst"
        # dave's per-minute limit has 2 of 5 left, his per-endpoint one 5 elsewhere
        assert [c.get("/other", {"X-API-Key": "dave"}).status for _ in range(3)] == [200, 200, 429]
        r = c.get("/search", {"X-API-Key": "erin"})
        assert r.headers["ratelimit-policy"] == (
            '"tier:free/per-minute";q=4;w=60, "tier:free/per-endpoint";q=4;w=60, '
            '"tier:free/everyone";q=1000;w=60, "endpoint:search/burst";q=3;w=60')


def test_admin_override_below_a_limits_cost_refuses_for_good(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: units, max: 100, window: 1m, cost: 5}
        default_tier: free
        """)
    server = start_server(rules=rules, admin_token=TOKEN)
    r = server.get("/", {"X-API-Key": "k"})
    assert r.status == 200 and r.headers["x-ratelimit-remaining"] == "95", r
    assert post_override(server, {"key": "k", "limit": 3}).status == 200
    r = server.get("/", {"X-API-Key": "k"})
    assert r.status == 429, r
    assert "retry-after" not in r.headers  # retrying cannot help
    body = r.json()
    assert body == {"error": "cost exceeds limit", "limit": "tier:free/units", "max": 3,
                    "cost": 5, "retry_after_s": None}, body


def test_admin_override_expires_after_its_ttl(start_server, tmp_path):
    # (2 s: the request just after the override is set comes before its end, however late
    # a busy machine makes it.)
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    set_at = time.monotonic()
    assert post_override(server, {"key": "eve", "limit": 50, "ttl_s": 2}).status == 200
    assert server.get("/", {"X-API-Key": "eve"}).headers["x-ratelimit-limit"] == "50"
    # In force until its time is up, and not after it.
    assert wait_until(lambda: server.get("/", {"X-API-Key": "eve"})
                      .headers["x-ratelimit-limit"] == "2", interval=0.05)
    assert time.monotonic() - set_at >= 2 - 0.01
    assert server.get("/admin/overrides", AUTH).json()["overrides"] == []


def test_admin_override_bad_requests(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    bad = [
        b"not json at all: [",
        b"[1, 2]",
        json.dumps({"limit": 5}).encode(),
        json.dumps({"key": "", "limit": 5}).encode(),
        json.dumps({"key": "k"}).encode(),
        json.dumps({"key": "k", "limit": 5, "multiplier": 2}).encode(),
        json.dumps({"key": "k", "limit": 0}).encode(),
        json.dumps({"key": "k", "multiplier": 0}).encode(),
        json.dumps({"key": "k", "multiplier": -1}).encode(),
        json.dumps({"key": "k", "limit": 5, "ttl_s": 0}).encode(),
        json.dumps({"key": "k", "limit": 5, "color": "red"}).encode(),
        json.dumps({"key": "k", "limit": "many"}).encode(),
    ]
    for body in bad:
        r = server.call("POST", "/admin/overrides", headers=AUTH, body=body)
        assert r.status == 400, (body, r)
        assert r.json()["error"], r
    assert server.get("/admin/overrides", AUTH).json()["overrides"] == []
    assert server.alive()


def test_admin_override_body_is_strict_json(start_server, tmp_path):
    """RFC 8259 and nothing more: what a YAML parser would accept (unquoted keys, hex and
    octal numbers, comments, anchors, a second document, trailing garbage) and duplicate
    keys are refused, and nothing is changed."""
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    bad = [
        b'{key: k, limit: 5}',
        b'{"key": k, "limit": 5}',
        b"{'key': 'k', 'limit': 5}",
        b'{"key": "k", "limit": 0x10}',
        b'{"key": "k", "limit": 0o10}',
        b'{"key": "k", "limit": 010}',
        b'{"key": "k", "limit": +5}',
        b'{"key": "k", "limit": 5.0}',
        b'{"key": "k", "limit": 5e0}',
        b'{"key": "k", "limit": 1e400}',
        b'{"key": "k", "multiplier": .5}',
        b'{"key": "k", "multiplier": NaN}',
        b'{"key": "k", "multiplier": Infinity}',
        b'{"key": "k", "limit": 5} # comment',
        b'{"key": "k", "limit": 5} // comment',
        b'/* c */ {"key": "k", "limit": 5}',
        b'{"key": &a "k", "limit": 5, "ttl_s": *a}',
        b'--- {"key": "k", "limit": 5}',
        b'{"key": "k", "limit": 5}\n---\n{}',
        b'key: k\nlimit: 5\n',
        b'{"key": "k", "limit": 5,}',
        b'{"key": "k", "limit": 5} trailing',
        b'{"key": "k", "limit": 5}{"key": "k2", "limit": 6}',
        b'{"key": "k", "limit": 5, "limit": 6}',
        b'{"key": "k", "key": "other", "limit": 5}',
        b'{"key": "k", "\\u006cimit": 5, "limit": 6}',
        b'{"key": 5, "limit": 5}',
        b'{"key": true, "limit": 5}',
        b'{"key": ["k"], "limit": 5}',
        b'{"key": "k", "limit": "5"}',
        b'{"key": "k", "limit": true}',
        b'{"key": "k", "limit": null}',
        b'{"key": "k", "multiplier": "2"}',
        b'{"key": "k", "limit": 5, "ttl_s": "60"}',
        b'{"key": "\\ud800", "limit": 5}',
        b'{"key": "\xff", "limit": 5}',
        b'\xef\xbb\xbf{"key": "k", "limit": 5}',
        b'{"key": "ip:localhost", "limit": 5}',
        b'{"key": "ip:fe80::1%eth0", "limit": 5}',
        b'[' * 10000,
        b'',
    ]
    for body in bad:
        r = server.call("POST", "/admin/overrides", headers=AUTH, body=body)
        assert r.status == 400, (body, r)
        assert r.json()["error"], r
    r = server.call("DELETE", "/admin/overrides", headers=AUTH, body=b'{key: k}')
    assert r.status == 400, r
    r = server.call("DELETE", "/admin/overrides", headers=AUTH,
                    body=b'{"key": "k", "limit": 5}')
    assert r.status == 400 and "unknown field" in r.json()["error"], r
    assert server.get("/admin/overrides", AUTH).json()["overrides"] == []
    # The same, written as JSON, is taken.
    for body in [b'{"key": "k", "limit": 16}', b' {"key":"k2","multiplier":0.5,"ttl_s":1e2}\r\n',
                 b'{"key": "k\\u0033", "limit": 4294967295}']:
        r = server.call("POST", "/admin/overrides", headers=AUTH, body=body)
        assert r.status == 200, (body, r)
    assert [o["key"] for o in server.get("/admin/overrides", AUTH).json()["overrides"]] == [
        "k", "k2", "k3"]


def test_admin_override_of_an_address_is_canonical(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    r = post_override(server, {"key": "ip:::FFFF:127.0.0.9", "limit": 7})
    assert r.status == 200 and r.json()["override"]["key"] == "ip:127.0.0.9", r
    with Client(server.port, source="127.0.0.9") as c:
        assert c.get("/").headers["x-ratelimit-limit"] == "7"
    with Client(server.port, source="127.0.0.8") as c:
        assert c.get("/").headers["x-ratelimit-limit"] == "2"
    r = server.call("DELETE", "/admin/overrides", headers=AUTH,
                    body=json.dumps({"key": "ip:0:0:0:0:0:ffff:7f00:9"}))
    assert r.status == 200, r
    assert server.get("/admin/overrides", AUTH).json()["overrides"] == []


def post_reset(server, body: dict, headers=AUTH):
    return server.call("POST", "/admin/reset", headers={**headers, "Content-Type": "application/json"},
                       body=json.dumps(body))


def test_admin_reset_clears_a_keys_own_counts(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    with Client(server.port) as c:
        assert [c.get("/", {"X-API-Key": "alice"}).status for _ in range(3)] == [200, 200, 429]
        assert [c.get("/search", {"X-API-Key": "alice"}).status for _ in range(1)] == [429]
        assert [c.get("/", {"X-API-Key": "bob"}).status for _ in range(3)] == [200, 200, 429]
        r = post_reset(server, {"key": "alice"})
        assert r.status == 200 and r.json() == {"reset": "alice"}, r
        # alice starts afresh, per key and per endpoint; bob's counts and the global
        # limit's are untouched.
        assert [c.get("/", {"X-API-Key": "alice"}).status for _ in range(3)] == [200, 200, 429]
        assert c.get("/", {"X-API-Key": "bob"}).status == 429
        everyone = c.get("/", {"X-API-Key": "carol"}).headers["ratelimit-policy"]
        assert "everyone" in everyone
    # An address is reset as the rules name it.
    with Client(server.port) as c:
        assert [c.get("/").status for _ in range(3)] == [200, 200, 429]
        assert post_reset(server, {"key": "ip:127.0.0.1"}).status == 200
        assert c.get("/").status == 200


def test_admin_reset_bad_requests(start_server, tmp_path):
    server = start_server(rules=write_rules(tmp_path / "rules.yaml", RULES), admin_token=TOKEN)
    for body, words in (({}, "key"), ({"key": ""}, "empty"), ({"key": "a", "limit": 3}, "unknown field"),
                        ({"key": "ip:nope"}, "IP address")):
        r = post_reset(server, body)
        assert r.status == 400 and words in r.json()["error"], (body, r)
    assert post_reset(server, {"key": "a"}, headers={}).status == 401
    assert server.call("GET", "/admin/reset", headers=AUTH).status == 404
