"""ratewin-server behind Redis Sentinel (--redis redis-sentinel://...): instances find the
primary through the sentinels and share their limits there, and when the primary dies
they follow the sentinels' failover to the replica they promote."""

from __future__ import annotations

from ratewin_testkit import Client, shared_admissions, store_up, wait_until, write_rules

RULES = """
    endpoints:
      - name: before
        path: /before
        limits:
          - {name: everybody, max: 10, window: 1m, per: global}
      - name: after
        path: /after
        limits:
          - {name: everybody, max: 10, window: 1m, per: global}
      - name: probe
        path: /probe
        limits:
          - {name: plenty, max: 100000, window: 1m, per: global}
    """


def admitted_across(a, b, path: str) -> list[int]:
    """30 requests to `path`, a and b in turn, each from its own key: the indexes admitted,
    10 of them, on the counts the two share (see shared_admissions)."""
    with Client(a.port) as ca, Client(b.port) as cb:
        got = [(ca if i % 2 == 0 else cb).get(path, {"X-API-Key": f"k{i}"}) for i in range(30)]
    assert all(r.status in (200, 429) for r in got), got
    shared_admissions(got, 10)
    return [i for i, r in enumerate(got) if r.status == 200]


def test_instances_share_a_limit_through_the_primary_and_follow_a_failover(
        start_server, redis_sentinel, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", RULES)
    a = start_server(rules=rules, redis=redis_sentinel)
    b = start_server(rules=rules, redis=redis_sentinel)
    assert "Redis" in a.banner and "Redis" in b.banner
    store_up(a, b)

    admitted = admitted_across(a, b, "/before")
    assert {i % 2 for i in admitted} == {0, 1}, admitted
    # The counts are the primary's (the sentinels named it; the replica only copies it).
    assert b"ratewin:{" in redis_sentinel.primary.command("KEYS", "ratewin:{*")

    # The primary dies; the sentinels promote the replica.
    old_port = redis_sentinel.primary.port
    redis_sentinel.primary.kill()
    assert wait_until(lambda: redis_sentinel.announced_port() == redis_sentinel.replica.port), \
        redis_sentinel.announced_port()
    assert redis_sentinel.announced_port() != old_port

    # Each instance follows: an admission written (not decided on local counts) can only
    # have been written to the new primary, the old one being gone.
    def follows(server) -> bool:
        r = server.get("/probe", {"X-API-Key": "probe"})
        return r.status == 200 and "x-ratelimit-policy" not in r.headers

    for server in (a, b):
        assert wait_until(lambda: follows(server)), server.log()
    admitted = admitted_across(a, b, "/after")
    assert {i % 2 for i in admitted} == {0, 1}, admitted
    assert redis_sentinel.replica.query("ROLE")[0] == b"master"
    # Health says up again once every connection of each engine has followed (the
    # background reads' connection may find the old primary gone after the writes have
    # moved: a TSan-built server takes seconds to).
    store_up(a, b)
    for server in (a, b):
        assert server.alive()
