"""Envoy's rate limit service (gRPC, --grpc-listen) end to end, through a gRPC client
written here (Debian's python3-grpcio, and the messages protoc made from
cmd/server/rls/proto): envoyproxy/ratelimit's configuration read unchanged, the
protocol's semantics in local mode and against a private Redis, two servers sharing one
limit exactly, rejections that send nothing to Redis, hot reload, bad files refused at
start, and health checks."""

from __future__ import annotations

import pathlib
import signal
import subprocess
import time

import pytest

from ratewin_testkit import PATIENCE, RedisCluster, store_up, wait_until

from rls_messages import grpc, rls_pb2  # (skips this module in a build without gRPC)

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
Unit = rls_pb2.RateLimitResponse.RateLimit

CONFIG = """\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: generic_key
    value: login
    rate_limit: {unit: hour, requests_per_unit: 2, name: login}
  - key: generic_key
    value: search*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: second, requests_per_unit: 1}
"""


class Rls:
    """A gRPC client of one server: ShouldRateLimit and grpc.health.v1.Health/Check."""

    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self._call = self.channel.unary_unary(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString)
        # (grpc.health.v1 by hand: HealthCheckRequest{service=1}, HealthCheckResponse{status=1}.)
        self._health = self.channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda name: (b"\n" + bytes([len(name)]) + name.encode()) if name else b"",
            response_deserializer=lambda data: data[1] if len(data) >= 2 and data[0] == 0x08 else 0)

    def ask(self, domain: str, *descriptors, hits: int = 0, timeout: float = PATIENCE):
        request = rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits)
        for d in descriptors:
            entries, extra = (d, {}) if isinstance(d, list) else (d[0], d[1])
            descriptor = request.descriptors.add()
            for key, value in entries:
                entry = descriptor.entries.add()
                entry.key, entry.value = key, value
            if "limit" in extra:
                descriptor.limit.requests_per_unit, descriptor.limit.unit = extra["limit"]
            if "hits" in extra:
                descriptor.hits_addend.value = extra["hits"]
        return self._call(request, timeout=timeout)

    def health(self, service: str = "") -> int:
        return self._health(service, timeout=PATIENCE)

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def rls_server(start_server, tmp_path):
    """rls_server(*flags, config=text, redis=RedisServer) -> (ServerProcess, Rls, folder)."""
    clients: list[Rls] = []

    def start(*flags: str, config: str = CONFIG, redis=None, folder: pathlib.Path | None = None):
        if folder is None:
            folder = tmp_path / f"rls-{len(clients)}"
            folder.mkdir()
            (folder / "config.yaml").write_text(config)
        server = start_server("--grpc-listen", "127.0.0.1:0", "--rls-config", str(folder), *flags,
                              redis=redis)
        client = Rls(server.grpc_port)
        clients.append(client)
        return server, client, folder

    try:
        yield start
    finally:
        for c in clients:
            c.close()


def codes(response) -> list[int]:
    return [s.code for s in response.statuses]


def test_statuses_and_overall_code_in_local_mode(rls_server):
    server, rls, _ = rls_server("--rls-headers", "draft")
    assert "local-only" in server.banner
    answers = [rls.ask("edge", [("remote_address", "10.0.0.1")]) for _ in range(4)]
    assert [a.overall_code for a in answers] == [OK, OK, OK, OVER]
    assert [a.statuses[0].limit_remaining for a in answers] == [2, 1, 0, 0]
    first = answers[0].statuses[0]
    assert first.current_limit.requests_per_unit == 3 and first.current_limit.unit == Unit.MINUTE
    assert 0 < first.duration_until_reset.seconds <= 66
    headers = {h.key: h.value for h in answers[3].response_headers_to_add}
    assert headers["RateLimit-Limit"] == "3" and headers["RateLimit-Remaining"] == "0"
    assert int(headers["Retry-After"]) >= 1
    # Another address has its own counter; a wildcard matches by prefix; names are sent.
    assert rls.ask("edge", [("remote_address", "10.0.0.2")]).overall_code == OK
    assert rls.ask("edge", [("generic_key", "search-v2")]).statuses[0].current_limit.unit == Unit.MINUTE
    assert rls.ask("edge", [("generic_key", "login")]).statuses[0].current_limit.name == "login"
    # Nested: the limit of the last entry's node.
    nested = [rls.ask("edge", [("tenant", "t1"), ("plan", "free")]) for _ in range(2)]
    assert [a.overall_code for a in nested] == [OK, OVER]


def test_unknown_domains_and_descriptors_are_ok_and_bad_requests_invalid(rls_server):
    _, rls, _ = rls_server()
    unknown = rls.ask("nobody", [("remote_address", "x")])
    assert unknown.overall_code == OK and not unknown.statuses[0].HasField("current_limit")
    no_limit = rls.ask("edge", [("user", "x")])
    assert no_limit.overall_code == OK and len(no_limit.statuses) == 1
    for domain, descriptors in (("", [[("remote_address", "x")]]), ("edge", [])):
        with pytest.raises(grpc.RpcError) as e:
            rls.ask(domain, *descriptors)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_hits_addend_overrides_and_several_descriptors(rls_server):
    _, rls, _ = rls_server()
    # The request's hits_addend, and a descriptor's own (0 asks without counting).
    assert rls.ask("edge", [("remote_address", "a")], hits=2).statuses[0].limit_remaining == 1
    peek = rls.ask("edge", ([("remote_address", "a")], {"hits": 0}), hits=3)
    assert peek.overall_code == OK and peek.statuses[0].limit_remaining == 1
    # A limit override from Envoy: a dynamic limit, counted by its entries.
    dynamic = [rls.ask("edge", ([("anything", "v")], {"limit": (2, Unit.HOUR)})) for _ in range(3)]
    assert [d.overall_code for d in dynamic] == [OK, OK, OVER]
    assert dynamic[0].statuses[0].current_limit.requests_per_unit == 2
    # All or nothing: the address (1 left) is not counted when the login limit refuses.
    rls.ask("edge", [("generic_key", "login")], hits=2)
    both = rls.ask("edge", [("remote_address", "a")], [("generic_key", "login")])
    assert both.overall_code == OVER and codes(both)[1] == OVER
    assert rls.ask("edge", [("remote_address", "a")]).statuses[0].limit_remaining == 0


def test_each_descriptor_counts_on_its_own_with_the_flag(rls_server):
    _, rls, _ = rls_server("--rls-descriptors", "each")
    rls.ask("edge", [("generic_key", "login")], hits=2)
    both = rls.ask("edge", [("remote_address", "a")], [("generic_key", "login")])
    assert codes(both) == [OK, OVER] and both.overall_code == OVER
    assert both.statuses[0].limit_remaining == 2  # counted all the same


@pytest.mark.parametrize("store", ["local", "redis"])
@pytest.mark.parametrize("mode", ["all", "each"])
def test_a_refused_call_answers_each_descriptor_on_its_own(rls_server, request, mode, store):
    config = """\
domain: d
descriptors:
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
"""
    redis = request.getfixturevalue("redis") if store == "redis" else None
    server, rls, _ = rls_server("--listen", "127.0.0.1:0", "--rls-descriptors", mode,
                                config=config, redis=redis)
    if redis is not None:
        store_up(server)
    assert rls.ask("d", [("ten", "x")], hits=3).overall_code == OK
    assert rls.ask("d", [("one", "x")]).overall_code == OK
    # Only the descriptor over its limit is OVER_LIMIT; the other is OK with what it has
    # left (all or nothing counted nothing of the refused call: 7 of 10; each counted it)
    # and when its window empties, whichever comes first.
    for over_first in (True, False):
        pair = [[("one", "x")], [("ten", "x")]]
        r = rls.ask("d", *(pair if over_first else pair[::-1]))
        over, within = (r.statuses[0], r.statuses[1]) if over_first else (r.statuses[1], r.statuses[0])
        assert r.overall_code == OVER
        assert over.code == OVER and over.limit_remaining == 0
        assert within.code == OK and within.current_limit.requests_per_unit == 10
        assert within.limit_remaining == (7 if mode == "all" else (6 if over_first else 5))
        assert 0 < within.duration_until_reset.seconds <= 66
    # Counted as within its limit, not over it.
    def hits(name: str, key: str) -> float | None:
        return server.metric(f'ratewin_rls_{name}_total{{domain="d",key="d.{key}"}}')
    assert hits("within_limit", "ten") == 5 and hits("over_limit", "ten") == 0
    assert hits("over_limit", "one") == 2


def test_two_servers_share_one_redis_limit_exactly(rls_server, redis):
    config = """\
domain: shared
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 25}
"""
    a, rls_a, folder = rls_server(config=config, redis=redis)
    b, rls_b, _ = rls_server(redis=redis, folder=folder)
    assert "Redis" in a.banner and "Redis" in b.banner
    store_up(a, b)
    allowed = 0
    for i in range(60):
        client = rls_a if i % 2 == 0 else rls_b
        allowed += client.ask("shared", [("api_key", "k1")]).overall_code == OK
    assert allowed == 25


def test_a_redis_cluster_serves_as_one_redis(rls_server, tmp_path):
    """--redis takes the same URLs for gRPC calls: keys spread over a cluster's slots."""
    cluster = RedisCluster(tmp_path / "cluster")
    try:
        cluster.start()
        server, rls, _ = rls_server(config="""\
domain: c
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
""", redis=cluster)
        store_up(server)
        for user in ("alice", "bob", "carol", "dave"):
            answers = [rls.ask("c", [("user", user)]).overall_code for _ in range(4)]
            assert answers == [OK, OK, OK, OVER], user
    finally:
        cluster.stop()


def redis_calls(redis) -> dict[str, int]:
    """Calls of each command Redis has run (INFO commandstats), but INFO's own."""
    calls = {}
    for line in redis.command("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_") and not line.startswith("cmdstat_info:"):
            name, rest = line[len("cmdstat_"):].split(":", 1)
            calls[name] = int(rest.split("calls=")[1].split(",")[0])
    return calls


# The commands that write a count (a window's BITFIELD and change-set APPEND, or a
# script's EVALSHA for the other algorithms).
WRITES = ("bitfield", "append", "evalsha", "eval", "fcall")


def test_rejections_send_nothing_to_redis(rls_server, redis):
    config = """\
domain: d
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
"""
    server, rls, _ = rls_server(config=config, redis=redis)
    store_up(server)
    assert [rls.ask("d", [("k", "v")]).overall_code for _ in range(5)] == [OK] * 5
    before = redis_calls(redis)
    assert sum(before.get(w, 0) for w in WRITES) >= 5  # the admissions wrote
    for _ in range(200):
        assert rls.ask("d", [("k", "v")]).overall_code == OVER
    after = redis_calls(redis)
    assert sum(after.get(w, 0) for w in WRITES) == sum(before.get(w, 0) for w in WRITES)
    # Whatever else ran (a heartbeat, a clock reading) ran on its own timer, not per call.
    assert sum(after.values()) - sum(before.values()) < 20, (before, after)


def test_hot_reload_and_a_bad_edit_keeps_the_last_good_config(rls_server):
    server, rls, folder = rls_server()
    assert rls.ask("edge", [("user", "u")]).overall_code == OK
    (folder / "config.yaml").write_text(CONFIG + """\
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
""")
    assert wait_until(lambda: rls.ask("edge", [("user", "u2")]).statuses[0].HasField("current_limit"))
    (folder / "config.yaml").write_text(CONFIG + "  - key: user\n    rate_limit: {unit: fortnight}\n")
    server.signal(signal.SIGHUP)
    assert wait_until(lambda: "fortnight" in server.log())
    assert "config.yaml:" in server.log()
    # The last good configuration still serves: user's limit of 1.
    assert [rls.ask("edge", [("user", "u3")]).overall_code for _ in range(2)] == [OK, OVER]
    assert server.metric('ratewin_rls_config_error') == 1
    # A second file adds a domain.
    (folder / "other.yaml").write_text("domain: other\ndescriptors:\n  - key: k\n"
                                       "    rate_limit: {unit: second, requests_per_unit: 1}\n")
    (folder / "config.yaml").write_text(CONFIG)
    assert wait_until(lambda: rls.ask("other", [("k", "v")]).statuses[0].HasField("current_limit"))


@pytest.mark.parametrize("text, problem", [
    ("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
     "config.yaml:4:"),
    ("domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n", "unknown field"),
    ("descriptors: []\n", "empty domain"),
])
def test_bad_config_is_refused_at_start(server_binary, tmp_path, text, problem):
    (tmp_path / "config.yaml").write_text(text)
    done = subprocess.run([server_binary, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                           "--rls-config", str(tmp_path)], capture_output=True, timeout=PATIENCE)
    assert done.returncode != 0
    assert problem in done.stderr.decode(), done.stderr.decode()


def test_duplicate_domains_across_files_are_refused(server_binary, tmp_path):
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text("domain: same\n")
    done = subprocess.run([server_binary, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                           "--rls-config", str(tmp_path)], capture_output=True, timeout=PATIENCE)
    assert done.returncode != 0
    assert "duplicate domain \"same\"" in done.stderr.decode()


def test_health_checks_and_metrics(rls_server):
    server, rls, _ = rls_server("--listen", "127.0.0.1:0")
    SERVING, NOT_SERVING = 1, 2
    assert rls.health() == SERVING
    assert rls.health("envoy.service.ratelimit.v3.RateLimitService") == SERVING
    with pytest.raises(grpc.RpcError) as e:
        rls.health("no.such.Service")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    for _ in range(4):
        rls.ask("edge", [("remote_address", "m")])
    assert server.metric('ratewin_rls_total_hits_total{domain="edge",key="edge.remote_address"}') == 4
    assert server.metric('ratewin_rls_over_limit_total{domain="edge",key="edge.remote_address"}') == 1
    # Draining: health turns NOT_SERVING (or the listener is gone) and the server exits.
    server.signal(signal.SIGTERM)
    deadline = time.monotonic() + PATIENCE
    status = SERVING
    while time.monotonic() < deadline and status == SERVING:
        try:
            status = rls.health()
        except grpc.RpcError:
            status = NOT_SERVING
    assert status == NOT_SERVING
    assert server.wait(PATIENCE) == 0


def test_grpc_port_in_use_is_refused(rls_server, server_binary, tmp_path):
    server, _, folder = rls_server()
    done = subprocess.run([server_binary, "--listen", "127.0.0.1:0",
                           "--grpc-listen", f"127.0.0.1:{server.grpc_port}", "--rls-config", str(folder)],
                          capture_output=True, timeout=PATIENCE)
    assert done.returncode != 0
    assert "--grpc-listen" in done.stderr.decode()


def test_grpc_only(server_binary, tmp_path):
    (tmp_path / "c.yaml").write_text(CONFIG)
    process = subprocess.Popen([server_binary, "--listen", "none", "--grpc-listen", "127.0.0.1:0",
                                "--rls-config", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = process.stdout.readline().decode()
        assert line.startswith("ratewin-server gRPC listening on 127.0.0.1:"), line
        port = int(line.split(":")[1].split()[0])
        rls = Rls(port)
        assert rls.ask("edge", [("remote_address", "x")]).overall_code == OK
        rls.close()
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(PATIENCE) == 0
