"""ASGI middleware: a limit per client (and per route), with rate-limit headers.

    import ratewin
    from ratewin.asgi import RateLimitMiddleware

    engine = ratewin.Engine()  # or ratewin.Engine("redis://10.0.0.5:6379")
    app = RateLimitMiddleware(app, engine, ratewin.Limit(100, per=60))

Starlette / FastAPI: ``app.add_middleware(RateLimitMiddleware, engine=engine,
limit=limit)``. Django (ASGI): wrap ``get_asgi_application()``.

HTTP requests only (websocket and lifespan events pass through). Every limited
response carries X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset; a
rejected request is answered ``429 Too Many Requests`` with Retry-After, without
calling the application.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, MutableMapping, Optional, Union

from ._middleware import TOO_MANY_REQUESTS, Charge, PathChoice, RequestLimits
from ._ratewin import Decision, Engine, Limit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["RateLimitMiddleware", "client_address"]


def client_address(scope: Scope) -> Optional[str]:
    """The default client key: the peer's address (``scope["client"]``).

    Behind a proxy, pass ``key=`` a function that reads the header your proxy sets.
    """
    client = scope.get("client")
    return client[0] if client else None


class RateLimitMiddleware:
    """Limits an ASGI application per client key (and per route).

    ``limit`` is a Limit for every request, or a function ``(scope) -> Limit | None``
    that picks one per request; None leaves the request unlimited. ``key(scope)`` names
    the client (None: unlimited); ``cost(scope)`` gives the units a request takes
    (default 1).

    ``per_path`` splits a client's count: ``False`` (the default) gives a client one count
    for the whole application; a function ``(scope) -> str | None`` gives one count per
    value it returns (a route name, an API group; None: the client's plain count);
    ``True`` gives one count per request path, which suits only applications with a
    fixed set of paths: where paths carry ids (``/users/42``) a client escapes the limit
    by varying them, and fills the engine with limiters that crowd out other clients'.

    An admission with Redis waits for one round trip (up to the engine's
    command_timeout); with ``offload`` (the default when the engine uses Redis) the
    decision is made on the event loop's default executor, so the loop keeps serving
    meanwhile. In local mode a decision takes well under a microsecond and is made in
    place.
    """

    def __init__(
        self,
        app: ASGIApp,
        engine: Engine,
        limit: Union[Limit, Callable[[Scope], Optional[Limit]]],
        *,
        key: Callable[[Scope], Optional[str]] = client_address,
        cost: Optional[Callable[[Scope], int]] = None,
        per_path: PathChoice = False,
        offload: Optional[bool] = None,
    ) -> None:
        self.app = app
        self.engine = engine
        self.limits = RequestLimits(limit, key, cost, per_path, "scope")
        self.offload = engine.redis is not None if offload is None else offload

    def __repr__(self) -> str:
        return f"<ratewin.asgi.RateLimitMiddleware {self.limits.limit!r} around {self.app!r}>"

    async def _decide(self, charge: Charge) -> Decision:
        if not self.offload:
            return self.engine.try_acquire(*charge)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.engine.try_acquire, *charge)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # ASGI's path is the full path, root_path included.
        charge = self.limits.charge(scope, scope.get("path", ""))
        if charge is None:
            await self.app(scope, receive, send)
            return
        decision = await self._decide(charge)
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in decision.headers().items()
        ]
        if not decision.allowed:
            await send(
                {
                    "type": "http.response.start",
                    "status": 429,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(TOO_MANY_REQUESTS)).encode("latin-1")),
                    ]
                    + headers,
                }
            )
            await send({"type": "http.response.body", "body": TOO_MANY_REQUESTS})
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = list(message.get("headers", [])) + headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
