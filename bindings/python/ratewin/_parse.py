"""Limit strings, in the grammar the ``limits`` / flask-limiter family uses.

    parse("10/second")              -> Limit(10, per=1)
    parse("100 per 5 minutes")      -> Limit(100, per=300)
    parse_many("10/second; 1000/day")

One limit is ``COUNT ("/" | "per") [AMOUNT] UNIT``: COUNT and AMOUNT are whole numbers,
UNIT is second, minute, hour, day, month (30 days) or year (365 days), singular or
plural, in any case. Several limits are separated by ``;``, ``,`` or ``|``.
"""

from __future__ import annotations

import re
from typing import Optional, Union

from ._ratewin import FailurePolicy, Limit

_UNITS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "month": 30 * 86400,
    "year": 365 * 86400,
}
_LIMIT = re.compile(
    r"\s*(?P<count>[0-9]+)\s*(?:/|\bper\b)\s*(?P<amount>[0-9]+)?\s*(?P<unit>[A-Za-z]+)\s*",
    re.IGNORECASE,
)
_SEPARATORS = re.compile(r"[;,|]")


def _unit_seconds(unit: str, text: str) -> int:
    name = unit.lower()
    if name not in _UNITS and name.endswith("s"):
        name = name[:-1]
    if name not in _UNITS:
        raise ValueError(
            f"ratewin.parse: unknown unit {unit!r} in {text!r}; use second, minute, hour, "
            "day, month or year"
        )
    return _UNITS[name]


def parse(
    text: str,
    *,
    on_failure: Union[FailurePolicy, str] = "local",
    scope: Optional[str] = None,
) -> Limit:
    """One limit from text such as ``"10/second"`` or ``"100 per 5 minutes"``.

    Raises ValueError naming the problem (TypeError if ``text`` is not a str)."""
    if not isinstance(text, str):
        raise TypeError(f"ratewin.parse: text must be a str, not {type(text).__name__}")
    match = _LIMIT.fullmatch(text)
    if match is None:
        raise ValueError(
            f"ratewin.parse: cannot read {text!r} as a limit; write COUNT/UNIT or COUNT per "
            "[AMOUNT] UNIT, such as '10/second' or '100 per 5 minutes'"
        )
    count = int(match["count"])
    amount = int(match["amount"]) if match["amount"] is not None else 1
    if count == 0:
        raise ValueError(f"ratewin.parse: {text!r} allows nothing; the count must be at least 1")
    if amount == 0:
        raise ValueError(f"ratewin.parse: {text!r} has a window of 0; the amount must be at least 1")
    per = amount * _unit_seconds(match["unit"], text)
    try:
        return Limit(count, per=per, on_failure=on_failure, scope=scope)
    except ValueError as e:
        raise ValueError(f"ratewin.parse: {text!r}: {e}") from None


def parse_many(
    text: str,
    *,
    on_failure: Union[FailurePolicy, str] = "local",
) -> list[Limit]:
    """Several limits separated by ``;``, ``,`` or ``|``: ``"10/second; 1000/day"``.

    Raises ValueError naming the part that is wrong, or if there is none."""
    if not isinstance(text, str):
        raise TypeError(f"ratewin.parse_many: text must be a str, not {type(text).__name__}")
    parts = _SEPARATORS.split(text)
    if not any(p.strip() for p in parts):
        raise ValueError(f"ratewin.parse_many: no limit in {text!r}")
    limits = []
    for part in parts:
        if not part.strip():
            raise ValueError(f"ratewin.parse_many: an empty limit in {text!r}")
        limits.append(parse(part, on_failure=on_failure))
    return limits
