"""Where things are: the source tree's root."""

from __future__ import annotations

import pathlib

# tests/support/ratewin_testkit/paths.py: three folders up.
ROOT = pathlib.Path(__file__).resolve().parents[3]
