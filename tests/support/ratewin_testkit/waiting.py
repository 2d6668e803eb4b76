"""Waiting for a condition: polled, with a deadline that only bounds a failure.

PATIENCE is that bound, for every wait on something that is bound to happen (a server
up, a log line written, a connection closed, a reply): it is reached only when the thing
never happens, so it is long (a sanitizer-built server on a machine busy with other work
can take seconds where a quiet one takes milliseconds) and costs nothing when all is
well. A test passes a shorter bound only where the bound is what it checks, and says so.
"""

from __future__ import annotations

import time
from typing import Callable

PATIENCE = 60.0  # seconds


def wait_until(predicate: Callable[[], object], timeout: float = PATIENCE,
               interval: float = 0.02):
    """Calls predicate until it returns something truthy (returned) or timeout passes
    (returns the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
