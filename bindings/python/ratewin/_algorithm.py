"""How a limit counts: ``Limit(..., algorithm=...)`` takes a name or one of these."""

from __future__ import annotations

import enum


class Algorithm(str, enum.Enum):
    """The algorithms of ``Limit(..., algorithm=...)``. Each member is the str of its
    name, so it compares equal to ``Limit.algorithm``: ``limit.algorithm ==
    Algorithm.STRICT_WINDOW``."""

    #: The default: the subinterval leaving the window counts by its overlap with it.
    SLIDING_WINDOW = "sliding_window"
    #: That subinterval counts in full until it has left: never more than max in any
    #: sliding window, at the price of refusing up to one subinterval's worth too early.
    STRICT_WINDOW = "strict_window"
    #: Windows of ``per`` seconds aligned on the clock, one counter each (resolution is
    #: per): never more than max per window, up to 2 x max across a boundary.
    FIXED_WINDOW = "fixed_window"
    #: A token bucket (GCRA): refills at max per ``per`` seconds, one unit every per / max,
    #: and holds ``burst`` units (max unless given): ``burst`` at once, then that rate. Its
    #: decisions' ``limit`` is the burst.
    TOKEN_BUCKET = "token_bucket"
    #: Exact: a log of the units admitted in the last ``per`` seconds (a sorted set per
    #: resource in Redis): never more than max in any sliding window, and nothing refused
    #: that an exact window would admit. Its max is at most 4096.
    SLIDING_LOG = "sliding_log"

    def __str__(self) -> str:
        return str(self.value)
