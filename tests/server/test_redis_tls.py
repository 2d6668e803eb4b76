"""ratewin-server with TLS to Redis (--redis rediss://... and the --redis-tls-* flags) and
the Redis password from a file or the environment (--redis-password-file,
RATEWIN_REDIS_PASSWORD), against private redis-servers."""

from __future__ import annotations

import os
import subprocess

from ratewin_testkit import (PATIENCE, SERVER, Client, RedisServer, shared_admissions, store_up,
                            wait_until, write_rules)

RULES = """
    endpoints:
      - name: shared
        path: /shared
        limits:
          - {name: everybody, max: 12, window: 1h, per: global}
    """


def admitted_across(a, b, requests: int = 30) -> list[int]:
    """The statuses of `requests` requests to /shared, alternating between a and b; every
    one a 200 or a 429, and 12 of them 200 (shared_admissions)."""
    with Client(a.port) as ca, Client(b.port) as cb:
        replies = [(ca if i % 2 == 0 else cb).get("/shared", {"X-API-Key": f"k{i}"})
                   for i in range(requests)]
    statuses = [r.status for r in replies]
    assert set(statuses) <= {200, 429}, statuses
    shared_admissions(replies, 12)
    return statuses


def run_failing(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A server that must exit at start: its exit code and what it said."""
    return subprocess.run([SERVER, "--listen", "127.0.0.1:0", *flags], capture_output=True,
                          text=True, timeout=PATIENCE, stdin=subprocess.DEVNULL,
                          env=env if env is not None else
                          {k: v for k, v in os.environ.items() if k != "RATEWIN_REDIS_PASSWORD"})


def test_two_instances_share_limits_over_tls(start_server, tls_redis, certificates, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", RULES)
    # The CA as a flag, and as the URL's parameter.
    a = start_server("--redis", tls_redis.tls_url, "--redis-tls-ca-file", certificates["ca.crt"],
                     "--redis-tls-min-version", "1.3", rules=rules)
    b = start_server("--redis", f"{tls_redis.tls_url}?tls_ca_file={certificates['ca.crt']}",
                     "--redis-tls-server-name", "localhost", rules=rules)
    store_up(a, b)
    statuses = admitted_across(a, b)
    allowed = [i for i, status in enumerate(statuses) if status == 200]
    assert {i % 2 for i in allowed} == {0, 1}, "both instances admitted some"
    # The counts are in the TLS server (read over its plain port).
    assert b"ratewin:{" in tls_redis.command("KEYS", "ratewin:{*")
    for server in (a, b):
        assert "certificate" not in server.log(), server.log()


def test_a_certificate_that_does_not_pass_is_logged_plainly(start_server, tls_redis,
                                                            certificates, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", RULES)
    # A CA that did not sign the server's certificate: the server starts (degraded) and
    # says why; with --redis-tls-verify none it connects, with a warning.
    wrong = start_server("--redis", tls_redis.tls_url,
                         "--redis-tls-ca-file", certificates["other-ca.crt"], rules=rules)
    assert wait_until(lambda: "certificate verify failed" in wrong.log()), wrong.log()
    assert wrong.get("/healthz").json()["store"] == "down"
    unverified = start_server("--redis", tls_redis.tls_url,
                              "--redis-tls-ca-file", certificates["other-ca.crt"],
                              "--redis-tls-verify", "none", rules=rules)
    store_up(unverified)
    assert "verification is off" in unverified.log() or "verify=none" in unverified.log(), \
        unverified.log()


def test_mutual_tls_with_the_client_certificate_flags(start_server, certificates, tmp_path):
    server = RedisServer(tmp_path / "redis", tls=certificates.server_args(auth_clients=True))
    server.start()
    try:
        rules = write_rules(tmp_path / "rules.yaml", RULES)
        a = start_server("--redis", server.tls_url, "--redis-tls-ca-file", certificates["ca.crt"],
                         "--redis-tls-cert-file", certificates["client.crt"],
                         "--redis-tls-key-file", certificates["client.key"], rules=rules)
        store_up(a)
        # Without a certificate of its own: refused, and the log says a certificate is
        # wanted.
        b = start_server("--redis", server.tls_url, "--redis-tls-ca-file", certificates["ca.crt"],
                         rules=rules)
        assert wait_until(lambda: "certificate" in b.log()), b.log()
        assert b.get("/healthz").json()["store"] == "down"
    finally:
        server.stop()


def test_bad_tls_settings_stop_the_server_with_a_clear_message(tls_redis, certificates,
                                                               tmp_path):
    missing = tmp_path / "missing-ca.crt"
    done = run_failing("--redis", tls_redis.tls_url, "--redis-tls-ca-file", str(missing))
    assert done.returncode == 1  # (docs/redis.md: files that cannot be used exit 1)
    assert "TLS" in done.stderr and str(missing) in done.stderr, done.stderr
    not_a_certificate = tmp_path / "not-a-ca.crt"
    not_a_certificate.write_text("hello\n")
    done = run_failing("--redis", tls_redis.tls_url, "--redis-tls-ca-file",
                       str(not_a_certificate))
    assert done.returncode == 1 and "TLS" in done.stderr, done.stderr
    # TLS flags for an address without TLS.
    done = run_failing("--redis", tls_redis.url, "--redis-tls-ca-file", certificates["ca.crt"])
    assert done.returncode == 1 and "rediss" in done.stderr, done.stderr
    for flag, value in (("--redis-tls-verify", "maybe"), ("--redis-tls-min-version", "1.1")):
        done = run_failing("--redis", tls_redis.tls_url, flag, value)
        assert done.returncode == 2 and flag in done.stderr, done.stderr


def test_the_password_from_a_file_or_the_environment(start_server, tmp_path):
    password = "s3cret pw/with@odd:chars"
    redis = RedisServer(tmp_path / "redis", password=password)
    redis.start()
    try:
        rules = write_rules(tmp_path / "rules.yaml", RULES)
        secret = tmp_path / "redis-password"
        secret.write_text(password + "\n")
        a = start_server("--redis", redis.url, "--redis-password-file", str(secret), rules=rules)
        b = start_server("--redis", redis.url.replace("://", "://default@"), rules=rules,
                         env={"RATEWIN_REDIS_PASSWORD": password})
        store_up(a, b)
        admitted_across(a, b)
        for server in (a, b):
            assert password not in server.log()
        # Without the password, the server runs degraded and says why.
        c = start_server("--redis", redis.url, rules=rules)
        assert wait_until(lambda: "password" in c.log()), c.log()
        assert c.get("/healthz").json()["store"] == "down"
    finally:
        redis.stop()


def test_password_settings_that_cannot_be_used(tmp_path):
    secret = tmp_path / "redis-password"
    secret.write_text("pw\n")
    done = run_failing("--redis", "redis://:inline@127.0.0.1:1", "--redis-password-file",
                       str(secret))
    assert done.returncode == 2 and "already holds a password" in done.stderr, done.stderr
    assert "inline" not in done.stderr
    done = run_failing("--redis", "redis://:inline@127.0.0.1:1",
                       env={**os.environ, "RATEWIN_REDIS_PASSWORD": "pw"})
    assert done.returncode == 2 and "already holds a password" in done.stderr, done.stderr
    done = run_failing("--redis", "redis://127.0.0.1:1", "--redis-password-file",
                       str(tmp_path / "nowhere"))
    assert done.returncode == 2 and "cannot read" in done.stderr, done.stderr
    done = run_failing("--redis-password-file", str(secret))
    assert done.returncode == 2 and "needs --redis" in done.stderr, done.stderr


def test_help_lists_every_redis_url_form():
    done = subprocess.run([SERVER, "--help"], capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for form in ("redis://", "rediss://", "unix://", "redis-cluster://", "rediss-cluster://",
                 "redis-sentinel://", "rediss-sentinel://", "--redis-password-file",
                 "RATEWIN_REDIS_PASSWORD", "--redis-tls-ca-file", "--redis-tls-ca-dir",
                 "--redis-tls-cert-file", "--redis-tls-key-file", "--redis-tls-server-name",
                 "--redis-tls-verify", "--redis-tls-min-version"):
        assert form in text, form
