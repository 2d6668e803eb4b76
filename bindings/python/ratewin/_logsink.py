"""Where an Engine without a logger of its own reports: the "ratewin" logging.Logger
(its connection's ups and downs: warnings and errors, and debug and info records)."""

from __future__ import annotations

import logging

_LOGGER = logging.getLogger("ratewin")
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def emit(level: str, message: str) -> None:
    """Called from the engine's threads."""
    _LOGGER.log(_LEVELS.get(level, logging.WARNING), "%s", message)
