"""Who is being limited: the refusal log (a line when a key starts being refused, a count
per interval, a line when it ends; API keys by fingerprint), --log-format json, and
GET /admin/top."""

from __future__ import annotations

import json
import re

from ratewin_testkit import Client, wait_until, write_rules

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET_KEY = "sk-live-0123456789"

RULES = """
    version: "v1"
    tiers:
      free:
        limits:
          - {name: per-key, max: 2, window: 1m}
    default_tier: free
    """


# A JSON line's head: the time stamp (UTC, to the second) and the level, in that order.
HEAD = re.compile(r'\{"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ","level":"(debug|info|warning|error)",')


def events(server) -> list[dict]:
    """The log's lines, each of which must be a JSON object, written compact."""
    out = []
    for line in server.log().splitlines():
        record = json.loads(line)  # every line, not only the refusal log's
        assert record["level"] in {"debug", "info", "warning", "error"}, record
        assert "time" in record, record
        # The bytes: the head, then the members in the server's order, no spaces (the
        # lines hold no value Python would write otherwise: no control character, no
        # number with a fraction of zero or a small exponent).
        assert HEAD.match(line), line
        assert json.dumps(record, separators=(",", ":"), ensure_ascii=False) == line, line
        out.append(record)
    return out


def named(server, event: str) -> list[dict]:
    return [e for e in events(server) if e.get("event") == event]


def test_refusals_are_logged_as_json_and_the_most_refused_are_listed(start_server, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", RULES)
    # (A key is followed until an interval has passed without its refusal: the refusals
    # below are listed by GET /admin/top at least one interval, 3 s, after they were
    # made, however late a busy machine makes the request.)
    server = start_server("--log-format", "json", "--refusal-log-interval", "3",
                          rules=path, admin_token=TOKEN)
    with Client(server.port) as c:
        by_key = [c.get("/", {"X-API-Key": SECRET_KEY}).status for _ in range(6)]
        by_address = [c.get("/").status for _ in range(3)]
    assert by_key == [200, 200, 429, 429, 429, 429]
    assert by_address == [200, 200, 429]

    # One "refusing" line per key, when it starts being refused; the API key by its
    # fingerprint, never whole.
    starts = wait_until(lambda: len(named(server, "refusing")) == 2 and named(server, "refusing"))
    keys = {e["key"]: e for e in starts}
    assert "ip:127.0.0.1" in keys, starts
    (fingerprint,) = [k for k in keys if k.startswith("key#")]
    assert len(fingerprint) == 16
    assert keys[fingerprint]["rule"] == "tier:free/per-key"
    assert keys[fingerprint]["limit"].startswith("2/1m")
    assert keys[fingerprint]["retry_after_s"] >= 1
    assert SECRET_KEY not in server.log()

    # GET /admin/top: the keys, whole, most refused first, with counts and rates.
    assert server.get("/admin/top").status == 401
    top = server.get("/admin/top", AUTH).json()
    assert top["interval_s"] == 3
    (rule,) = top["rules"]
    assert rule["rule"] == "tier:free/per-key"
    assert [k["key"] for k in rule["keys"]] == [SECRET_KEY, "ip:127.0.0.1"]
    assert rule["keys"][0]["fingerprint"] == fingerprint
    assert [k["refusals"] for k in rule["keys"]] == [4, 1]
    assert rule["keys"][0]["per_second"] > 0
    assert server.get("/admin/top?n=1", AUTH).json()["rules"][0]["keys"][0]["key"] == SECRET_KEY
    assert server.get("/admin/top?n=0", AUTH).status == 400

    # Each interval, a count for each key still refused; then, an interval without a
    # refusal, the end (and the key is forgotten).
    counted = wait_until(lambda: named(server, "refused"))
    assert {(e["key"], e["refusals"]) for e in counted[:2]} == {(fingerprint, 4), ("ip:127.0.0.1", 1)}
    ended = wait_until(lambda: len(named(server, "refusals_ended")) == 2 and
                       named(server, "refusals_ended"))
    assert {e["key"]: e["refusals"] for e in ended} == {fingerprint: 4, "ip:127.0.0.1": 1}
    assert server.get("/admin/top", AUTH).json()["rules"] == []
    # Not logged again while nothing is refused.
    assert len(named(server, "refusing")) == 2
