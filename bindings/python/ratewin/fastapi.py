"""FastAPI and Starlette: limits per client and per route, as a dependency or, in
slowapi's shape, as a route decorator.

    import ratewin, ratewin.fastapi
    from fastapi import Depends, FastAPI

    app = FastAPI()
    ratewin.fastapi.install(app, ratewin.Engine("redis://10.0.0.5:6379"))

    @app.get("/users/{id}")
    async def user(id: int, rl=Depends(ratewin.fastapi.limit("5/minute"))):
        ...

or, as with slowapi:

    limiter = ratewin.fastapi.Limiter(engine=engine, default_limits="100/hour")
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, ratewin.fastapi.rate_limit_exceeded_handler)
    app.add_middleware(ratewin.fastapi.LimiterMiddleware)  # for default_limits

    @app.get("/search")
    @limiter.limit("5/minute")
    async def search(request: Request): ...

A limit counts per client key (default: the peer address) and per route template: the
requests to /users/1 and /users/2 share the count of /users/{id}, and two routes with
equal limits count apart. ``scope="name"`` (or ``Limiter.shared_limit``) makes routes
share one count, as does a Limit with a scope name of its own. The template does not
depend on the method: GET and POST on one path with equal limits share their count.

A refused request raises RateLimitExceeded (an HTTPException, status 429, with the
rate-limit headers); ``rate_limit_exceeded_handler`` (which ``install`` registers) answers
it with the JSON body ratewin.asgi sends, or with ``on_reject``'s answer. An admitted
request gets the rate-limit headers on its response, and its decision (a RequestLimit)
on ``request.state.ratewin``.

Decisions are awaited (Engine.try_acquire_all_async): no executor thread, and the event
loop keeps serving while an admission waits for Redis.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import (Any, Awaitable, Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple, TypeVar, Union, cast)

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Host, Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._middleware import (
    REFUSED_MARK,
    Answer,
    Charge,
    Limits,
    RejectHook,
    RequestLimit,
    Responder,
    UnknownClient,
    as_limits,
    check_cost,
    check_engine,
    check_key,
    counted_in,
    fixed_limits,
    limit_name,
    with_length,
)
from ._ratewin import Decisions, Engine

__all__ = [
    "Answer",
    "Limiter",
    "LimiterMiddleware",
    "RateLimitExceeded",
    "RequestLimit",
    "client_address",
    "install",
    "limit",
    "rate_limit_exceeded_handler",
    "route_template",
]

log = logging.getLogger("ratewin")

KeyFunc = Callable[[Request], Optional[str]]
CostChoice = Union[int, Callable[[Request], int]]
LimitValue = Union[Limits, Callable[[Request], Optional[Limits]]]
F = TypeVar("F", bound=Callable[..., Any])

# On a function: the Limiter whose decorator limits it, or which exempts it; on a
# dependency made by limit(): True. LimiterMiddleware leaves such routes to them.
_LIMITED = "__ratewin_limited__"
_EXEMPT = "__ratewin_exempt__"
# Where the decision made for this request so far is kept: request.state.ratewin; the
# charges admitted so far, given back if a later limit refuses the request.
_CHARGES = "ratewin_charges"
# On request.state: whether any decision on the request was degraded; what words the
# headers of the decision shown, and the Response a limit() dependency set them on.
_DEGRADED = "ratewin_degraded"
_SHOWN_ON = "ratewin_shown_on"
# In the scope: the Limiter whose default limits a LimiterMiddleware applied to the
# request (a second LimiterMiddleware of the same Limiter leaves it alone).
_DEFAULTS_APPLIED = "ratewin.fastapi.defaults"
# What words a decision's headers, given whether any decision on the request was degraded.
_Render = Callable[[bool], List[Tuple[str, str]]]

# Requests without a peer address (uvicorn --uds): one count, and a warning once.
_unknown_client = UnknownClient()


def client_address(request: Request) -> Optional[str]:
    """The default client key: the peer's address (slowapi's get_remote_address).

    Behind a proxy, pass ``key=`` a function that reads the header your proxy sets.
    """
    client = request.client
    return client.host if client else None


class RateLimitExceeded(HTTPException):
    """A refused request: status 429 (or on_reject's), ``headers`` the rate-limit headers
    and Retry-After, ``detail`` the name of the limit that refused ("5/60s", or its scope
    name), ``request_limit`` the decision as a RequestLimit, ``answer`` the response
    rate_limit_exceeded_handler sends (the JSON refusal, or on_reject's answer).

    Without rate_limit_exceeded_handler, FastAPI's own HTTPException handler answers it:
    the same status and headers, with the body ``{"detail": "5/60s"}``."""

    def __init__(self, request_limit: RequestLimit, answer: Answer,
                 headers: List[Tuple[str, str]]) -> None:
        super().__init__(status_code=answer.status, detail=limit_name(request_limit.limit),
                         headers=dict(headers))
        self.request_limit = request_limit
        self.answer = answer
        self.limit = request_limit.limit


async def rate_limit_exceeded_handler(request: Request, exc: Exception) -> Response:
    """The exception handler of RateLimitExceeded (slowapi's _rate_limit_exceeded_handler):
    answers with the refusal's status, body and headers. A coroutine, so that Starlette
    does not run it on its thread pool.

        app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)
    """
    if not isinstance(exc, RateLimitExceeded):
        raise TypeError(f"rate_limit_exceeded_handler handles RateLimitExceeded, not "
                        f"{type(exc).__name__}")
    return _refusal_response(exc)


def _refusal_response(exc: RateLimitExceeded) -> Response:
    answer = exc.answer
    response = Response(content=answer.body, status_code=answer.status)
    for name, value in with_length(answer, (exc.headers or {}).items()):
        if name.lower() != "content-length":  # Response sets it from the body
            response.headers.append(name, value)
    return response


# --- Which route a request is in ------------------------------------------------------

def _walk(routes: Sequence[BaseRoute], prefix: str) -> Iterator[Tuple[str, BaseRoute]]:
    """Every route under `routes`, with its template (the mount paths before its own)."""
    for route in routes:
        path = getattr(route, "path", "")  # a Host has none
        if isinstance(route, (Mount, Host)):
            yield from _walk(route.routes, prefix + path)
        else:
            yield prefix + path, route


# The attribute of a router that keeps its templates: id(route or endpoint) -> that route
# or endpoint (kept, so that its id is not reused while the entry lives) and the templates
# of the routes that are it or have it as endpoint. Kept on the router, it lives and dies
# with the application (routes are unhashable: Starlette's define __eq__).
_TEMPLATES = "_ratewin_templates"


def route_template(request: Union[Request, Scope]) -> Optional[str]:
    """The template of the route a request matched ("/users/{id}", with the paths of the
    mounts it is under), or None when that cannot be told.

    FastAPI (0.92) sets ``scope["route"]`` when its APIRoute matches, before the
    dependencies run; Starlette's own Route (0.26) does not, and leaves only
    ``scope["endpoint"]``. Both are looked up in the application's router
    (``scope["router"]``, the outermost), through its mounts: a route mounted under
    "/v1" counts apart from an equal one under "/v2". Where an endpoint serves several
    routes, the one that matches the request is taken."""
    scope = request.scope if isinstance(request, Request) else request
    route = scope.get("route")
    target: Any = route if route is not None else scope.get("endpoint")
    router = scope.get("router")
    if target is None:
        return None
    if router is None:
        return getattr(route, "path", None)
    cache: Optional[Dict[int, Tuple[Any, List[Tuple[str, BaseRoute]]]]] = getattr(
        router, _TEMPLATES, None)
    if cache is None:
        cache = {}
        setattr(router, _TEMPLATES, cache)
    entry = cache.get(id(target))
    if entry is not None and entry[0] is target:
        found = entry[1]
    else:
        found = [(template, r) for template, r in _walk(router.routes, "")
                 if r is target or (route is None and getattr(r, "endpoint", None) is target)]
        if found:  # a target of this router's routes: as many entries as routes
            cache[id(target)] = (target, found)
    if len(found) == 1:
        return found[0][0]
    for template, r in found:  # an endpoint on several routes: the one matched
        if r.matches(scope)[0] is not Match.NONE:
            return template
    return getattr(route, "path", None)


# --- The limits of a route ------------------------------------------------------------

class _Rule:
    """One limit as a dependency or a decorator states it: the limits, the client key,
    the cost, where it counts (its route, or a shared scope), and the options of its
    headers and refusals (None: the Limiter's)."""

    def __init__(self, value: LimitValue, *, key: Optional[KeyFunc], cost: CostChoice,
                 scope: Optional[str], headers: Optional[str], reset: Optional[str],
                 on_reject: Optional[RejectHook]) -> None:
        self.fixed = fixed_limits(value)
        check_key(key, "(request)")
        check_cost(cost, "(request)")
        if scope is not None and (not isinstance(scope, str) or not scope):
            raise TypeError("scope must be a non-empty string (a shared scope name) or None")
        self.value = value
        self.key = key
        self.cost = cost
        self.scope = scope
        self.options = (headers, reset, on_reject)
        # Checks the options now, not at the first request.
        Responder(headers or "both", reset or "delay", on_reject)
        self.responders: Dict[int, Tuple[Optional[Limiter], Responder]] = {}

    def responder(self, limiter: Optional["Limiter"]) -> Responder:
        """This rule's Responder: its own options, the others the limiter's."""
        found = self.responders.get(id(limiter))
        if found is None or found[0] is not limiter:
            headers, reset, on_reject = self.options
            base = limiter.options if limiter is not None else ("both", "delay", None)
            responder = Responder(headers or base[0], reset or base[1],
                                  on_reject if on_reject is not None else base[2])
            found = (limiter, responder)
            self.responders[id(limiter)] = found
        return found[1]

    def charge(self, request: Request, key: KeyFunc, fallback: bool,
               template: Optional[str] = None) -> Optional[Charge]:
        """What the request asks of the engine, or None when it is not limited (the limit
        function chose none, or a key function of the application's named no client).
        `template`: the route's, when routing has not set it yet."""
        if self.fixed is not None:
            limits = self.fixed
        else:
            chosen = cast(Callable[[Request], Optional[Limits]], self.value)(request)
            if chosen is None or (isinstance(chosen, (list, tuple)) and not chosen):
                return None  # none, or no limits at all: not limited this time
            limits = as_limits(chosen)
        own_key = self.key is not None
        client = (self.key or key)(request)
        if client is None:
            if own_key or not fallback:
                return None
            client = _unknown_client()
        if self.scope is not None:
            counted = counted_in(limits, "shared " + self.scope)
        else:
            if template is None:
                template = route_template(request)
            if template is not None:
                where = "route " + template
            else:
                # The route is out of the router's sight (under a mount of an application
                # wrapped in middleware): its endpoint, not the path, which carries ids.
                endpoint = request.scope.get("endpoint")
                name = getattr(endpoint, "__qualname__", None)
                where = (f"endpoint {getattr(endpoint, '__module__', '')}.{name}"
                         if name is not None
                         else "path " + request.url.path)  # no routing at all
            counted = counted_in(limits, where)
        cost = self.cost(request) if callable(self.cost) else self.cost
        return Charge(client, counted, cost, limits)

    async def decide(self, request: Request, engine: Engine, key: KeyFunc, fallback: bool,
                     responder: Responder) -> Optional[Tuple[RequestLimit, _Render]]:
        """Decides the request: its RequestLimit and what words its headers (given
        whether any decision on the request was degraded), or None when not limited.
        Raises RateLimitExceeded when refused, after giving back what the request's
        earlier limits admitted."""
        try:
            charge = self.charge(request, key, fallback)
            if charge is None:
                return None
            decisions: Decisions = await charge.try_acquire_async(engine)
        except BaseException:
            # A key, cost or limit function raised (or the engine did): all or nothing,
            # as with a refusal, for what the request's earlier limits admitted.
            _give_back(request)
            raise
        state = request.state
        if decisions.degraded:
            setattr(state, _DEGRADED, True)
        shown = charge.shown

        def render(degraded: bool) -> List[Tuple[str, str]]:
            return responder.headers(decisions, shown, degraded=degraded or None)

        decided = RequestLimit.of(decisions, shown)
        if not decisions.allowed:
            headers = render(_degraded(request))
            _refused(request)
            state.ratewin = decided
            answer = responder.refusal(request, decisions, shown, charge.cost)
            raise RateLimitExceeded(decided, answer, headers)
        _admitted(request, engine, charge)
        return decided, render


def _admitted(request: Request, engine: Engine, charge: Charge) -> Tuple[Engine, Charge]:
    """Notes an admitted charge of the request, given back if a later limit refuses it."""
    charges: Optional[List[Tuple[Engine, Charge]]] = getattr(request.state, _CHARGES, None)
    if charges is None:
        charges = []
        setattr(request.state, _CHARGES, charges)
    entry = (engine, charge)
    charges.append(entry)
    return entry


def _refused(request: Request) -> None:
    """Gives back what the request's earlier limits admitted, and marks it refused, so
    that an outer ratewin.asgi middleware gives its own count back too."""
    request.scope[REFUSED_MARK] = True
    _give_back(request)


def _give_back(request: Request) -> None:
    """Gives back what the request's limits admitted so far."""
    state = request.state
    charges = getattr(state, _CHARGES, [])
    setattr(state, _CHARGES, [])
    for engine, charge in charges:
        charge.refund(engine)


def _shown(request: Request, decided: RequestLimit) -> bool:
    """Records `decided` on request.state.ratewin unless an earlier decision for this
    request has fewer units left (that one's headers stay); True when recorded."""
    earlier = getattr(request.state, "ratewin", None)
    if isinstance(earlier, RequestLimit) and earlier.remaining <= decided.remaining:
        return False
    request.state.ratewin = decided
    return True


def _degraded(request: Request) -> bool:
    """Whether any decision on the request was degraded (the headers shown say so, even
    when the decision they show was not)."""
    return bool(getattr(request.state, _DEGRADED, False))


def _mark_degraded(request: Request) -> None:
    """A decision not shown was degraded: the headers a limit() dependency set on its
    Response for the decision shown now say so."""
    shown_on = getattr(request.state, _SHOWN_ON, None)
    if shown_on is not None and shown_on[0] is not None and _degraded(request):
        response, render = shown_on
        _set_headers(response, render(True))


def _set_headers(response: Response, headers: Sequence[Tuple[str, str]]) -> None:
    for name in Responder.NAMES:  # (a decision replacing another: its headers go)
        if name in response.headers:
            del response.headers[name]
    for name, value in headers:
        response.headers.append(name, value)


def _limiter_of(request: Request) -> "Limiter":
    limiter = getattr(request.app.state, "limiter", None)
    if not isinstance(limiter, Limiter):
        raise RuntimeError(
            "ratewin.fastapi: no engine for this limit: pass engine= to limit(), or call "
            "ratewin.fastapi.install(app, engine) (or set app.state.limiter to a "
            "ratewin.fastapi.Limiter)")
    return limiter


# --- The dependency ---------------------------------------------------------------------

def limit(
    value: LimitValue,
    *,
    engine: Optional[Engine] = None,
    key: Optional[KeyFunc] = None,
    cost: CostChoice = 1,
    scope: Optional[str] = None,
    headers: Optional[str] = None,
    reset: Optional[str] = None,
    on_reject: Optional[RejectHook] = None,
) -> Callable[[Request, Response], Awaitable[Optional[RequestLimit]]]:
    """A FastAPI dependency that limits the routes it is on:
    ``Depends(limit("5/minute"))`` as a parameter (the handler gets the RequestLimit) or
    in ``dependencies=[...]`` of a route, a router or the app.

    ``value``: a Limit, a limit string ("5/minute; 100/day"), a list of them (all counted
    at once: admitted only if every one admits), or a function (request) -> limits | None
    (None: not limited). ``engine``: the engine that decides; without it, the Limiter of
    ``app.state.limiter`` (see install) gives the engine, and the key and header options
    not given here. ``key(request)``: the client (None: not limited); by default the
    peer address. ``cost``: units per request, or a function (request) -> int.
    ``scope``: a name whose count every limit() and shared_limit() naming it shares;
    without it, each route template counts apart. ``headers``, ``reset`` and
    ``on_reject(request, decisions, limits) -> Answer``: as in ratewin.asgi.

    Admitted: the rate-limit headers go on the response (FastAPI merges the dependency's
    Response into the handler's, unless the handler returns a Response of its own), the
    RequestLimit on ``request.state.ratewin``, and it is returned. Refused: raises
    RateLimitExceeded. With several limits on one request, request.state.ratewin and the
    headers are those of the decision with the fewest units left, and a refusal gives
    back what the earlier ones counted.

    FastAPI only: plain Starlette has no dependencies (see Limiter.limit)."""
    rule = _Rule(value, key=key, cost=cost, scope=scope, headers=headers, reset=reset,
                 on_reject=on_reject)
    if engine is not None:
        check_engine(engine)
    return _dependency(rule, engine, None, f"limit({value!r})")


def _dependency(rule: "_Rule", engine: Optional[Engine], limiter: Optional["Limiter"],
                name: str) -> Callable[[Request, Response], Awaitable[Optional[RequestLimit]]]:
    """The dependency of limit() and Limiter.depends(): `rule` decided by `engine`, else
    by `limiter`, else by the Limiter on app.state.limiter."""

    async def ratewin_limit(request: Request, response: Response) -> Optional[RequestLimit]:
        if engine is not None:
            decided = await rule.decide(request, engine, client_address, True,
                                        rule.responder(None))
        else:
            decided = await (limiter or _limiter_of(request))._decide(request, rule)
        if decided is None:
            return None
        request_limit, render = decided
        if _shown(request, request_limit):
            setattr(request.state, _SHOWN_ON, (response, render))
            _set_headers(response, render(_degraded(request)))
        else:
            _mark_degraded(request)
        return request_limit

    setattr(ratewin_limit, _LIMITED, True)
    ratewin_limit.__qualname__ = name
    return ratewin_limit


# --- The decorator, in slowapi's shape --------------------------------------------------

def _request_parameter(func: Callable[..., Any]) -> Tuple[str, int]:
    """The name and position of the endpoint's request parameter: the one annotated with
    Request (or a subclass), else the one named ``request``, as slowapi asks."""
    signature = inspect.signature(func)
    params = list(signature.parameters.values())
    for index, param in enumerate(params):
        annotation = param.annotation
        if inspect.isclass(annotation) and issubclass(annotation, Request):
            return param.name, index
        if isinstance(annotation, str) and annotation.split(".")[-1] == "Request":
            return param.name, index
    for index, param in enumerate(params):
        if param.name == "request":
            return param.name, index
    raise TypeError(
        f"ratewin.fastapi: the endpoint {func.__qualname__} must take the request as a "
        "parameter (request: Request) for a Limiter decorator to limit it")


def _signature_with_response(func: Callable[..., Any]) -> Tuple[inspect.Signature, str]:
    """The endpoint's signature, its annotations evaluated (FastAPI reads them from the
    wrapper, whose module is not the endpoint's), with a Response parameter for the
    headers if it has none; and that parameter's name."""
    try:
        signature = inspect.signature(func, eval_str=True)
    except Exception:  # a name not defined yet: FastAPI sees the annotations unevaluated
        signature = inspect.signature(func)
    params = list(signature.parameters.values())
    for param in params:
        if inspect.isclass(param.annotation) and issubclass(param.annotation, Response):
            return signature, param.name
    name = "ratewin_response"
    added = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Response)
    # Keyword-only parameters go before **kwargs.
    at = len(params) - (1 if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD
                        else 0)
    return signature.replace(parameters=params[:at] + [added] + params[at:]), name


class Limiter:
    """Rate limits in slowapi's shape: ``@limiter.limit("5/minute")`` on an endpoint
    that takes ``request: Request``, ``@limiter.exempt``, ``limiter.shared_limit``, and
    ``default_limits`` applied by LimiterMiddleware. Also what install() keeps on
    ``app.state.limiter``, whose engine and options limit() dependencies without
    ``engine=`` use.

    ``engine``: the ratewin.Engine that decides (local, or on Redis). ``key(request)``:
    the client (None: not limited); by default the peer address, a request without one
    sharing the count "unknown-client" (a warning is logged once). ``default_limits``:
    the limits LimiterMiddleware applies to every route that has no limit of its own and
    is not exempt, each route template counting apart. ``headers``, ``reset`` and
    ``on_reject``: as in ratewin.asgi. ``enabled=False`` (or setting ``limiter.enabled``
    later) turns every limit of this Limiter off, and those of the limit() dependencies
    that use it through ``app.state.limiter`` (slowapi's ``enabled``)."""

    def __init__(
        self,
        *,
        engine: Engine,
        key: Optional[KeyFunc] = None,
        default_limits: Optional[Limits] = None,
        headers: str = "both",
        reset: str = "delay",
        on_reject: Optional[RejectHook] = None,
        enabled: bool = True,
    ) -> None:
        self.engine = check_engine(engine)
        check_key(key, "(request)")
        self.key: KeyFunc = client_address if key is None else key
        self.fallback = key is None
        self.options: Tuple[str, str, Optional[RejectHook]] = (headers, reset, on_reject)
        self.responder = Responder(headers, reset, on_reject)
        self.default_rule: Optional[_Rule] = None
        if default_limits is not None:
            self.default_rule = _Rule(default_limits, key=None, cost=1, scope=None,
                                      headers=None, reset=None, on_reject=None)
        self.enabled = enabled

    def __repr__(self) -> str:
        return f"<ratewin.fastapi.Limiter on {self.engine!r}>"

    def limit(
        self,
        value: LimitValue,
        *,
        key: Optional[KeyFunc] = None,
        cost: CostChoice = 1,
        scope: Optional[str] = None,
        headers: Optional[str] = None,
        reset: Optional[str] = None,
        on_reject: Optional[RejectHook] = None,
    ) -> Callable[[F], F]:
        """A decorator that limits an endpoint (FastAPI's, or a Starlette Route's), placed
        under the route decorator. The endpoint must take ``request: Request``. Options as
        in ratewin.fastapi.limit; key and the header options default to this Limiter's.

        The headers go on the endpoint's Response when it returns one; otherwise (FastAPI)
        on the Response parameter the endpoint declares, or one the decorator adds to the
        signature FastAPI sees. Decorators stack: every one must admit the request."""
        rule = _Rule(value, key=key, cost=cost, scope=scope, headers=headers, reset=reset,
                     on_reject=on_reject)

        def decorate(func: F) -> F:
            return cast(F, self._wrap(func, rule))
        return decorate

    def shared_limit(
        self,
        value: LimitValue,
        scope: str,
        *,
        key: Optional[KeyFunc] = None,
        cost: CostChoice = 1,
        headers: Optional[str] = None,
        reset: Optional[str] = None,
        on_reject: Optional[RejectHook] = None,
    ) -> Callable[[F], F]:
        """limit() counted in the shared scope `scope`: every endpoint it decorates (and
        every limit naming that scope) draws on one count per client."""
        if not isinstance(scope, str) or not scope:
            raise TypeError("shared_limit needs a scope name (a non-empty string)")
        return self.limit(value, key=key, cost=cost, scope=scope, headers=headers,
                          reset=reset, on_reject=on_reject)

    def exempt(self, func: F) -> F:
        """Exempts an endpoint from the default limits (LimiterMiddleware)."""
        setattr(func, _EXEMPT, True)
        return func

    def depends(self, value: LimitValue, **options: Any
                ) -> Callable[[Request, Response], Awaitable[Optional[RequestLimit]]]:
        """ratewin.fastapi.limit() with this Limiter's engine, key and header options."""
        rule = _Rule(value, key=options.pop("key", None), cost=options.pop("cost", 1),
                     scope=options.pop("scope", None), headers=options.pop("headers", None),
                     reset=options.pop("reset", None),
                     on_reject=options.pop("on_reject", None))
        if options:
            raise TypeError(f"unknown options: {', '.join(sorted(options))}")
        return _dependency(rule, None, self, f"Limiter.depends({value!r})")

    async def _decide(self, request: Request, rule: _Rule
                      ) -> Optional[Tuple[RequestLimit, _Render]]:
        if not self.enabled:
            return None
        return await rule.decide(request, self.engine, self.key, self.fallback,
                                 rule.responder(self))

    def _wrap(self, func: Callable[..., Any], rule: _Rule) -> Callable[..., Any]:
        name, position = _request_parameter(func)
        signature, response_name = _signature_with_response(func)
        added = response_name not in inspect.signature(func).parameters
        is_async = inspect.iscoroutinefunction(func)
        limiter = self

        @functools.wraps(func)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            request = kwargs[name] if name in kwargs else args[position]
            if not isinstance(request, Request):
                raise TypeError(f"ratewin.fastapi: {func.__qualname__}'s {name} is not a "
                                f"starlette Request but {type(request).__name__}")
            sub_response: Optional[Response] = (kwargs.pop(response_name, None) if added
                                                else kwargs.get(response_name))
            decided = await limiter._decide(request, rule)
            if decided is not None:
                if _shown(request, decided[0]):
                    setattr(request.state, _SHOWN_ON, (None, decided[1]))
                else:
                    _mark_degraded(request)
            if is_async:
                result = await func(*args, **kwargs)
            else:  # as Starlette and FastAPI run a plain function: on a thread
                result = await run_in_threadpool(func, *args, **kwargs)
            # The headers are those of the decision shown: this one's, an inner
            # decorator's, or a limit() dependency's (whose own headers a returned
            # Response would not get).
            shown_on = getattr(request.state, _SHOWN_ON, None)
            if decided is not None and shown_on is not None:
                target = result if isinstance(result, Response) else sub_response
                if target is not None:
                    _set_headers(target, shown_on[1](_degraded(request)))
            return result

        # FastAPI reads this signature (functools.wraps would point it at func's, through
        # __wrapped__, without the Response parameter).
        setattr(wrapper, "__signature__", signature)
        setattr(wrapper, _LIMITED, True)
        if getattr(func, _EXEMPT, False):
            setattr(wrapper, _EXEMPT, True)
        return wrapper


def install(
    app: Any,
    engine: Engine,
    *,
    key: Optional[KeyFunc] = None,
    default_limits: Optional[Limits] = None,
    headers: str = "both",
    reset: str = "delay",
    on_reject: Optional[RejectHook] = None,
) -> Limiter:
    """Sets up `app` (FastAPI or Starlette) once: a Limiter of these options on
    ``app.state.limiter`` (limit() dependencies without ``engine=`` use it), the exception
    handler of RateLimitExceeded, and, with ``default_limits``, LimiterMiddleware.
    Returns the Limiter. Call it before the application starts."""
    limiter = Limiter(engine=engine, key=key, default_limits=default_limits,
                      headers=headers, reset=reset, on_reject=on_reject)
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, rate_limit_exceeded_handler)
    if default_limits is not None:
        app.add_middleware(LimiterMiddleware)
    return limiter


# --- Default limits -------------------------------------------------------------------

def _uses_limit(dependant: Any) -> bool:
    """Whether a FastAPI route's dependencies include a ratewin limit()."""
    for dependency in getattr(dependant, "dependencies", ()):
        if getattr(dependency.call, _LIMITED, False) or _uses_limit(dependency):
            return True
    return False


def _match(routes: Sequence[BaseRoute], scope: Scope, prefix: str
           ) -> Optional[Tuple[str, BaseRoute]]:
    """The route a request will be routed to, as the router will find it (a full match
    first, else the first partial one), and its template."""
    partial: Optional[Tuple[str, BaseRoute]] = None
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.NONE:
            continue
        path = getattr(route, "path", "")
        if isinstance(route, (Mount, Host)):
            if match is Match.FULL:
                inner = _match(route.routes, {**scope, **child}, prefix + path)
                if inner is not None:
                    return inner
            continue
        if match is Match.FULL:
            return prefix + path, route
        if partial is None:
            partial = (prefix + path, route)
    return partial


class LimiterMiddleware:
    """Applies the default limits of ``app.state.limiter`` (a Limiter with
    ``default_limits``) to every route that has no limit of its own (a Limiter decorator
    or a limit() dependency) and is not exempt, each route template counting apart; slowapi's
    SlowAPIMiddleware. Requests matching no route are not limited.

        app.add_middleware(ratewin.fastapi.LimiterMiddleware)

    It runs before routing, so it finds the route itself (in the app's routes, through
    mounts). A refusal is answered here (the exception handlers are inside it), with the
    status, headers and body rate_limit_exceeded_handler would send."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.skip: Dict[int, Tuple[BaseRoute, bool]] = {}

    def _skipped(self, route: BaseRoute) -> bool:
        found = self.skip.get(id(route))
        if found is None or found[0] is not route:
            endpoint = getattr(route, "endpoint", None)
            own = (getattr(endpoint, _LIMITED, False) or getattr(endpoint, _EXEMPT, False)
                   or _uses_limit(getattr(route, "dependant", None)))
            found = (route, bool(own))
            self.skip[id(route)] = found
        return found[1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        application = scope.get("app")
        limiter = getattr(getattr(application, "state", None), "limiter", None)
        if (application is None or not isinstance(limiter, Limiter)
                or limiter.default_rule is None or scope.get(_DEFAULTS_APPLIED) is limiter):
            await self.app(scope, receive, send)
            return
        # Added twice (install(default_limits=...) and add_middleware): counted once.
        scope[_DEFAULTS_APPLIED] = limiter
        matched = _match(application.router.routes, scope, "")
        if matched is None or self._skipped(matched[1]):
            await self.app(scope, receive, send)
            return
        request = Request(scope)  # its state is scope["state"], the handler's too
        charge = (limiter.default_rule.charge(request, limiter.key, limiter.fallback,
                                              matched[0]) if limiter.enabled else None)
        if charge is None:
            await self.app(scope, receive, send)
            return
        decisions = await charge.try_acquire_async(limiter.engine)
        responder = limiter.responder
        headers = responder.headers(decisions, charge.shown)
        decided = RequestLimit.of(decisions, charge.shown)
        request.state.ratewin = decided
        if not decisions.allowed:
            scope[REFUSED_MARK] = True  # an outer ratewin.asgi middleware gives back
            answer = responder.refusal(request, decisions, charge.shown, charge.cost)
            response = _refusal_response(RateLimitExceeded(decided, answer, headers))
            await response(scope, receive, send)
            return
        state = request.state
        engine: Engine = limiter.engine
        admitted: Charge = charge
        entry = _admitted(request, engine, admitted)
        encoded = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in headers]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                if scope.get(REFUSED_MARK):
                    # Refused inside (a ratewin.asgi middleware, a limit): this count goes
                    # back, unless that limit gave it back already; the headers are its.
                    current = getattr(state, _CHARGES, [])
                    if any(e is entry for e in current):
                        current[:] = [e for e in current if e is not entry]
                        admitted.refund(engine)
                else:
                    message = dict(message)
                    message["headers"] = list(message.get("headers", [])) + encoded
            await send(message)

        await self.app(scope, receive, send_with_headers)
