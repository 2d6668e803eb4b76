"""The gRPC listener (--grpc-listen) as a transport, end to end: it is served by the
server's own HTTP/2 loops, so its connections count against --max-connections-per-address
with HTTP's, a connection that never sends a whole request is closed after
--request-timeout-ms, and a hostile client holds nothing for long; gRPC's own rules as
grpcio speaks them (unknown methods, compression, message bounds, deadlines, cancellation,
a Unix socket, grpc.health.v1.Health/Watch's stream through timeouts and the drain). The RLS
semantics are test_rls.py's; the bounds of a call (descriptors, units, UTF-8) and of the
configuration's folder are here too."""

from __future__ import annotations

import json
import signal
import socket
import subprocess

import pytest

from ratewin_testkit import PATIENCE, metric_value, request, store_up, wait_until

from rls_messages import (CONFIG, grpc, health_pb2, health_pb2_grpc,  # (skips in a build
                          rls_pb2)  # without gRPC)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


@pytest.fixture
def grpc_server(start_server, tmp_path):
    def start(*flags: str):
        folder = tmp_path / "rls"
        folder.mkdir(exist_ok=True)
        (folder / "config.yaml").write_text(CONFIG)
        return start_server("--grpc-listen", "127.0.0.1:0", "--rls-config", str(folder), *flags)
    return start


def rls_stub(channel):
    return channel.unary_unary(METHOD,
                               request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                               response_deserializer=rls_pb2.RateLimitResponse.FromString)


def rls_request(value: str):
    r = rls_pb2.RateLimitRequest(domain="edge")
    e = r.descriptors.add().entries.add()
    e.key, e.value = "remote_address", value
    return r


def call(port: int, value: str = "1.2.3.4", timeout: float = PATIENCE, **channel_options):
    with grpc.insecure_channel(f"127.0.0.1:{port}", **channel_options) as channel:
        return rls_stub(channel)(rls_request(value), timeout=timeout)


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """Reads until the server closes (True) or `timeout` passes (False)."""
    sock.settimeout(timeout)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_grpc_connections_count_against_the_per_address_bound(grpc_server):
    server = grpc_server("--max-connections-per-address", "4")
    held = []
    try:
        # Six from 127.0.0.2, each greeting and then silent: four are held, two closed.
        for _ in range(6):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", server.grpc_port))
            s.sendall(PREFACE)
            held.append(s)
        # The two over the bound are closed at once; the four held stay open (their
        # request timeout is 10 s away).
        def closed_now(s: socket.socket) -> bool:
            s.setblocking(False)
            try:
                while s.recv(65536):
                    pass
                return True
            except BlockingIOError:
                return False
            except ConnectionResetError:
                return True
        wait_until(lambda: sum(closed_now(s) for s in held) == 2)
        assert sum(closed_now(s) for s in held) == 2
        # The HTTP port's bound is the same one: 127.0.0.2 has no slot left there either.
        h = socket.socket()
        h.bind(("127.0.0.2", 0))
        h.connect(("127.0.0.1", server.port))
        assert closed_by_server(h, PATIENCE)
        h.close()
        # Another address is served on both ports.
        assert call(server.grpc_port).overall_code == rls_pb2.RateLimitResponse.OK
        assert request(server.port, "GET", "/healthz").status == 200
    finally:
        for s in held:
            s.close()


def test_a_connection_that_never_sends_a_whole_call_is_closed(grpc_server):
    server = grpc_server("--request-timeout-ms", "300")
    s = socket.create_connection(("127.0.0.1", server.grpc_port))
    try:
        s.sendall(PREFACE)
        assert closed_by_server(s, PATIENCE)
    finally:
        s.close()
    metrics = request(server.port, "GET", "/metrics").body.decode()
    assert metric_value(metrics, 'ratewin_server_connections_total{outcome="timed_out"}') == 1
    assert metric_value(metrics, 'ratewin_server_connections_total{outcome="accepted"}') >= 1


def test_unknown_methods_and_compressed_calls_are_unimplemented(grpc_server):
    server = grpc_server()
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        unknown = channel.unary_unary("/no.Such/Method")
        with pytest.raises(grpc.RpcError) as e:
            unknown(b"", timeout=PATIENCE)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as e:
        call(server.grpc_port, compression=grpc.Compression.Gzip)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # The connection and the server go on.
    assert call(server.grpc_port).overall_code == rls_pb2.RateLimitResponse.OK


def test_a_request_message_over_the_bound_is_resource_exhausted(grpc_server):
    server = grpc_server()
    with pytest.raises(grpc.RpcError) as e:
        call(server.grpc_port, value="x" * 200_000)
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert call(server.grpc_port).overall_code == rls_pb2.RateLimitResponse.OK


def test_many_calls_on_one_connection_in_flight_at_once(grpc_server):
    server = grpc_server("--threads", "1")
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = rls_stub(channel)
        futures = [stub.future(rls_request(f"10.0.0.{i % 7}"), timeout=PATIENCE)
                   for i in range(300)]
        codes = [f.result().overall_code for f in futures]
    assert codes == [rls_pb2.RateLimitResponse.OK] * 300


def raw_call(port: int, payload: bytes):
    """ShouldRateLimit with a request message given as bytes."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = channel.unary_unary(METHOD, request_serializer=lambda b: b,
                                   response_deserializer=rls_pb2.RateLimitResponse.FromString)
        return stub(payload, timeout=PATIENCE)


def test_hostile_calls_are_invalid_argument_and_logged_quietly(grpc_server):
    server = grpc_server()
    # Not UTF-8 where protobuf wants a string: refused, and protobuf's own log stays quiet.
    valid = rls_pb2.RateLimitRequest(domain="edge")
    e = valid.descriptors.add().entries.add()
    e.key, e.value = "remote_address", "AAAA"
    payload = valid.SerializeToString().replace(b"AAAA", b"\xff\xfe\xfd\xfc")
    for _ in range(50):
        with pytest.raises(grpc.RpcError) as error:
            raw_call(server.grpc_port, payload)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "UTF-8" not in server.log() and "String field" not in server.log()
    # A unit past the enum's last (257 would read as SECOND in 8 bits).
    r = rls_pb2.RateLimitRequest(domain="edge")
    d = r.descriptors.add()
    e = d.entries.add()
    e.key, e.value = "remote_address", "1.2.3.4"
    d.limit.requests_per_unit, d.limit.unit = 5, 257
    with pytest.raises(grpc.RpcError) as error:
        raw_call(server.grpc_port, r.SerializeToString())
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # More descriptors than --rls-max-descriptors (64).
    r = rls_pb2.RateLimitRequest(domain="edge")
    for i in range(65):
        e = r.descriptors.add().entries.add()
        e.key, e.value = "remote_address", str(i)
    with pytest.raises(grpc.RpcError) as error:
        raw_call(server.grpc_port, r.SerializeToString())
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 64 descriptors" in error.value.details()
    assert call(server.grpc_port).overall_code == rls_pb2.RateLimitResponse.OK


def test_an_rls_config_without_a_rate_limit_is_refused_unless_allowed(server_binary, start_server,
                                                                       tmp_path):
    (tmp_path / "edge.yaml").write_text("domain: edge\n")
    done = subprocess.run([server_binary, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                           "--rls-config", str(tmp_path)], capture_output=True, timeout=PATIENCE)
    assert done.returncode != 0
    assert "defines no rate limit" in done.stderr.decode()
    server = start_server("--grpc-listen", "127.0.0.1:0", "--rls-config", str(tmp_path),
                          "--allow-empty-rls-config")
    assert call(server.grpc_port).overall_code == rls_pb2.RateLimitResponse.OK


def test_healthz_and_the_status_json_show_the_rls_config_and_its_last_error(grpc_server,
                                                                           tmp_path):
    server = grpc_server("--admin-token", "t0ken")
    health = json.loads(request(server.port, "GET", "/healthz").body)
    assert health["rls"]["version"].startswith("rls@") and health["rls"]["last_error"] == ""
    assert health["rls"]["rate_limits"] == 1
    (tmp_path / "rls" / "config.yaml").write_text("domain: edge\n")  # no rate limit: refused
    server.signal(signal.SIGHUP)
    assert wait_until(lambda: json.loads(
        request(server.port, "GET", "/healthz").body)["rls"]["last_error"])
    after = json.loads(request(server.port, "GET", "/healthz").body)["rls"]
    assert after["version"] == health["rls"]["version"]
    assert "defines no rate limit" in after["last_error"]
    status = json.loads(request(server.port, "GET", "/status.json",
                                headers={"Authorization": "Bearer t0ken"}).body)
    assert status["rls"] == after


def test_a_deadline_and_a_cancel_while_the_answer_waits_on_redis(start_server, redis, tmp_path):
    folder = tmp_path / "rls"
    folder.mkdir()
    (folder / "config.yaml").write_text(CONFIG)
    server = start_server("--grpc-listen", "127.0.0.1:0", "--rls-config", str(folder),
                          redis=redis)
    store_up(server)
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = rls_stub(channel)
        r = rls_request("1.2.3.4")
        assert stub(r, timeout=PATIENCE).overall_code == rls_pb2.RateLimitResponse.OK
        # With Redis stopped, an admission's answer waits for its write (up to the
        # engine's 100 ms command timeout): a 50 ms deadline passes first, and a call
        # cancelled at once is gone before its answer comes.
        redis.pause()
        try:
            late = stub.future(r, timeout=0.05)
            gone = stub.future(r, timeout=PATIENCE)
            assert gone.cancel()
            assert late.exception(timeout=PATIENCE).code() == grpc.StatusCode.DEADLINE_EXCEEDED
        finally:
            redis.resume()
        # The connection goes on: the answers owed to both were dropped or cut, not sent
        # into a closed stream.
        assert stub(r, timeout=PATIENCE).overall_code == rls_pb2.RateLimitResponse.OK
    assert server.alive()


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") +
            payload)


def h2_literal(name: str, value: str) -> bytes:
    """An HPACK field without indexing, its name new (both under 127 bytes)."""
    return bytes([0, len(name)]) + name.encode() + bytes([len(value)]) + value.encode()


def test_a_short_deadline_while_a_write_is_queued_does_not_close_the_connection(
        start_server, redis, tmp_path):
    """A call's own grpc-timeout that passes while part of the connection's output waits
    for the socket (the client reads slowly: not yet) answers DEADLINE_EXCEEDED behind it,
    and the connection goes on. It was closed as a slow reader: the timer's firing with a
    write in flight was taken for the wait for the client to take its writes."""
    folder = tmp_path / "rls"
    folder.mkdir()
    (folder / "config.yaml").write_text(CONFIG)
    # (A Unix socket: its buffer is the size it is, where TCP's grows and would take the
    # writes waiting.)
    path = tmp_path / "rls.sock"
    server = start_server("--grpc-listen", f"unix:{path}", "--rls-config", str(folder),
                          redis=redis)
    store_up(server)

    def figure(name: str) -> float:
        return metric_value(request(server.port, "GET", "/metrics").body.decode(), name) or 0

    buffered = "ratewin_server_connection_buffer_bytes"
    timed_out = 'ratewin_server_connections_total{outcome="timed_out"}'
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(path))
    s.settimeout(PATIENCE)
    received = b""

    def frames():
        data = received
        while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
            size = int.from_bytes(data[:3], "big")
            yield data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF, data[9:9 + size]
            data = data[9 + size:]

    def read_until(found) -> None:
        nonlocal received
        while not any(found(*f) for f in frames()):
            chunk = s.recv(65536)
            assert chunk, "the server closed the connection"
            received += chunk

    def raw_call(stream: int, timeout: str) -> bytes:
        block = b"".join(h2_literal(n, v) for n, v in (
            (":method", "POST"), (":scheme", "http"), (":path", METHOD), (":authority", "t"),
            ("content-type", "application/grpc"), ("te", "trailers"), ("grpc-timeout", timeout)))
        message = rls_request("5.6.7.8").SerializeToString()
        return h2_frame(1, 4, stream, block) + h2_frame(
            0, 1, stream, b"\0" + len(message).to_bytes(4, "big") + message)

    # The key's first call, answered (the connection's loop has its Redis connection).
    s.sendall(PREFACE + raw_call(1, "10S"))
    read_until(lambda kind, flags, stream, _: kind == 1 and flags & 1 and stream == 1)
    # PINGs whose answers this client does not read. A first burst grows the session's
    # output buffer to the most one read makes (16 KiB); then batches of 20 (340 bytes of
    # answers), until the socket holds no more and one batch's answers wait in a write of
    # their own, counted as the connection's: a little queued, under the 16 KiB after
    # which the server would stop reading this client.
    s.sendall(h2_frame(6, 0, 0, b"12345678") * 1200)
    ping = h2_frame(6, 0, 0, b"12345678") * 20
    counted = [figure(buffered)]
    for _ in range(20000):
        s.sendall(ping)
        counted.append(figure(buffered))
        if len(counted) >= 4 and all(b - a >= 300 for a, b in zip(counted[-4:], counted[-3:])):
            break  # (three batches in a row queued: not another connection's passing bytes)
    else:
        pytest.fail("no write was ever queued")
    redis.pause()  # (the admission's write waits: its answer is owed past the deadline)
    try:
        s.sendall(raw_call(3, "20m"))
        # The 20 ms deadline passes: the old code closed the connection then, and counted
        # it timed out. (Waiting 100 times as long can only weaken the check on a slow
        # machine: a deadline that passes after the client reads is the ordinary case.)
        wait_until(lambda: figure(timed_out) > 0, timeout=2.0)
        assert figure(timed_out) == 0
    finally:
        redis.resume()
    # Read it all: the PING answers, the call's trailers-only answer (HEADERS with
    # END_STREAM on stream 3), then a new PING answered: the connection goes on.
    read_until(lambda kind, flags, stream, _: kind == 1 and flags & 1 and stream == 3)
    s.sendall(h2_frame(6, 0, 0, b"87654321"))
    read_until(lambda kind, flags, _, payload: kind == 6 and flags & 1 and payload == b"87654321")
    s.close()
    assert figure(timed_out) == 0


def test_a_unix_socket_listener(start_server, server_binary, tmp_path):
    """--grpc-listen unix:PATH (the reference's GRPC_UDS): served by every loop, a stale
    socket file replaced, a live one refused, the file removed at exit."""
    folder = tmp_path / "rls"
    folder.mkdir()
    (folder / "config.yaml").write_text(CONFIG)
    path = tmp_path / "rls.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # bound, never listening: what a killed server leaves
    stale.close()
    server = start_server("--grpc-listen", f"unix:{path}", "--rls-config", str(folder))
    with grpc.insecure_channel(f"unix:{path}") as channel:
        stub = rls_stub(channel)
        r = rls_request("1.2.3.4")
        futures = [stub.future(r, timeout=PATIENCE) for _ in range(20)]
        assert [f.result().overall_code for f in futures] == [rls_pb2.RateLimitResponse.OK] * 20
    # A second server on the same path is refused while the first listens.
    second = subprocess.run([server_binary, "--listen", "127.0.0.1:0", "--grpc-listen",
                             f"unix:{path}", "--rls-config", str(folder)],
                            capture_output=True, timeout=PATIENCE)
    assert second.returncode != 0
    assert "another process listens there" in second.stderr.decode()
    server.signal(signal.SIGTERM)
    assert server.wait(PATIENCE) == 0
    assert not path.exists()


def test_health_watch_stays_open_through_the_timeouts_and_ends_at_the_drain(grpc_server):
    """grpc.health.v1.Health/Watch: the status at once, the stream kept open (the request
    and idle timeouts do not cut it), NOT_SERVING when the server drains and then the end,
    UNAVAILABLE (the server going away: reconnect elsewhere), so the server exits at once
    rather than at its drain timeout (ten times the wait here)."""
    server = grpc_server("--request-timeout-ms", "300", "--idle-timeout-ms", "300",
                         "--drain-timeout-ms", str(int(10 * PATIENCE * 1000)))
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        assert stub.Check(health_pb2.HealthCheckRequest(), timeout=PATIENCE).status == serving
        whole = stub.Watch(health_pb2.HealthCheckRequest(), timeout=PATIENCE)
        rls = stub.Watch(health_pb2.HealthCheckRequest(service="ratelimit"), timeout=PATIENCE)
        unknown = stub.Watch(health_pb2.HealthCheckRequest(service="no.Such"), timeout=PATIENCE)
        assert next(whole).status == serving
        assert next(rls).status == serving
        assert next(unknown).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
        # A connection made after the watches, greeting and then silent, is closed by the
        # request timeout: by then the watches' connection has been past both timeouts.
        # (Late timers only make this check less, never fail it.)
        late = socket.create_connection(("127.0.0.1", server.grpc_port))
        try:
            late.sendall(PREFACE)
            assert closed_by_server(late, PATIENCE)
        finally:
            late.close()
        server.signal(signal.SIGTERM)
        for watch in (whole, rls):
            assert next(watch).status == not_serving
        for watch in (whole, rls, unknown):  # (an unknown service's status does not change)
            with pytest.raises(grpc.RpcError) as error:
                next(watch)
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "shutting down" in error.value.details()
        assert server.wait(PATIENCE) == 0
