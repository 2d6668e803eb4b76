"""WSGI middleware: limits per client (and per route), with rate-limit headers.

    import ratewin
    from ratewin.wsgi import RateLimitMiddleware

    engine = ratewin.Engine()  # or ratewin.Engine("redis://10.0.0.5:6379")
    app = RateLimitMiddleware(app, engine, "100/minute; 1000/day")

Flask: ``app.wsgi_app = RateLimitMiddleware(app.wsgi_app, engine, limit)``, or ratewin.flask
for decorators per route.
Django: wrap ``get_wsgi_application()`` in ``wsgi.py`` the same way.

Every limited response carries X-RateLimit-Limit, X-RateLimit-Remaining and
X-RateLimit-Reset, and the IETF RateLimit-Policy and RateLimit; a rejected request is
answered ``429 Too Many Requests`` with Retry-After and a JSON body, without calling
the application.
"""

from __future__ import annotations

import http
from typing import Any, Callable, Dict, Iterable, Optional

from ._middleware import (
    REFUSED_MARK,
    Answer,
    Charge,
    Middleware,
    with_length,
)

Environ = Dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

__all__ = ["Answer", "RateLimitMiddleware", "client_address"]


def client_address(environ: Environ) -> Optional[str]:
    """The default client key: the peer's address (REMOTE_ADDR).

    Behind a proxy, pass ``key=`` a function that reads the header your proxy sets (and
    that only it can set), for example ``lambda e: e.get("HTTP_X_REAL_IP")``.
    """
    return environ.get("REMOTE_ADDR") or None


def _status_line(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


class RateLimitMiddleware(Middleware[WSGIApp, Environ]):
    """Limits a WSGI application per client key (and per route).

    ``limit`` is what every request counts against: a Limit, a limit string
    (``"10/second; 1000/day"``, see ratewin.parse_many), or a list of them, all counted
    at once (a request is admitted only if every limit admits it, and a refused one
    counts against none); or a function ``(environ) -> limits | None`` that picks them
    per request (per endpoint, per tier, ...); None (or an empty list) leaves the request
    unlimited.

    ``key(environ)`` names the client (None: unlimited). The default is the peer
    address; a request without one (a server on a Unix socket) shares one count with all
    such requests, and a warning is logged once on the ``ratewin`` logger.
    ``cost(environ)`` gives the units a request takes (default 1).

    ``per_path`` says where a client's limits count apart. ``None`` (the default): a
    limit given here is one count for the whole application, and a limit chosen by a
    function counts per request path (equal limits chosen for two routes count apart);
    ``False``: one count per client, whatever the function chooses (tiers by key);
    ``True``: every limit per request path; a function ``(environ) -> str | None``: per
    the value it returns (a route name, an API group; None: the client's plain count).
    A limit with a scope name (``ratewin.parse("3/minute", scope="reports")``) counts in
    that scope in every case: limits named alike share one count per client. Counting
    per raw path suits only a fixed set of paths: where paths carry ids (``/users/42``)
    a client escapes the limit by varying them, and fills the engine with limiters that
    crowd out other clients'; name a scope, or return the route from ``per_path``.

    ``headers``: ``"both"`` (default: X-RateLimit-* and the IETF RateLimit-Policy and
    RateLimit), ``"x-ratelimit"``, ``"ietf"`` or ``"none"`` (Retry-After is always sent
    with a refusal). ``reset``: X-RateLimit-Reset as ``"delay"`` (default: seconds until
    the window is empty) or ``"unix"`` (that moment as a Unix time, as flask-limiter and
    slowapi send it). ``on_reject(environ, decisions, limits)`` returns the Answer to a
    refused request (status, headers, body); the rate-limit headers are added unless it
    sets them. Default: 429 with a JSON body naming the limit and the wait.

    Stacked, an outer ratewin middleware gives its count back when an inner one refuses
    the request, and leaves the inner one's headers alone.
    """

    request_name = "environ"
    default_key = staticmethod(client_address)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        found = self.limits.charge(
            environ, environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))
        if found is None:
            return self.app(environ, start_response)
        charge: Charge = found
        decisions = charge.try_acquire(self.engine)
        headers = self.responder.headers(decisions, charge.shown)
        if not decisions.allowed:
            environ[REFUSED_MARK] = True
            answer = self.responder.refusal(environ, decisions, charge.shown, charge.cost)
            start_response(_status_line(answer.status), with_length(answer, headers))
            return [answer.body]

        def start_with_headers(
            status: str, response_headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            if environ.get(REFUSED_MARK):
                # An inner ratewin middleware refused it: this one's count goes back, and
                # the headers are the inner one's (the mark stays for further outer ones).
                charge.refund(self.engine)
                return start_response(status, response_headers, exc_info)
            return start_response(status, list(response_headers) + headers, exc_info)

        return self.app(environ, start_with_headers)
