"""What the WSGI and ASGI middleware share: choosing the limits, the client, the
resource and the cost of a request; deciding; the rate-limit headers; the 429 answer."""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from typing import (Any, Callable, ClassVar, Generic, Iterable, NamedTuple, Optional, Sequence,
                    TypeVar, Union)

from ._parse import parse_many
from ._ratewin import Decisions, Engine, Limit

log = logging.getLogger("ratewin")

# A request as the framework gives it: a WSGI environ or an ASGI scope.
Request = Any
# The limits of a request: one Limit, a limit string ("10/second; 1000/day"), or a
# sequence of either.
Limits = Union[Limit, str, Sequence[Union[Limit, str]]]
LimitChoice = Union[Limits, Callable[[Request], Optional[Limits]]]
# True: each request path counts apart; a function: requests count apart by what it
# returns (a route name, say); False: one count per client.
PathChoice = Union[bool, Callable[[Request], Optional[str]]]

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


@functools.lru_cache(maxsize=256)
def _parsed(text: str) -> tuple[Limit, ...]:
    return tuple(parse_many(text))


def as_limits(value: Limits) -> tuple[Limit, ...]:
    """One Limit, a limit string or a sequence of either, as a tuple of Limit."""
    if isinstance(value, Limit):
        return (value,)
    if isinstance(value, str):
        return _parsed(value)
    if isinstance(value, (list, tuple)):
        out: list[Limit] = []
        for item in value:
            if isinstance(item, Limit):
                out.append(item)
            elif isinstance(item, str):
                out.extend(_parsed(item))
            else:
                raise TypeError(
                    f"limits must be Limit objects or limit strings, not {type(item).__name__}")
        if not out:
            raise ValueError("the list of limits is empty")
        return tuple(out)
    raise TypeError(
        "limit must be a ratewin.Limit, a limit string such as '10/second; 1000/day', a "
        f"list of them, or a function returning one, not {type(value).__name__}")


def limit_name(limit: Limit) -> str:
    """A limit's name in headers and bodies: its scope's name, else "100/60s"."""
    if isinstance(limit.scope, str):
        return limit.scope
    per = limit.per
    return f"{limit.max}/{int(per) if per.is_integer() else per}s"


def _policy(limit: Limit) -> str:
    """A limit as IETF RateLimit-Policy describes it: a quota q per window w, in seconds. A
    token bucket's quota is its burst, and its window the refill of the whole burst, so
    that q / w is its rate."""
    window = limit.per * limit.burst / limit.max  # the interval, but for a token bucket
    return f"{_sf_string(limit_name(limit))};q={limit.burst};w={max(1, math.ceil(window))}"


def _sf_string(text: str) -> str:
    """A structured-field string (RFC 8941)."""
    safe = "".join(c if " " <= c <= "~" else "?" for c in text)
    return '"' + safe.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Charge(NamedTuple):
    """What one request asks of the engine."""

    resource: str
    limits: tuple[Limit, ...]
    cost: int


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
        if callable(limit) and not isinstance(limit, Limit):
            self.fixed: Optional[tuple[Limit, ...]] = None
        else:
            self.fixed = as_limits(limit)
        if not isinstance(per_path, bool) and not callable(per_path):
            raise TypeError(
                f"per_path must be True, False or a function ({request_name}) -> str")
        self.limit = limit
        self.key = default_key if key is None else key
        self.fallback = key is None
        self.cost = cost
        self.per_path = per_path
        self.warned = False

    def charge(self, request: Request, path: str) -> Optional[Charge]:
        """The charge for a request to `path`, or None when it is not limited (no limit
        applies to it, or a key function of the application's names no client)."""
        if self.fixed is not None:
            limits = self.fixed
        else:
            chosen = self.limit(request)  # type: ignore[operator]
            if chosen is None:
                return None
            limits = as_limits(chosen)
        client = self.key(request)
        if client is None:
            if not self.fallback:
                return None
            if not self.warned:
                self.warned = True
                log.warning(
                    "ratewin: a request has no client address (a Unix socket server?): such "
                    "requests share one count, %r; pass key= to name clients", UNKNOWN_CLIENT)
            client = UNKNOWN_CLIENT
        if self.per_path is True:
            client += " " + path
        elif callable(self.per_path):
            group = self.per_path(request)
            if group is not None:
                client += " " + group
        return Charge(client, limits, 1 if self.cost is None else self.cost(request))


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

    def headers(self, decisions: Decisions, limits: Sequence[Limit]) -> list[tuple[str, str]]:
        """The rate-limit headers of a decision: X-RateLimit-* and Retry-After, and the
        IETF RateLimit-Policy / RateLimit, as the options ask."""
        out: list[tuple[str, str]] = []
        if self.style == "none":
            return out
        d = decisions.decision
        if self.style in ("both", "x-ratelimit"):
            for name, value in decisions.headers().items():
                if name == "X-RateLimit-Reset" and self.reset == "unix":
                    value = str(math.ceil(time.time() + d.reset_after))
                out.append((name, value))
        else:
            retry = decisions.headers().get("Retry-After")
            if retry is not None:
                out.append(("Retry-After", retry))
        if self.style in ("both", "ietf"):
            out.append(("RateLimit-Policy", ", ".join(_policy(lim) for lim in limits)))
            shown = limits[decisions.index]
            out.append(("RateLimit", f"{_sf_string(limit_name(shown))};r={d.remaining};"
                                     f"t={math.ceil(d.reset_after)}"))
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


def refund(engine: Engine, charge: Charge) -> None:
    """Gives back what an admitted request counted (an inner middleware refused it)."""
    for limit in charge.limits:
        engine.refund(charge.resource, limit, charge.cost)


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
        per_path: PathChoice = False,
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
