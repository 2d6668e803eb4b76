"""What the WSGI and ASGI middleware share: choosing the limit, the client, the
resource and the cost of a request, and the body of a 429 answer."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Union

from ._ratewin import Limit

TOO_MANY_REQUESTS = b"Too Many Requests\n"

# A request as the framework gives it: a WSGI environ or an ASGI scope.
Request = Any
LimitChoice = Union[Limit, Callable[[Request], Optional[Limit]]]
# True: each request path counts apart; a function: requests count apart by what it
# returns (a route name, say); False: one count per client.
PathChoice = Union[bool, Callable[[Request], Optional[str]]]


class Charge(NamedTuple):
    """What one request asks of the engine."""

    resource: str
    limit: Limit
    cost: int


class RequestLimits:
    """The per-request choices of a rate-limiting middleware (see its docstring)."""

    def __init__(
        self,
        limit: LimitChoice,
        key: Callable[[Request], Optional[str]],
        cost: Optional[Callable[[Request], int]],
        per_path: PathChoice,
        request_name: str,
    ) -> None:
        if not isinstance(limit, Limit) and not callable(limit):
            raise TypeError(
                f"limit must be a ratewin.Limit or a function ({request_name}) -> Limit")
        if not isinstance(per_path, bool) and not callable(per_path):
            raise TypeError(
                f"per_path must be True, False or a function ({request_name}) -> str")
        self.limit = limit
        self.key = key
        self.cost = cost
        self.per_path = per_path

    def charge(self, request: Request, path: str) -> Optional[Charge]:
        """The charge for a request to `path`, or None when it is not limited (no limit
        applies to it, or its client has no key)."""
        limit = self.limit if isinstance(self.limit, Limit) else self.limit(request)
        if limit is None:
            return None
        client = self.key(request)
        if client is None:
            return None
        if self.per_path is True:
            client += " " + path
        elif callable(self.per_path):
            group = self.per_path(request)
            if group is not None:
                client += " " + group
        return Charge(client, limit, 1 if self.cost is None else self.cost(request))
