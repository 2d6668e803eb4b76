"""The command line around serving: --version, --help's URL forms, `check RULES` and
`check --rls-config DIR` (the messages a reload gives), and a --listen port another process holds (refused unless
--reuse-port)."""

from __future__ import annotations

import json
import re
import subprocess

from ratewin_testkit import EXAMPLE_RULES, PATIENCE, ROOT, SERVER, wait_until, write_rules


def run(*args: str, timeout: float = PATIENCE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SERVER, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def test_version():
    got = run("--version")
    assert got.returncode == 0, got
    assert re.fullmatch(r"ratewin-server \d+\.\d+\.\d+ \(gRPC rate limit service: "
                        r"(built in|not built)\)\n", got.stdout), got.stdout


def test_help_names_every_redis_url_form():
    got = run("--help")
    assert got.returncode == 0
    text = " ".join(got.stdout.split())  # cxxopts wraps the descriptions
    for form in ["redis://", "rediss://", "unix://", "redis-cluster://", "rediss-cluster://",
                 "redis-sentinel://", "rediss-sentinel://"]:
        assert form in text, form
    for flag in ["--check", "--version", "--reuse-port"]:
        assert flag in text, flag


def test_check_prints_the_effective_rules():
    got = run("check", str(EXAMPLE_RULES))
    assert got.returncode == 0, got.stderr
    rules = json.loads(got.stdout)
    assert rules["version"].startswith("2024-06-example@")
    assert rules["defaults"]["algorithm"] == "sliding_window"  # defaults filled in
    assert f"{EXAMPLE_RULES}: valid, version {rules['version']}" in got.stderr
    # The flag form, with the server's other options, says the same.
    flag = run("--check", "--rules", str(EXAMPLE_RULES), "--threads", "1")
    assert flag.returncode == 0 and json.loads(flag.stdout) == rules


def test_check_fails_with_the_message_a_reload_gives(start_server, tmp_path):
    good = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - name: burst
                max: 5
                window: 1m
        default_tier: free
        """)
    server = start_server(rules=good)
    bad_text = """
        tiers:
          free:
            limits:
              - name: burst
                max: 5
                windw: 1m
        default_tier: free
        """
    bad = write_rules(tmp_path / "bad.yaml", bad_text)
    got = run("check", str(bad))
    assert got.returncode == 1 and got.stdout == "", got
    expected = f'{bad}:6:9: tiers.free.limits[0]: unknown field "windw"'
    assert got.stderr.startswith(f"ratewin-server: rules rejected: {expected}"), got.stderr
    message = got.stderr.split("rules rejected: ", 1)[1].strip()
    # The running server, given the same bytes at the same path, logs the same message.
    write_rules(good, bad_text, atomic=True)
    assert wait_until(lambda: "rules rejected" in server.log()), server.log()
    assert message.replace(str(bad), str(good)) in server.log()

    # The memory bound is checked as at a load: not one limiter of an hourly limit with
    # 60,000 subintervals (240 KB) fits in 16K.
    huge = write_rules(tmp_path / "huge.yaml", """
        tiers:
          free:
            limits:
              - name: hourly
                max: 5
                window: 1h
                subintervals: 60000
        default_tier: free
        """)
    got = run("check", str(huge), "--max-memory", "16K")
    assert got.returncode == 1, got
    assert "not one fits in the memory bound (16384 bytes, --max-memory)" in got.stderr
    assert run("check", str(huge)).returncode == 0

    # An empty file is refused unless --allow-empty-rules.
    empty = write_rules(tmp_path / "empty.yaml", "")
    assert run("check", str(empty)).returncode == 1
    assert run("check", str(empty), "--allow-empty-rules").returncode == 0
    missing = run("check", str(tmp_path / "none.yaml"))
    assert missing.returncode == 1 and "none.yaml" in missing.stderr
    assert run("--check").returncode == 2  # no rules file named


def test_check_an_rls_config_folder_as_the_listener_loads_it(tmp_path):
    example = ROOT / "cmd" / "server" / "rls" / "example"
    good = run("check", "--rls-config", str(example))
    assert good.returncode == 0, good.stderr
    assert "valid, version rls@" in good.stderr and "rate limits" in good.stderr
    # With a rules file too: both checked, either refusing.
    both = run("check", str(EXAMPLE_RULES), "--rls-config", str(example))
    assert both.returncode == 0, both.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "edge.yaml").write_text("domain: edge\ndescriptors:\n  - key: k\n"
                                   "    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
    refused = run("check", str(EXAMPLE_RULES), "--rls-config", str(bad))
    assert refused.returncode == 1
    assert "rls config rejected" in refused.stderr and "edge.yaml:4" in refused.stderr
    # A folder the server would refuse for holding no rate limit.
    (bad / "edge.yaml").write_text("domain: edge\n")
    assert run("check", "--rls-config", str(bad)).returncode == 1
    assert run("check", "--rls-config", str(bad), "--allow-empty-rls-config").returncode == 0
    assert run("check").returncode == 2


def test_a_port_in_use_is_refused_unless_reuse_port(start_server, tmp_path):
    first = start_server(threads=1)
    listen = f"127.0.0.1:{first.port}"
    # A second process on the same port: refused, saying why (it would have joined the
    # first's SO_REUSEPORT group, each counting apart).
    second = run("--listen", listen, "--threads", "1")
    assert second.returncode == 1, second
    assert f"cannot listen on {listen}: another process listens there" in second.stderr
    assert "--reuse-port" in second.stderr
    assert first.alive() and first.get("/healthz").status == 200
    # Asked for, it is served by both, with the warning that they must share a Redis.
    shared = start_server("--listen", listen, "--reuse-port", threads=1)
    assert shared.port == first.port
    assert "they must all use the same --redis" in shared.log()
    assert "its counts are its own" in shared.log()
    assert shared.get("/healthz").status == 200 and first.alive()
