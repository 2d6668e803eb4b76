"""WSGI middleware: a limit per client (and per route), with rate-limit headers.

    import ratewin
    from ratewin.wsgi import RateLimitMiddleware

    engine = ratewin.Engine()  # or ratewin.Engine("redis://10.0.0.5:6379")
    app = RateLimitMiddleware(app, engine, ratewin.Limit(100, per=60))

Flask: ``app.wsgi_app = RateLimitMiddleware(app.wsgi_app, engine, limit)``.
Django: wrap ``get_wsgi_application()`` in ``wsgi.py`` the same way.

Every limited response carries X-RateLimit-Limit, X-RateLimit-Remaining and
X-RateLimit-Reset; a rejected request is answered ``429 Too Many Requests`` with
Retry-After, without calling the application.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Optional, Union

from ._middleware import TOO_MANY_REQUESTS, PathChoice, RequestLimits
from ._ratewin import Engine, Limit

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

__all__ = ["RateLimitMiddleware", "client_address"]


def client_address(environ: Environ) -> Optional[str]:
    """The default client key: the peer's address (REMOTE_ADDR).

    Behind a proxy, pass ``key=`` a function that reads the header your proxy sets (and
    that only it can set), for example ``lambda e: e.get("HTTP_X_REAL_IP")``.
    """
    return environ.get("REMOTE_ADDR") or None


class RateLimitMiddleware:
    """Limits a WSGI application per client key (and per route).

    ``limit`` is a Limit for every request, or a function ``(environ) -> Limit | None``
    that picks one per request (per endpoint, per tier, ...); None leaves the request
    unlimited. ``key(environ)`` names the client (None: unlimited); ``cost(environ)``
    gives the units a request takes (default 1).

    ``per_path`` splits a client's count: ``False`` (the default) gives a client one count
    for the whole application; a function ``(environ) -> str | None`` gives one count per
    value it returns (a route name, an API group; None: the client's plain count);
    ``True`` gives one count per request path, which suits only applications with a
    fixed set of paths: where paths carry ids (``/users/42``) a client escapes the limit
    by varying them, and fills the engine with limiters that crowd out other clients'.
    """

    def __init__(
        self,
        app: WSGIApp,
        engine: Engine,
        limit: Union[Limit, Callable[[Environ], Optional[Limit]]],
        *,
        key: Callable[[Environ], Optional[str]] = client_address,
        cost: Optional[Callable[[Environ], int]] = None,
        per_path: PathChoice = False,
    ) -> None:
        self.app = app
        self.engine = engine
        self.limits = RequestLimits(limit, key, cost, per_path, "environ")

    def __repr__(self) -> str:
        return f"<ratewin.wsgi.RateLimitMiddleware {self.limits.limit!r} around {self.app!r}>"

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        charge = self.limits.charge(
            environ, environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))
        if charge is None:
            return self.app(environ, start_response)
        decision = self.engine.try_acquire(*charge)
        headers = list(decision.headers().items())
        if not decision.allowed:
            start_response(
                "429 Too Many Requests",
                [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("Content-Length", str(len(TOO_MANY_REQUESTS))),
                ]
                + headers,
            )
            return [TOO_MANY_REQUESTS]

        def start_with_headers(
            status: str, response_headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            return start_response(status, list(response_headers) + headers, exc_info)

        return self.app(environ, start_with_headers)
