"""The ratewin-server end-to-end tests' set-up: the fixtures (redis, tls_redis,
redis_sentinel, certificates, server_binary, start_server) are the support kit's
(tests/support/ratewin_testkit/plugin.py). The binary is $RATEWIN_SERVER (default
build/cmd/ratewin-server)."""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "support"))

pytest_plugins = ["ratewin_testkit.plugin"]
