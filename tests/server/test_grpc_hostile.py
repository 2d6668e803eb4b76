"""cmd/bench/grpc_hostile.py run small against this build's server: every attack of
issue 38's table on the gRPC listener (connections that only greet, a CONTINUATION flood,
half-open streams, huge and unique descriptor values with overrides and a scrape, a YAML
alias bomb in --rls-config, rapid stream resets, bad fields, a broken folder), each
answered as it should be, while a well-behaved HTTP client and gRPC client (a process of
their own) get every answer they ask for, and the server's RSS stays within --max-memory
+ --max-buffer-memory + 64 MiB (not under a sanitizer, whose own memory is not the
server's). The latency figures it prints are for people (docs/envoy.md), not checked."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from rls_messages import grpc  # noqa: F401  (skips this module in a build without gRPC)
from ratewin_testkit import SERVER

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "cmd" / "bench" / "grpc_hostile.py"


def test_every_attack_is_bounded_and_good_clients_are_served():
    run = subprocess.run(
        [sys.executable, str(SCRIPT), SERVER, "--scale", "0.05", "--json",
         "--rls-python", os.environ["RATEWIN_RLS_PYTHON"],
         "--server-flag=--max-connections-per-address", "--server-flag=50"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    rows = {r["attack"]: r for r in result["rows"]}
    assert len(rows) == 8 and result["exit_code"] == 0, result["log_tail"]
    sanitized = bool(os.environ.get("RATEWIN_SANITIZE"))
    for name, r in rows.items():
        assert r["alive"], name
        assert r["http_failures"] == 0 and r["grpc_failures"] == 0, (name, r)
        if not sanitized:
            assert r["rss_peak"] <= r["rss_bound"], (name, r["rss_peak"])
    assert sum(r["http_calls"] for r in rows.values()) > 0
    assert sum(r["grpc_calls"] for r in rows.values()) > 0
    assert rows["greeting_only"]["closed_at_once"] == rows["greeting_only"]["connections"] - 50
    assert rows["continuation_flood"]["closed"]
    huge = rows["huge_values"]
    assert huge["codes"] == {"RESOURCE_EXHAUSTED": 5, "OK": 50}
    assert huge["metrics_bytes"] < 1 << 20
    assert rows["alias_bomb"]["refused"] and "nodes" in rows["alias_bomb"]["error"]
    assert rows["stream_resets"]["connections_ended"] >= 1
    bad = rows["bad_fields"]
    assert bad["unit_257"] == "INVALID_ARGUMENT"
    assert bad["hits_addend_max"] == "OVER_LIMIT"
    assert bad["invalid_utf8"] == {"INVALID_ARGUMENT": 250}
    assert bad["descriptors_100000"] == "RESOURCE_EXHAUSTED"
    assert bad["descriptors_65"] == "INVALID_ARGUMENT"
    assert bad["log_lines"] < 10  # (one a call, before)
    folder = rows["config_folder"]
    assert all(folder[k] for k in ("emptied", "cut", "dangling", "fifo")), folder
