"""ASGI middleware: limits per client (and per route), with rate-limit headers.

    import ratewin
    from ratewin.asgi import RateLimitMiddleware

    engine = ratewin.Engine()  # or ratewin.Engine("redis://10.0.0.5:6379")
    app = RateLimitMiddleware(app, engine, "100/minute; 1000/day")

Starlette / FastAPI: ``app.add_middleware(RateLimitMiddleware, engine=engine,
limit=limit)``. Django (ASGI): wrap ``get_asgi_application()``.

HTTP requests only (websocket and lifespan events pass through). Every limited
response carries X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset, and
the IETF RateLimit-Policy and RateLimit; a rejected request is answered ``429 Too Many
Requests`` with Retry-After and a JSON body, without calling the application.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, MutableMapping, Optional

from ._middleware import (
    REFUSED_MARK,
    Answer,
    Charge,
    Middleware,
    with_length,
)
from ._ratewin import Decisions

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["Answer", "RateLimitMiddleware", "client_address"]


def client_address(scope: Scope) -> Optional[str]:
    """The default client key: the peer's address (``scope["client"]``).

    Behind a proxy, pass ``key=`` a function that reads the header your proxy sets.
    """
    client = scope.get("client")
    return client[0] if client else None


def _encoded(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers]


class RateLimitMiddleware(Middleware[ASGIApp, Scope]):
    """Limits an ASGI application per client key (and per route).

    ``limit`` is what every request counts against: a Limit, a limit string
    (``"10/second; 1000/day"``, see ratewin.parse_many), or a list of them, all counted
    at once (a request is admitted only if every limit admits it, and a refused one
    counts against none); or a function ``(scope) -> limits | None`` that picks them per
    request; None (or an empty list) leaves the request
    unlimited.

    ``key(scope)`` names the client (None: unlimited). The default is the peer address;
    a request without one (``uvicorn --uds``: ``scope["client"]`` is None) shares one
    count with all such requests, and a warning is logged once on the ``ratewin``
    logger. ``cost(scope)`` gives the units a request takes (default 1).

    ``per_path`` says where a client's limits count apart. ``None`` (the default): a
    limit given here is one count for the whole application, and a limit chosen by a
    function counts per request path (equal limits chosen for two routes count apart);
    ``False``: one count per client, whatever the function chooses (tiers by key);
    ``True``: every limit per request path; a function ``(scope) -> str | None``: per
    the value it returns (a route name, an API group; None: the client's plain count).
    A limit with a scope name (``ratewin.parse("3/minute", scope="reports")``) counts in
    that scope in every case: limits named alike share one count per client. Counting
    per raw path suits only a fixed set of paths: where paths carry ids (``/users/42``)
    a client escapes the limit by varying them, and fills the engine with limiters that
    crowd out other clients'; name a scope, or return the route from ``per_path``.

    ``headers``, ``reset`` and ``on_reject(scope, decisions, limits)`` are as in
    ratewin.wsgi.RateLimitMiddleware. Stacked, an outer ratewin middleware gives its count
    back when an inner one refuses the request, and leaves the inner one's headers alone.

    Decisions are awaited (Engine.try_acquire_all_async): an admission with Redis
    waits for its round trip on the engine's I/O thread while the event loop keeps
    serving, without an executor thread per request; refusals and local mode are
    decided in place, in well under a microsecond.
    """

    request_name = "scope"
    default_key = staticmethod(client_address)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # ASGI's path is the full path, root_path included.
        found = self.limits.charge(scope, scope.get("path", ""))
        if found is None:
            await self.app(scope, receive, send)
            return
        charge: Charge = found
        decisions: Decisions = await charge.try_acquire_async(self.engine)
        headers = self.responder.headers(decisions, charge.shown)
        if not decisions.allowed:
            scope[REFUSED_MARK] = True
            answer = self.responder.refusal(scope, decisions, charge.shown, charge.cost)
            await send({"type": "http.response.start", "status": answer.status,
                        "headers": _encoded(with_length(answer, headers))})
            await send({"type": "http.response.body", "body": answer.body})
            return
        encoded = _encoded(headers)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                if scope.get(REFUSED_MARK):
                    # An inner ratewin middleware refused it: this one's count goes back,
                    # and the headers are the inner one's.
                    charge.refund(self.engine)
                else:
                    message = dict(message)
                    message["headers"] = list(message.get("headers", [])) + encoded
            await send(message)

        await self.app(scope, receive, send_with_headers)
