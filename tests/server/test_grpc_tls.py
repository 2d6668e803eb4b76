"""TLS on the gRPC listener (--grpc-tls-cert-file, --grpc-tls-key-file,
--grpc-tls-client-ca-file, --grpc-tls-min-version), end to end through grpcio and
Python's ssl module: calls and health over TLS and mutual TLS, on a port and on a Unix
socket; clients that must be refused (plain text, an unknown CA, no client certificate,
no h2 in ALPN, a handshake never finished); certificate files read again when they
change, a broken change logged and the files loaded before kept; flags that do not go
together. The certificates are tests/support/make_certs.sh's."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess

import pytest

from ratewin_testkit import PATIENCE, SERVER, wait_until

from rls_messages import (CONFIG, grpc, health_pb2, health_pb2_grpc,  # (skips in a build
                          rls_pb2)  # without gRPC)

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH = "/grpc.health.v1.Health/Check"
SERVING = b"\x08\x01"  # HealthCheckResponse{status: SERVING}


@pytest.fixture
def tls_files(certificates, tmp_path):
    """The server's certificate and key, copied where a test may replace them."""
    folder = tmp_path / "tls"
    folder.mkdir()
    for name in ("server.crt", "server.key"):
        shutil.copy(certificates[name], folder / name)
    return folder


@pytest.fixture
def tls_server(start_server, tmp_path, tls_files):
    def start(*flags: str, listen: str = "127.0.0.1:0"):
        folder = tmp_path / "rls"
        folder.mkdir(exist_ok=True)
        (folder / "config.yaml").write_text(CONFIG)
        return start_server("--grpc-listen", listen, "--rls-config", str(folder),
                            "--grpc-tls-cert-file", str(tls_files / "server.crt"),
                            "--grpc-tls-key-file", str(tls_files / "server.key"), *flags)
    return start


def credentials(certificates, ca: str = "ca.crt", client: str | None = None):
    with open(certificates[ca], "rb") as f:
        root = f.read()
    if client is None:
        return grpc.ssl_channel_credentials(root_certificates=root)
    with open(certificates[f"{client}.key"], "rb") as k, open(certificates[f"{client}.crt"],
                                                              "rb") as c:
        return grpc.ssl_channel_credentials(root_certificates=root, private_key=k.read(),
                                            certificate_chain=c.read())


def rls_request(value: str = "1.2.3.4"):
    r = rls_pb2.RateLimitRequest(domain="edge")
    e = r.descriptors.add().entries.add()
    e.key, e.value = "remote_address", value
    return r


def secure_call(target: str, creds, timeout: float = PATIENCE, **options):
    """One ShouldRateLimit and one Health/Check over a new TLS channel: their answers."""
    with grpc.secure_channel(target, creds, options=list(options.items())) as channel:
        rls = channel.unary_unary(METHOD,
                                  request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                                  response_deserializer=rls_pb2.RateLimitResponse.FromString)
        answer = rls(rls_request(), timeout=timeout)
        health = channel.unary_unary(HEALTH)(b"", timeout=timeout)
        return answer, health


def refused(target: str, creds, **options) -> grpc.StatusCode:
    """The status of a call the handshake must refuse (never an answer)."""
    with pytest.raises(grpc.RpcError) as failure:
        secure_call(target, creds, **options)
    return failure.value.code()


def handshake(port: int, certificates, alpn: list[str] | None = None,
              client: str | None = None, version=None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=certificates["ca.crt"])
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    if client is not None:
        context.load_cert_chain(certificates[f"{client}.crt"], certificates[f"{client}.key"])
    if version is not None:
        context.maximum_version = version
    raw = socket.create_connection(("127.0.0.1", port), timeout=PATIENCE)
    return context.wrap_socket(raw, server_hostname="localhost")


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, ssl.SSLError):
        return True
    except socket.timeout:
        return False


PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") +
            payload)


def call_block() -> bytes:
    """A ShouldRateLimit call's headers, each an HPACK literal without indexing."""
    return b"".join(bytes([0, len(n)]) + n.encode() + bytes([len(v)]) + v.encode() for n, v in (
        (":method", "POST"), (":scheme", "https"), (":path", METHOD), (":authority", "t"),
        ("content-type", "application/grpc"), ("te", "trailers")))


def frames(data: bytes) -> list[tuple[int, int, int]]:
    """The (type, flags, stream) of each whole HTTP/2 frame in `data`."""
    out = []
    while len(data) >= 9 and len(data) >= 9 + int.from_bytes(data[:3], "big"):
        size = int.from_bytes(data[:3], "big")
        out.append((data[3], data[4], int.from_bytes(data[5:9], "big") & 0x7FFFFFFF))
        data = data[9 + size:]
    return out


def frame_types(data: bytes) -> list[int]:
    """The types of the HTTP/2 frames in `data` (a server's bytes, whole frames)."""
    return [kind for kind, _, _ in frames(data)]


def tls_metric(server, outcome: str, family: str = "handshakes") -> float:
    return server.metric(f'ratewin_server_grpc_tls_{family}_total{{outcome="{outcome}"}}') or 0


def test_calls_and_health_over_tls(tls_server, certificates):
    server = tls_server()
    target = f"127.0.0.1:{server.grpc_port}"
    answer, health = secure_call(target, credentials(certificates))
    assert answer.overall_code == rls_pb2.RateLimitResponse.OK
    assert health == SERVING
    # By its name too (the certificate is for 127.0.0.1 and localhost).
    answer, _ = secure_call(f"localhost:{server.grpc_port}", credentials(certificates))
    assert answer.overall_code == rls_pb2.RateLimitResponse.OK
    assert tls_metric(server, "ok") >= 2
    # A client that does not trust the server's CA is refused by its own check.
    assert refused(target, credentials(certificates, ca="other-ca.crt")) == \
        grpc.StatusCode.UNAVAILABLE
    # Plain text on the TLS port: the handshake fails and the connection is closed.
    with grpc.insecure_channel(target) as channel:
        with pytest.raises(grpc.RpcError) as plain:
            channel.unary_unary(HEALTH)(b"", timeout=PATIENCE)
        assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
    assert wait_until(lambda: tls_metric(server, "failed") >= 2)
    # The server served on: HTTP on its port, gRPC over TLS.
    assert server.get("/healthz").status == 200
    assert secure_call(target, credentials(certificates))[1] == SERVING


def test_alpn_h2_and_the_oldest_version(tls_server, certificates):
    server = tls_server("--grpc-tls-min-version", "1.3")
    with handshake(server.grpc_port, certificates, alpn=["http/1.1", "h2"]) as s:
        assert s.selected_alpn_protocol() == "h2"
        assert s.version() == "TLSv1.3"
    # A client that offers only HTTP/1.1 is refused (no_application_protocol).
    with pytest.raises(ssl.SSLError, match="NO_APPLICATION_PROTOCOL|no application protocol"):
        handshake(server.grpc_port, certificates, alpn=["http/1.1"]).close()
    # TLS 1.2 is under --grpc-tls-min-version 1.3.
    with pytest.raises(ssl.SSLError):
        handshake(server.grpc_port, certificates, version=ssl.TLSVersion.TLSv1_2).close()


def test_mutual_tls(tls_server, certificates):
    server = tls_server("--grpc-tls-client-ca-file", certificates["ca.crt"])
    assert "(mutual TLS, " in server.grpc_banner
    target = f"127.0.0.1:{server.grpc_port}"
    answer, health = secure_call(target, credentials(certificates, client="client"))
    assert answer.overall_code == rls_pb2.RateLimitResponse.OK and health == SERVING
    # No client certificate; one of a CA the server does not trust.
    assert refused(target, credentials(certificates)) == grpc.StatusCode.UNAVAILABLE
    assert refused(target, credentials(certificates, client="other")) == \
        grpc.StatusCode.UNAVAILABLE
    assert wait_until(lambda: tls_metric(server, "failed") >= 2)
    assert secure_call(target, credentials(certificates, client="client"))[1] == SERVING


def test_tls_on_a_unix_socket(tls_server, certificates, tmp_path):
    path = tmp_path / "rls.sock"
    server = tls_server(listen=f"unix:{path}")
    answer, health = secure_call(f"unix:{path}", credentials(certificates),
                                 **{"grpc.ssl_target_name_override": "localhost"})
    assert answer.overall_code == rls_pb2.RateLimitResponse.OK and health == SERVING
    assert server.stop() == 0


def test_records_cut_by_the_network_are_read_whole(tls_server, certificates):
    """A client whose records reach the server a few bytes at a time (each TCP write 7
    bytes), the handshake's and the call's: the server reads on until each record is whole
    and answers."""
    server = tls_server()
    context = ssl.create_default_context(cafile=certificates["ca.crt"])
    context.set_alpn_protocols(["h2"])
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    sock = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=PATIENCE)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send_in_pieces() -> None:
        data = outgoing.read()
        for i in range(0, len(data), 7):
            sock.sendall(data[i:i + 7])

    def receive() -> None:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        incoming.write(chunk)

    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            send_in_pieces()
            receive()
    send_in_pieces()
    message = rls_request().SerializeToString()
    tls.write(PREFACE + h2_frame(4, 0, 0) + h2_frame(1, 4, 1, call_block()) +
              h2_frame(0, 1, 1, b"\0" + len(message).to_bytes(4, "big") + message))
    send_in_pieces()
    plain = b""
    while not any(k == 1 and f & 1 and stream == 1 for k, f, stream in frames(plain)):
        receive()
        try:
            while True:
                plain += tls.read(65536)
        except ssl.SSLWantReadError:
            pass
        send_in_pieces()  # (the client's answers to the server's SETTINGS, tickets)
    assert 0 in [k for k, _, stream in frames(plain) if stream == 1], "no response message"
    sock.close()


def test_a_handshake_not_finished_in_time_is_closed(tls_server, certificates):
    server = tls_server("--request-timeout-ms", "300")
    silent = socket.create_connection(("127.0.0.1", server.grpc_port))
    # Half a ClientHello, then nothing: the request timeout covers the handshake.
    partial = socket.create_connection(("127.0.0.1", server.grpc_port))
    partial.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    assert closed_by_server(silent, PATIENCE) and closed_by_server(partial, PATIENCE)
    silent.close()
    partial.close()
    timed_out = 'ratewin_server_connections_total{outcome="timed_out"}'
    assert wait_until(lambda: (server.metric(timed_out) or 0) >= 2)
    assert secure_call(f"127.0.0.1:{server.grpc_port}", credentials(certificates))[1] == SERVING


def test_drain_over_tls(tls_server, certificates):
    server = tls_server()
    with handshake(server.grpc_port, certificates, alpn=["h2"]) as s:
        s.sendall(PREFACE + h2_frame(4, 0, 0))
        server.signal(signal.SIGTERM)
        # GOAWAY, then the end of the stream (close_notify): the server exits at once.
        received = b""
        s.settimeout(PATIENCE)
        while True:
            try:
                chunk = s.recv(65536)
            except ssl.SSLError:
                break
            if not chunk:
                break
            received += chunk
        assert 7 in frame_types(received), "no GOAWAY frame"
    assert server.wait(PATIENCE) == 0


def test_certificates_are_read_again_when_they_change(tls_server, certificates, tls_files):
    server = tls_server()
    target = f"127.0.0.1:{server.grpc_port}"
    assert secure_call(target, credentials(certificates))[1] == SERVING
    # Rotated: a certificate of another CA. New connections get it (the files are looked
    # at again at most every second, on a new connection).
    shutil.copy(certificates["other.key"], tls_files / "server.key.new")
    shutil.copy(certificates["other.crt"], tls_files / "server.crt.new")
    os.replace(tls_files / "server.key.new", tls_files / "server.key")
    os.replace(tls_files / "server.crt.new", tls_files / "server.crt")

    def rotated() -> bool:
        try:
            return secure_call(target, credentials(certificates, ca="other-ca.crt"),
                               timeout=5)[1] == SERVING
        except grpc.RpcError:
            return False
    assert wait_until(rotated)
    assert tls_metric(server, "ok", "reloads") == 1
    assert refused(target, credentials(certificates)) == grpc.StatusCode.UNAVAILABLE
    # A change that cannot be used (a key of another certificate) is logged, and the
    # files loaded before are kept.
    shutil.copy(certificates["server.key"], tls_files / "server.key")

    def reload_failed() -> bool:
        rotated()  # (a new connection: the files are looked at then)
        return tls_metric(server, "failed", "reloads") >= 1
    assert wait_until(reload_failed)
    assert "does not match the certificate" in server.log()
    assert rotated()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SERVER, *args], capture_output=True, text=True, timeout=PATIENCE,
                          stdin=subprocess.DEVNULL)


def test_flags_that_cannot_be_used(certificates, tmp_path):
    folder = tmp_path / "rls"
    folder.mkdir()
    (folder / "config.yaml").write_text(CONFIG)
    grpc_flags = ["--grpc-listen", "127.0.0.1:0", "--rls-config", str(folder)]
    r = run(*grpc_flags, "--grpc-tls-key-file", certificates["server.key"])
    assert r.returncode == 2 and "need --grpc-tls-cert-file" in r.stderr
    r = run("--grpc-tls-cert-file", certificates["server.crt"])
    assert r.returncode == 2 and "needs --grpc-listen" in r.stderr
    r = run(*grpc_flags, "--grpc-tls-cert-file", certificates["server.crt"],
            "--grpc-tls-min-version", "1.1")
    assert r.returncode == 2 and "1.2 or 1.3" in r.stderr
    r = run(*grpc_flags, "--grpc-tls-cert-file", str(tmp_path / "missing.crt"))
    assert r.returncode == 1 and "cannot load the certificate" in r.stderr
    r = run(*grpc_flags, "--grpc-tls-cert-file", certificates["server.crt"],
            "--grpc-tls-key-file", certificates["client.key"])
    assert r.returncode == 1 and "does not match the certificate" in r.stderr
    # `check` loads them as the server would (the unit's ExecStartPre runs it).
    r = run("check", "--rls-config", str(folder), "--grpc-tls-cert-file",
            certificates["server.crt"], "--grpc-tls-key-file", certificates["client.key"])
    assert r.returncode == 1 and "does not match the certificate" in r.stderr
    r = run("check", "--rls-config", str(folder), "--grpc-tls-cert-file",
            certificates["server.crt"], "--grpc-tls-key-file", certificates["server.key"],
            "--grpc-tls-client-ca-file", certificates["ca.crt"])
    assert r.returncode == 0, r.stderr


def test_health_watch_over_mutual_tls_ends_at_the_drain(tls_server, certificates):
    server = tls_server("--grpc-tls-client-ca-file", certificates["ca.crt"],
                        "--drain-timeout-ms", str(int(10 * PATIENCE * 1000)))
    target = f"127.0.0.1:{server.grpc_port}"
    with grpc.secure_channel(target, credentials(certificates, client="client")) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(),
                                                          timeout=PATIENCE)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        server.signal(signal.SIGTERM)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as end:
            next(watch)
        assert end.value.code() == grpc.StatusCode.UNAVAILABLE
    assert server.wait(PATIENCE) == 0
