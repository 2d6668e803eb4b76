"""ratewin.wsgi: called directly and behind the standard library's wsgiref server."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.util import setup_testing_defaults

import pytest

import ratewin
from ratewin.wsgi import RateLimitMiddleware


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello " + environ.get("PATH_INFO", "").encode()]


def call(app, path="/", addr="10.0.0.1", **extra):
    environ = {"PATH_INFO": path, "REMOTE_ADDR": addr, **extra}
    setup_testing_defaults(environ)
    environ["REMOTE_ADDR"] = addr
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen["status"] = status
        seen["headers"] = dict(headers)

    body = b"".join(app(environ, start_response))
    return seen["status"], seen["headers"], body


def test_limits_per_client_and_path(engine):
    app = RateLimitMiddleware(hello, engine, ratewin.Limit(2, per=60), per_path=True)
    first = call(app, "/a")
    assert first[0] == "200 OK" and first[2] == b"hello /a"
    assert first[1]["X-RateLimit-Limit"] == "2"
    assert first[1]["X-RateLimit-Remaining"] == "1"
    assert first[1]["Content-Type"] == "text/plain"
    assert call(app, "/a")[0] == "200 OK"
    status, headers, body = call(app, "/a")
    assert status == "429 Too Many Requests"
    assert body == b"Too Many Requests\n"
    assert headers["X-RateLimit-Remaining"] == "0"
    assert int(headers["Retry-After"]) >= 1
    assert headers["Content-Length"] == str(len(body))
    assert call(app, "/b")[0] == "200 OK", "another path counts apart"
    assert call(app, "/a", addr="10.0.0.2")[0] == "200 OK", "another client counts apart"


def test_one_count_per_client_by_default(engine):
    app = RateLimitMiddleware(hello, engine, ratewin.Limit(2, per=60))
    assert [call(app, p)[0][:3] for p in ("/a", "/users/1", "/users/2")] == ["200", "200", "429"]


def test_counts_per_route(engine):
    def route(environ):
        parts = environ["PATH_INFO"].split("/")
        return parts[1] if len(parts) > 1 and parts[1] not in ("", "static") else None

    app = RateLimitMiddleware(hello, engine, ratewin.Limit(2, per=60), per_path=route)
    statuses = [call(app, p)[0][:3] for p in ("/users/1", "/users/2", "/users/3")]
    assert statuses == ["200", "200", "429"], "ids in the path do not escape the limit"
    assert call(app, "/orders/1")[0] == "200 OK", "another route counts apart"
    # None: the client's plain count, shared by every such path.
    assert [call(app, p)[0][:3] for p in ("/static/a", "/static/b", "/")] == ["200", "200", "429"]
    with pytest.raises(TypeError, match="per_path"):
        RateLimitMiddleware(hello, engine, ratewin.Limit(1, per=1), per_path="yes")  # type: ignore[arg-type]


def test_limit_key_and_cost_functions(engine):
    tiers = {"gold": ratewin.Limit(10, per=60), "free": ratewin.Limit(1, per=60)}

    def limit(environ):
        return tiers.get(environ.get("HTTP_X_TIER", ""))

    app = RateLimitMiddleware(
        hello, engine, limit,
        key=lambda e: e.get("HTTP_X_API_KEY"),
        cost=lambda e: 5 if e["REQUEST_METHOD"] == "POST" else 1)
    free = {"HTTP_X_TIER": "free", "HTTP_X_API_KEY": "k1"}
    assert call(app, **free)[0] == "200 OK"
    assert call(app, **free)[0].startswith("429")
    gold = {"HTTP_X_TIER": "gold", "HTTP_X_API_KEY": "k2", "REQUEST_METHOD": "POST"}
    assert [call(app, **gold)[0][:3] for _ in range(3)] == ["200", "200", "429"]
    # No tier: no limit; no key: no limit (and no headers).
    for _ in range(5):
        status, headers, _ = call(app, HTTP_X_API_KEY="k3")
        assert status == "200 OK" and "X-RateLimit-Limit" not in headers
    status, headers, _ = call(app, HTTP_X_TIER="free")
    assert status == "200 OK" and "X-RateLimit-Limit" not in headers


def test_bad_limit_argument(engine):
    with pytest.raises(TypeError, match="ratewin.Limit"):
        RateLimitMiddleware(hello, engine, 100)  # type: ignore[arg-type]
    assert "RateLimitMiddleware" in repr(RateLimitMiddleware(hello, engine,
                                                             ratewin.Limit(1, per=1)))


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args) -> None:  # keep pytest's output clean
        pass


def test_behind_wsgiref_server(engine):
    app = RateLimitMiddleware(hello, engine, ratewin.Limit(3, per=60), per_path=True)
    server: WSGIServer = make_server("127.0.0.1", 0, app, handler_class=QuietHandler)
    server.timeout = 5
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/items"
        for remaining in (2, 1, 0):
            with urllib.request.urlopen(url, timeout=10) as response:
                assert response.status == 200
                assert response.read() == b"hello /items"
                assert response.headers["X-RateLimit-Remaining"] == str(remaining)
                assert response.headers["X-RateLimit-Limit"] == "3"
        with pytest.raises(urllib.error.HTTPError) as rejected:
            urllib.request.urlopen(url, timeout=10)
        assert rejected.value.code == 429
        assert int(rejected.value.headers["Retry-After"]) >= 1
        assert rejected.value.read() == b"Too Many Requests\n"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
