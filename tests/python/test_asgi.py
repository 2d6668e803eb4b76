"""ratewin.asgi with a minimal ASGI server loop: asyncio only, no framework."""

from __future__ import annotations

import asyncio
import json
import logging

import ratewin
from ratewin._middleware import counted_in
from ratewin.asgi import RateLimitMiddleware
from conftest import PATIENT, counting_loop_turns


async def hello(scope, receive, send):
    if scope["type"] == "lifespan":
        message = await receive()
        assert message["type"] == "lifespan.startup"
        await send({"type": "lifespan.startup.complete"})
        return
    if scope["type"] == "websocket":
        await send({"type": "websocket.accept"})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello " + scope["path"].encode()})


def request(app, path="/", client=("10.0.0.1", 5000), kind="http", **extra):
    return asyncio.run(run(app, path, client, kind, **extra))


async def run(app, path="/", client=("10.0.0.1", 5000), kind="http", **extra):
    scope = {"type": kind, "path": path, "root_path": "", "method": "GET",
             "headers": [], "client": client, **extra}
    sent = []
    inbox = [{"type": "lifespan.startup"}] if kind == "lifespan" else \
        [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        return inbox.pop(0)

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


def status_of(sent):
    return sent[0]["status"]


def test_limits_per_client_and_path(engine):
    app = RateLimitMiddleware(hello, engine, ratewin.Limit(2, per=60), per_path=True)
    first = request(app, "/a")
    assert status_of(first) == 200 and first[1]["body"] == b"hello /a"
    headers = dict(first[0]["headers"])
    assert headers[b"content-type"] == b"text/plain"
    assert headers[b"x-ratelimit-limit"] == b"2"
    assert headers[b"x-ratelimit-remaining"] == b"1"
    assert status_of(request(app, "/a")) == 200
    rejected = request(app, "/a")
    assert status_of(rejected) == 429
    headers = dict(rejected[0]["headers"])
    assert int(headers[b"retry-after"]) >= 1
    assert headers[b"content-length"] == str(len(rejected[1]["body"])).encode()
    assert headers[b"content-type"] == b"application/json"
    body = json.loads(rejected[1]["body"])
    assert body["error"] == "rate limited" and body["limit"] == "2/60s"
    assert 0 < body["retry_after_s"] <= 64  # (a window and a subinterval at most)
    assert status_of(request(app, "/b")) == 200
    assert status_of(request(app, "/a", client=("10.0.0.2", 1))) == 200


def test_one_count_per_client_by_default_and_root_path_counted_once(engine):
    app = RateLimitMiddleware(hello, engine, ratewin.Limit(2, per=60))
    assert [status_of(request(app, p)) for p in ("/a", "/b", "/c")] == [200, 200, 429]
    # ASGI's path includes root_path: the resource is the full path, once, as WSGI's
    # SCRIPT_NAME + PATH_INFO is.
    limit = ratewin.Limit(5, per=60)
    mounted = RateLimitMiddleware(hello, engine, limit, per_path=True)
    assert status_of(request(mounted, "/api/items", root_path="/api")) == 200
    counted = counted_in((limit,), "path /api/items")[0]
    assert engine.try_acquire("10.0.0.1", counted, 0).remaining == 4
    assert engine.try_acquire("10.0.0.1", limit, 0).remaining == 5  # (the whole app's)


def test_websocket_and_lifespan_pass_through(engine):
    app = RateLimitMiddleware(hello, engine, ratewin.Limit(1, per=60))
    for _ in range(3):
        assert request(app, "/ws", kind="websocket") == [{"type": "websocket.accept"}]
    assert request(app, kind="lifespan") == [{"type": "lifespan.startup.complete"}]


def test_no_limit_is_unlimited_and_no_client_address_shares_one_count(engine, caplog):
    app = RateLimitMiddleware(hello, engine,
                              lambda scope: None if scope["path"] == "/free" else
                              ratewin.Limit(2, per=60))
    for _ in range(3):
        assert status_of(request(app, "/free")) == 200
    # uvicorn --uds: no peer address. Such requests share one count (not unlimited), and
    # the application hears of it once.
    with caplog.at_level(logging.WARNING, logger="ratewin"):
        got = [status_of(request(app, "/paid", client=None)) for _ in range(3)]
    assert got == [200, 200, 429]
    assert len([r for r in caplog.records if "no client address" in r.getMessage()]) == 1
    assert status_of(request(app, "/paid")) == 200
    # A key function of the application's own that names no client: unlimited, as it says.
    mine = RateLimitMiddleware(hello, engine, ratewin.Limit(1, per=60), key=lambda scope: None)
    assert [status_of(request(mine)) for _ in range(3)] == [200, 200, 200]


def test_with_redis_the_loop_keeps_serving_and_no_executor_is_used(redis):
    """Admissions wait for Redis on the engine's I/O thread: the loop runs other tasks
    meanwhile, and no thread of the loop's executor is taken."""
    async def main():
        loop = asyncio.get_running_loop()
        with ratewin.Engine(redis.url, key_prefix="asgi-async", **PATIENT) as engine:
            app = RateLimitMiddleware(hello, engine, ratewin.Limit(20, per=60))
            assert engine.try_acquire("warm", ratewin.Limit(1, per=60))  # connected
            results, ticks = await counting_loop_turns(
                asyncio.gather(*[run(app, "/") for _ in range(30)]))
        assert sorted(status_of(r) for r in results) == [200] * 20 + [429] * 10
        assert ticks > 0
        assert getattr(loop, "_default_executor", None) is None
    asyncio.run(main())
