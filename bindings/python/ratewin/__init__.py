"""ratewin: a distributed approximate sliding-window rate limiter.

One honest limit across many replicas: each process decides locally, admissions are
written to Redis synchronously, and rejections never touch the network.

    import ratewin

    engine = ratewin.Engine()                      # or Engine("redis://127.0.0.1:6379")
    per_user = ratewin.Limit(100, per=60)          # 100 requests a minute
    decision = engine.try_acquire("user:42", per_user)
    if not decision:
        ...  # answer 429 with decision.headers()

Limits from strings: ``ratewin.parse("10/second")``, ``ratewin.parse_many("10/second;
1000/day")``; every method that takes a Limit also takes a limit string, and most take
several (a string of several or a list, decided all or nothing). Web applications: see ``ratewin.wsgi`` and ``ratewin.asgi``.
"""

from __future__ import annotations

import atexit
import collections.abc

from ._ratewin import (
    ClosedError,
    Decision,
    Decisions,
    Engine,
    Error,
    FailurePolicy,
    Limit,
    Limiter,
    ManualClock,
    Stats,
    StoreError,
    __version__,
    hash,
    parse,
    parse_many,
)
from . import _ratewin
from ._algorithm import Algorithm
from ._mode import Mode
from . import _waiting

_waiting.install()
# Engine.stats() reads as a mapping too (stats["allowed"], dict(stats)).
collections.abc.Mapping.register(Stats)

__all__ = [
    "Algorithm",
    "ClosedError",
    "Decision",
    "Decisions",
    "Engine",
    "Error",
    "FailurePolicy",
    "Limit",
    "Limiter",
    "ManualClock",
    "Mode",
    "Stats",
    "StoreError",
    "__version__",
    "hash",
    "parse",
    "parse_many",
]

# Engines still open when the interpreter exits are closed first, while their threads
# can still call back into Python; then those calls stop.
atexit.register(_ratewin._at_exit)
