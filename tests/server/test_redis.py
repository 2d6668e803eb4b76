"""Several ratewin-server instances sharing one private Redis: shared limits are exact
across instances, admin overrides reach every instance within 2 s, and a Redis that dies
mid-run leaves the servers answering in degraded mode (and they recover). (A decision
Redis did not answer within the server's 100 ms is made on local counts and says so:
counts are exact but for those, see shared_admissions.)"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

from ratewin_testkit import (PATIENCE, SERVER, Client, RedisCluster, RedisServer, degraded,
                            free_port, shared_admissions, store_up, wait_until, write_rules)

TOKEN = "shared-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# How soon an override made on one instance is in force on the others: announced on a
# channel, read at once. Without the announcement an instance would still read it at its
# next refresh, 5 s at most later: the bound is what tells the two apart.
PROPAGATED_S = 2.0


def all_flushed(server) -> bool:
    """Whether a batched instance has written every unit it admitted: each admission is
    written through (a write of its own) or flushed (a flush being one write)."""
    allowed = server.metric('ratewin_engine_decisions_total{result="allowed"}')
    writes = server.metric('ratewin_store_writes_total{result="ok"}')
    flushes = server.metric('ratewin_store_flushes_total{result="ok"}')
    return allowed == writes - flushes + server.metric("ratewin_store_flushed_units_total")


def test_global_limit_is_exact_across_two_instances(start_server, redis, tmp_path):
    """Allowed requests are written to Redis synchronously by a conditional script, so the
    instances together admit exactly the limit, however the requests are spread."""
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: shared
            path: /shared
            limits:
              - {name: everybody, max: 20, window: 10s, per: global}
          - name: mine
            path: /mine
            limits:
              - {name: per-key, max: 5, window: 10s}
        """)
    a = start_server(rules=rules, redis=redis)
    b = start_server(rules=rules, redis=redis)
    assert "Redis" in a.banner and "Redis" in b.banner
    store_up(a, b)

    with Client(a.port) as ca, Client(b.port) as cb:
        shared = [(ca if i % 2 == 0 else cb).get("/shared", {"X-API-Key": f"k{i}"}) for i in range(60)]
        by_key = [(ca if i % 2 == 0 else cb).get("/mine", {"X-API-Key": "same"}) for i in range(20)]
    allowed = [i for i, r in enumerate(shared) if r.status == 200]
    shared_admissions(shared, 20)
    assert all(r.status in (200, 429) for r in shared)
    # Both instances admitted some (the limit really is shared, not per instance).
    assert {i % 2 for i in allowed} == {0, 1}
    assert all(r.json()["limit"] == "endpoint:shared/everybody" for r in shared if r.status == 429)
    assert all("x-ratelimit-policy" not in r.headers or degraded(r) for r in shared)
    shared_admissions(by_key, 5)
    # A third instance, started now, sees the counts already made.
    c = start_server(rules=rules, redis=redis)
    store_up(c)
    r = c.get("/shared", {"X-API-Key": "late"})
    assert r.status == 429 or degraded(r), r


def test_batched_instances_keep_to_a_global_limit_and_write_every_admission(start_server, redis,
                                                                           tmp_path):
    """--write-mode batched: admissions are decided in memory, within each instance's
    budget; what the instances admitted reaches Redis in their flushes, every unit."""
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: shared
            path: /shared
            limits:
              - {name: everybody, max: 60, window: 60s, per: global}
        """)
    # (The bound holds while flushes complete within their interval: a second, not the
    # 50 ms chosen for this window, which a sanitizer-built server on a busy machine can
    # take for a round trip.)
    a = start_server("--write-mode", "batched", "--flush-interval-ms", "1000", rules=rules,
                     redis=redis)
    b = start_server("--write-mode", "batched", "--flush-interval-ms", "1000", rules=rules,
                     redis=redis)
    store_up(a, b)
    for s in (a, b):
        assert wait_until(lambda s=s: "ratewin_store_live_nodes 2" in s.metrics()), s.log()
    with Client(a.port) as ca, Client(b.port) as cb:
        shared = [(ca if i % 2 == 0 else cb).get("/shared", {"X-API-Key": f"k{i}"})
                  for i in range(150)]
    allowed = [i for i, r in enumerate(shared) if r.status == 200]
    assert all(r.status in (200, 429) for r in shared)
    assert {i % 2 for i in allowed} == {0, 1}
    # The limit, and one unit of rounding (and any admission decided on local counts).
    over = sum(r.status == 200 and degraded(r) for r in shared)
    assert 2 <= len(allowed) <= 61 + over, len(allowed)
    if over:
        return  # (what Redis holds is then short of what was admitted)
    # Once both have flushed, a third instance (sync) finds every admission in Redis.
    for s in (a, b):
        assert wait_until(lambda s=s: all_flushed(s)), s.metrics()
    c = start_server(rules=rules, redis=redis)
    store_up(c)
    r = c.get("/shared", {"X-API-Key": "late"})
    left = max(0, 60 - len(allowed))
    assert r.status == (200 if left > 0 else 429), r
    assert int(r.headers["x-ratelimit-remaining"]) == max(0, left - 1), r


def test_a_batched_instance_killed_loses_only_what_it_had_not_flushed(start_server, redis,
                                                                      tmp_path):
    """A batched instance killed (SIGKILL, no close) loses what it admitted since its last
    flush, at most a budget and a write through's: Redis holds the rest, whole, and the
    survivor keeps to the limit from what Redis holds."""
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: shared
            path: /shared
            limits:
              - {name: everybody, max: 60, window: 60s, per: global}
        """)
    # The victim flushes once a second: what it admits now is still pending when killed.
    victim = start_server("--write-mode", "batched", "--flush-interval-ms", "1000", rules=rules,
                          redis=redis)
    survivor = start_server("--write-mode", "batched", rules=rules, redis=redis)
    store_up(victim, survivor)
    for s in (victim, survivor):
        assert wait_until(lambda s=s: "ratewin_store_live_nodes 2" in s.metrics()), s.log()
    with Client(victim.port) as cv:
        by_victim = sum(cv.get("/shared", {"X-API-Key": f"v{i}"}).status == 200 for i in range(20))
    victim.signal(signal.SIGKILL)
    victim.wait(timeout=PATIENCE)
    assert by_victim >= 2, by_victim  # its warm start, and budgeted ones
    # What reached Redis: its warm start (written as in sync mode), its writes through, and
    # any flush made before the kill. What is lost is what it admitted since its last
    # flush: a budget (at most 0.276 x 7/8 of what was left, weighted, for two engines)
    # and the half even budget a write through grants (0.138 / 2): at most 18 of 59.
    # (Redis has run what the victim sent before it died once it answers a later command.)
    assert redis.command("PING") == b"+PONG\r\n"
    reader = start_server(rules=rules, redis=redis)  # sync: reads what Redis holds
    store_up(reader)
    r = reader.get("/shared", {"X-API-Key": "reader"})
    assert r.status == 200, r
    stored_by_victim = 60 - int(r.headers["x-ratelimit-remaining"]) - 1
    lost = by_victim - stored_by_victim
    assert stored_by_victim >= 1, (by_victim, stored_by_victim)
    assert 0 <= lost <= 18, (lost, by_victim, stored_by_victim)
    # The survivor admits what Redis has left, and no more (the limit holds but for the
    # lost counts), give or take one unit of rounding. (It is granted its budget a flush
    # at a time, 50 ms apart: requested until it has admitted what is left, then for a
    # second more, in which it must admit no more.)
    left = 60 - stored_by_victim - 1
    by_survivor = 0
    with Client(survivor.port) as cs:
        deadline = time.monotonic() + PATIENCE
        while by_survivor < left - 5:
            assert time.monotonic() < deadline, (by_survivor, left)
            by_survivor += cs.get("/shared", {"X-API-Key": "s"}).status == 200
        more = time.monotonic() + 1.0
        while time.monotonic() < more:
            by_survivor += cs.get("/shared", {"X-API-Key": "s"}).status == 200
    assert left - 5 <= by_survivor <= left + 1, (by_survivor, left)


def test_global_limit_is_exact_under_concurrency(start_server, redis, tmp_path):
    """Concurrent clients on two instances (two event loops each): still exactly the limit."""
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: hot
            path: /hot
            limits:
              - {name: everybody, max: 25, window: 10s, per: global}
        """)
    servers = [start_server(rules=rules, redis=redis), start_server(rules=rules, redis=redis)]
    store_up(*servers)
    results: list[int] = []
    lock = threading.Lock()

    degraded: list[int] = []

    def client(n: int) -> None:
        with Client(servers[n % 2].port) as c:
            got = [c.get("/hot", {"X-API-Key": f"c{n}-{i}"}) for i in range(15)]
        with lock:
            results.extend(r.status for r in got)
            # A write that missed its deadline (a slow machine, a sanitizer) is decided on
            # local counts, as the failure policy says, and says so: such a decision may
            # admit past the shared count.
            degraded.extend(r.status for r in got
                            if r.headers.get("x-ratelimit-policy") == "degraded")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(PATIENCE)
    assert len(results) == 90
    assert all(s in (200, 429) for s in results), results
    admitted = results.count(200)
    if not degraded:
        # (26 and 27 were seen under sanitizers before an admission stood on its own
        # write's shared counts; tests/unit/engine_test.cpp has the interleaving.)
        assert admitted == 25, results
    else:
        # Never more than the limit on shared counts; the degraded ones on local counts.
        assert 25 <= admitted <= 25 + degraded.count(200), (results, degraded)


def two_following_overrides(start_server, tmp_path, redis):
    """Two servers of one free tier (2 a minute) on `redis`, with the admin API, once both
    follow the overrides in Redis."""
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 2, window: 1m}
        default_tier: free
        """)
    a = start_server(rules=rules, redis=redis, admin_token=TOKEN)
    b = start_server(rules=rules, redis=redis, admin_token=TOKEN)
    for s in (a, b):
        assert wait_until(lambda: s.metric("ratewin_server_overrides_in_sync") == 1), s.log()
    return a, b


def test_admin_override_propagates_to_other_instance_within_2s(start_server, redis, tmp_path):
    a, b = two_following_overrides(start_server, tmp_path, redis)

    def b_overrides() -> list:
        return b.get("/admin/overrides", AUTH).json()["overrides"]

    assert b.get("/admin/overrides", AUTH).json()["shared"] is True
    assert b_overrides() == []
    r = a.call("POST", "/admin/overrides", headers=AUTH,
               body=json.dumps({"key": "alice", "limit": 7, "ttl_s": 120}))
    assert r.status == 200, r
    started = time.monotonic()  # (made: announced)
    seen = wait_until(lambda: [o for o in b_overrides() if o["key"] == "alice"], PROPAGATED_S,
                      0.01)
    elapsed = time.monotonic() - started
    assert seen, f"override not on the other instance after {elapsed:.2f}s"
    assert seen[0]["limit"] == 7
    r = b.get("/", {"X-API-Key": "alice"})
    assert r.headers["x-ratelimit-limit"] == "7", r

    # A multiplier, set on b, reaches a.
    assert b.call("POST", "/admin/overrides", headers=AUTH,
                  body=json.dumps({"key": "bob", "multiplier": 4})).status == 200
    started = time.monotonic()
    assert wait_until(lambda: any(o["key"] == "bob"
                                  for o in a.get("/admin/overrides", AUTH).json()["overrides"]),
                      PROPAGATED_S, 0.01), f"not seen after {time.monotonic() - started:.2f}s"
    assert a.get("/", {"X-API-Key": "bob"}).headers["x-ratelimit-limit"] == "8"

    # Removal propagates too.
    assert a.call("DELETE", "/admin/overrides", headers=AUTH,
                  body=json.dumps({"key": "alice"})).status == 200
    started = time.monotonic()
    assert wait_until(lambda: not [o for o in b_overrides() if o["key"] == "alice"],
                      PROPAGATED_S, 0.01), \
        f"removal not seen after {time.monotonic() - started:.2f}s"
    assert b.get("/", {"X-API-Key": "alice2"}).headers["x-ratelimit-limit"] == "2"


def test_override_set_before_an_instance_starts_reaches_it(start_server, redis, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 2, window: 1m}
        default_tier: free
        """)
    a = start_server(rules=rules, redis=redis, admin_token=TOKEN)
    assert wait_until(lambda: a.metric("ratewin_server_overrides_in_sync") == 1)
    assert a.call("POST", "/admin/overrides", headers=AUTH,
                  body=json.dumps({"key": "carol", "limit": 9})).status == 200
    b = start_server(rules=rules, redis=redis, admin_token=TOKEN)
    assert wait_until(lambda: b.metric("ratewin_server_overrides") == 1), b.log()
    assert b.get("/", {"X-API-Key": "carol"}).headers["x-ratelimit-limit"] == "9"


def test_redis_killed_mid_run_degrades_and_recovers(start_server, redis, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 1000, window: 1m}
        default_tier: free
        endpoints:
          - name: login
            path: /login
            limits:
              - {name: attempts, max: 100, window: 1m, failure_policy: closed}
          - name: open
            path: /open
            limits:
              - {name: once, max: 1, window: 1m, failure_policy: open}
          - name: tiny
            path: /tiny
            limits:
              - {name: once, max: 1, window: 1m}
        """)
    server = start_server(rules=rules, redis=redis, admin_token=TOKEN)
    store_up(server)
    key = {"X-API-Key": "k"}
    r = server.get("/", key)
    assert r.status == 200 and "x-ratelimit-policy" not in r.headers, r
    assert server.get("/login", key).status == 200
    assert [server.get("/open", key).status for _ in range(2)] == [200, 429]
    assert [server.get("/tiny", key).status for _ in range(2)] == [200, 429]
    assert server.metric("ratewin_store_up") == 1
    assert wait_until(lambda: server.metric("ratewin_server_overrides_in_sync") == 1)

    redis.kill()
    replies = []

    def degraded() -> bool:
        reply = server.get("/", key)
        replies.append(reply)
        return reply.headers.get("x-ratelimit-policy") == "degraded"

    assert wait_until(degraded), replies[-1]
    # Every answer meanwhile was a normal one: the server kept serving.
    assert all(x.status == 200 for x in replies), replies
    for _ in range(10):
        r = server.get("/", key)
        assert r.status == 200 and r.headers["x-ratelimit-policy"] == "degraded", r
        assert r.headers["x-ratelimit-limit"] == "1000"
    # closed: refused while the store is away, and it says so
    r = server.get("/login", key)
    assert r.status == 429 and r.headers["x-ratelimit-policy"] == "degraded", r
    assert r.json()["degraded"] is True
    # open: admitted beyond its max while the store is away
    r = server.get("/open", key)
    assert r.status == 200 and r.headers["x-ratelimit-policy"] == "degraded", r
    # local: its own counts still limit, and the refusal is marked degraded too
    r = server.get("/tiny", key)
    assert r.status == 429, r
    assert r.headers.get("x-ratelimit-policy") == "degraded", r
    assert r.json()["degraded"] is True
    assert server.get("/healthz").json()["store"] == "down"
    assert server.metric("ratewin_store_up") == 0
    # Overrides cannot be shared now: refused rather than silently local.
    r = server.call("POST", "/admin/overrides", headers=AUTH, body=json.dumps({"key": "k", "limit": 5}))
    assert r.status == 503 and "Redis" in r.json()["error"], r
    assert wait_until(lambda: server.metric("ratewin_server_overrides_in_sync") == 0)
    assert server.metric("ratewin_engine_degraded_decisions_total") >= 10
    assert server.alive()

    # Redis back on the same port: the degraded marker goes away.
    redis.start(same_port=True)
    assert wait_until(lambda: "x-ratelimit-policy" not in server.get("/", key).headers,
                      interval=0.1), server.log()
    assert server.get("/healthz").json()["store"] == "up"
    assert server.metric("ratewin_store_up") == 1
    assert wait_until(lambda: server.metric("ratewin_server_overrides_in_sync") == 1)
    r = server.call("POST", "/admin/overrides", headers=AUTH, body=json.dumps({"key": "k", "limit": 5}))
    assert r.status == 200, r


def test_redis_unreachable_at_start_degrades(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 2, window: 1m}
        default_tier: free
        """)
    dead = free_port()  # nothing listens there
    server = start_server("--redis", f"redis://127.0.0.1:{dead}", rules=rules)
    assert "Redis" in server.banner
    got = [server.get("/", {"X-API-Key": "k"}) for _ in range(3)]
    assert [r.status for r in got] == [200, 200, 429]
    assert all(r.headers.get("x-ratelimit-policy") == "degraded" for r in got), got
    health = server.get("/healthz").json()
    assert health["store"] == "down" and health["status"] == "degraded"
    assert "Connection refused" in health["reason"] or "connect" in health["reason"], health
    assert server.metric("ratewin_store_configured") == 1
    assert server.metric("ratewin_store_up") == 0
    assert server.metric('ratewin_store_errors_total{reason="connect"}') >= 1

    # Required, it does not start at all, and says why.
    refused = subprocess.run([SERVER, "--listen", "127.0.0.1:0", "--rules", str(rules),
                              "--redis", f"redis://127.0.0.1:{dead}", "--require-redis"],
                             capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode == 1 and refused.stdout == "", refused
    assert f"Redis at redis://127.0.0.1:{dead} cannot be used" in refused.stderr, refused.stderr


def test_an_acl_that_forbids_the_key_prefix_is_reported_not_hidden(start_server, tmp_path):
    """A Redis ACL user limited to ~myapp:*, with ratewin given another prefix: every
    command fails (NOPERM). The server says so: /healthz degraded with the reason, the
    store not up, the failures counted by reason, one log line (not one per request) that
    names the user and the prefix, the overrides' reason; --require-redis refuses to
    start."""
    redis = RedisServer(tmp_path / "acl-redis", extra_args=[
        "--user", "app", "on", ">pw", "~myapp:*", "&*", "+@all", "-@admin",
        "--user", "default", "on", "nopass", "~*", "&*", "+@all"])
    redis.start()
    try:
        rules = write_rules(tmp_path / "rules.yaml", """
            tiers:
              free:
                limits:
                  - {name: per-minute, max: 2, window: 1m}
            default_tier: free
            """)
        url = f"redis://app:pw@127.0.0.1:{redis.port}"
        server = start_server("--redis", url, "--key-prefix", "other", rules=rules,
                              admin_token=TOKEN)
        with Client(server.port) as c:
            got = [c.get("/", {"X-API-Key": "k"}) for _ in range(20)]
        assert [r.status for r in got[:3]] == [200, 200, 429]
        # Redis serves, but not these keys: its circuit stays open, every decision degraded.
        assert all(r.headers.get("x-ratelimit-policy") == "degraded" for r in got), \
            [(r.status, r.headers.get("x-ratelimit-policy")) for r in got]
        assert "reachable again" not in server.log()
        assert wait_until(lambda: server.get("/healthz").json()["status"] == "degraded")
        health = server.get("/healthz").json()
        assert health["store"] == "down" and "NOPERM" in health["reason"], health
        assert server.metric("ratewin_store_up") == 0
        assert server.metric('ratewin_store_errors_total{reason="NOPERM"}') >= 1
        assert server.metric('ratewin_store_errors_total{reason="OOM"}') == 0  # listed, 0
        # The overrides' thread reads Redis on its own: its lines come when they come.
        assert wait_until(lambda: "overrides: reading Redis: NOPERM" in server.log() and
                          "overrides: cannot follow Redis: reading other:server:overrides "
                          "failed" in server.log()), server.log()
        log = server.log()
        assert 'the Redis ACL user \\"app\\" may not use the keys of the key prefix \\"other\\"' in log \
            or 'the Redis ACL user "app" may not use the keys of the key prefix "other"' in log, log
        # Not one line per refused write: 20 requests, a handful of lines.
        assert log.count("NOPERM") <= 8, log

        refused = subprocess.run([SERVER, "--listen", "127.0.0.1:0", "--rules", str(rules),
                                  "--redis", url, "--key-prefix", "other", "--require-redis"],
                                 capture_output=True, text=True, timeout=60,
                                 stdin=subprocess.DEVNULL)
        assert refused.returncode == 1, refused
        assert 'the Redis ACL user "app" may not use the keys of the key prefix "other"' \
            in refused.stderr, refused.stderr
        # With the prefix the ACL allows, the store is up and the decisions shared.
        fine = start_server("--redis", url, "--key-prefix", "myapp", rules=rules)
        store_up(fine)
        assert fine.get("/healthz").json()["status"] == "ok"
        r = fine.get("/", {"X-API-Key": "k"})
        assert r.status == 200 and r.headers.get("x-ratelimit-policy") != "degraded"
    finally:
        redis.stop()


def test_key_prefix_separates_deployments(start_server, redis, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: all
            path: /
            limits:
              - {name: everybody, max: 3, window: 1m, per: global}
        """)
    a = start_server("--key-prefix", "blue", rules=rules, redis=redis)
    a2 = start_server("--key-prefix", "blue", rules=rules, redis=redis)
    b = start_server("--key-prefix", "green", rules=rules, redis=redis)
    store_up(a, a2, b)
    assert [a.get("/x").status for _ in range(3)] == [200] * 3
    r = a2.get("/x")
    assert r.status == 429 or degraded(r), r  # same prefix: shared
    assert [b.get("/x").status for _ in range(4)] == [200, 200, 200, 429]  # its own counter
    keys = redis.command("KEYS", "*")
    assert b"blue" in keys and b"green" in keys, keys


def test_all_or_nothing_across_instances(start_server, redis, tmp_path):
    """A request the shared endpoint counter refuses gives back what it took from the key's
    limit, in Redis too: the other instance sees only the admitted requests."""
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 10, window: 1m}
        default_tier: free
        endpoints:
          - name: scarce
            path: /scarce
            limits:
              - {name: everybody, max: 3, window: 1m, per: global}
        """)
    a = start_server(rules=rules, redis=redis)
    b = start_server(rules=rules, redis=redis)
    store_up(a, b)
    key = {"X-API-Key": "k"}
    with Client(a.port) as ca, Client(b.port) as cb:
        got = [(ca if i % 2 == 0 else cb).get("/scarce", key) for i in range(10)]
        shared_admissions(got, 3)
        assert all(r.json()["limit"] == "endpoint:scarce/everybody" for r in got if r.status == 429)
        # 3 of the key's 10 are used, wherever they were admitted: 7 more in all. (Unless
        # some were decided on local counts, which Redis then lacks.)
        more = [(ca if i % 2 == 0 else cb).get("/other", key) for i in range(10)]
    if not any(degraded(r) for r in got):
        shared_admissions(more, 7)


def test_overrides_reach_every_instance_on_a_cluster(start_server, tmp_path):
    """On a Redis Cluster: the overrides' hash lives on its slot's primary, and a PUBLISH on
    one node reaches subscribers on every node."""
    cluster = RedisCluster(tmp_path / "cluster")
    try:
        cluster.start()
        a, b = two_following_overrides(start_server, tmp_path, cluster)
        store_up(a, b)
        assert a.call("POST", "/admin/overrides", headers=AUTH,
                      body=json.dumps({"key": "carol", "limit": 5, "ttl_s": 120})).status == 200
        assert wait_until(lambda: any(o["key"] == "carol" for o in
                                      b.get("/admin/overrides", AUTH).json()["overrides"]),
                          PROPAGATED_S, 0.01), b.log()
        assert b.get("/", {"X-API-Key": "carol"}).headers["x-ratelimit-limit"] == "5"
        assert b.call("DELETE", "/admin/overrides", headers=AUTH,
                      body=json.dumps({"key": "carol"})).status == 200
        assert wait_until(lambda: not any(o["key"] == "carol" for o in
                                          a.get("/admin/overrides", AUTH).json()["overrides"]),
                          PROPAGATED_S, 0.01), a.log()
        # The limits themselves are shared through the cluster too.
        with Client(a.port) as ca, Client(b.port) as cb:
            got = [(ca if i % 2 == 0 else cb).get("/", {"X-API-Key": "dave"}) for i in range(6)]
        shared_admissions(got, 2)
    finally:
        cluster.stop()


def test_partitioned_splits_the_limit_between_instances_while_redis_is_gone(start_server, redis,
                                                                            tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: api
            path: /
            limits:
              - {name: all, max: 20, window: 1m, per: global, failure_policy: partitioned}
        """)
    servers = [start_server("--partition-share", "1", rules=rules, redis=redis) for _ in range(2)]
    for s in servers:
        store_up(s)
    assert wait_until(lambda: all(s.metric("ratewin_store_live_nodes") == 2 for s in servers))
    redis.kill()
    for s in servers:
        with Client(s.port) as c:
            got = [c.get("/", {"X-API-Key": "k"}) for _ in range(30)]
        admitted = [r for r in got if r.status == 200]
        # The request that found Redis gone was admitted on the whole limit (as local would);
        # from then on, this instance's half of it.
        assert 10 <= len(admitted) <= 11, got
        assert got[-1].status == 429 and got[-1].headers["x-ratelimit-limit"] == "10", got[-1]
        assert got[-1].headers["x-ratelimit-policy"] == "degraded"
