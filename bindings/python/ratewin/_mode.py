"""Whether a limit's refusals take effect: ``Limit(..., mode=...)`` takes a name or one of
these."""

from __future__ import annotations

import enum


class Mode(str, enum.Enum):
    """The modes of ``Limit(..., mode=...)``. Each member is the str of its name, so it
    compares equal to ``Limit.mode``: ``limit.mode == Mode.SHADOW``."""

    #: The default: a refusal is a refusal.
    ENFORCE = "enforce"
    #: The limit decides and counts as if it enforced, but never refuses: what it would
    #: have refused is allowed, uncounted, with ``Decision.would_reject`` set. Switched to
    #: enforce (``Limit.with_mode``), it keeps what it counted.
    SHADOW = "shadow"

    def __str__(self) -> str:
        return str(self.value)
