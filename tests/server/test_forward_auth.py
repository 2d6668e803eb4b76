"""Forward-auth checks, spoken to directly as nginx (auth_request), Traefik (ForwardAuth)
and Envoy (ext_authz over HTTP) speak: which request a check is about, who sent it, the
answer and its headers, and every way a check could pass a request off as another."""

from __future__ import annotations

import subprocess

import pytest

from ratewin_testkit import PATIENCE, SERVER, Client, RawReader, raw_connect, write_rules

RULES = """
tiers:
  free:
    limits:
      - {name: per-minute, max: 3, window: 1m}
default_tier: free
endpoints:
  - name: upload
    path: /upload
    methods: [POST]
    limits:
      - {name: burst, max: 1, window: 1m}
allow:
  - "internal-*"
deny:
  - "ip:192.0.2.66"
  - "revoked"
"""

CHECK = "/ratewin/check"


@pytest.fixture
def rules(tmp_path):
    return write_rules(tmp_path / "rules.yaml", RULES)


@pytest.fixture
def checker(start_server, rules):
    """A server that trusts 127.0.0.1 (the gateway) only."""
    return start_server("--trust-proxy", "127.0.0.1", rules=rules)


def nginx_check(server, uri: str, method: str = "GET", client: str = "203.0.113.1", **extra):
    """A check as the nginx configuration of docs/server.md sends it."""
    headers = {"X-Original-URI": uri, "X-Original-Method": method, "X-Real-IP": client,
               "X-Forwarded-For": client, **extra}
    return server.get(CHECK, headers)


def test_check_answers_with_the_rate_limit_headers(checker):
    got = [nginx_check(checker, "/api/items?page=2") for _ in range(4)]
    assert [r.status for r in got] == [200, 200, 200, 429]
    ok = got[0]
    assert ok.body == b""  # nothing for the gateway to forward but the headers
    assert ok.headers["x-ratelimit-limit"] == "3"
    assert ok.headers["x-ratelimit-remaining"] == "2"
    assert int(ok.headers["x-ratelimit-reset"]) > 0
    assert ok.headers["ratelimit-policy"] == '"tier:free/per-minute";q=3;w=60'
    assert ok.headers["ratelimit"].startswith('"tier:free/per-minute";r=2;t=')
    assert "retry-after" not in ok.headers
    refused = got[3]
    assert 0 < int(refused.headers["retry-after"]) <= 66  # the window and one subinterval
    assert refused.headers["x-ratelimit-remaining"] == "0"
    assert refused.json()["limit"] == "tier:free/per-minute"
    # Another client of the same gateway has its own count.
    assert nginx_check(checker, "/api/items", client="203.0.113.2").status == 200
    # The endpoint and method of the original request count, not the check's.
    assert nginx_check(checker, "/upload", "POST", client="203.0.113.3").status == 200
    r = nginx_check(checker, "/upload", "POST", client="203.0.113.3")
    assert r.status == 429 and r.json()["limit"] == "endpoint:upload/burst", r
    # Deny and allow rules; an API key from the original request's headers.
    assert nginx_check(checker, "/a", client="192.0.2.66").status == 403
    assert nginx_check(checker, "/a", **{"X-API-Key": "revoked"}).status == 403
    r = nginx_check(checker, "/a", **{"X-API-Key": "internal-1"})
    assert r.status == 200 and r.headers["x-ratelimit-policy"] == "allow-list", r
    assert checker.metric('ratewin_server_requests_total{status="429",rule="tier:free/per-minute"}') == 1


def test_check_as_traefik_sends_it(checker):
    headers = {"X-Forwarded-Method": "POST", "X-Forwarded-Proto": "https",
               "X-Forwarded-Host": "api.example.com", "X-Forwarded-Uri": "/upload?id=1",
               "X-Forwarded-For": "203.0.113.20"}
    assert checker.get(CHECK, headers).status == 200
    r = checker.get(CHECK, headers)
    assert r.status == 429 and r.json()["limit"] == "endpoint:upload/burst", r
    # GET /upload is not the upload endpoint (POST only).
    assert checker.get(CHECK, {**headers, "X-Forwarded-Method": "GET"}).status == 200


def test_check_as_envoy_sends_it(checker):
    """ext_authz over HTTP: the original method, and path_prefix + the original path."""
    headers = {"X-Forwarded-For": "203.0.113.30"}
    assert checker.call("POST", CHECK + "/upload?x=1", headers=headers, body=b"").status == 200
    r = checker.call("POST", CHECK + "/upload", headers=headers, body=b"")
    assert r.status == 429 and r.json()["limit"] == "endpoint:upload/burst", r
    r = checker.call("POST", CHECK + "/api/../upload", headers={"X-Forwarded-For": "203.0.113.31"})
    assert r.status == 200
    r = checker.call("POST", CHECK + "//upload", headers={"X-Forwarded-For": "203.0.113.31"})
    assert r.status == 429, r
    # A client's own X-Original-URI let through is ignored: the path says which request.
    r = checker.call("POST", CHECK + "/upload",
                     headers={"X-Forwarded-For": "203.0.113.31", "X-Original-URI": "/cheap",
                              "X-Original-Method": "GET"})
    assert r.status == 429, r


def test_checks_are_answered_for_trusted_proxies_only(start_server, rules):
    server = start_server("--trust-proxy", "127.0.0.2", rules=rules)
    for source in ["127.0.0.1", "127.0.0.3"]:
        with Client(server.port, source=source) as c:
            r = c.get(CHECK, {"X-Original-URI": "/a", "X-Forwarded-For": "203.0.113.1"})
            assert r.status == 403 and "--trust-proxy" in r.json()["error"], r
            assert c.get(CHECK + "/a").status == 403
    with Client(server.port, source="127.0.0.2") as c:
        assert c.get(CHECK, {"X-Original-URI": "/a", "X-Forwarded-For": "203.0.113.1"}).status == 200
    # Without --trust-proxy, every check is refused (no peer could vouch for a client).
    plain = start_server(rules=rules)
    assert plain.get(CHECK, {"X-Original-URI": "/a", "X-Real-IP": "203.0.113.1"}).status == 403
    assert plain.metric('ratewin_server_requests_total{status="403",rule="untrusted-check"}') == 1


def test_a_check_must_name_the_request_and_the_client(checker):
    bad = [
        {},                                                           # no original URI
        {"X-Original-Method": "GET"},
        {"X-Original-URI": ""},
        {"X-Original-URI": "*"},
        {"X-Original-URI": "upload"},
        {"X-Original-URI": "example.com:443"},
        {"X-Original-URI": "http://h:99999/upload"},                 # absolute, unparseable
        {"X-Original-URI": "http://[::1/upload"},
        {"X-Original-URI": "http://a!b/upload"},
        {"X-Forwarded-Uri": "*"},
        {"X-Original-URI": "/a", "X-Original-Method": "G(E)T"},
        {"X-Original-URI": "/upload", "X-Forwarded-Uri": "/cheap"},  # two families
        {"X-Original-URI": "/upload", "X-Forwarded-Method": "GET"},
        {"X-Forwarded-Uri": "/upload", "X-Original-Method": "GET"},
    ]
    for headers in bad:
        r = checker.get(CHECK, {"X-Forwarded-For": "203.0.113.40", **headers})
        assert r.status == 400 and r.json()["error"], (headers, r)
    # The same header twice, or a URI with what no request line carries: raw requests.
    raw = [
        [("X-Original-URI", "/cheap"), ("X-Original-URI", "/upload")],
        [("X-Forwarded-Uri", "/cheap"), ("X-Forwarded-Uri", "/upload")],
        [("X-Original-URI", "/a"), ("X-Original-Method", "GET"), ("X-Original-Method", "POST")],
        [("X-Original-URI", "/up load")],
        [("X-Original-URI", "/a\x7f")],
    ]
    for headers in raw:
        with raw_connect(checker.port) as s:
            head = [f"GET {CHECK} HTTP/1.1", "Host: c", "X-Forwarded-For: 203.0.113.40",
                    *(f"{k}: {v}" for k, v in headers)]
            s.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            r = RawReader(s).response()
            assert r.status == 400, (headers, r)
    # The client: X-Forwarded-For or X-Real-IP must name it (the peer is the proxy).
    for client in [{}, {"X-Forwarded-For": "junk"}, {"X-Real-IP": "fe80::1%eth0"},
                   {"X-Forwarded-For": "fe80::1%eth0"}, {"X-Forwarded-For": "203.0.113.1:443"}]:
        r = checker.get(CHECK, {"X-Original-URI": "/a", **client})
        assert r.status == 400 and "client's address" in r.json()["error"], (client, r)
    # The check path is taken as written only.
    for target in ["/ratewin//check", "/x/../ratewin/check", "/ratewin/./check/upload"]:
        r = checker.get(target, {"X-Original-URI": "/a", "X-Forwarded-For": "203.0.113.40"})
        assert r.status == 400 and "as it is written" in r.json()["error"], (target, r)
    assert checker.metric('ratewin_server_requests_total{status="400",rule="bad-check"}') > 0


def test_a_check_cannot_dodge_an_endpoint(checker):
    """The original URI is parsed and normalised as a request target is."""
    forms = ["/upload", "/upload?x=1", "/upload/", "//upload", "/api/../upload",
             "/./upload", "/upload#f", "http://elsewhere/upload", "https://h:8443/a/../upload?q"]
    for i, form in enumerate(forms):
        client = f"203.0.113.{100 + i}"
        assert nginx_check(checker, "/upload", "POST", client=client).status == 200
        r = nginx_check(checker, form, "POST", client=client)
        assert r.status == 429 and r.json()["limit"] == "endpoint:upload/burst", (form, r)


def test_a_path_that_leaves_the_check_path_is_still_a_check(checker):
    """Envoy's path_prefix puts the client's path after the check path: a client path of
    "/../upload" makes "/ratewin/check/../upload", which normalises to "/upload". It is a
    check of "/upload" all the same, never the demo backend's answer to "/upload"."""
    headers = {"X-Forwarded-For": "203.0.113.40"}
    first = checker.call("POST", CHECK + "/../upload", headers=headers, body=b"")
    assert first.status == 200 and "x-ratelimit-limit" in first.headers, first
    assert "\"ok\"" not in first.text, first  # (the demo backend answers {"ok": true, ...})
    r = checker.call("POST", CHECK + "/../upload", headers=headers, body=b"")
    assert r.status == 429 and r.json()["limit"] == "endpoint:upload/burst", r


def test_head_counts_where_get_is_limited(start_server, tmp_path):
    rules = write_rules(tmp_path / "head.yaml", """
        endpoints:
          - name: search
            path: /v1/*/search
            methods: [GET]
            limits:
              - {name: per-minute, max: 3, window: 1m}
        """)
    server = start_server("--trust-proxy", "127.0.0.1", rules=rules)
    statuses = [server.call(m, "/v1/x/search", headers={"X-API-Key": "k"}).status
                for m in ["GET"] * 2 + ["HEAD"] * 3]
    assert statuses == [200, 200, 200, 429, 429]
    # The same through a forward-auth check of a HEAD.
    checks = [nginx_check(server, "/v1/y/search", "HEAD", client="203.0.113.50").status
              for _ in range(4)]
    assert checks == [200, 200, 200, 429]


def test_a_check_of_an_address_uses_its_canonical_form(checker):
    for form in ["::ffff:192.0.2.66", "::FFFF:C000:242", "0:0:0:0:0:ffff:192.0.2.66"]:
        assert nginx_check(checker, "/a", client=form).status == 403, form
    # The right-most X-Forwarded-For entry the trusted proxy did not vouch for.
    r = checker.get(CHECK, {"X-Original-URI": "/a", "X-Forwarded-For": "192.0.2.66, 203.0.113.77"})
    assert r.status == 200
    r = checker.get(CHECK, {"X-Original-URI": "/a", "X-Forwarded-For": "203.0.113.77, 192.0.2.66"})
    assert r.status == 403


def test_forward_auth_mode_answers_checks_only(start_server, rules):
    server = start_server("--mode", "forward-auth", "--trust-proxy", "127.0.0.1",
                          "--check-path", "/_ratelimit", rules=rules)
    r = server.get("/api/items")
    assert r.status == 404 and "/_ratelimit" in r.json()["error"], r
    assert server.get("/ratewin/check", {"X-Original-URI": "/a"}).status == 404
    r = server.get("/_ratelimit", {"X-Original-URI": "/a", "X-Real-IP": "203.0.113.1"})
    assert r.status == 200 and r.headers["x-ratelimit-limit"] == "3", r
    assert server.get("/_ratelimit/a", {"X-Real-IP": "203.0.113.1"}).headers[
        "x-ratelimit-remaining"] == "1"
    assert server.get("/healthz").status == 200
    assert server.get("/metrics").status == 200
    # In gateway mode (the default) the check path works beside the demo backend.
    gateway = start_server("--trust-proxy", "127.0.0.1", rules=rules)
    assert gateway.get("/api/items").json()["ok"] is True


@pytest.mark.parametrize("flags, message", [
    (["--check-path", "/"], "every request would be a check"),
    (["--check-path", "ratewin"], "must start with '/'"),
    (["--check-path", "/ratewin/"], "must not end with '/'"),
    (["--check-path", "/a/../b"], "normalised"),
    (["--check-path", "/admin/check"], "/admin"),
    (["--check-path", "/metrics"], "/metrics"),
    (["--check-path", "/a?b"], "letters, digits"),
    (["--mode", "proxy"], "--mode must be gateway or forward-auth"),
])
def test_bad_forward_auth_options_exit_2(flags, message):
    done = subprocess.run([SERVER, "--listen", "127.0.0.1:0", *flags],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=PATIENCE)
    assert done.returncode == 2, done
    assert message.encode() in done.stderr, done.stderr
