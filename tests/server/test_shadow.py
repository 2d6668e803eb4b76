"""Limits in shadow (rules' `mode: shadow`) through ratewin-server in local mode: they count
as if they enforced but never refuse, what they would have refused is counted per rule in
/metrics and logged at most once a second, they are left out of the headers unless
defaults.shadow_headers is true, and a reload that enforces them keeps their counts."""

from __future__ import annotations

import time

from ratewin_testkit import Client, wait_until, write_rules

KEY = {"X-API-Key": "k"}
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def rules_text(version: str, mode: str, defaults: str = "") -> str:
    return f"""
        version: "{version}"
        {defaults}
        tiers:
          free:
            limits:
              - {{name: new, max: 2, window: 1m, {mode}}}
              - {{name: old, max: 100, window: 1m}}
        default_tier: free
        """


def test_a_shadow_limit_counts_never_refuses_and_enforces_from_its_counts(start_server, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", rules_text("v1", "mode: shadow"))
    server = start_server(rules=path, admin_token=TOKEN)
    described = server.get("/admin/rules", AUTH).json()["rules"]["tiers"]["free"]["limits"]
    assert [limit["mode"] for limit in described] == ["shadow", "enforce"]
    with Client(server.port) as c:
        got = []
        for _ in range(5):
            if len(got) == 2:  # (the limit in shadow refuses from the third on)
                shadow_began = time.monotonic()
            got.append(c.get("/", KEY))
        shadow_span = time.monotonic() - shadow_began
        assert [r.status for r in got] == [200] * 5, got
        # The headers describe the enforcing limit only.
        assert [r.headers["x-ratelimit-remaining"] for r in got] == ["99", "98", "97", "96", "95"]
        assert got[0].headers["ratelimit-policy"] == '"tier:free/old";q=100;w=60'
        assert all("retry-after" not in r.headers for r in got)
        # Three would have been refused: counted per rule, and logged at most once a second
        # (so once, when the three come within a second, as they do but on a machine busy
        # enough to spread them further apart).
        assert server.metric('ratewin_server_shadow_refusals_total{rule="tier:free/new"}') == 3
        assert server.metric('ratewin_server_requests_total{status="200",rule="tier:free/old"}') == 5
        assert wait_until(lambda: 'shadow: limit "tier:free/new"' in server.log())
        assert 1 <= server.log().count('shadow: limit "tier:free/new"') <= 1 + int(shadow_span), \
            (shadow_span, server.log())

        # Enforced: the two it admitted in shadow count, so the next request is refused.
        write_rules(path, rules_text("v2", "mode: enforce"), atomic=True)
        assert wait_until(
            lambda: server.get("/admin/rules", AUTH).json()["version"].startswith("v2@"))
        refused = c.get("/", KEY)
        assert refused.status == 429, refused
        assert refused.json()["limit"] == "tier:free/new"
        assert refused.headers["x-ratelimit-remaining"] == "0"
        assert server.metric('ratewin_server_shadow_refusals_total{rule="tier:free/new"}') == 3


def test_shadow_limits_in_the_headers_when_the_rules_ask(start_server, tmp_path):
    path = write_rules(tmp_path / "rules.yaml",
                       rules_text("v1", "mode: shadow", "defaults: {shadow_headers: true}"))
    server = start_server(rules=path)
    with Client(server.port) as c:
        got = [c.get("/", KEY) for _ in range(3)]
        assert [r.status for r in got] == [200] * 3
        # The shadow limit is closest to refusing: it is the one described, with 0 left.
        assert [r.headers["x-ratelimit-remaining"] for r in got] == ["1", "0", "0"]
        assert got[0].headers["ratelimit-policy"] == \
            '"tier:free/new";q=2;w=60, "tier:free/old";q=100;w=60'
        assert "retry-after" not in got[2].headers


def test_only_shadow_limits_send_no_rate_limit_headers(start_server, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", """
        defaults: {mode: shadow}
        endpoints:
          - name: e
            path: /
            limits:
              - {name: l, max: 1, window: 1m}
        """)
    server = start_server(rules=path)
    with Client(server.port) as c:
        got = [c.get("/", KEY) for _ in range(3)]
    assert [r.status for r in got] == [200] * 3
    for r in got:
        assert not any(name.startswith(("x-ratelimit", "ratelimit")) for name in r.headers), r
    assert server.metric('ratewin_server_shadow_refusals_total{rule="endpoint:e/l"}') == 2
