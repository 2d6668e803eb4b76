"""What the WSGI and ASGI middleware share: choosing the limits, the client, the
resource and the cost of a request; deciding; the rate-limit headers; the 429 answer."""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from typing import (Any, Callable, ClassVar, Generic, Iterable, NamedTuple, Optional, Sequence,
                    TypeVar, Union)

from ._ratewin import Decisions, Engine, Limit, _limits, _rate_limit_headers

log = logging.getLogger("ratewin")

# A request as the framework gives it: a WSGI environ or an ASGI scope.
Request = Any
# The limits of a request: one Limit, a limit string ("10/second; 1000/day"), or a
# sequence of either.
Limits = Union[Limit, str, Sequence[Union[Limit, str]]]
LimitChoice = Union[Limits, Callable[[Request], Optional[Limits]]]
# Where a client's limits count apart (see RequestLimits): None, the default: a fixed
# limit once for the whole application, a limit chosen by a function per request path;
# True: every limit per request path; a function: per what it returns (a route name,
# say); False: one count per client.
PathChoice = Union[None, bool, Callable[[Request], Optional[str]]]

class Answer(NamedTuple):
    """What a refused request is answered (see ``on_reject``)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


# on_reject(request, decisions, limits) -> Answer: decisions.index names the limit that
# refused (limits[decisions.index]).
RejectHook = Callable[[Request, Decisions, Sequence[Limit]], Answer]

HEADER_STYLES = ("both", "x-ratelimit", "ietf", "none")
RESET_STYLES = ("delay", "unix")

# The key of a request whose client the default key function cannot name (a Unix socket
# server has no peer address): all such requests share one count.
UNKNOWN_CLIENT = "unknown-client"

# Set in the request (environ or scope) by a middleware that refuses it, so that an outer
# ratewin middleware gives its own count back and leaves the headers alone.
REFUSED_MARK = "ratewin.refused"


class UnknownClient:
    """The key of requests whose client the default key function cannot name (no peer
    address: a server on a Unix socket): UNKNOWN_CLIENT, shared by all such requests, with
    a warning on the ``ratewin`` logger the first time its owner (a middleware, a
    limiter) meets one."""

    def __init__(self) -> None:
        self._warned = threading.Event()

    def __call__(self) -> str:
        if not self._warned.is_set():
            self._warned.set()
            log.warning(
                "ratewin: a request has no client address (a Unix socket server?): such "
                "requests share one count, %r; pass key= to name clients", UNKNOWN_CLIENT)
        return UNKNOWN_CLIENT


def check_engine(engine: Any) -> Engine:
    """`engine`, if it is a ratewin.Engine; TypeError otherwise."""
    if not isinstance(engine, Engine):
        raise TypeError(f"engine must be a ratewin.Engine, not {type(engine).__name__}")
    return engine


def check_key(key: Any, signature: str) -> None:
    """TypeError unless `key` is None or a function (`signature` says of what)."""
    if key is not None and not callable(key):
        raise TypeError(f"key must be a function {signature} -> str | None")


def check_cost(cost: Any, signature: str) -> None:
    """TypeError unless `cost` is a whole number of units (1 or more; not a bool) or a
    function (`signature` says of what)."""
    if not callable(cost) and (isinstance(cost, bool) or not isinstance(cost, int) or cost < 1):
        raise TypeError("cost must be a whole number of units (1 or more) or a function "
                        f"{signature} -> int")


def fixed_limits(value: Any) -> Optional[tuple[Limit, ...]]:
    """The limits of a limit option when they are fixed (a Limit, a limit string or a list
    of them), None when a function chooses them per request."""
    if callable(value) and not isinstance(value, Limit):
        return None
    return as_limits(value)


def as_limits(value: Limits) -> tuple[Limit, ...]:
    """One Limit, a limit string or a sequence of either, as a tuple of Limit (the
    engine's own reading: TypeError or ValueError saying what is wrong)."""
    if isinstance(value, (list, tuple, str, Limit)):
        return tuple(_limits(value))
    raise TypeError(
        "limit must be a ratewin.Limit, a limit string such as '10/second; 1000/day', a "
        f"list of them, or a function returning one, not {type(value).__name__}")


@functools.lru_cache(maxsize=4096)
def counted_in(limits: tuple[Limit, ...], scope: str) -> tuple[Limit, ...]:
    """The limits as counted in `scope` (a route, a path, a name the application gives):
    a limit with a scope name of its own keeps it, so that limits named alike share their
    counts wherever they are chosen; one without counts in `scope`, apart from equal
    limits counted in other scopes, and from the other limits of this one."""
    return tuple(lim if lim.scope is not None else lim.with_scope(f"{scope}\n{lim!r}")
                 for lim in limits)


def limit_name(limit: Limit) -> str:
    """A limit's name in headers and bodies: its scope's name, else "100/60s"."""
    if isinstance(limit.scope, str):
        return limit.scope
    per = limit.per
    return f"{limit.max}/{int(per) if per.is_integer() else per}s"


class Charge(NamedTuple):
    """What one request asks of the engine: `limits` as counted (in the scope of what
    chose them, see counted_in), `shown` as they were given, for headers and refusals."""

    resource: str
    limits: tuple[Limit, ...]
    cost: int
    shown: tuple[Limit, ...]

    def try_acquire(self, engine: Engine) -> Decisions:
        return engine.try_acquire_all(self.resource, self.limits, self.cost)

    async def try_acquire_async(self, engine: Engine) -> Decisions:
        return await engine.try_acquire_all_async(self.resource, self.limits, self.cost)

    def refund(self, engine: Engine) -> None:
        """Gives back what an admitted request counted (an inner middleware, or the
        application, refused it)."""
        for limit in self.limits:
            engine.refund(self.resource, limit, self.cost)


class RequestLimit(NamedTuple):
    """What a limited request was decided, as a handler sees it (``flask.g.ratewin``,
    ``request.state.ratewin``): the limit shown in the headers (the one that refused, else
    the one with the fewest units left), its units left, the seconds until its window is
    empty (``reset_after``) and that moment as a Unix time (``reset_at``), the seconds to
    wait before a retry can pass (0 when allowed), whether the decision was made without
    the shared store (``degraded``), and the engine's whole answer."""

    allowed: bool
    limit: Limit
    remaining: int
    reset_after: float
    reset_at: int
    retry_after: float
    degraded: bool
    decisions: Decisions

    @classmethod
    def of(cls, decisions: Decisions, shown: Sequence[Limit]) -> "RequestLimit":
        d = decisions.decision
        return cls(decisions.allowed, shown[decisions.index], d.remaining, d.reset_after,
                   math.ceil(time.time() + d.reset_after),
                   0.0 if decisions.allowed else decisions.retry_after, decisions.degraded,
                   decisions)


class RequestLimits:
    """The per-request choices of a rate-limiting middleware (see its docstring)."""

    def __init__(
        self,
        limit: LimitChoice,
        key: Optional[Callable[[Request], Optional[str]]],
        default_key: Callable[[Request], Optional[str]],
        cost: Optional[Callable[[Request], int]],
        per_path: PathChoice,
        request_name: str,
    ) -> None:
        self.fixed = fixed_limits(limit)
        if per_path is not None and not isinstance(per_path, bool) and not callable(per_path):
            raise TypeError(
                f"per_path must be None, True, False or a function ({request_name}) -> str")
        self.limit = limit
        self.key = default_key if key is None else key
        self.fallback = key is None
        self.cost = cost
        self.per_path = per_path
        self.unknown = UnknownClient()

    def charge(self, request: Request, path: str) -> Optional[Charge]:
        """The charge for a request to `path`, or None when it is not limited (no limit
        applies to it, or a key function of the application's names no client)."""
        chosen_per_request = self.fixed is None
        if self.fixed is not None:
            limits = self.fixed
        else:
            chosen = self.limit(request)  # type: ignore[operator]
            if chosen is None or (isinstance(chosen, (list, tuple)) and not chosen):
                return None  # no limit this time
            limits = as_limits(chosen)
        client = self.key(request)
        if client is None:
            if not self.fallback:
                return None
            client = self.unknown()
        group: Optional[str] = None
        if self.per_path is True or (self.per_path is None and chosen_per_request):
            group = "path " + path
        elif callable(self.per_path):
            named = self.per_path(request)
            if named is not None:
                group = "group " + named
        counted = limits if group is None else counted_in(limits, group)
        return Charge(client, counted, 1 if self.cost is None else self.cost(request), limits)


class Responder:
    """Headers and refusals, as a middleware's options ask."""

    def __init__(self, headers: str, reset: str, on_reject: Optional[RejectHook]) -> None:
        if headers not in HEADER_STYLES:
            raise ValueError(f"headers must be one of {', '.join(HEADER_STYLES)}, not {headers!r}")
        if reset not in RESET_STYLES:
            raise ValueError(f"reset must be 'delay' or 'unix', not {reset!r}")
        if on_reject is not None and not callable(on_reject):
            raise TypeError("on_reject must be a function (request, decisions, limits) -> Answer")
        self.style = headers
        self.reset = reset
        self.on_reject = on_reject

    # Every header headers() may set.
    NAMES = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After",
             "X-RateLimit-Policy", "RateLimit-Policy", "RateLimit")

    def headers(self, decisions: Decisions, limits: Sequence[Limit],
                degraded: Optional[bool] = None) -> list[tuple[str, str]]:
        """The rate-limit headers of a decision: X-RateLimit-* and Retry-After, and the
        IETF RateLimit-Policy / RateLimit, as the options ask. A degraded decision (made
        without the shared store, by a limit's failure policy) says so: X-RateLimit-Policy:
        degraded, as ratewin-server sends it, and a ``degraded`` parameter on RateLimit.
        ``degraded``: whether to say so (default: whether `decisions` was degraded; True
        when another decision on the same request was)."""
        out: list[tuple[str, str]] = []
        if self.style == "none":
            return out
        if degraded is None:
            degraded = decisions.degraded
        d = decisions.decision
        if self.style in ("both", "x-ratelimit"):
            for name, value in decisions.headers().items():
                if name == "X-RateLimit-Reset" and self.reset == "unix":
                    value = str(math.ceil(time.time() + d.reset_after))
                out.append((name, value))
            if degraded:  # as ratewin-server marks it
                out.append(("X-RateLimit-Policy", "degraded"))
        else:
            retry = decisions.headers().get("Retry-After")
            if retry is not None:
                out.append(("Retry-After", retry))
        if self.style in ("both", "ietf"):
            # Formatted by the extension, as ratewin-server formats them: each limit a quota
            # q (its burst) per w seconds (a token bucket's whole refill), the shown one's
            # state.
            policy, state = _rate_limit_headers(limits, [limit_name(lim) for lim in limits],
                                                decisions.index, d.remaining,
                                                math.ceil(d.reset_after), degraded)
            out.append(("RateLimit-Policy", policy))
            out.append(("RateLimit", state))
        return out

    def refusal(self, request: Request, decisions: Decisions, limits: Sequence[Limit],
                cost: int) -> Answer:
        """The answer to a refused request: the hook's, or a JSON body saying which limit
        refused and when to retry (or that retrying cannot help)."""
        if self.on_reject is not None:
            answer = self.on_reject(request, decisions, limits)
            if not isinstance(answer, tuple) or len(answer) != 3:
                raise TypeError("on_reject must return an Answer(status, headers, body)")
            return Answer(int(answer[0]), list(answer[1]), bytes(answer[2]))
        limit = limits[decisions.index]
        d = decisions.decision
        if d.can_ever_pass:
            wait: float = math.ceil(d.retry_after * 1000) / 1000  # to the ms, rounded up
            body = {"error": "rate limited", "limit": limit_name(limit),
                    "retry_after_s": int(wait) if wait.is_integer() else wait}
        else:
            body = {"error": "cost exceeds limit", "limit": limit_name(limit), "max": limit.burst,
                    "cost": cost, "retry_after_s": None}
        return Answer(429, [("Content-Type", "application/json")],
                      (json.dumps(body, separators=(",", ":")) + "\n").encode())


def with_length(answer: Answer, extra: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """A refusal's headers: its own, Content-Length, and the rate-limit headers the answer
    does not set itself."""
    own = {name.lower() for name, _ in answer.headers}
    headers = list(answer.headers)
    if "content-length" not in own:
        headers.append(("Content-Length", str(len(answer.body))))
    headers.extend((n, v) for n, v in extra if n.lower() not in own)
    return headers


App = TypeVar("App")
Req = TypeVar("Req")


class Middleware(Generic[App, Req]):
    """The options every rate-limiting middleware takes (see ratewin.wsgi's and
    ratewin.asgi's RateLimitMiddleware), checked and kept for its __call__: the wrapped
    ``app``, the ``engine`` that decides, the request's ``limits`` and the ``responder``
    that words headers and refusals. A subclass names its framework's request
    (``request_name``) and the key used without ``key=`` (``default_key``)."""

    request_name: ClassVar[str]

    @staticmethod
    def default_key(request: Any) -> Optional[str]:
        raise NotImplementedError

    def __init__(
        self,
        app: App,
        engine: Engine,
        limit: LimitChoice,
        *,
        key: Optional[Callable[[Req], Optional[str]]] = None,
        cost: Optional[Callable[[Req], int]] = None,
        per_path: PathChoice = None,
        headers: str = "both",
        reset: str = "delay",
        on_reject: Optional[RejectHook] = None,
    ) -> None:
        self.app = app
        self.engine = engine
        self.limits = RequestLimits(limit, key, self.default_key, cost, per_path,
                                    self.request_name)
        self.responder = Responder(headers, reset, on_reject)

    def __repr__(self) -> str:
        cls = type(self)
        return f"<{cls.__module__}.{cls.__qualname__} {self.limits.limit!r} around {self.app!r}>"
