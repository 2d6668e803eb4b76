"""TLS to Redis from Python (rediss://), against redis-servers these tests start with
certificates made by tests/support/make_certs.sh (the support kit)."""

from __future__ import annotations

import pathlib
import threading
import time

import pytest

import ratewin
from conftest import PATIENT
from ratewin_testkit import PATIENCE, RedisServer
from test_wsgi import call, hello
from ratewin.wsgi import RateLimitMiddleware


def test_engines_over_tls_count_together(tls_redis, certificates):
    limit = ratewin.Limit(10, per=3600)
    # The CA as an argument (a pathlib.Path), and as the URL's parameter.
    with ratewin.Engine(tls_redis.tls_url, tls_ca_file=pathlib.Path(certificates["ca.crt"]),
                        connect="require", **PATIENT) as a, \
            ratewin.Engine(f"{tls_redis.tls_url}?tls_ca_file={certificates['ca.crt']}",
                           connect="require", **PATIENT) as b:
        decisions = [(a if i % 2 else b).try_acquire("shared", limit) for i in range(30)]
        assert sum(1 for d in decisions if d) == 10
        assert not any(d.degraded for d in decisions)
        for engine in (a, b):
            stats = engine.stats()
            assert stats["store_available"] is True and stats["writes_ok"] >= 1
        assert a.redis == tls_redis.tls_url and tls_redis.tls_url in repr(a)
        assert "tls_ca_file" not in (b.redis or "")
    # The counts are in the server (read over its plain Unix socket).
    assert tls_redis.cli("KEYS", "ratewin:{*")


def test_tls_1_3_only_and_the_name_given(tls_redis, certificates):
    with ratewin.Engine(tls_redis.tls_url, tls_ca_file=certificates["ca.crt"],
                        tls_min_version="1.3", tls_server_name="localhost",
                        connect="require", **PATIENT) as engine:
        assert engine.try_acquire("x", ratewin.Limit(1, per=60)).degraded is False


@pytest.mark.parametrize("settings, words", [
    ({"tls_ca_file": "other-ca.crt"}, "certificate verify failed"),
    ({"tls_server_name": "redis.example.com"}, "host name mismatch"),
])
def test_a_certificate_that_does_not_pass_is_said_plainly(tls_redis, certificates, settings,
                                                          words):
    arguments = {"tls_ca_file": certificates["ca.crt"], **settings}
    if "tls_ca_file" in settings:
        arguments["tls_ca_file"] = certificates[settings["tls_ca_file"]]
    with pytest.raises(ratewin.StoreError, match=words):
        ratewin.Engine(tls_redis.tls_url, connect="require", **PATIENT, **arguments)
    # Lazily, the engine starts degraded and says the same.
    with ratewin.Engine(tls_redis.tls_url, **PATIENT, **arguments) as engine:
        assert engine.stats()["store_available"] is False
        assert words in engine.stats()["last_error"]
        assert engine.try_acquire("x", ratewin.Limit(1, per=60)).degraded is True


def test_verify_ca_accepts_a_certificate_for_another_name(tls_redis, certificates):
    with ratewin.Engine(tls_redis.tls_url, tls_ca_file=certificates["ca.crt"],
                        tls_server_name="redis.example.com", tls_verify="ca",
                        connect="require", **PATIENT) as engine:
        assert engine.try_acquire("x", ratewin.Limit(1, per=60)).degraded is False


def test_an_expired_certificate_is_said_plainly(tmp_path, certificates):
    server = RedisServer(tmp_path, unix=True, tls=certificates.server_args("expired"))
    server.start()
    try:
        with pytest.raises(ratewin.StoreError, match="expired"):
            ratewin.Engine(server.tls_url, tls_ca_file=certificates["ca.crt"],
                           connect="require", **PATIENT)
    finally:
        server.stop()


def test_the_wrong_scheme_for_the_port_fails_fast(tls_redis, certificates):
    # Plain RESP to the TLS port: refused at once (the server resets the connection), not
    # at the connect timeout, with a hint.
    started = time.monotonic()
    with pytest.raises(ratewin.StoreError, match="rediss://"):
        ratewin.Engine(f"redis://127.0.0.1:{tls_redis.tls_port}", connect="require",
                       connect_timeout=PATIENCE)
    assert time.monotonic() - started < PATIENCE / 2
    # TLS to the plain port (which never answers a TLS hello): at the connect timeout
    # given (not before it, nor at the default 0.5 s), and saying so.
    started = time.monotonic()
    with pytest.raises(ratewin.StoreError, match="TLS") as raised:
        ratewin.Engine(f"rediss://127.0.0.1:{tls_redis.port}", tls_ca_file=certificates["ca.crt"],
                       connect="require", connect_timeout=1)
    assert time.monotonic() - started >= 1 - 0.05
    assert "within 1000 ms" in str(raised.value), raised.value
    assert "redis://" in str(raised.value), raised.value


def test_mutual_tls(tmp_path, certificates):
    server = RedisServer(tmp_path, unix=True, tls=certificates.server_args(auth_clients=True))
    server.start()
    try:
        with ratewin.Engine(server.tls_url, tls_ca_file=certificates["ca.crt"],
                            tls_cert_file=certificates["client.crt"],
                            tls_key_file=certificates["client.key"],
                            connect="require", **PATIENT) as engine:
            assert engine.try_acquire("x", ratewin.Limit(1, per=60)).degraded is False
        with pytest.raises(ratewin.StoreError, match="certificate"):
            ratewin.Engine(server.tls_url, tls_ca_file=certificates["ca.crt"],
                           connect="require", **PATIENT)
    finally:
        server.stop()


def test_verify_none_works_and_warns_once(tls_redis, certificates):
    heard: list[tuple[str, str]] = []
    lock = threading.Lock()

    def logger(level: str, message: str) -> None:
        with lock:
            heard.append((level, message))

    # A CA that did not sign the server's certificate: not checked.
    with ratewin.Engine(tls_redis.tls_url, tls_ca_file=certificates["other-ca.crt"],
                        tls_verify="none", connect="require", max_connections=4,
                        logger=logger, **PATIENT) as engine:
        limit = ratewin.Limit(100, per=60)
        for _ in range(20):
            assert engine.try_acquire("x", limit).degraded is False
    with lock:
        warnings = [m for level, m in heard if level == "warning" and "verif" in m]
    assert len(warnings) == 1, heard
    assert "none" in warnings[0]


def test_bad_tls_settings_raise_value_error(tls_redis, certificates):
    url = tls_redis.tls_url
    with pytest.raises(ValueError, match="tls_verify"):
        ratewin.Engine(url, tls_verify="maybe")
    with pytest.raises(ValueError, match="tls_min_version"):
        ratewin.Engine(url, tls_min_version="1.1")
    with pytest.raises(ValueError, match="tls_verify"):
        ratewin.Engine(url + "?tls_verify=maybe")
    with pytest.raises(ValueError, match="TLS.*/nonexistent/ca.crt|/nonexistent/ca.crt.*TLS"):
        ratewin.Engine(url, tls_ca_file="/nonexistent/ca.crt")
    with pytest.raises(ValueError, match="TLS.*certificate|cert"):
        ratewin.Engine(url, tls_ca_file=certificates["ca.crt"],
                       tls_cert_file=certificates["ca.key"])
    # TLS settings for an address without TLS.
    with pytest.raises(ValueError, match="rediss"):
        ratewin.Engine(tls_redis.url, tls_ca_file=certificates["ca.crt"])
    with pytest.raises(TypeError, match="tls_ca_file"):
        ratewin.Engine(url, tls_ca_file=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tls_server_name"):
        ratewin.Engine(url, tls_server_name=b"localhost")  # type: ignore[arg-type]


def test_middleware_over_a_tls_engine(tls_redis, certificates):
    with ratewin.Engine(tls_redis.tls_url, tls_ca_file=certificates["ca.crt"],
                        connect="require", **PATIENT) as a, \
            ratewin.Engine(tls_redis.tls_url, tls_ca_file=certificates["ca.crt"],
                           connect="require", **PATIENT) as b:
        limit = ratewin.Limit(2, per=60)
        first, second = RateLimitMiddleware(hello, a, limit), RateLimitMiddleware(hello, b, limit)
        assert call(first)[0] == "200 OK"
        assert call(second)[0] == "200 OK"
        status, headers, _ = call(first)
        assert status == "429 Too Many Requests" and headers["X-RateLimit-Remaining"] == "0"

