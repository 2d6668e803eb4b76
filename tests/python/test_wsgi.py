"""ratewin.wsgi: called directly and behind the standard library's wsgiref server."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.util import setup_testing_defaults

import pytest

import ratewin
from ratewin.wsgi import Answer, RateLimitMiddleware
from ratewin_testkit import PATIENCE


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
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["limit"] == "2/60s"
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
    server.timeout = PATIENCE
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/items"
        for remaining in (2, 1, 0):
            with urllib.request.urlopen(url, timeout=PATIENCE) as response:
                assert response.status == 200
                assert response.read() == b"hello /items"
                assert response.headers["X-RateLimit-Remaining"] == str(remaining)
                assert response.headers["X-RateLimit-Limit"] == "3"
        with pytest.raises(urllib.error.HTTPError) as rejected:
            urllib.request.urlopen(url, timeout=PATIENCE)
        assert rejected.value.code == 429
        assert int(rejected.value.headers["Retry-After"]) >= 1
        assert json.loads(rejected.value.read())["error"] == "rate limited"
        assert rejected.value.headers["RateLimit-Policy"] == '"3/60s";q=3;w=60'
        assert rejected.value.headers["RateLimit"] == f'"3/60s";r=0;t={rejected.value.headers["X-RateLimit-Reset"]}'
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=PATIENCE)


# ---- several limits, strings, per-route limits, stacking, headers and 429 ---------------

def test_limit_strings_and_lists_are_counted_all_or_nothing(engine):
    app = RateLimitMiddleware(hello, engine, "2/minute; 3/hour")
    got = [call(app)[0][:3] for _ in range(3)]
    assert got == ["200", "200", "429"]
    # The refused one counted against neither: the hour has 1 left.
    assert engine.try_acquire_all("10.0.0.1", ratewin.parse_many("2/minute; 3/hour"),
                                  0).decisions[1].remaining == 1
    status, headers, _ = call(RateLimitMiddleware(hello, engine, [ratewin.Limit(5, per=1),
                                                                  "10/minute"]), addr="10.0.0.9")
    assert headers["RateLimit-Policy"] == '"5/1s";q=5;w=1, "10/60s";q=10;w=60'
    with pytest.raises(ValueError, match="fortnight"):
        RateLimitMiddleware(hello, engine, "2/fortnight")


def test_per_route_limits_never_share_counts(engine):
    login, api = ratewin.Limit(3, per=60), ratewin.Limit(100, per=60)
    app = RateLimitMiddleware(hello, engine,
                              lambda e: login if e["PATH_INFO"] == "/login" else api)
    for _ in range(5):
        assert call(app, "/api/items")[0] == "200 OK"
    status, headers, _ = call(app, "/login")
    assert status == "200 OK" and headers["X-RateLimit-Remaining"] == "2"


def test_limits_chosen_per_request_count_per_path_unless_a_scope_name_joins_them(engine):
    # The case: equal limit strings chosen for two routes count apart.
    chooser = lambda e: {"/a": "3/minute", "/b": "3/minute"}.get(e["PATH_INFO"])  # noqa: E731
    app = RateLimitMiddleware(hello, engine, chooser)
    assert [call(app, "/a")[0][:3] for _ in range(4)] == ["200", "200", "200", "429"]
    assert [call(app, "/b")[0][:3] for _ in range(2)] == ["200", "200"]
    assert call(app, "/c")[0] == "200 OK"  # None: unlimited
    assert call(RateLimitMiddleware(hello, engine, lambda e: []), "/c")[0] == "200 OK"  # so is []
    # A scope name joins them, wherever they are chosen.
    shared = ratewin.parse("3/minute", scope="reports")
    joined = RateLimitMiddleware(hello, engine, lambda e: shared, key=lambda e: "joined")
    assert [call(joined, p)[0][:3] for p in ("/x", "/y", "/z", "/w")] == ["200"] * 3 + ["429"]
    # per_path=False: one count per client for whatever the function chooses.
    whole = RateLimitMiddleware(hello, engine, chooser, per_path=False, key=lambda e: "whole")
    assert [call(whole, p)[0][:3] for p in ("/a", "/b", "/a", "/b")] == ["200"] * 3 + ["429"]
    # The headers name the limit as it was given, not the scope it is counted in.
    headers = call(app, "/b")[1]
    assert headers["RateLimit-Policy"] == '"3/60s";q=3;w=60'
    assert headers["X-RateLimit-Remaining"] == "0"


def test_a_fixed_limit_counts_once_for_the_application_and_per_path_true_splits_it(engine):
    app = RateLimitMiddleware(hello, engine, "2/minute")
    assert [call(app, p)[0][:3] for p in ("/a", "/b", "/c")] == ["200", "200", "429"]
    split = RateLimitMiddleware(hello, engine, "2/minute", per_path=True, key=lambda e: "s")
    assert [call(split, p)[0][:3] for p in ("/a", "/a", "/a", "/b")] == ["200", "200", "429",
                                                                           "200"]
    # per_path=True keeps a named limit's one count.
    named = RateLimitMiddleware(hello, engine, ratewin.parse("2/minute", scope="n"),
                                per_path=True, key=lambda e: "n")
    assert [call(named, p)[0][:3] for p in ("/a", "/b", "/c")] == ["200", "200", "429"]


def test_degraded_decisions_are_marked_in_the_headers():
    # No Redis at that address: each limit decides by its failure policy, degraded.
    with ratewin.Engine("redis://127.0.0.1:1", connect_timeout=0.05,
                        command_timeout=0.05) as down:
        for style, name, want in (("both", "X-RateLimit-Policy", "degraded"),
                                  ("x-ratelimit", "X-RateLimit-Policy", "degraded")):
            headers = call(RateLimitMiddleware(hello, down, "5/minute", headers=style))[1]
            assert headers[name] == want, headers
        headers = call(RateLimitMiddleware(hello, down, "5/minute", headers="ietf"))[1]
        assert headers["RateLimit"].endswith(";degraded"), headers
        assert "X-RateLimit-Policy" not in headers
    up = call(RateLimitMiddleware(hello, ratewin.Engine(), "5/minute"))[1]
    assert "X-RateLimit-Policy" not in up and not up["RateLimit"].endswith("degraded")


def test_stacked_middlewares_refund_and_do_not_duplicate_headers(engine):
    inner = RateLimitMiddleware(hello, engine, ratewin.Limit(1, per=60, scope="inner"))
    outer = RateLimitMiddleware(inner, engine, ratewin.Limit(10, per=60, scope="outer"))
    assert call(outer)[0] == "200 OK"
    status, headers, _ = call(outer)
    assert status.startswith("429") and headers["X-RateLimit-Limit"] == "1"
    # The outer limit counted only the request that got through.
    outer_limit = ratewin.Limit(10, per=60, scope="outer")
    assert engine.try_acquire("10.0.0.1", outer_limit, 0).remaining == 9


def test_header_styles_and_unix_reset(engine):
    limit = ratewin.Limit(5, per=60)
    _, both, _ = call(RateLimitMiddleware(hello, engine, limit), addr="1.1.1.1")
    assert {"X-RateLimit-Limit", "RateLimit", "RateLimit-Policy"} <= set(both)
    _, x_only, _ = call(RateLimitMiddleware(hello, engine, limit, headers="x-ratelimit"),
                        addr="1.1.1.2")
    assert "RateLimit" not in x_only and "X-RateLimit-Limit" in x_only
    _, ietf, _ = call(RateLimitMiddleware(hello, engine, limit, headers="ietf"), addr="1.1.1.3")
    assert "X-RateLimit-Limit" not in ietf and ietf["RateLimit"].startswith('"5/60s";r=4;t=')
    _, none, _ = call(RateLimitMiddleware(hello, engine, limit, headers="none"), addr="1.1.1.4")
    assert not any("ratelimit" in h.lower() for h in none)
    before = time.time()
    _, unix, _ = call(RateLimitMiddleware(hello, engine, limit, reset="unix"), addr="1.1.1.5")
    # (the counts leave a subinterval at a time: within the window plus one, 66 s)
    assert before + 59 <= int(unix["X-RateLimit-Reset"]) <= time.time() + 67
    with pytest.raises(ValueError, match="headers"):
        RateLimitMiddleware(hello, engine, limit, headers="all")
    with pytest.raises(ValueError, match="reset"):
        RateLimitMiddleware(hello, engine, limit, reset="epoch")


def test_on_reject_shapes_the_answer_and_a_cost_above_max_says_why(engine):
    def teapot(environ, decisions, limits):
        return Answer(418, [("Content-Type", "text/plain")],
                      f"slow down: {limits[decisions.index].max}".encode())

    app = RateLimitMiddleware(hello, engine, ratewin.Limit(1, per=60), on_reject=teapot)
    call(app)
    status, headers, body = call(app)
    assert status == "418 I'm a Teapot" and body == b"slow down: 1"
    assert headers["Content-Length"] == str(len(body)) and "Retry-After" in headers
    greedy = RateLimitMiddleware(hello, engine, ratewin.Limit(2, per=60), cost=lambda e: 5)
    status, headers, body = call(greedy, addr="10.9.9.9")
    assert status.startswith("429") and "Retry-After" not in headers
    assert json.loads(body) == {"error": "cost exceeds limit", "limit": "2/60s", "max": 2,
                                "cost": 5, "retry_after_s": None}


def test_token_bucket_headers_describe_its_burst_and_refill(engine):
    # 60 per minute with room for 3 at once: refilling all 3 takes 3 s.
    bucket = ratewin.Limit(60, per=60, algorithm="token_bucket", burst=3)
    app = RateLimitMiddleware(hello, engine, bucket)
    statuses = [call(app, addr="10.0.0.7") for _ in range(4)]
    assert [s[:3] for s, _, _ in statuses] == ["200", "200", "200", "429"]
    _, headers, body = statuses[3]
    assert headers["X-RateLimit-Limit"] == "3"
    assert headers["Retry-After"] == "1"
    assert headers["RateLimit-Policy"] == '"60/60s";q=3;w=3'
    assert json.loads(body)["error"] == "rate limited"
    _, _, too_big = call(RateLimitMiddleware(hello, engine, bucket, cost=lambda request: 4),
                         addr="10.0.0.8")
    assert json.loads(too_big)["max"] == 3


def test_token_bucket_w_is_its_whole_refill_computed_exactly(engine):
    # burst x per / max seconds, rounded up, in integers (the extension formats the headers
    # as ratewin-server does): 50 refill in exactly 5 s at 11 per 1.1 s, where floating
    # point made it 5.000000000000001 and w=6 before.
    bucket = ratewin.Limit(11, per=1.1, algorithm="token_bucket", burst=50)
    headers = call(RateLimitMiddleware(hello, engine, bucket), addr="10.0.0.10")[1]
    assert headers["RateLimit-Policy"] == '"11/1.1s";q=50;w=5'
    # 3 per second with a burst of 3: 1 s (ratewin-server wrote 2: its engine's refill,
    # rounded up to whole nanoseconds, takes 1,000,000,002 ns).
    bucket = ratewin.Limit(3, per=1, algorithm="token_bucket", burst=3)
    headers = call(RateLimitMiddleware(hello, engine, bucket), addr="10.0.0.11")[1]
    assert headers["RateLimit-Policy"] == '"3/1s";q=3;w=1'


def test_ietf_headers_write_a_name_outside_printable_ascii_one_character_at_a_time(engine):
    # é (2 bytes in UTF-8), € (3), 😀 (4): one "?" each, as ratewin-server writes them; the
    # quote and the backslash escaped. The refusal's JSON body keeps the name as it is.
    name = 'caf\u00e9 \u20ac\U0001f600 "q\\'
    limit = ratewin.parse("1/minute", scope=name)
    app = RateLimitMiddleware(hello, engine, limit)
    headers = call(app, addr="10.0.0.12")[1]
    assert headers["RateLimit-Policy"] == '"caf? ?? \\"q\\\\";q=1;w=60'
    assert headers["RateLimit"].startswith('"caf? ?? \\"q\\\\";r=0;t=')
    status, headers, body = call(app, addr="10.0.0.12")
    assert status.startswith("429") and json.loads(body)["limit"] == name
    assert headers["RateLimit"].startswith('"caf? ?? \\"q\\\\";r=0;t=')
