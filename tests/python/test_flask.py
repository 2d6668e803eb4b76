"""ratewin.flask: the Flask extension, with Flask's test client, and under gunicorn with
two workers sharing one Redis."""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import flask
import flask.views
import pytest

import ratewin
from ratewin_testkit import PATIENCE, free_port, http_get
from ratewin.flask import Answer, Limiter, RateLimitExceeded, RequestLimit

HERE = pathlib.Path(__file__).resolve().parent


def make_app(engine, **options):
    app = flask.Flask(__name__)
    limiter = Limiter(app, engine=engine, **options)
    return app, limiter


def statuses(client, *paths, **options):
    return [client.open(path, **options).status_code for path in paths]


def test_routes_with_equal_limits_count_apart(engine):
    app, limiter = make_app(engine)

    @app.route("/a")
    @limiter.limit("2/minute")
    def a():
        return "a"

    @app.route("/b")
    @limiter.limit("2/minute")
    def b():
        return "b"

    client = app.test_client()
    assert statuses(client, "/a", "/a", "/a") == [200, 200, 429]
    assert statuses(client, "/b", "/b", "/b") == [200, 200, 429]
    other = {"environ_base": {"REMOTE_ADDR": "10.0.0.2"}}
    assert statuses(client, "/a", **other) == [200], "another client counts apart"


def test_shared_limit_joins_routes(engine):
    app, limiter = make_app(engine)
    api = limiter.shared_limit("2/minute", scope="api")
    by_prefix = limiter.shared_limit("2/minute", scope=lambda endpoint: endpoint[:1])

    @app.route("/a")
    @api
    def a():
        return "a"

    @app.route("/b")
    @api
    def b():
        return "b"

    @app.route("/x1")
    @by_prefix
    def x1():
        return "x1"

    @app.route("/x2")
    @by_prefix
    def x2():
        return "x2"

    client = app.test_client()
    assert statuses(client, "/a", "/b", "/a", "/b") == [200, 200, 429, 429]
    # Scope names from a function of the endpoint: x1 and x2 are both "x".
    assert statuses(client, "/x1", "/x2", "/x1") == [200, 200, 429]


def test_a_limit_with_a_scope_name_joins_routes(engine):
    app, limiter = make_app(engine)
    login = ratewin.Limit(2, per=60, scope="login")

    @app.route("/password")
    @limiter.limit(login)
    def password():
        return "p"

    @app.route("/token")
    @limiter.limit([login])
    def token():
        return "t"

    client = app.test_client()
    assert statuses(client, "/password", "/token", "/password") == [200, 200, 429]
    assert client.get("/token").json["limit"] == "login"


def test_exempt_views_and_blueprints(engine):
    app, limiter = make_app(engine, default_limits="10/minute", application_limits="2/minute")

    @app.route("/limited")
    def limited():
        return "l"

    @app.route("/ping")
    @limiter.exempt
    def ping():
        return "pong"

    bp = flask.Blueprint("health", __name__)

    @bp.route("/health")
    def health():
        return "ok"

    limiter.exempt(bp)
    app.register_blueprint(bp)
    client = app.test_client()
    assert statuses(client, "/ping", "/ping", "/ping", "/health", "/health") == [200] * 5
    response = client.get("/ping")
    assert "X-RateLimit-Limit" not in response.headers, "exempt: no headers"
    # Exempt requests counted against no application limit either: its 2/minute is whole.
    assert statuses(client, "/limited", "/limited", "/limited") == [200, 200, 429]


def test_blueprint_limits_apply_to_each_route_apart(engine):
    app, limiter = make_app(engine, default_limits="1/minute")
    bp = flask.Blueprint("api", __name__, url_prefix="/api")

    @bp.route("/x")
    def x():
        return "x"

    @bp.route("/y")
    def y():
        return "y"

    @bp.route("/z")
    @limiter.limit("3/minute")
    def z():
        return "z"

    limiter.limit("2/minute")(bp)
    app.register_blueprint(bp)

    @app.route("/outside")
    def outside():
        return "o"

    client = app.test_client()
    assert statuses(client, "/api/x", "/api/x", "/api/x") == [200, 200, 429]
    assert statuses(client, "/api/y", "/api/y", "/api/y") == [200, 200, 429]
    # A route's own limit overrides the blueprint's.
    assert statuses(client, *["/api/z"] * 4) == [200, 200, 200, 429]
    # Outside the blueprint: the default limits.
    assert statuses(client, "/outside", "/outside") == [200, 429]


def test_nested_blueprints_and_class_based_views(engine):
    app, limiter = make_app(engine, default_limits="1/minute")
    parent = flask.Blueprint("parent", __name__, url_prefix="/p")
    child = flask.Blueprint("child", __name__, url_prefix="/c")
    quiet = flask.Blueprint("quiet", __name__, url_prefix="/q")

    @child.route("/x")
    def x():
        return "x"

    @quiet.route("/y")
    def y():
        return "y"

    @limiter.limit("2/minute")
    class Items(flask.views.MethodView):
        def get(self):
            return "items"

    @limiter.exempt
    class Health(flask.views.MethodView):
        def get(self):
            return "ok"

    class Listed(flask.views.MethodView):  # the decorator in the view's decorators
        decorators = [limiter.limit("1/minute")]

        def get(self):
            return "listed"

    limiter.limit("3/minute")(parent)
    limiter.limit("2/minute")(child)
    limiter.exempt(quiet)
    parent.register_blueprint(child)
    parent.register_blueprint(quiet)
    app.register_blueprint(parent)
    app.add_url_rule("/items", view_func=Items.as_view("items"))
    app.add_url_rule("/health", view_func=Health.as_view("health"))
    app.add_url_rule("/listed", view_func=Listed.as_view("listed"))
    client = app.test_client()
    # The innermost blueprint's limits override its parent's and the defaults.
    assert statuses(client, *["/p/c/x"] * 3) == [200, 200, 429]
    # An exempt blueprint nested in a limited one: unlimited.
    assert statuses(client, *["/p/q/y"] * 4) == [200] * 4
    assert statuses(client, *["/items"] * 3) == [200, 200, 429]
    assert statuses(client, *["/health"] * 3) == [200] * 3
    assert statuses(client, *["/listed"] * 2) == [200, 429]


def test_methods_and_per_method(engine):
    app, limiter = make_app(engine)

    @app.route("/post-only", methods=["GET", "POST"])
    @limiter.limit("1/minute", methods=["post"])
    def post_only():
        return "p"

    @app.route("/each", methods=["GET", "POST"])
    @limiter.limit("1/minute", per_method=True)
    def each():
        return "e"

    @app.route("/together", methods=["GET", "POST"])
    @limiter.limit("1/minute")
    def together():
        return "t"

    client = app.test_client()
    assert [client.get("/post-only").status_code for _ in range(3)] == [200] * 3
    assert [client.post("/post-only").status_code for _ in range(2)] == [200, 429]
    assert [client.get("/each").status_code, client.post("/each").status_code,
            client.get("/each").status_code] == [200, 200, 429]
    assert [client.get("/together").status_code,
            client.post("/together").status_code] == [200, 429]


def test_exempt_when(engine):
    app, limiter = make_app(engine)

    @app.route("/")
    @limiter.limit("1/minute", exempt_when=lambda: flask.request.headers.get("X-Admin") == "1")
    def index():
        return "i"

    client = app.test_client()
    admin = {"headers": {"X-Admin": "1"}}
    assert statuses(client, "/", "/", "/", **admin) == [200] * 3
    assert statuses(client, "/", "/") == [200, 429]
    assert statuses(client, "/", **admin) == [200]


def test_cost(engine):
    app, limiter = make_app(engine)

    @app.route("/batch")
    @limiter.limit("5/minute", cost=lambda: int(flask.request.args.get("n", "1")))
    def batch():
        return str(flask.g.ratewin.remaining)

    @app.route("/heavy")
    @limiter.limit("5/minute", cost=2)
    def heavy():
        return "h"

    client = app.test_client()
    assert client.get("/batch?n=3").text == "2"
    refused = client.get("/batch?n=3")
    assert refused.status_code == 429 and refused.json["error"] == "rate limited"
    too_big = client.get("/batch?n=6")
    assert too_big.json == {"error": "cost exceeds limit", "limit": "5/60s", "max": 5,
                            "cost": 6, "retry_after_s": None}
    assert statuses(client, "/heavy", "/heavy", "/heavy") == [200, 200, 429]


def test_key(engine):
    app, limiter = make_app(engine)

    @app.route("/")
    @limiter.limit("1/minute", key=lambda: flask.request.headers.get("X-User"))
    def index():
        return "i"

    client = app.test_client()
    assert statuses(client, "/", "/", headers={"X-User": "ann"}) == [200, 429]
    assert statuses(client, "/", headers={"X-User": "bob"}) == [200]
    # No user: the key names no client, so the limit does not apply.
    assert statuses(client, "/", "/") == [200, 200]


def test_limiter_key_and_unknown_clients(engine, caplog):
    app, limiter = make_app(engine, default_limits="2/minute")

    @app.route("/")
    def index():
        return "i"

    client = app.test_client()
    with caplog.at_level(logging.WARNING, logger="ratewin"):
        no_address = {"environ_base": {"REMOTE_ADDR": ""}}
        assert statuses(client, "/", "/", "/", **no_address) == [200, 200, 429]
    warnings = [r for r in caplog.records if "no client address" in r.getMessage()]
    assert len(warnings) == 1, "warned once"

    keyed_app, _ = make_app(engine, default_limits="1/minute",
                            key=lambda: flask.request.args.get("user"))
    keyed_app.add_url_rule("/", "index", index)
    client = keyed_app.test_client()
    assert statuses(client, "/?user=a", "/?user=a", "/?user=b") == [200, 429, 200]


def test_default_limits_count_per_route(engine, clock):
    app, limiter = make_app(engine, default_limits=["1/minute", "10/day"])

    @app.route("/a")
    def a():
        return "a"

    @app.route("/b")
    def b():
        return "b"

    @app.route("/own")
    @limiter.limit("3/minute")
    def own():
        return "own"

    @app.route("/both")
    @limiter.limit("3/minute", override_defaults=False)
    def both():
        return "both"

    client = app.test_client()
    assert statuses(client, "/a", "/b", "/b") == [200, 200, 429]
    refused = client.get("/a")
    assert refused.status_code == 429
    assert statuses(client, *["/own"] * 4) == [200, 200, 200, 429], "own limits replace"
    assert statuses(client, "/both", "/both") == [200, 429], "defaults apply as well"
    clock.advance(int(refused.headers["Retry-After"]))
    assert statuses(client, "/a") == [200]


def test_application_limits_are_one_count_for_the_application(engine):
    app, limiter = make_app(engine, application_limits="3/minute")

    @app.route("/a")
    def a():
        return "a"

    @app.route("/b")
    @limiter.limit("10/minute")
    def b():
        return "b"

    client = app.test_client()
    assert statuses(client, "/a", "/b", "/a", "/b") == [200, 200, 200, 429]
    assert statuses(client, "/a", environ_base={"REMOTE_ADDR": "10.0.0.9"}) == [200]


def test_a_refusal_gives_back_what_other_groups_counted(engine):
    # The route's limit costs 2 and the application's 1: two charges, decided one after
    # the other; the route refusing gives the application's unit back.
    app, limiter = make_app(engine, application_limits="5/minute")

    @app.route("/a")
    @limiter.limit("2/minute", cost=2)
    def a():
        return "a"

    @app.route("/b")
    def b():
        return "b"

    client = app.test_client()
    assert statuses(client, "/a", "/a", "/a") == [200, 429, 429]
    refused = client.get("/a")
    assert refused.headers["X-RateLimit-Limit"] == "2", "headers of the refusing limit"
    assert refused.json["limit"] == "2/60s"
    # One unit counted (the admitted /a), one more now.
    assert client.get("/b").headers["X-RateLimit-Remaining"] == "3"


def test_limits_chosen_per_request(engine):
    app, limiter = make_app(engine)

    def tier():
        plans = {"free": "1/minute", "open": []}
        return plans.get(flask.request.args.get("tier", ""))

    @app.route("/")
    @limiter.limit(tier)
    def index():
        return "i"

    client = app.test_client()
    assert statuses(client, "/?tier=free", "/?tier=free") == [200, 429]
    assert statuses(client, "/", "/") == [200, 200], "None: not limited"
    assert statuses(client, "/?tier=open", "/?tier=open") == [200, 200], "[]: not limited"


def test_the_handler_sees_the_decision_on_g(engine):
    app, limiter = make_app(engine)
    seen = []

    @app.route("/")
    @limiter.limit("3/minute; 100/day")
    def index():
        decision = flask.g.ratewin
        seen.append(decision)
        assert limiter.current_limit is decision
        return "i"

    @app.route("/free")
    def free():
        seen.append(flask.g.get("ratewin"))
        return "f"

    client = app.test_client()
    client.get("/")
    client.get("/")
    first, second = seen
    assert isinstance(first, RequestLimit)
    assert first.allowed and not first.degraded
    assert (first.limit, first.remaining, second.remaining) == (ratewin.Limit(3, per=60), 2, 1)
    assert first.retry_after == 0 and 0 < first.reset_after <= 70  # a window and a step
    assert first.reset_at >= int(time.time())
    client.get("/free")
    assert seen[-1] is None, "unlimited route: no decision"


def test_headers_on_allowed_and_refused_responses(engine):
    app, limiter = make_app(engine)

    @app.route("/")
    @limiter.limit("2/minute")
    def index():
        return "i"

    client = app.test_client()
    ok = client.get("/")
    assert ok.headers["X-RateLimit-Limit"] == "2"
    assert ok.headers["X-RateLimit-Remaining"] == "1"
    assert 0 < int(ok.headers["X-RateLimit-Reset"]) <= 70
    assert ok.headers["RateLimit-Policy"] == '"2/60s";q=2;w=60'
    assert ok.headers["RateLimit"].startswith('"2/60s";r=1;t=')
    assert "Retry-After" not in ok.headers
    client.get("/")
    refused = client.get("/")
    assert refused.status_code == 429
    assert refused.headers["Content-Type"] == "application/json"
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["Content-Length"] == str(len(refused.data))
    assert refused.json["error"] == "rate limited" and refused.json["limit"] == "2/60s"
    assert len(refused.headers.getlist("Retry-After")) == 1, "no header twice"

    unix_app, unix_limiter = make_app(engine, headers="x-ratelimit", reset="unix")
    unix_app.add_url_rule("/", "index", unix_limiter.limit("2/minute")(lambda: "i"))
    response = unix_app.test_client().get("/")
    assert int(response.headers["X-RateLimit-Reset"]) >= int(time.time())
    assert "RateLimit-Policy" not in response.headers


def test_errorhandler_429_answers_refusals(engine):
    app, limiter = make_app(engine)

    @app.errorhandler(429)
    def too_many(error):
        assert isinstance(error, RateLimitExceeded)
        assert error.response.status_code == 429 and error.answer.status == 429
        return f"slow down: {error.limit.limit.max} per minute", 429

    @app.route("/")
    @limiter.limit("1/minute")
    def index():
        return "i"

    client = app.test_client()
    client.get("/")
    refused = client.get("/")
    assert refused.status_code == 429
    assert refused.text == "slow down: 1 per minute"
    # The handler's response still carries the rate-limit headers.
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert int(refused.headers["Retry-After"]) >= 1


def test_an_outer_wsgi_middleware_gets_its_count_back(engine):
    """A refusal marks the request refused, so that a ratewin.wsgi middleware around the
    Flask application gives its own count back and leaves the refusal's headers alone."""
    import ratewin.wsgi

    app, limiter = make_app(engine)

    @app.route("/")
    @limiter.limit("1/minute")
    def index():
        return "i"

    @app.route("/free")
    def free():
        return "f"

    app.wsgi_app = ratewin.wsgi.RateLimitMiddleware(app.wsgi_app, engine, "4/minute")
    client = app.test_client()
    assert statuses(client, "/", "/", "/") == [200, 429, 429]
    assert client.get("/").headers.getlist("X-RateLimit-Limit") == ["1"], "the inner's"
    # The outer count: the admitted request, and this one (5 counted without refunds).
    assert client.get("/free").headers["X-RateLimit-Remaining"] == "2"


def test_head_requests_are_limited_with_headers(engine):
    app, limiter = make_app(engine)

    @app.route("/")
    @limiter.limit("1/minute")
    def index():
        return "i"

    client = app.test_client()
    ok = client.head("/")
    assert ok.status_code == 200 and ok.headers["X-RateLimit-Remaining"] == "0"
    refused = client.head("/")
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.data == b""


def test_head_counts_as_get_for_methods_and_per_method(engine):
    # Flask answers HEAD with the GET view: a limit on GET must hold for HEAD too, and
    # per_method must not give HEAD a count of its own.
    app, limiter = make_app(engine)

    @app.route("/get-only", methods=["GET", "POST"])
    @limiter.limit("1/minute", methods=["GET"])
    def get_only():
        return "g"

    @app.route("/each", methods=["GET", "POST"])
    @limiter.limit("1/minute", per_method=True)
    def each():
        return "e"

    client = app.test_client()
    assert [client.head("/get-only").status_code, client.get("/get-only").status_code,
            client.head("/get-only").status_code] == [200, 429, 429]
    assert client.post("/get-only").status_code == 200
    assert [client.get("/each").status_code, client.head("/each").status_code,
            client.post("/each").status_code] == [200, 429, 200]


def test_on_reject_shapes_the_refusal(engine):
    def busy(request, decisions, limits):
        assert request.path == "/"
        limit = limits[decisions.index]
        return Answer(503, [("Content-Type", "text/plain"), ("Retry-After", "120")],
                      f"busy: {limit.max}".encode())

    app, limiter = make_app(engine, on_reject=busy)

    @app.route("/")
    @limiter.limit("1/minute")
    def index():
        return "i"

    client = app.test_client()
    client.get("/")
    refused = client.get("/")
    assert (refused.status_code, refused.text) == (503, "busy: 1")
    assert refused.headers["Retry-After"] == "120", "the hook's own header wins"
    assert refused.headers["X-RateLimit-Limit"] == "1"


def test_degraded_decisions_are_marked():
    # No Redis listens on port 1: the store is down, and each limit decides by its
    # failure policy, marked degraded.
    with ratewin.Engine("redis://127.0.0.1:1", connect_timeout=0.05) as engine:
        app, limiter = make_app(engine)
        seen = []

        @app.route("/local")
        @limiter.limit(ratewin.Limit(5, per=60, on_failure="local"))
        def local():
            seen.append(flask.g.ratewin.degraded)
            return "l"

        @app.route("/closed")
        @limiter.limit(ratewin.Limit(5, per=60, on_failure="closed"))
        def closed():
            return "c"

        client = app.test_client()
        ok = client.get("/local")
        assert ok.status_code == 200 and seen == [True]
        assert ok.headers["X-RateLimit-Policy"] == "degraded"
        assert ok.headers["RateLimit"].endswith(";degraded")
        refused = client.get("/closed")
        assert refused.status_code == 429
        assert refused.headers["X-RateLimit-Policy"] == "degraded"


def test_a_refusal_is_marked_degraded_when_an_earlier_decision_was(clock):
    # Two clients (keys) on one request: the first decided without the shared store
    # (degraded), the second refused by a healthy count. The refusal says degraded too.
    with ratewin.Engine("redis://127.0.0.1:1", connect_timeout=0.05,
                        command_timeout=0.05) as down:

        class Mixed(ratewin.Engine):
            def try_acquire_all(self, resource, limits, cost=1):
                if resource == "via-down":
                    return down.try_acquire_all(resource, limits, cost)
                return super().try_acquire_all(resource, limits, cost)

        with Mixed(clock=clock) as engine:
            app, limiter = make_app(engine)

            @app.route("/")
            @limiter.limit("1/minute", key=lambda: "local")  # decided second
            @limiter.limit("100/minute", key=lambda: "via-down")
            def index():
                return "i"

            client = app.test_client()
            ok = client.get("/")
            assert ok.status_code == 200 and ok.headers["X-RateLimit-Policy"] == "degraded"
            refused = client.get("/")
            assert refused.status_code == 429
            assert refused.headers["X-RateLimit-Remaining"] == "0"
            assert refused.headers["X-RateLimit-Policy"] == "degraded"
            assert refused.headers["RateLimit"].endswith(";degraded")


def test_init_app_and_enabled(engine):
    limiter = Limiter(engine=engine, default_limits="1/minute")
    app = flask.Flask(__name__)

    @app.route("/")
    def index():
        return "i"

    limiter.init_app(app)
    limiter.init_app(app)  # once is enough; twice changes nothing
    assert app.extensions["ratewin"] is limiter
    client = app.test_client()
    assert statuses(client, "/", "/") == [200, 429]
    limiter.enabled = False
    assert statuses(client, "/", "/") == [200, 200]


def test_not_found_and_static_files_are_not_limited(engine, tmp_path):
    (tmp_path / "style.css").write_text("body {}")
    app = flask.Flask(__name__, static_folder=str(tmp_path), static_url_path="/static")
    Limiter(app, engine=engine, default_limits="1/minute", application_limits="1/minute")
    client = app.test_client()
    assert statuses(client, "/missing", "/missing", "/missing") == [404] * 3
    assert "X-RateLimit-Limit" not in client.get("/missing").headers
    assert statuses(client, "/static/style.css", "/static/style.css") == [200, 200]


def test_a_view_named_static_is_limited(engine, tmp_path):
    # Only the static files routes go unlimited, not every endpoint whose name ends in
    # "static" (a view of a blueprint without static files, or of an app without any).
    app, limiter = make_app(engine, default_limits="1/minute")
    api = flask.Blueprint("api", __name__)

    @api.route("/static")
    def static():
        return "a page"

    app.register_blueprint(api, url_prefix="/api")
    with_files = flask.Blueprint("files", __name__, static_folder=str(tmp_path),
                                 static_url_path="/assets")
    (tmp_path / "style.css").write_text("body {}")
    app.register_blueprint(with_files, url_prefix="/files")
    bare = flask.Flask(__name__, static_folder=None)
    Limiter(bare, engine=engine, application_limits="1/minute")
    bare.add_url_rule("/static", "static", lambda: "a page")
    assert statuses(app.test_client(), "/api/static", "/api/static") == [200, 429]
    assert statuses(bare.test_client(), "/static", "/static") == [200, 429]
    assert statuses(app.test_client(), "/files/assets/style.css",
                    "/files/assets/style.css") == [200, 200]


def test_arguments_are_checked(engine):
    with pytest.raises(TypeError, match="engine"):
        Limiter(engine="redis://x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="headers"):
        Limiter(engine=engine, headers="all")
    limiter = Limiter(engine=engine)
    with pytest.raises(ValueError):
        limiter.limit("often")
    with pytest.raises(TypeError, match="cost"):
        limiter.limit("1/minute", cost=0)
    with pytest.raises(TypeError, match="methods"):
        limiter.limit("1/minute", methods="POST")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="view function or a flask.Blueprint"):
        limiter.limit("1/minute")(42)  # type: ignore[call-overload]


def test_flask_docs_example(tmp_path):
    from test_readme import run_example

    # Not "flask": run_example writes the block to NAME.py, and a flask.py beside the
    # program would be imported in place of the flask package.
    lines = run_example(tmp_path, "flask-app")
    assert lines == [
        "200 2 left",
        "200 1 left",
        "200 0 left",
        "429 rate limited 3/60s Remaining: 0 Retry-After > 0: True",
        "200 /ping is exempt",
        "200 search: 0 left of the shared 2/60s",
        "429 slow down: 2 searches a minute",
    ], lines


def _get(url: str) -> tuple[int, str]:
    status, headers, _ = http_get(url)
    return status, headers["X-Worker"]


def test_gunicorn_workers_share_one_limit(redis, tmp_path):
    """Two gunicorn workers, each with its own engine on one Redis: a limit of N per
    minute admits exactly N of 3N requests or more, whichever worker takes them."""
    n = 5
    port = free_port()
    package_root = pathlib.Path(ratewin.__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(package_root), RATEWIN_REDIS=redis.url,
               RATEWIN_TEST_LIMIT=f"{n}/minute")
    log_path = tmp_path / "gunicorn.log"
    with open(log_path, "wb") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}",
             "--chdir", str(HERE / "apps"), "flask_app:app"],
            env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + PATIENCE
        while True:
            assert server.poll() is None, log_path.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.05)
        results: list[tuple[int, str]] = []
        errors: list[str] = []
        lock = threading.Lock()

        def send(count: int) -> None:
            for _ in range(count):
                try:
                    got = _get(f"http://127.0.0.1:{port}/")
                except OSError as error:  # (seen in the assertion below, not lost)
                    with lock:
                        errors.append(repr(error))
                    continue
                with lock:
                    results.append(got)

        def round_of(senders: int, count: int) -> None:
            threads = [threading.Thread(target=send, args=(count,)) for _ in range(senders)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=PATIENCE)

        round_of(3, n)
        # Both workers must decide. A worker still loading the application takes no
        # request, and the kernel hands each connection to either: more rounds, bounded,
        # until both have answered.
        deadline = time.monotonic() + PATIENCE
        while (len({worker for _, worker in results}) < 2 and len(results) < 300
               and time.monotonic() < deadline):
            round_of(3, 1)
        assert not errors, errors
        assert len({worker for _, worker in results}) == 2, ("both workers answered", results)
        codes = [code for code, _ in results]
        assert codes.count(200) == n, (results, log_path.read_text())
        assert codes.count(429) == len(results) - n, results
    finally:
        # Stop what this test started, by PID: the master, which stops its workers; if it
        # does not, it is killed, and so are the workers it booted (as its log names them).
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=PATIENCE)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=PATIENCE)
            for pid in re.findall(r"Booting worker with pid: (\d+)", log_path.read_text()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
