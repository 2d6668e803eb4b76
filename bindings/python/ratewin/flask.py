"""Flask extension: per-route limits with decorators, in flask-limiter's conventions.

    import ratewin
    from flask import Flask
    from ratewin.flask import Limiter

    app = Flask(__name__)
    limiter = Limiter(app, engine=ratewin.Engine("redis://10.0.0.5:6379"),
                      default_limits="200/day; 50/hour")

    @app.route("/slow")
    @limiter.limit("1/second")
    def slow(): ...

Limits count per client (the peer address unless ``key=`` names it) and per route (the
endpoint): two routes with equal limits count apart. ``shared_limit`` and limits with a
scope name of their own (``Limit(..., scope="api")``) share one count wherever they are
chosen; ``application_limits`` are one count per client for the whole application.

A limited response carries the rate-limit headers; the decision is ``flask.g.ratewin``
(a RequestLimit); a refused request raises RateLimitExceeded, a werkzeug
TooManyRequests, so ``@app.errorhandler(429)`` can answer it. Requests that match no
route (404, 405) and static files are not limited, as with flask-limiter. See
docs/flask.md.
"""

from __future__ import annotations

import logging
from typing import (Any, Callable, Iterable, NamedTuple, Optional, TypeVar, Union, cast,
                    overload)

import flask
from werkzeug.exceptions import TooManyRequests

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
from ._ratewin import Decisions, Engine, Limit

__all__ = ["Answer", "Limiter", "LimitDecorator", "RateLimitExceeded", "RequestLimit",
           "remote_address"]

log = logging.getLogger("ratewin")

View = TypeVar("View", bound=Callable[..., Any])
# The limits of a decorator: fixed, or a function of no arguments (reading
# flask.request) that returns them per request; None from it: no limit this time.
LimitChoice = Union[Limits, Callable[[], Optional[Limits]]]
KeyFunction = Callable[[], Optional[str]]
Cost = Union[int, Callable[[], int]]
# A shared limit's scope: a name, or a function of the endpoint that returns one.
ScopeChoice = Union[str, Callable[[str], str]]

# Where a limiter keeps a request's state (in the WSGI environ, which lives exactly as long
# as the request, whatever the application context does).
_STATE_KEY = "ratewin.flask"


def remote_address() -> Optional[str]:
    """The default client key: the peer address of the request (``request.remote_addr``),
    flask-limiter's ``get_remote_address``. Behind a proxy, pass ``key=`` a function that
    reads the header your proxy sets (and that only it can set), or install werkzeug's
    ProxyFix so that remote_addr is the client's."""
    return flask.request.remote_addr or None


class RateLimitExceeded(TooManyRequests):
    """A request was refused. ``limit`` is the decision (a RequestLimit: the limit that
    refused, retry_after, degraded, ...); ``answer`` the Answer it is given (status,
    headers, body: the default JSON body or ``on_reject``'s); ``response`` that answer as
    a Flask response, with the rate-limit headers. Its code is 429 whatever the answer's
    status, so ``@app.errorhandler(429)`` receives it."""

    def __init__(self, limit: RequestLimit, answer: Answer,
                 response: flask.Response) -> None:
        super().__init__(description=f"rate limit {limit_name(limit.limit)} exceeded",
                         response=response)
        self.limit = limit
        self.answer = answer


class _Group(NamedTuple):
    """The limits one decorator (or default_limits, or application_limits) asks for, and
    how: the kind says where they count (``route``, ``blueprint``, ``default`` per route;
    ``shared`` per scope name; ``application`` once for the whole application)."""

    kind: str
    limits: Optional[tuple[Limit, ...]]  # None: chosen per request by `choose`
    choose: Optional[Callable[[], Optional[Limits]]]
    key: Optional[KeyFunction]
    cost: Cost
    methods: Optional[frozenset[str]]
    exempt_when: Optional[Callable[[], bool]]
    per_method: bool
    override_defaults: bool
    scope: Optional[ScopeChoice]

    def limits_now(self) -> Optional[tuple[Limit, ...]]:
        if self.limits is not None:
            return self.limits
        assert self.choose is not None
        chosen = self.choose()
        # None, or no limits at all (an empty list): not limited this time.
        return None if chosen is None or _empty(chosen) else as_limits(chosen)

    def applies(self, method: str) -> bool:
        # Flask answers HEAD with the GET view: a limit on GET holds for HEAD too.
        if (self.methods is not None and method not in self.methods
                and not (method == "HEAD" and "GET" in self.methods)):
            return False
        return not (self.exempt_when is not None and self.exempt_when())

    def counted_as(self, endpoint: str, method: str) -> str:
        """The scope the group's unnamed limits count in for this request."""
        if self.kind == "application":
            where = "flask application"
        elif self.kind == "shared":
            name = self.scope(endpoint) if callable(self.scope) else self.scope
            where = f"flask shared {name}"
        else:
            # Route decorators, blueprint limits and defaults of one route count apart
            # from one another, so that equal limits in two of them are two counts.
            where = f"flask route {endpoint}\n{self.kind}"
        if not self.per_method:
            return where
        return f"{where}\n{'GET' if method == 'HEAD' else method}"  # HEAD is GET's view


def _group(kind: str, limit: LimitChoice, key: Optional[KeyFunction], cost: Cost,
           methods: Optional[Iterable[str]], exempt_when: Optional[Callable[[], bool]],
           per_method: bool, override_defaults: bool,
           scope: Optional[ScopeChoice] = None) -> _Group:
    fixed = fixed_limits(limit)
    choose: Optional[Callable[[], Optional[Limits]]] = (
        cast(Callable[[], Optional[Limits]], limit) if fixed is None else None)
    check_key(key, "() reading flask.request")
    check_cost(cost, "() reading flask.request")
    if isinstance(methods, str):
        raise TypeError("methods must be a list of method names, such as ['POST']")
    return _Group(kind, fixed, choose, key, cost,
                  None if methods is None else frozenset(m.upper() for m in methods),
                  exempt_when, per_method, override_defaults, scope)


class LimitDecorator:
    """What ``Limiter.limit`` and ``Limiter.shared_limit`` return: applied to a view
    function, it limits that view (and returns it unchanged); applied to a Blueprint, it
    limits every route of the blueprint, each counting apart."""

    def __init__(self, limiter: "Limiter", group: _Group) -> None:
        self._limiter = limiter
        self._group = group

    @overload
    def __call__(self, target: flask.Blueprint) -> flask.Blueprint: ...

    @overload
    def __call__(self, target: View) -> View: ...

    def __call__(self, target: Any) -> Any:
        if isinstance(target, flask.Blueprint):
            group = self._group._replace(kind="blueprint") \
                if self._group.kind == "route" else self._group
            self._limiter._blueprint_groups.setdefault(target, []).append(group)
        elif callable(target):
            self._limiter._view_groups.setdefault(target, []).append(self._group)
        else:
            raise TypeError("limit decorates a view function or a flask.Blueprint, not "
                            f"{type(target).__name__}")
        return target


class _State:
    """What the before_request hook leaves for after_request: the headers of the decision
    shown (added to the response unless it sets them itself)."""

    def __init__(self, headers: list[tuple[str, str]]) -> None:
        self.headers = headers


class Limiter:
    """Rate limits for a Flask application, decided by a ratewin ``engine``.

    ``key()`` names the client of the current request (read ``flask.request``); None
    leaves the request unlimited by the limits that use that key. The default,
    ``remote_address``, is the peer address; a request without one (a server on a Unix
    socket) shares one count with all such requests, and a warning is logged once on the
    ``ratewin`` logger.

    ``default_limits`` apply to every route without limits of its own (from ``limit`` or
    ``shared_limit`` with ``override_defaults=True``, or from its blueprint), each route
    counting apart, as flask-limiter's do. ``application_limits`` apply to every route
    (unless exempt) and are one count per client for the whole application. Both take
    what ``limit`` takes: a limit string (``"100/minute; 1000/day"``), a Limit, a list of
    them, or a function returning them.

    ``headers``, ``reset`` and ``on_reject(request, decisions, limits) -> Answer`` are
    ratewin.wsgi's (``request`` is ``flask.request``). ``enabled=False`` (or setting
    ``limiter.enabled`` later) turns every check off.

    Requests matching no route (404, 405) and static files (the ``static`` endpoint of
    the application and of blueprints) are not limited, as flask-limiter does.
    """

    def __init__(
        self,
        app: Optional[flask.Flask] = None,
        *,
        engine: Engine,
        key: Optional[KeyFunction] = None,
        default_limits: LimitChoice = (),
        application_limits: LimitChoice = (),
        headers: str = "both",
        reset: str = "delay",
        on_reject: Optional[RejectHook] = None,
        enabled: bool = True,
    ) -> None:
        self.engine = check_engine(engine)
        check_key(key, "() reading flask.request")
        self.enabled = enabled
        self.responder = Responder(headers, reset, on_reject)
        self._key = key
        self._unknown = UnknownClient()
        self._defaults: list[_Group] = []
        self._application: list[_Group] = []
        if not _empty(default_limits):
            self._defaults.append(_group("default", default_limits, None, 1, None, None,
                                         False, True))
        if not _empty(application_limits):
            self._application.append(_group("application", application_limits, None, 1,
                                            None, None, False, False))
        self._view_groups: dict[Callable[..., Any], list[_Group]] = {}
        self._blueprint_groups: dict[flask.Blueprint, list[_Group]] = {}
        self._exempt_views: set[Callable[..., Any]] = set()
        self._exempt_blueprints: set[flask.Blueprint] = set()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: flask.Flask) -> None:
        """Installs the checks (before_request) and the headers (after_request) in
        ``app``; one limiter may serve several applications."""
        if app.extensions.get("ratewin") is self:
            return
        app.extensions["ratewin"] = self
        app.before_request(self._check)
        app.after_request(self._add_headers)

    # -- decorators -------------------------------------------------------------------

    def limit(
        self,
        limit: LimitChoice,
        *,
        key: Optional[KeyFunction] = None,
        cost: Cost = 1,
        methods: Optional[Iterable[str]] = None,
        exempt_when: Optional[Callable[[], bool]] = None,
        per_method: bool = False,
        override_defaults: bool = True,
    ) -> LimitDecorator:
        """Limits a view (or every route of a blueprint), counting per route.

        ``limit``: a limit string, a Limit, a list of them, or a function of no arguments
        returning them per request (None: not limited this time). ``key``: the client,
        as the limiter's. ``cost``: the units a request takes, or a function returning
        them. ``methods``: only requests with these methods count (default: all).
        ``exempt_when()``: true leaves the request unlimited by these limits.
        ``per_method``: each method counts apart. ``override_defaults``: the route gets
        these limits instead of the blueprint's and the default ones (False: as well).
        """
        return LimitDecorator(self, _group("route", limit, key, cost, methods, exempt_when,
                                           per_method, override_defaults))

    def shared_limit(
        self,
        limit: LimitChoice,
        scope: ScopeChoice,
        *,
        key: Optional[KeyFunction] = None,
        cost: Cost = 1,
        methods: Optional[Iterable[str]] = None,
        exempt_when: Optional[Callable[[], bool]] = None,
        per_method: bool = False,
        override_defaults: bool = True,
    ) -> LimitDecorator:
        """Like ``limit``, but every route decorated with the same ``scope`` shares one
        count per client. ``scope`` is a name, or a function of the endpoint returning
        one (routes it names alike share)."""
        if not (isinstance(scope, str) or callable(scope)):
            raise TypeError("scope must be a name or a function (endpoint) -> name")
        return LimitDecorator(self, _group("shared", limit, key, cost, methods, exempt_when,
                                           per_method, override_defaults, scope))

    @overload
    def exempt(self, target: flask.Blueprint) -> flask.Blueprint: ...

    @overload
    def exempt(self, target: View) -> View: ...

    def exempt(self, target: Any) -> Any:
        """Exempts a view, or every route of a blueprint (and of the blueprints nested in
        it), from the application, default and blueprint limits. Limits decorated on the
        view itself still apply."""
        if isinstance(target, flask.Blueprint):
            self._exempt_blueprints.add(target)
        elif callable(target):
            self._exempt_views.add(target)
        else:
            raise TypeError("exempt takes a view function or a flask.Blueprint, not "
                            f"{type(target).__name__}")
        return target

    @property
    def current_limit(self) -> Optional[RequestLimit]:
        """The decision of the current request (``flask.g.ratewin``), None if unlimited."""
        found: Optional[RequestLimit] = flask.g.get("ratewin")
        return found

    # -- the request ------------------------------------------------------------------

    def _groups(self, endpoint: str) -> list[_Group]:
        """The groups that may apply to a request to `endpoint`, before their methods and
        exempt_when are asked: the application's, then the blueprints' (innermost first)
        or the defaults, then the view's own."""
        app = flask.current_app
        view = app.view_functions.get(endpoint)
        own: list[_Group] = []
        exempt = False
        # The view, the functions it wraps (functools.wraps), and the class of a
        # class-based view (View.as_view): whichever was decorated.
        chain: list[Any] = []
        seen = view
        while seen is not None and seen not in chain:
            chain.append(seen)
            seen = getattr(seen, "__wrapped__", None)
        view_class = getattr(view, "view_class", None)
        if view_class is not None:
            chain.append(view_class)
        for found in chain:
            own.extend(self._view_groups.get(found, ()))
            exempt = exempt or found in self._exempt_views
        blueprints = [bp for bp in (app.blueprints.get(name)
                                    for name in flask.request.blueprints) if bp is not None]
        exempt = exempt or any(bp in self._exempt_blueprints for bp in blueprints)
        if exempt:
            return own
        groups = list(self._application)
        if not any(g.override_defaults for g in own):
            overridden = False
            for bp in blueprints:
                found = self._blueprint_groups.get(bp, ())
                groups.extend(found)
                if any(g.override_defaults for g in found):
                    overridden = True
                    break
            if not overridden:
                groups.extend(self._defaults)
        return groups + own

    def _client(self, group: _Group) -> Optional[str]:
        key = group.key if group.key is not None else self._key
        if key is not None:
            return key()
        return remote_address() or self._unknown()

    def _charges(self, endpoint: str) -> list[Charge]:
        """The request's charges: one per client key and cost, so that the groups of one
        client are decided at once (all or nothing) in the common case."""
        method = flask.request.method
        merged: dict[tuple[str, int], tuple[list[Limit], list[Limit]]] = {}
        for group in self._groups(endpoint):
            if not group.applies(method):
                continue
            limits = group.limits_now()
            if limits is None:
                continue
            client = self._client(group)
            if client is None:
                continue
            cost = group.cost() if callable(group.cost) else group.cost
            counted, shown = merged.setdefault((client, int(cost)), ([], []))
            for lim, as_counted in zip(limits, counted_in(limits,
                                                          group.counted_as(endpoint, method))):
                if as_counted not in counted:  # one limit counted once per request
                    counted.append(as_counted)
                    shown.append(lim)
        return [Charge(client, tuple(counted), cost, tuple(shown))
                for (client, cost), (counted, shown) in merged.items()]

    def _check(self) -> None:
        """before_request: decides the request; raises RateLimitExceeded if refused."""
        environ = flask.request.environ
        if _STATE_KEY not in environ:
            flask.g.pop("ratewin", None)  # the app context may outlive a request
        endpoint = flask.request.endpoint
        if not self.enabled or not endpoint or _serves_static_files(endpoint):
            return
        admitted: list[tuple[Charge, Decisions]] = []
        try:
            for charge in self._charges(endpoint):
                decisions = charge.try_acquire(self.engine)
                if not decisions.allowed:
                    # Marked degraded if any decision on the request was.
                    self._refuse(charge, decisions, decisions.degraded
                                 or any(d.degraded for _, d in admitted))
                admitted.append((charge, decisions))
        except BaseException:
            # Refused (RateLimitExceeded), or a later charge failed (the engine closed, a
            # key or on_reject function raised): all or nothing across the groups too.
            for done, _ in admitted:
                done.refund(self.engine)
            raise
        if not admitted:
            return
        # The limit shown is the one with the fewest units left (a degraded one on a tie).
        charge, decisions = min(admitted, key=lambda a: (a[1].decision.remaining,
                                                         not a[1].degraded))
        headers = self.responder.headers(decisions, charge.shown,
                                         degraded=any(d.degraded for _, d in admitted))
        environ[_STATE_KEY] = _State(headers)
        flask.g.ratewin = RequestLimit.of(decisions, charge.shown)

    def _refuse(self, charge: Charge, decisions: Decisions, degraded: bool) -> None:
        headers = self.responder.headers(decisions, charge.shown, degraded=degraded)
        environ = flask.request.environ
        environ[_STATE_KEY] = _State(headers)
        # An outer ratewin.wsgi middleware gives its count back and leaves these headers.
        environ[REFUSED_MARK] = True
        limit = RequestLimit.of(decisions, charge.shown)
        flask.g.ratewin = limit
        answer = self.responder.refusal(flask.request, decisions, charge.shown, charge.cost)
        response = flask.current_app.response_class(
            answer.body, status=answer.status, headers=with_length(answer, headers))
        raise RateLimitExceeded(limit, answer, response)

    def _add_headers(self, response: flask.Response) -> flask.Response:
        """after_request: the decision's headers, on every limited response (an error
        handler's too), unless the response sets them itself."""
        state = flask.request.environ.get(_STATE_KEY)
        if isinstance(state, _State):
            for name, value in state.headers:
                if name not in response.headers:
                    response.headers[name] = value
        return response

    def __repr__(self) -> str:
        return f"<ratewin.flask.Limiter engine={self.engine!r}>"


def _serves_static_files(endpoint: str) -> bool:
    """Whether `endpoint` is the static files route of the application or of a blueprint
    (not a view of the application's own that happens to be named "static")."""
    owner_name, _, name = endpoint.rpartition(".")
    if name != "static":
        return False
    app = flask.current_app
    owner: Optional[Union[flask.Flask, flask.Blueprint]] = (
        app.blueprints.get(owner_name) if owner_name else app)
    return owner is not None and owner.has_static_folder


def _empty(limits: LimitChoice) -> bool:
    return isinstance(limits, (list, tuple)) and len(limits) == 0
