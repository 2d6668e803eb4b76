"""The operators' files in cmd/server/deploy/: the Prometheus alert rules pass promtool
(check rules, and test rules: each alert fires on its series and not on the ones beside
it), and every metric the rules and the Grafana dashboard query, with every label value
they match exactly, is one a running server's /metrics exports (Envoy's rate limit
service's too, with a call within its limit and one over)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from ratewin_testkit import PATIENCE, ROOT, Client, store_up, write_rules

DEPLOY = ROOT / "cmd" / "server" / "deploy"
ALERTS = DEPLOY / "prometheus-alerts.yml"
DASHBOARD = DEPLOY / "grafana-dashboard.json"
ALERT_TESTS = ROOT / "tests" / "server" / "prometheus-alerts.test.yml"


def promtool() -> str | None:
    """Debian's promtool: on PATH, or taken out of the prometheus package by cmd/setup.sh
    (installing the package would start a Prometheus service)."""
    for candidate in [os.environ.get("RATEWIN_PROMTOOL"), shutil.which("promtool"),
                      str(ROOT / "build" / "tools" / "prometheus" / "usr" / "bin" / "promtool")]:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


PROMTOOL = promtool()
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not found (cmd/setup.sh extracts it from Debian's prometheus)")


@needs_promtool
def test_alert_rules_pass_promtool():
    check = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0 and "SUCCESS: 6 rules found" in check.stdout, check
    unit = subprocess.run([PROMTOOL, "test", "rules", ALERT_TESTS.name], capture_output=True,
                          text=True, timeout=60, cwd=ALERT_TESTS.parent)
    assert unit.returncode == 0, unit.stdout + unit.stderr


# A metric name, and its {matchers} if any.
SELECTOR = re.compile(r"\b(ratewin_[a-z0-9_]+)(\{[^}]*\})?")
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"')


def queried(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each metric a text names, with the label values it matches exactly (not instance:
    Prometheus adds it; not template variables)."""
    out = []
    for m in SELECTOR.finditer(text.replace('\\"', '"')):
        exact = [(label, value) for label, op, value in MATCHER.findall(m.group(2) or "")
                 if op == "=" and label != "instance" and "$" not in value]
        out.append((m.group(1), exact))
    return out


def exported(metrics: str) -> dict[str, list[dict[str, str]]]:
    """/metrics' samples: the label sets of each name."""
    samples: dict[str, list[dict[str, str]]] = {}
    for line in metrics.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s", line)
        assert m is not None, line
        labels = {k: v for k, _, v in MATCHER.findall(m.group(2) or "")}
        samples.setdefault(m.group(1), []).append(labels)
    return samples


def test_every_metric_the_alerts_and_dashboard_query_is_exported(start_server, redis, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - name: burst
                max: 2
                window: 1m
        default_tier: free
        """)
    # With Envoy's rate limit service too, one descriptor within its limit and one over
    # (the ratewin_rls_* series), when this build has it.
    grpc_built = os.environ.get("RATEWIN_GRPC", "ON") != "OFF"
    rls_flags: list[str] = []
    if grpc_built:
        folder = tmp_path / "rls"
        folder.mkdir()
        (folder / "edge.yaml").write_text(
            "domain: edge\ndescriptors:\n  - key: k\n"
            "    rate_limit: {unit: minute, requests_per_unit: 1}\n")
        rls_flags = ["--grpc-listen", "127.0.0.1:0", "--rls-config", str(folder)]
    server = start_server(*rls_flags, rules=rules, redis=redis, admin_token="t0ken")
    store_up(server)
    with Client(server.port) as c:
        statuses = [c.get("/", {"X-API-Key": "k"}).status for _ in range(4)]
    assert statuses == [200, 200, 429, 429]
    if grpc_built:
        assert rls_codes(server.grpc_port, 2) == [1, 2]  # OK, then OVER_LIMIT
    samples = exported(server.metrics())

    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in dashboard["templating"]["list"]]
    assert len(dashboard["panels"]) >= 10 and all(exprs)
    texts = {"dashboard": "\n".join(exprs), "alerts": ALERTS.read_text()}
    for source, text in texts.items():
        names = queried(text)
        assert names, source
        for name, exact in names:
            if name.startswith("ratewin_rls_") and not grpc_built:
                continue
            # A histogram's series are queried as _bucket, _sum and _count, as exported.
            assert name in samples, f"{source} queries {name}, which /metrics does not export"
            for label, value in exact:
                assert any(s.get(label) == value for s in samples[name]), \
                    f"{source}: no {name} sample has {label}=\"{value}\""
    # The alerts cover what the issue asks: the store down, the degraded share, a refusal
    # spike, rejected reloads.
    alerts = re.findall(r"- alert: (\w+)", texts["alerts"])
    assert alerts == ["RatewinStoreDown", "RatewinDegradedDecisions", "RatewinRefusalSpike",
                      "RatewinRulesRejected", "RatewinRlsConfigRejected",
                      "RatewinRlsOverLimitSpike"]


def rls_codes(port: int, calls: int) -> list[int]:
    """The overall codes of `calls` ShouldRateLimit calls for descriptor k=v of domain
    edge (grpcio; the messages protoc made for the tests)."""
    import grpc  # noqa: PLC0415 (python3-grpcio, only with gRPC built)
    sys.path.insert(0, os.environ["RATEWIN_RLS_PYTHON"])
    from envoy.service.ratelimit.v3 import rls_pb2  # noqa: PLC0415
    request = rls_pb2.RateLimitRequest(domain="edge")
    entry = request.descriptors.add().entries.add()
    entry.key, entry.value = "k", "v"
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString)
        return [call(request, timeout=PATIENCE).overall_code for _ in range(calls)]


def test_the_check_catches_a_metric_that_is_not_exported():
    """The matching above is not vacuous: a misspelt name or label value is found."""
    got = queried('sum(rate(ratewin_server_requests_totals{status="429",instance=~"$i"}[5m]))')
    assert got == [("ratewin_server_requests_totals", [("status", "429")])]
    samples = exported('ratewin_server_requests_total{status="200",rule="x"} 1\n')
    assert "ratewin_server_requests_totals" not in samples
    assert not any(s.get("status") == "429" for s in samples["ratewin_server_requests_total"])
