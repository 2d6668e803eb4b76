"""Waiting for a condition: polled, with a deadline that only bounds a failure."""

from __future__ import annotations

import time
from typing import Callable


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.02):
    """Calls predicate until it returns something truthy (returned) or timeout passes
    (returns the last falsy value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
