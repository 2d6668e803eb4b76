"""Engine methods written in Python: decisions awaited on an asyncio loop, and waiting
until a request is admitted.

    decision = await engine.try_acquire_async("user:42", limit)
    decision = engine.acquire("vendor-api", ratewin.parse("10/second"), timeout=5)
    decision = await engine.acquire_async("vendor-api", limit, timeout=5)

Waiters on one resource and limits line up: only the first of them polls the engine,
at the moment its retry_after says the request can pass, and hands over to the next
when it is done, so N waiters do not all wake whenever room frees up.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from typing import TYPE_CHECKING, Any, Deque, Dict, Hashable, Optional, Sequence, Union

from ._ratewin import Decision, Decisions, Engine, Limit, _limits

if TYPE_CHECKING:
    from ._ratewin import LimitsArg

Resource = Union[str, bytes, int]

__all__ = ["install"]


def _settle(future: "asyncio.Future[Decisions]", engine: Engine, resource: Resource,
            limits: Sequence[Limit], cost: int, decisions: Decisions) -> None:
    if future.cancelled():
        # Nobody will act on it: what it counted goes back.
        if decisions.allowed and not engine.closed:
            for limit in limits:
                engine.refund(resource, limit, cost)
        return
    if not future.done():
        future.set_result(decisions)


async def try_acquire_all_async(self: Engine, resource: Resource, limits: LimitsArg,
                                cost: int = 1) -> Decisions:
    """Engine.try_acquire_all, awaited on the running asyncio loop: a decision that needs
    a Redis round trip completes without blocking the loop or taking a thread per call
    (the write goes out on the engine's own I/O thread). Refusals on this engine's counts
    and local mode answer at once. If the awaiting task is cancelled, an admission it
    would have had is given back."""
    limits = tuple(_limits(limits))
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Decisions] = loop.create_future()

    def done(decisions: Decisions) -> None:  # on the engine's I/O thread
        try:
            loop.call_soon_threadsafe(_settle, future, self, resource, limits, cost, decisions)
        except RuntimeError:  # the loop is closed: nobody waits
            pass

    now = self._try_acquire_all_async(resource, limits, cost, done)
    if now is not None:
        return now
    return await future


async def try_acquire_async(self: Engine, resource: Resource, limit: LimitsArg,
                            cost: int = 1) -> Decision:
    """Engine.try_acquire, awaited on the running asyncio loop (see
    try_acquire_all_async)."""
    return (await try_acquire_all_async(self, resource, _limits(limit), cost)).decision


class _Line:
    """The waiters of one (engine, resource, limits, cost), first come first served."""

    def __init__(self) -> None:
        self.waiters: Deque[Any] = collections.deque()


class _Lines:
    """The lines of waiters, for threads (a threading.Event each) and for asyncio tasks
    (their loop and an asyncio.Event each)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lines: Dict[Hashable, _Line] = {}

    def busy(self, key: Hashable) -> bool:
        """Whether someone waits in that line."""
        with self.lock:
            return key in self.lines

    def join(self, key: Hashable, waiter: Any) -> bool:
        """Queues `waiter`; True when it is first (it may poll now)."""
        with self.lock:
            line = self.lines.setdefault(key, _Line())
            line.waiters.append(waiter)
            return len(line.waiters) == 1

    def leave(self, key: Hashable, waiter: Any) -> Optional[Any]:
        """Takes `waiter` out; returns the new first waiter, if it just became first."""
        with self.lock:
            line = self.lines.get(key)
            if line is None:
                return None
            was_first = bool(line.waiters) and line.waiters[0] is waiter
            try:
                line.waiters.remove(waiter)
            except ValueError:
                return None
            if not line.waiters:
                del self.lines[key]
                return None
            return line.waiters[0] if was_first else None


# Every line of every engine; a line (and its key's reference to the engine) goes when
# its last waiter leaves.
_LINES = _Lines()


def _key(engine: Engine, resource: Resource, limits: Sequence[Limit], cost: int) -> Hashable:
    return (engine, resource, limits, cost)


def _check_timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be seconds (int or float) or None, not {type(timeout).__name__}")
    if not timeout >= 0:
        raise ValueError(f"timeout must be 0 or more seconds, not {timeout!r}")
    return float(timeout)


def _wait_for(d: Decisions, deadline: Optional[float]) -> Optional[float]:
    """How long to wait before asking again, or None to give up (never can pass, or the
    deadline comes first)."""
    if not d.decision.can_ever_pass:
        return None
    wait = max(d.retry_after, 0.001)
    if deadline is not None and time.monotonic() + wait > deadline:
        return None
    return wait


def acquire(self: Engine, resource: Resource, limit: LimitsArg, cost: int = 1,
            timeout: Optional[float] = None) -> Decision:
    """Waits until `cost` units of `resource` fit in `limit` and counts them, or until
    `timeout` seconds pass (None: as long as it takes). Returns the Decision: allowed,
    or the last refusal when the timeout would pass first, or at once when the request
    can never pass (its cost exceeds max). Blocks the calling thread; the GIL is free
    while it sleeps. Waiters on the same resource and limit are served in turn: only the
    first polls."""
    return acquire_all(self, resource, _limits(limit), cost, timeout).decision


def acquire_all(self: Engine, resource: Resource, limits: LimitsArg, cost: int = 1,
                timeout: Optional[float] = None) -> Decisions:
    """acquire() over several limits at once (see try_acquire_all)."""
    limits = tuple(_limits(limits))
    deadline = None if (t := _check_timeout(timeout)) is None else time.monotonic() + t
    lines = _LINES
    key = _key(self, resource, limits, cost)
    last: Optional[Decisions] = None
    if not lines.busy(key):  # nobody waits: try at once
        last = self.try_acquire_all(resource, limits, cost)
        if last.allowed or _wait_for(last, deadline) is None:
            return last
    me = threading.Event()
    if lines.join(key, me):
        me.set()
    try:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0 or not me.wait(remaining):
                # The deadline came (before this waiter's turn, perhaps): one last try.
                return last if last is not None and not me.is_set() else (
                    self.try_acquire_all(resource, limits, cost))
            d = self.try_acquire_all(resource, limits, cost)
            if d.allowed:
                return d
            last = d
            wait = _wait_for(d, deadline)
            if wait is None:
                return d
            time.sleep(wait)
    finally:
        following = lines.leave(key, me)
        if following is not None:
            _wake(following)


async def acquire_async(self: Engine, resource: Resource, limit: LimitsArg, cost: int = 1,
                        timeout: Optional[float] = None) -> Decision:
    """acquire(), awaited on the running asyncio loop: waits with asyncio.sleep and
    decides with try_acquire_async, so the loop keeps serving."""
    return (await acquire_all_async(self, resource, _limits(limit), cost, timeout)).decision


async def acquire_all_async(self: Engine, resource: Resource, limits: LimitsArg,
                            cost: int = 1, timeout: Optional[float] = None) -> Decisions:
    """acquire_all(), awaited on the running asyncio loop."""
    limits = tuple(_limits(limits))
    deadline = None if (t := _check_timeout(timeout)) is None else time.monotonic() + t
    lines = _LINES
    key = _key(self, resource, limits, cost)
    last: Optional[Decisions] = None
    if not lines.busy(key):  # nobody waits: try at once
        last = await try_acquire_all_async(self, resource, limits, cost)
        if last.allowed or _wait_for(last, deadline) is None:
            return last
    loop = asyncio.get_running_loop()
    me = asyncio.Event()
    # The line is shared with threads: a thread that hands over sets the event through
    # the loop.
    waiter = (loop, me)
    if lines.join(key, waiter):
        me.set()
    try:
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                if remaining is not None and remaining <= 0:
                    raise asyncio.TimeoutError
                await asyncio.wait_for(me.wait(), remaining)
            except asyncio.TimeoutError:
                # The deadline came (before this waiter's turn, perhaps): one last try.
                if last is not None and not me.is_set():
                    return last
                return await try_acquire_all_async(self, resource, limits, cost)
            d = await try_acquire_all_async(self, resource, limits, cost)
            if d.allowed:
                return d
            last = d
            wait = _wait_for(d, deadline)
            if wait is None:
                return d
            await asyncio.sleep(wait)
    finally:
        following = lines.leave(key, waiter)
        if following is not None:
            _wake(following)


def _wake(waiter: Any) -> None:
    if isinstance(waiter, threading.Event):
        waiter.set()
        return
    loop, event = waiter
    try:
        loop.call_soon_threadsafe(event.set)
    except RuntimeError:  # its loop is closed
        pass


def install() -> None:
    """Adds the methods above to Engine."""
    setattr(Engine, "try_acquire_async", try_acquire_async)
    setattr(Engine, "try_acquire_all_async", try_acquire_all_async)
    setattr(Engine, "acquire", acquire)
    setattr(Engine, "acquire_all", acquire_all)
    setattr(Engine, "acquire_async", acquire_async)
    setattr(Engine, "acquire_all_async", acquire_all_async)
