"""Client addresses: --trust-proxy CIDR ranges (forwarded headers believed only from
them), the right-most X-Forwarded-For entry that is not a trusted proxy, X-Real-IP, and
one canonical form of every address, so "ip:" keys and deny rules match whatever form a
socket or a proxy gives."""

from __future__ import annotations

import http.client
import subprocess

import pytest

from ratewin_testkit import (PATIENCE, SERVER, Client, RawReader, Reply, raw_connect, raw_get,
                            write_rules)

# A key's tier shows in the demo backend's body: "marked" for the addresses listed here.
RULES = """
tiers:
  free: {limits: [{name: per-minute, max: 1000, window: 1m}]}
  marked: {limits: [{name: per-minute, max: 1000, window: 1m}]}
default_tier: free
keys:
  - {match: "ip:203.0.113.7", tier: marked}
  - {match: "ip:2001:DB8::0007", tier: marked}
  - {match: "ip:::ffff:127.0.0.3", tier: marked}
deny:
  - "ip:192.0.2.66"
  - "ip:2001:db8:0:0:0:0:0:66"
"""


@pytest.fixture
def rules(tmp_path):
    return write_rules(tmp_path / "rules.yaml", RULES)


def seen_as(reply: Reply) -> str:
    """"denied", or the tier the server put the request's client in."""
    if reply.status == 403:
        return "denied"
    assert reply.status == 200, reply
    return reply.json()["tier"]


def get_from(server, source: str, headers: dict[str, str]) -> str:
    with Client(server.port, source=source) as c:
        return seen_as(c.get("/", headers))


def test_forwarded_headers_are_believed_only_from_trusted_proxies(start_server, rules):
    server = start_server("--trust-proxy", "127.0.0.2", rules=rules)
    for headers in [{"X-Forwarded-For": "192.0.2.66"}, {"X-Real-IP": "192.0.2.66"},
                    {"X-Forwarded-For": "203.0.113.7"}, {"X-Real-IP": "203.0.113.7"}]:
        # From 127.0.0.1, not a trusted proxy: the connection's address counts.
        assert get_from(server, "127.0.0.1", headers) == "free", headers
        assert get_from(server, "127.0.0.4", headers) == "free", headers
    # From the trusted proxy, they name the client.
    assert get_from(server, "127.0.0.2", {"X-Forwarded-For": "192.0.2.66"}) == "denied"
    assert get_from(server, "127.0.0.2", {"X-Real-IP": "192.0.2.66"}) == "denied"
    assert get_from(server, "127.0.0.2", {"X-Forwarded-For": "203.0.113.7"}) == "marked"
    assert get_from(server, "127.0.0.2", {"X-Real-IP": "203.0.113.7"}) == "marked"
    # Without either, the proxy's own address.
    assert get_from(server, "127.0.0.2", {}) == "free"
    # Without --trust-proxy no peer is trusted.
    plain = start_server(rules=rules)
    for source in ["127.0.0.1", "127.0.0.2"]:
        assert get_from(plain, source, {"X-Forwarded-For": "192.0.2.66"}) == "free"
        assert get_from(plain, source, {"X-Real-IP": "192.0.2.66"}) == "free"


def test_the_right_most_untrusted_forwarded_entry_is_the_client(start_server, rules):
    server = start_server("--trust-proxy", "127.0.0.0/8, 10.0.0.0/8", rules=rules)

    def xff(*lines: str) -> str:
        with raw_connect(server.port) as s:
            s.sendall(raw_get("/", [("X-Forwarded-For", v) for v in lines]))
            return seen_as(RawReader(s).response())

    # A chain of trusted proxies (10.x) vouches for the address left of it.
    assert xff("192.0.2.66, 10.1.2.3") == "denied"
    assert xff("192.0.2.66, 10.1.2.3, 10.200.0.1") == "denied"
    assert xff("192.0.2.66", "10.1.2.3") == "denied"  # several lines are one list
    assert xff("192.0.2.66,10.1.2.3 ,, 10.9.9.9") == "denied"  # empty elements are skipped
    # What lies left of the first untrusted entry is the client's own claim.
    assert xff("192.0.2.66, 203.0.113.7, 10.1.2.3") == "marked"
    assert xff("192.0.2.66, 203.0.113.7") == "marked"
    assert xff("192.0.2.66", "203.0.113.7") == "marked"
    # Every entry trusted: the left-most.
    assert xff("10.9.9.9, 10.1.1.1") == "free"
    # Junk left of a trusted entry: the last address vouched for (a trusted one).
    assert xff("junk, 10.1.1.1") == "free"
    assert xff("203.0.113.7 junk, 192.0.2.66") == "denied"
    # Junk as the right-most entry: X-Real-IP, else the connection.
    assert xff("203.0.113.7, junk") == "free"
    with raw_connect(server.port) as s:
        s.sendall(raw_get("/", [("X-Forwarded-For", "203.0.113.7, nonsense"),
                                ("X-Real-IP", "192.0.2.66")]))
        assert seen_as(RawReader(s).response()) == "denied"


def test_addresses_are_canonical_whatever_form_the_proxy_writes(start_server, rules):
    server = start_server("--trust-proxy", "127.0.0.1", rules=rules)
    for header in ["X-Forwarded-For", "X-Real-IP"]:
        for form, expected in [
            ("192.0.2.66", "denied"),
            ("::ffff:192.0.2.66", "denied"),          # IPv4-mapped IPv6 is the IPv4 address
            ("::FFFF:C000:0242", "denied"),
            ("0:0:0:0:0:ffff:192.0.2.66", "denied"),
            ("2001:db8::66", "denied"),
            ("2001:DB8:0000::0066", "denied"),
            ("2001:db8:0:0:0:0:0:66", "denied"),
            ("2001:db8::7", "marked"),
            ("2001:0db8:0:0::7", "marked"),
            ("::ffff:203.0.113.7", "marked"),
            # Not addresses: ignored (the connection's address counts).
            ("2001:db8::66%eth0", "free"),           # a zone ID names an interface of the sender
            ("fe80::1%1", "free"),
            ("[2001:db8::66]", "free"),
            ("192.0.2.66:443", "free"),
            ("192.0.2.066", "free"),
            ("0300.0.2.66", "free"),
            ("3221226050", "free"),
            ("::192.0.2.66", "free"),                 # IPv4-compatible is another address
        ]:
            assert get_from(server, "127.0.0.1", {header: form}) == expected, (header, form)


def test_deny_by_address_holds_on_a_dual_stack_listener(start_server, tmp_path):
    """On [::] an IPv4 client's peer address is ::ffff:127.0.0.1: it is 127.0.0.1."""
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free: {limits: [{name: per-minute, max: 1000, window: 1m}]}
          marked: {limits: [{name: per-minute, max: 1000, window: 1m}]}
        default_tier: free
        keys:
          - {match: "ip:127.0.0.3", tier: marked}
        deny:
          - "ip:127.0.0.1"
          - "ip:0:0:0:0:0:0:0:1"
        """)
    server = start_server("--listen", "[::]:0", rules=rules)
    assert server.banner.startswith("ratewin-server listening on :::")
    assert get_from(server, "127.0.0.1", {}) == "denied"
    assert get_from(server, "127.0.0.3", {}) == "marked"
    assert get_from(server, "127.0.0.2", {}) == "free"
    conn = http.client.HTTPConnection("::1", server.port, timeout=PATIENCE)
    try:
        conn.request("GET", "/")
        r = conn.getresponse()
        assert r.status == 403, (r.status, r.read())
    finally:
        conn.close()
    # Trusting the mapped form of a range trusts the IPv4 range.
    proxied = start_server("--listen", "[::]:0", "--trust-proxy", "::ffff:127.0.0.2/128",
                           rules=rules)
    assert get_from(proxied, "127.0.0.2", {"X-Forwarded-For": "127.0.0.3"}) == "marked"
    assert get_from(proxied, "127.0.0.4", {"X-Forwarded-For": "127.0.0.3"}) == "free"


@pytest.mark.parametrize("value, message", [
    ("10.0.0.1/8", "bits set after the prefix (the range is 10.0.0.0/8)"),
    ("10.0.0.0/33", "from 0 to 32"),
    ("2001:db8::/129", "from 0 to 128"),
    ("10.0.0.0/8,,", "\"\": not an IP address"),
    ("localhost", "not an IP address"),
    ("fe80::/10%eth0", "from 0 to 128"),
    ("fe80::1%eth0", "zone ID"),
    ("", "not an IP address"),
])
def test_bad_trust_proxy_ranges_exit_2(value, message):
    done = subprocess.run([SERVER, "--listen", "127.0.0.1:0", "--trust-proxy", value],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=PATIENCE)
    assert done.returncode == 2, done
    assert b"--trust-proxy" in done.stderr and message.encode() in done.stderr, done.stderr


def test_trust_proxy_needs_its_ranges():
    """The old form (a flag that trusted any peer) is refused rather than read as 'none'."""
    done = subprocess.run([SERVER, "--listen", "127.0.0.1:0", "--trust-proxy"],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=PATIENCE)
    assert done.returncode == 2, done
    assert b"trust-proxy" in done.stderr


def test_key_headers_read_one_way_only(start_server, rules, tmp_path):
    """Two X-API-Key headers: this server took the first, a backend may take the last.
    X_API_Key: ignored here, read as X-API-Key by CGI and WSGI backends. Both are 400,
    in gateway mode and in a forward-auth check alike."""
    server = start_server("--trust-proxy", "127.0.0.1", rules=rules)
    ambiguous = [
        [("X-API-Key", "a"), ("X-API-Key", "b")],
        [("Authorization", "Bearer a"), ("Authorization", "Bearer b")],
        [("X_API_Key", "a")],
        [("X-API-Key", "a"), ("x_api_key", "b")],
        [("X_Forwarded_For", "192.0.2.66")],
        [("X_Real_IP", "192.0.2.66")],
    ]
    for headers in ambiguous:
        for target in ["/", "/ratewin/check"]:
            extra = [] if target == "/" else [("X-Forwarded-For", "192.0.2.1"),
                                              ("X-Original-Method", "GET"),
                                              ("X-Original-URI", "/")]
            with raw_connect(server.port) as sock:
                sock.sendall(raw_get(target, [*headers, *extra]))
                reply = RawReader(sock).response()
            assert reply.status == 400, (headers, target, reply)
    # One key, and other headers with '_', are fine.
    with raw_connect(server.port) as sock:
        sock.sendall(raw_get("/", [("X-API-Key", "a"), ("X_Trace_Id", "1")]))
        assert RawReader(sock).response().status == 200


def test_headers_a_client_key_names_and_method_overrides_read_one_way_only(start_server,
                                                                            tmp_path):
    """Before: with `client_key: [header:X-User]`, `X-User: a` and `X-User: b` counted as
    a (a backend may read b), X_User was read as X-User by CGI and WSGI backends but not
    here, and X_HTTP_Method_Override passed where X-HTTP-Method-Override is 400. All 400
    now, in gateway mode and in forward-auth checks; so is a limit's own key header."""
    rules = write_rules(tmp_path / "rules.yaml", """
        defaults:
          client_key: ["header:X-User", "address"]
        endpoints:
          - name: search
            path: /search
            limits:
              - {name: per-minute, max: 100, window: 1m}
              - {name: per-team, max: 100, window: 1m, client_key: ["header:X-Team"]}
        """)
    server = start_server("--trust-proxy", "127.0.0.1", rules=rules)
    ambiguous = [
        [("X-User", "a"), ("X-User", "b")],
        [("X_User", "a")],
        [("X-User", "a"), ("x_user", "b")],
        [("X-Team", "t"), ("X-Team", "u")],
        [("X_Team", "t")],
        [("X_HTTP_Method_Override", "DELETE")],
        [("X_HTTP_Method", "DELETE")],
        [("X_Method_Override", "DELETE")],
    ]
    for headers in ambiguous:
        for target in ["/search", "/ratewin/check"]:
            extra = [] if target == "/search" else [("X-Forwarded-For", "192.0.2.1"),
                                                    ("X-Original-Method", "GET"),
                                                    ("X-Original-URI", "/search")]
            with raw_connect(server.port) as sock:
                sock.sendall(raw_get(target, [*headers, *extra]))
                reply = RawReader(sock).response()
            assert reply.status == 400, (headers, target, reply)
    with raw_connect(server.port) as sock:
        sock.sendall(raw_get("/search", [("X-User", "a"), ("X-Team", "t"), ("X_Trace", "1")]))
        assert RawReader(sock).response().status == 200


def test_a_method_not_in_upper_case_is_refused(start_server, tmp_path):
    """Before: `get /items` (methods are case-sensitive: not GET) escaped a GET-only
    limit. 400, and in a forward-auth check's original method too."""
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: items
            path: /items
            methods: [GET]
            limits: [{name: per-minute, max: 1, window: 1m}]
        """)
    server = start_server("--trust-proxy", "127.0.0.1", rules=rules)
    with Client(server.port) as c:
        assert c.get("/items").status == 200
        assert c.get("/items").status == 429
    for method in [b"get", b"Get", b"gET"]:
        with raw_connect(server.port) as sock:
            sock.sendall(method + b" /items HTTP/1.1\r\nHost: t\r\n\r\n")
            reply = RawReader(sock).response()
        assert reply.status == 400 and b"lower case" in reply.body, reply
    check = {"X-Forwarded-For": "192.0.2.1", "X-Original-Method": "get",
             "X-Original-URI": "/items"}
    assert server.get("/ratewin/check", check).status == 400


def test_ipv6_clients_are_counted_by_their_slash_64(start_server, tmp_path):
    """Before: twenty addresses inside one /64 each got their own quota. One host has a
    whole /64 to pick addresses from: keyless IPv6 clients count by it (--ipv6-prefix);
    rules still match whole addresses."""
    rules = write_rules(tmp_path / "r.yaml", """
        tiers:
          free: {limits: [{name: per-minute, max: 5, window: 1m}]}
          marked: {limits: [{name: per-minute, max: 1000, window: 1m}]}
        default_tier: free
        keys:
          - {match: "ip:2001:db8:0:2::7", tier: marked}
        """)
    server = start_server("--trust-proxy", "127.0.0.1", rules=rules)

    def statuses(prefix: str, count: int) -> list[int]:
        with Client(server.port) as c:
            return [c.get("/", {"X-Forwarded-For": f"{prefix}{i + 1:x}"}).status
                    for i in range(count)]

    assert statuses("2001:db8:0:1::", 20) == [200] * 5 + [429] * 15
    assert statuses("2001:db8:0:1:ffff::", 1) == [429]  # the same /64
    assert statuses("2001:db8:0:3::", 5) == [200] * 5  # another /64
    # Rules match the whole address: ::7 is in the marked tier, and counts apart from its
    # /64's free quota, spent by ::1 to ::6.
    assert statuses("2001:db8:0:2::", 6) == [200] * 5 + [429]
    with Client(server.port) as c:
        assert c.get("/", {"X-Forwarded-For": "2001:db8:0:2::7"}).status == 200
    assert statuses("192.0.2.", 6) == [200] * 6  # IPv4: each address apart
    per_address = start_server("--trust-proxy", "127.0.0.1", "--ipv6-prefix", "128", rules=rules)
    with Client(per_address.port) as c:
        assert [c.get("/", {"X-Forwarded-For": f"2001:db8:0:1::{i + 1:x}"}).status
                for i in range(20)] == [200] * 20
