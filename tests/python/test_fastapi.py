"""ratewin.fastapi: the dependency, the slowapi-shaped Limiter, the default-limits
middleware, on FastAPI and plain Starlette apps driven by Starlette's TestClient; and one
uvicorn run with two workers sharing a Redis count."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from fastapi import Depends, FastAPI, Request, Response
from fastapi.testclient import TestClient
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Mount, Route

import ratewin
import ratewin.fastapi
from ratewin.fastapi import (Limiter, LimiterMiddleware, RateLimitExceeded, RequestLimit,
                             limit, rate_limit_exceeded_handler)
from ratewin_testkit import PATIENCE, free_port, http_get

HERE = pathlib.Path(__file__).resolve().parent


def statuses(client: TestClient, *paths: str) -> list[int]:
    return [client.get(p).status_code for p in paths]


def installed_app(engine: ratewin.Engine, **options) -> FastAPI:
    app = FastAPI()
    ratewin.fastapi.install(app, engine, **options)
    return app


# --- Counting per route template --------------------------------------------------------

def test_ids_share_the_count_of_their_route_template(engine):
    app = installed_app(engine)

    @app.get("/users/{id}", dependencies=[Depends(limit("2/minute"))])
    async def user(id: int) -> dict:
        return {"id": id}

    client = TestClient(app)
    assert statuses(client, "/users/1", "/users/2", "/users/3") == [200, 200, 429]


def test_equal_limits_on_two_routes_count_apart(engine):
    app = installed_app(engine)

    @app.get("/a", dependencies=[Depends(limit("1/minute"))])
    async def a() -> str:
        return "a"

    @app.get("/b", dependencies=[Depends(limit("1/minute"))])
    async def b() -> str:
        return "b"

    client = TestClient(app)
    assert statuses(client, "/a", "/b", "/a", "/b") == [200, 200, 429, 429]


def test_a_shared_scope_joins_routes(engine):
    app = installed_app(engine)
    limiter: Limiter = app.state.limiter

    @app.get("/a", dependencies=[Depends(limit("2/minute", scope="api"))])
    async def a() -> str:
        return "a"

    @app.get("/b")
    @limiter.shared_limit("2/minute", scope="api")
    async def b(request: Request) -> str:
        return "b"

    @app.get("/c", dependencies=[Depends(limit("2/minute"))])
    async def c() -> str:
        return "c"

    client = TestClient(app)
    assert statuses(client, "/a", "/b", "/a", "/b", "/c") == [200, 200, 429, 429, 200]


def test_a_limit_with_a_scope_name_joins_routes(engine):
    app = installed_app(engine)
    named = ratewin.Limit(2, per=60, scope="search")

    @app.get("/x", dependencies=[Depends(limit(named))])
    async def x() -> str:
        return "x"

    @app.get("/y", dependencies=[Depends(limit([named]))])
    async def y() -> str:
        return "y"

    client = TestClient(app)
    assert statuses(client, "/x", "/y", "/x") == [200, 200, 429]
    assert client.get("/y").json()["limit"] == "search"  # the scope name names it


def test_routes_under_two_mounts_count_apart(engine):
    app = installed_app(engine)
    for version in ("v1", "v2"):
        sub = FastAPI()

        @sub.get("/items", dependencies=[Depends(limit("1/minute", engine=engine))])
        async def items() -> str:
            return "items"

        app.mount("/" + version, sub)
    client = TestClient(app)
    assert statuses(client, "/v1/items", "/v2/items", "/v1/items") == [200, 200, 429]


# --- The dependency ---------------------------------------------------------------------

def test_dependency_with_its_own_engine(engine, clock):
    app = FastAPI()  # nothing installed: FastAPI's HTTPException handler answers
    seen: list[RequestLimit] = []

    @app.get("/")
    async def index(request: Request,
                    rl: RequestLimit = Depends(limit("2/minute", engine=engine))) -> dict:
        assert request.state.ratewin is rl
        seen.append(rl)
        return {"remaining": rl.remaining}

    client = TestClient(app)
    assert client.get("/").json() == {"remaining": 1}
    assert client.get("/").json() == {"remaining": 0}
    refused = client.get("/")
    assert refused.status_code == 429
    assert refused.json() == {"detail": "2/60s"}
    assert int(refused.headers["Retry-After"]) >= 60
    assert [rl.allowed for rl in seen] == [True, True]
    assert seen[0].limit == ratewin.Limit(2, per=60)
    clock.advance(int(refused.headers["Retry-After"]))
    assert client.get("/").status_code == 200


def test_dependency_with_the_engine_installed_once(engine):
    app = installed_app(engine, headers="x-ratelimit")

    @app.get("/")
    async def index(rl: RequestLimit = Depends(limit("1/minute"))) -> dict:
        return {"allowed": rl.allowed}

    client = TestClient(app)
    ok = client.get("/")
    assert ok.json() == {"allowed": True}
    assert ok.headers["X-RateLimit-Limit"] == "1" and "RateLimit" not in ok.headers
    refused = client.get("/")
    assert refused.status_code == 429
    assert refused.json() == {"error": "rate limited", "limit": "1/60s",
                              "retry_after_s": int(refused.headers["Retry-After"])}


def test_dependency_without_an_engine_says_what_to_do():
    app = FastAPI()

    @app.get("/", dependencies=[Depends(limit("1/minute"))])
    async def index() -> str:
        return "x"

    with pytest.raises(RuntimeError, match="install"):
        TestClient(app).get("/")


def test_key_and_cost(engine):
    app = installed_app(engine, key=lambda request: request.headers.get("x-api-key"))

    @app.get("/", dependencies=[Depends(limit(
        "10/minute", cost=lambda request: int(request.query_params.get("n", "1"))))])
    async def index() -> str:
        return "x"

    client = TestClient(app)
    assert client.get("/?n=6", headers={"x-api-key": "a"}).headers["X-RateLimit-Remaining"] == "4"
    assert client.get("/?n=5", headers={"x-api-key": "a"}).status_code == 429
    assert client.get("/?n=4", headers={"x-api-key": "a"}).status_code == 200
    # Another key counts apart; no key (the key function says None): not limited.
    assert client.get("/?n=10", headers={"x-api-key": "b"}).status_code == 200
    unlimited = client.get("/?n=50")
    assert unlimited.status_code == 200 and "X-RateLimit-Limit" not in unlimited.headers
    # More than the limit can ever hold.
    refused = client.get("/?n=11", headers={"x-api-key": "c"})
    assert refused.json()["error"] == "cost exceeds limit"


def test_limits_chosen_per_request(engine):
    app = installed_app(engine)
    plans = {"free": "1/minute", "open": []}

    @app.get("/", dependencies=[Depends(limit(
        lambda request: plans.get(request.query_params.get("tier", ""))))])
    async def index(request: Request) -> dict:
        return {"limited": getattr(request.state, "ratewin", None) is not None}

    client = TestClient(app)
    assert statuses(client, "/?tier=free", "/?tier=free") == [200, 429]
    assert statuses(client, "/", "/") == [200, 200], "None: not limited"
    open_ = client.get("/?tier=open")
    assert open_.status_code == 200, "[]: not limited"
    assert open_.json() == {"limited": False} and "X-RateLimit-Limit" not in open_.headers


def test_headers_on_allowed_and_refused_responses(engine):
    app = installed_app(engine)

    @app.get("/", dependencies=[Depends(limit("2/minute"))])
    async def index() -> dict:
        return {}

    client = TestClient(app)
    ok = client.get("/")
    assert ok.headers["X-RateLimit-Limit"] == "2"
    assert ok.headers["X-RateLimit-Remaining"] == "1"
    reset = ok.headers["X-RateLimit-Reset"]  # the window, and a subinterval's rounding
    assert 60 <= int(reset) <= 70
    assert ok.headers["RateLimit-Policy"] == '"2/60s";q=2;w=60'
    assert ok.headers["RateLimit"] == f'"2/60s";r=1;t={reset}'
    assert "Retry-After" not in ok.headers
    client.get("/")
    refused = client.get("/")
    assert refused.status_code == 429
    assert refused.headers["X-RateLimit-Remaining"] == "0"
    assert int(refused.headers["Retry-After"]) >= 60
    assert refused.headers["RateLimit"].startswith('"2/60s";r=0;')
    assert refused.headers["Content-Type"] == "application/json"
    assert refused.json() == {"error": "rate limited", "limit": "2/60s",
                              "retry_after_s": int(refused.headers["Retry-After"])}


def test_the_fewest_remaining_is_shown_and_a_refusal_gives_back_the_others(engine):
    app = installed_app(engine)

    # The 5/minute limit is decided first, and admits what the 2/minute one then refuses.
    five = limit("5/minute", scope="five")

    @app.get("/", dependencies=[Depends(five), Depends(limit("2/minute"))])
    async def index(request: Request) -> dict:
        return {"remaining": request.state.ratewin.remaining}

    @app.get("/five", dependencies=[Depends(five)])
    async def only_five() -> dict:
        return {}

    client = TestClient(app)
    first = client.get("/")
    assert first.json() == {"remaining": 1} and first.headers["X-RateLimit-Limit"] == "2"
    assert client.get("/").status_code == 200
    assert statuses(client, "/", "/") == [429, 429]
    # The refused requests took nothing from the 5/minute count: two counted, and this
    # one, leave 2 (4 counted without the refunds would leave 0).
    assert client.get("/five").headers["X-RateLimit-Remaining"] == "2"


def test_a_limit_function_that_raises_gives_back_the_earlier_counts(engine):
    app = FastAPI()
    limiter = ratewin.fastapi.install(app, engine)
    broken = {"on": True}

    def cost(request: Request) -> int:
        if broken["on"]:
            raise RuntimeError("no cost")
        return 1

    def key(request: Request) -> str:
        if broken["on"]:
            raise RuntimeError("no key")
        return "k"

    @app.get("/dependency", dependencies=[Depends(limit("2/minute", scope="s")),
                                          Depends(limit("9/minute", cost=cost))])
    async def dependency(request: Request) -> dict:
        return {"remaining": request.state.ratewin.remaining}

    @app.get("/decorator")
    @limiter.shared_limit("2/minute", scope="s")
    @limiter.limit("9/minute", key=key)
    async def decorator(request: Request) -> dict:
        return {"remaining": request.state.ratewin.remaining}

    client = TestClient(app, raise_server_exceptions=False)
    assert statuses(client, "/dependency", "/decorator", "/dependency") == [500] * 3
    broken["on"] = False
    assert client.get("/dependency").json() == {"remaining": 1}, "nothing kept by the 500s"
    assert statuses(client, "/decorator", "/dependency") == [200, 429]


def test_router_dependencies_count_per_route(engine):
    from fastapi import APIRouter

    app = installed_app(engine)
    router = APIRouter(dependencies=[Depends(limit("1/minute"))])

    @router.get("/a")
    async def a() -> str:
        return "a"

    @router.get("/b")
    async def b() -> str:
        return "b"

    app.include_router(router)
    client = TestClient(app)
    assert statuses(client, "/a", "/b", "/a", "/b") == [200, 200, 429, 429]


def test_an_outer_asgi_middleware_gets_its_count_back(engine):
    """A refusal here marks the request refused, so that a ratewin.asgi middleware around
    the application gives its own count back (and leaves the refusal's headers alone)."""
    import ratewin.asgi

    app = installed_app(engine)

    @app.get("/", dependencies=[Depends(limit("1/minute"))])
    async def index() -> str:
        return "x"

    @app.get("/free")
    async def free() -> str:
        return "free"

    client = TestClient(ratewin.asgi.RateLimitMiddleware(app, engine, "4/minute"))
    assert statuses(client, "/", "/", "/") == [200, 429, 429]
    refused = client.get("/")
    assert refused.headers.get_list("X-RateLimit-Limit") == ["1"], "the inner limit's"
    # The outer count: the admitted request, and this one (5 counted without refunds).
    assert client.get("/free").headers["X-RateLimit-Remaining"] == "2"


def test_limiter_middleware_gives_back_when_refused_inside(engine):
    import ratewin.asgi

    limiter = Limiter(engine=engine, default_limits="3/minute")
    app = slowapi_app(limiter)
    inner_on = [True]

    @app.get("/")
    async def index() -> str:
        return "x"

    # add_middleware puts the latest outermost: the ratewin.asgi middleware runs inside
    # LimiterMiddleware, and refuses what LimiterMiddleware admitted.
    app.add_middleware(ratewin.asgi.RateLimitMiddleware, engine=engine, limit="1/minute",
                       key=lambda scope: "inner" if inner_on[0] else None)
    app.add_middleware(LimiterMiddleware)
    client = TestClient(app)
    refused = [client.get("/") for _ in range(3)]
    assert [r.status_code for r in refused] == [200, 429, 429]
    assert refused[2].headers.get_list("X-RateLimit-Limit") == ["1"], "the inner limit's"
    inner_on[0] = False
    # Only the admitted request counted against the default 3/minute.
    assert statuses(client, "/", "/", "/") == [200, 200, 429]


def test_no_thread_pool_on_admission_or_refusal(engine, monkeypatch):
    """Async throughout: the dependency, the decorator and the 429 handler never hand work
    to Starlette's thread pool."""
    import fastapi.dependencies.utils
    import fastapi.routing
    import starlette.middleware.exceptions
    import starlette.routing

    def no_thread(*args, **kwargs):
        raise AssertionError("a thread pool was used")

    for module in (fastapi.dependencies.utils, fastapi.routing,
                   starlette.middleware.exceptions, starlette.routing):
        monkeypatch.setattr(module, "run_in_threadpool", no_thread)
    app = installed_app(engine)
    limiter: Limiter = app.state.limiter

    @app.get("/dep", dependencies=[Depends(limit("1/minute"))])
    async def dep() -> dict:
        return {}

    @app.get("/decorated")
    @limiter.limit("1/minute")
    async def decorated(request: Request) -> dict:
        return {}

    client = TestClient(app)
    assert statuses(client, "/dep", "/dep", "/decorated", "/decorated") == [200, 429] * 2


def test_on_reject(engine):
    def reject(request, decisions, limits):
        assert isinstance(request, Request)
        return ratewin.fastapi.Answer(503, [("Content-Type", "text/plain")],
                                      f"busy {request.url.path}".encode())

    app = installed_app(engine, on_reject=reject)

    @app.get("/here", dependencies=[Depends(limit("1/minute"))])
    async def here() -> str:
        return "x"

    client = TestClient(app)
    client.get("/here")
    refused = client.get("/here")
    assert refused.status_code == 503 and refused.text == "busy /here"
    assert int(refused.headers["Retry-After"]) >= 60


def test_degraded_decisions_are_marked():
    with ratewin.Engine("redis://127.0.0.1:1", connect_timeout=0.05) as down:
        app = installed_app(down)

        @app.get("/local", dependencies=[Depends(limit("5/minute"))])
        async def local(request: Request) -> dict:
            return {"degraded": request.state.ratewin.degraded}

        @app.get("/closed", dependencies=[Depends(limit(
            ratewin.Limit(5, per=60, on_failure="closed")))])
        async def closed() -> dict:
            return {}

        client = TestClient(app)
        ok = client.get("/local")
        assert ok.status_code == 200 and ok.json() == {"degraded": True}
        assert ok.headers["X-RateLimit-Policy"] == "degraded"
        assert ok.headers["RateLimit"].endswith(";degraded")
        refused = client.get("/closed")
        assert refused.status_code == 429
        assert refused.headers["X-RateLimit-Policy"] == "degraded"


def test_a_degraded_decision_is_marked_when_another_is_shown(engine):
    # The decision shown (fewest units left) was made with the shared store; another one
    # on the same request was not: the headers still say the request was decided degraded.
    with ratewin.Engine("redis://127.0.0.1:1", connect_timeout=0.05,
                        command_timeout=0.05) as down:
        app = FastAPI()
        limiter = ratewin.fastapi.install(app, engine)
        degraded = Depends(limit("100/minute", engine=down))
        healthy = Depends(limit("3/minute"))

        @app.get("/first", dependencies=[degraded, healthy])
        async def first() -> dict:
            return {}

        @app.get("/last", dependencies=[healthy, degraded])
        async def last() -> dict:
            return {}

        @app.get("/decorated", dependencies=[Depends(limit("100/minute", engine=down))])
        @limiter.limit("3/minute")
        async def decorated(request: Request) -> dict:
            return {}

        @app.get("/refused", dependencies=[degraded])
        @limiter.limit("1/minute")
        async def refused(request: Request) -> dict:
            return {}

        client = TestClient(app)
        for path in ("/first", "/last", "/decorated"):
            ok = client.get(path)
            assert ok.status_code == 200, path
            assert ok.headers["X-RateLimit-Remaining"] == "2", path
            assert ok.headers["X-RateLimit-Policy"] == "degraded", path
            assert ok.headers["RateLimit"].startswith('"3/60s";r=2;'), path
            assert ok.headers["RateLimit"].endswith(";degraded"), path
        assert client.get("/refused").status_code == 200
        no = client.get("/refused")
        assert no.status_code == 429 and no.headers["X-RateLimit-Remaining"] == "0"
        assert no.headers["X-RateLimit-Policy"] == "degraded"


# --- The decorator ------------------------------------------------------------------------

def slowapi_app(limiter: Limiter) -> FastAPI:
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)
    return app


def test_decorator_form(engine):
    limiter = Limiter(engine=engine)
    app = slowapi_app(limiter)

    @app.get("/items/{id}")
    @limiter.limit("2/minute")
    async def item(request: Request, id: int) -> dict:
        return {"id": id, "remaining": request.state.ratewin.remaining}

    @app.get("/sync")
    @limiter.limit("1/minute")
    def sync(request: Request, response: Response) -> dict:
        response.headers["X-Own"] = "yes"
        return {}

    @app.get("/response")
    @limiter.limit("1/minute")
    async def own_response(request: Request) -> PlainTextResponse:
        return PlainTextResponse("own")

    client = TestClient(app)
    first = client.get("/items/1")
    assert first.json() == {"id": 1, "remaining": 1}
    assert first.headers["X-RateLimit-Remaining"] == "1"
    assert client.get("/items/2").status_code == 200
    refused = client.get("/items/3")
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 60
    assert refused.json()["limit"] == "2/60s"
    synced = client.get("/sync")
    assert synced.headers["X-Own"] == "yes" and synced.headers["X-RateLimit-Limit"] == "1"
    assert client.get("/sync").status_code == 429
    own = client.get("/response")
    assert own.text == "own" and own.headers["X-RateLimit-Limit"] == "1"
    # The parameters FastAPI documents are the endpoint's.
    schema = client.get("/openapi.json").json()
    assert [p["name"] for p in schema["paths"]["/items/{id}"]["get"]["parameters"]] == ["id"]


def test_limiter_depends_and_enabled(engine):
    limiter = Limiter(engine=engine, headers="ietf")
    app = slowapi_app(limiter)

    @app.get("/", dependencies=[Depends(limiter.depends("1/minute"))])
    async def index() -> dict:
        return {}

    @app.get("/installed", dependencies=[Depends(limit("1/minute"))])
    async def installed() -> dict:
        return {}

    client = TestClient(app)
    ok = client.get("/")
    assert ok.headers["RateLimit"].startswith('"1/60s";r=0;')
    assert "X-RateLimit-Limit" not in ok.headers
    assert statuses(client, "/", "/installed", "/installed") == [429, 200, 429]
    limiter.enabled = False
    # Off for its own dependencies, and for limit() ones that use app.state.limiter.
    assert statuses(client, "/", "/installed") == [200, 200]


def test_stacked_decorators_show_the_fewest_remaining(engine):
    limiter = Limiter(engine=engine)
    app = slowapi_app(limiter)

    @app.get("/")
    @limiter.limit("3/minute")
    @limiter.limit("2/minute")
    async def index(request: Request) -> dict:
        return {"remaining": request.state.ratewin.remaining}

    client = TestClient(app)
    first = client.get("/")
    assert first.json() == {"remaining": 1}
    assert first.headers["X-RateLimit-Limit"] == "2"
    assert first.headers["X-RateLimit-Remaining"] == "1"
    assert statuses(client, "/", "/") == [200, 429]


def test_a_returned_response_gets_a_dependencys_decision_when_it_is_shown(engine):
    # The dependency's decision (fewer units left) is the one shown; the endpoint returns
    # a Response of its own, which the decorator gives the headers of the decision shown.
    limiter = Limiter(engine=engine)
    app = slowapi_app(limiter)

    @app.get("/", dependencies=[Depends(limiter.depends("2/minute"))])
    @limiter.limit("5/minute")
    async def index(request: Request) -> PlainTextResponse:
        return PlainTextResponse("own")

    client = TestClient(app)
    first = client.get("/")
    assert first.status_code == 200 and first.text == "own"
    assert first.headers["X-RateLimit-Limit"] == "2"
    assert first.headers["X-RateLimit-Remaining"] == "1"
    assert first.headers["RateLimit"].startswith('"2/60s";r=1;')
    assert statuses(client, "/", "/") == [200, 429]


def test_decorator_needs_the_request():
    limiter = Limiter(engine=ratewin.Engine())
    with pytest.raises(TypeError, match="request: Request"):
        @limiter.limit("1/minute")
        async def no_request(id: int) -> dict:
            return {}


def test_default_limits_and_exempt(engine):
    limiter = Limiter(engine=engine, default_limits="2/minute")
    app = slowapi_app(limiter)
    app.add_middleware(LimiterMiddleware)

    @app.get("/plain/{id}")
    async def plain(request: Request, id: int) -> dict:
        return {"remaining": request.state.ratewin.remaining}

    @app.get("/other")
    async def other() -> dict:
        return {}

    @app.get("/free")
    @limiter.exempt
    async def free() -> dict:
        return {}

    @app.get("/own")
    @limiter.limit("5/minute")
    async def own(request: Request) -> dict:
        return {}

    @app.get("/dep", dependencies=[Depends(limit("5/minute"))])
    async def dep() -> dict:
        return {}

    client = TestClient(app)
    assert client.get("/plain/1").json() == {"remaining": 1}
    assert statuses(client, "/plain/2", "/plain/3") == [200, 429]
    refused = client.get("/plain/4")
    assert int(refused.headers["Retry-After"]) >= 60 and refused.json()["limit"] == "2/60s"
    assert statuses(client, "/other", "/other", "/other") == [200, 200, 429]
    exempted = client.get("/free")
    assert exempted.status_code == 200 and "X-RateLimit-Limit" not in exempted.headers
    assert statuses(client, "/free", "/free") == [200, 200]
    assert [client.get("/own").headers["X-RateLimit-Limit"] for _ in range(3)] == ["5"] * 3
    assert [client.get("/dep").headers["X-RateLimit-Limit"] for _ in range(3)] == ["5"] * 3
    assert client.get("/missing").status_code == 404


def test_limiter_middleware_added_twice_counts_once(engine):
    # install(default_limits=...) adds LimiterMiddleware; a slowapi habit adds it again.
    app = installed_app(engine, default_limits="2/minute")
    app.add_middleware(LimiterMiddleware)

    @app.get("/")
    async def index(request: Request) -> dict:
        return {"remaining": request.state.ratewin.remaining}

    client = TestClient(app)
    first = client.get("/")
    assert first.json() == {"remaining": 1}
    assert first.headers.get_list("X-RateLimit-Remaining") == ["1"]
    assert statuses(client, "/", "/") == [200, 429]


def test_plain_starlette(engine):
    """No dependencies in Starlette: the decorator and the middleware work on its Routes
    (which, unlike FastAPI's, do not set scope["route"])."""
    limiter = Limiter(engine=engine, default_limits="1/minute")

    @limiter.limit("2/minute")
    async def user(request: Request) -> JSONResponse:
        return JSONResponse({"remaining": request.state.ratewin.remaining})

    async def home(request: Request) -> PlainTextResponse:
        return PlainTextResponse("home")

    app = Starlette(routes=[Route("/", home),
                            Mount("/api", routes=[Route("/users/{id}", user),
                                                  Route("/people/{id}", user)])])
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)
    app.add_middleware(LimiterMiddleware)
    client = TestClient(app)
    first = client.get("/api/users/1")
    assert first.json() == {"remaining": 1} and first.headers["X-RateLimit-Limit"] == "2"
    assert statuses(client, "/api/users/2", "/api/users/3") == [200, 429]
    assert statuses(client, "/", "/") == [200, 429]
    # One endpoint on two routes: each route counts apart.
    assert statuses(client, "/api/people/1", "/api/people/2", "/api/people/3") == [200, 200, 429]
    assert ratewin.fastapi.route_template(
        {"router": app.router, "endpoint": user, "path": "/users/9", "type": "http",
         "method": "GET"}) == "/api/users/{id}"


def test_a_route_out_of_the_routers_sight_counts_per_endpoint(engine):
    """Under a mount of an application wrapped in middleware, the outer router cannot see
    the route: ids still share one count (the endpoint's), not one per path."""
    from starlette.middleware.gzip import GZipMiddleware

    limiter = Limiter(engine=engine)

    @limiter.limit("2/minute")
    async def user(request: Request) -> PlainTextResponse:
        return PlainTextResponse("user")

    inner = GZipMiddleware(Starlette(routes=[Route("/users/{id}", user)]))
    app = Starlette(routes=[Mount("/sub", app=inner)])
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)
    client = TestClient(app)
    assert statuses(client, "/sub/users/1", "/sub/users/2", "/sub/users/3") == [200, 200, 429]


# --- The example of docs/fastapi.md ---------------------------------------------------------

def test_docs_fastapi_example(tmp_path):
    from test_readme import run_example

    # Not "fastapi": run_example writes the block to NAME.py, and a fastapi.py beside the
    # program would be imported in place of the fastapi package.
    lines = run_example(tmp_path, "fastapi-app")
    assert lines == [
        "200 {'user': 1, 'remaining': 1} 1",
        "200 {'user': 2, 'remaining': 0} 0",
        "429 rate limited 2/60s True",
        "200 429",
        "200 429",
    ], lines


# --- uvicorn, two workers, one count on Redis -----------------------------------------------

def get(url: str) -> tuple[int, str, dict]:
    """The status, the X-Worker header and the JSON body of a GET."""
    status, headers, body = http_get(url)
    return status, headers["X-Worker"], json.loads(body)


def children_of(pid: int) -> list[int]:
    try:
        text = pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def test_uvicorn_two_workers_admit_exactly_n(redis, tmp_path):
    n = 5
    port = free_port()
    package_root = pathlib.Path(ratewin.__file__).resolve().parent.parent
    env = dict(os.environ, RATEWIN_REDIS=redis.url, RATEWIN_TEST_LIMIT=str(n),
               PYTHONPATH=os.pathsep.join([str(package_root), str(HERE / "apps")]))
    log = open(tmp_path / "uvicorn.log", "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--workers", "2", "--host", "127.0.0.1",
         "--port", str(port), "fastapi_app:app"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    workers: list[int] = []
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + PATIENCE
        # Ready when both workers have started their application.
        while (tmp_path / "uvicorn.log").read_text().count("Application startup complete") < 2:
            assert server.poll() is None, (tmp_path / "uvicorn.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "uvicorn.log").read_text()
            time.sleep(0.02)
        workers = children_of(server.pid)  # the workers (and multiprocessing's helper)
        answers = [get(base + "/limited") for _ in range(3 * n)]
        # Both workers must decide (the kernel hands each connection to one of them, not
        # necessarily in turn): more requests, a bounded number, until both have.
        while len({worker for _, worker, _ in answers}) < 2 and len(answers) < 300:
            answers.append(get(base + "/limited"))
        assert len({worker for _, worker, _ in answers}) == 2, answers
        admitted = [body for status, _, body in answers if status == 200]
        assert len(admitted) == n, answers
        assert [status for status, _, _ in answers].count(429) == len(answers) - n
    finally:
        workers = workers or children_of(server.pid)
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=PATIENCE)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=PATIENCE)
            # Killed: its workers may be left; stopped cleanly, they are gone, and their
            # PIDs may name other processes by now.
            for pid in workers:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        log.close()
