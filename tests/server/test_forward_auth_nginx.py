"""A real nginx (Debian's, with auth_request) in front of a small upstream, asking
ratewin-server whether each request may pass, with the configuration docs/server.md shows:
cmd/server/forward-auth/nginx.conf.in, run as it is. Limits hold through nginx, the
rate-limit headers reach the client, a 429 carries Retry-After, and with ratewin-server
down nginx answers as docs/server.md says (503; or, in the fail-open variant, the
upstream)."""

from __future__ import annotations

import http.client
import http.server
import os
import pathlib
import re
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from ratewin_testkit import PATIENCE, ROOT, free_port, wait_until, write_rules

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
TEMPLATE = ROOT / "cmd" / "server" / "forward-auth" / "nginx.conf.in"
CHECKER_DOWN = "return 503 '{\"error\":\"rate limiter unavailable\"}\\n';  # checker down"

pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (cmd/setup.sh installs Debian's nginx)")

RULES = """
tiers:
  free:
    limits:
      - {name: per-minute, max: 5, window: 1m}
default_tier: free
endpoints:
  - name: upload
    path: /upload
    methods: [POST]
    limits:
      - {name: burst, max: 1, window: 1m}
deny:
  - "ip:127.0.0.66"
"""


class Upstream:
    """The service behind nginx: answers 200 with what it was asked, and counts."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        lock = threading.Lock()
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                with lock:
                    seen.append((self.command, self.path))
                body = b'{"upstream":true}\n'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = answer

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Nginx:
    """nginx with the template's placeholders filled in, in the foreground (one process,
    stopped by PID), every file of its own under `prefix`."""

    def __init__(self, prefix: pathlib.Path, ratewin_port: int, upstream_port: int,
                 fail_open: bool = False) -> None:
        self.prefix = prefix
        prefix.mkdir(parents=True, exist_ok=True)
        self.ratewin_port = ratewin_port
        self.upstream_port = upstream_port
        self.fail_open = fail_open
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    def config(self, port: int) -> str:
        text = TEMPLATE.read_text()
        if self.fail_open:
            assert CHECKER_DOWN in text, "the template's checker-down line changed"
            text = text.replace(CHECKER_DOWN, "proxy_pass http://app;  # checker down: fail open")
        for name, value in [("@PREFIX@", str(self.prefix)), ("@LISTEN@", f"127.0.0.1:{port}"),
                            ("@RATEWIN@", f"127.0.0.1:{self.ratewin_port}"),
                            ("@UPSTREAM@", f"127.0.0.1:{self.upstream_port}")]:
            text = text.replace(name, value)
        assert re.search(r"@[A-Z]+@", text) is None, "a placeholder was left"
        return text

    def start(self) -> "Nginx":
        conf = self.prefix / "nginx.conf"
        for _ in range(5):  # a free port may be taken again before nginx binds it
            self.port = free_port()
            conf.write_text(self.config(self.port))
            self.process = subprocess.Popen(
                [NGINX, "-p", str(self.prefix), "-c", str(conf), "-e", str(self.prefix / "error.log"),
                 "-g", "daemon off; master_process off;"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(self.prefix / "stderr.log", "wb"))
            if wait_until(lambda: self.process.poll() is not None or self.answers()):
                if self.process.poll() is None:
                    return self
            self.stop()
        raise RuntimeError(f"nginx did not start: {self.log()}")

    def answers(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
            conn.request("GET", "/ratewin/check")  # internal: 404 without asking anyone
            conn.getresponse().read()
            conn.close()
            return True
        except OSError:
            return False

    def log(self) -> str:
        parts = []
        for name in ["stderr.log", "error.log"]:
            path = self.prefix / name
            if path.exists():
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=PATIENCE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=PATIENCE)
        self.process = None


def call(port: int, method: str, path: str, source: str, headers: dict[str, str] | None = None,
         body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE,
                                      source_address=(source, 0))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


@pytest.fixture
def stack(start_server, tmp_path):
    """ratewin-server (trusting nginx, 127.0.0.1), an upstream, and nginx in front."""
    checker = start_server("--trust-proxy", "127.0.0.1",
                           rules=write_rules(tmp_path / "rules.yaml", RULES))
    upstream = Upstream()
    nginx = Nginx(tmp_path / "nginx", checker.port, upstream.port)
    try:
        nginx.start()
        yield checker, upstream, nginx
    finally:
        nginx.stop()
        upstream.stop()


def test_limits_hold_through_nginx_and_the_headers_reach_the_client(stack):
    checker, upstream, nginx = stack
    # A burst from one client: exactly the limit's max gets through to the upstream.
    with ThreadPoolExecutor(max_workers=8) as pool:
        replies = list(pool.map(lambda i: call(nginx.port, "GET", f"/api/items?i={i}", "127.0.0.5"),
                                range(20)))
    statuses = sorted(status for status, _, _ in replies)
    assert statuses == [200] * 5 + [429] * 15, (statuses, nginx.log())
    assert len(upstream.seen) == 5
    for status, headers, body in replies:
        assert headers["x-ratelimit-limit"] == "5"
        assert headers["ratelimit-policy"] == '"tier:free/per-minute";q=5;w=60'
        assert headers["ratelimit"].startswith('"tier:free/per-minute";r=')
        assert int(headers["x-ratelimit-reset"]) > 0
        if status == 200:
            assert body == b'{"upstream":true}\n'
            assert "retry-after" not in headers
        else:
            assert 0 < int(headers["retry-after"]) <= 66, headers  # window + a subinterval
            assert headers["x-ratelimit-remaining"] == "0"
            assert body == b'{"error":"rate limited"}\n'
    assert sorted(int(h["x-ratelimit-remaining"]) for s, h, _ in replies if s == 200) == [0, 1, 2, 3, 4]
    # Another client behind the same nginx has its own limit.
    status, headers, _ = call(nginx.port, "GET", "/api/items", "127.0.0.6")
    assert status == 200 and headers["x-ratelimit-remaining"] == "4"
    assert checker.metric('ratewin_server_requests_total{status="429",rule="tier:free/per-minute"}') == 15
    # Refusals are answers, not errors: nginx logs none of them (it logs an error for
    # every auth_request answer other than 2xx, 401 and 403).
    assert "auth request unexpected status" not in nginx.log(), nginx.log()


def test_the_original_method_and_path_count_through_nginx(stack):
    _, upstream, nginx = stack
    # POST /upload: its endpoint limit (1), as nginx sends the method in X-Original-Method.
    assert call(nginx.port, "POST", "/upload", "127.0.0.7", body=b"x")[0] == 200
    for path in ["/upload", "/api/../upload", "//upload?x=1", "/upload/"]:
        status, headers, _ = call(nginx.port, "POST", path, "127.0.0.7", body=b"x")
        assert status == 429 and headers["ratelimit-policy"].endswith('"endpoint:upload/burst";q=1;w=60'), (path, status)
    # A client's own X-Original-* / X-Forwarded-* headers are replaced or removed by nginx.
    forged = {"X-Original-URI": "/cheap", "X-Original-Method": "GET",
              "X-Forwarded-Uri": "/cheap", "X-Forwarded-Method": "GET",
              "X-Forwarded-For": "203.0.113.1", "X-Real-IP": "203.0.113.1"}
    status, _, _ = call(nginx.port, "POST", "/upload", "127.0.0.7", headers=forged, body=b"x")
    assert status == 429
    # A deny rule for the client's address.
    status, _, body = call(nginx.port, "GET", "/", "127.0.0.66")
    assert status == 403 and body == b'{"error":"forbidden"}\n'
    # A check ratewin refuses as a bad request (an API key posing as an address).
    status, _, body = call(nginx.port, "GET", "/", "127.0.0.7", headers={"X-API-Key": "ip:1.2.3.4"})
    assert status == 400 and body == b'{"error":"bad request"}\n'
    assert ("POST", "/upload") in upstream.seen and len(upstream.seen) == 1
    assert "auth request unexpected status" not in nginx.log(), nginx.log()


def test_with_the_checker_down_nginx_answers_503(stack):
    checker, upstream, nginx = stack
    assert call(nginx.port, "GET", "/a", "127.0.0.8")[0] == 200
    checker.stop()
    status, headers, body = call(nginx.port, "GET", "/a", "127.0.0.8")
    assert status == 503, (status, body, nginx.log())
    assert body == b'{"error":"rate limiter unavailable"}\n'
    assert "x-ratelimit-limit" not in headers
    assert len(upstream.seen) == 1  # fails closed: nothing more went upstream
    assert "auth request unexpected status: 502" in nginx.log()


def test_docs_show_the_tested_configuration():
    """docs/server.md quotes the file this test runs, whole, so the two cannot drift apart."""
    page = (ROOT / "docs" / "server.md").read_text()
    assert "```nginx\n" + TEMPLATE.read_text() + "```" in page
    assert "# checker down" in page and CHECKER_DOWN in page


def test_fail_open_variant_passes_requests_while_the_checker_is_down(start_server, tmp_path):
    """docs/server.md's one-line change: the checker-down line replaced by proxy_pass."""
    checker = start_server("--trust-proxy", "127.0.0.1",
                           rules=write_rules(tmp_path / "rules.yaml", RULES))
    upstream = Upstream()
    nginx = Nginx(tmp_path / "nginx", checker.port, upstream.port, fail_open=True)
    try:
        nginx.start()
        for _ in range(5):
            assert call(nginx.port, "GET", "/a", "127.0.0.9")[0] == 200
        status, headers, _ = call(nginx.port, "GET", "/a", "127.0.0.9")
        assert status == 429 and int(headers["retry-after"]) > 0  # limits still hold
        checker.stop()
        for _ in range(3):
            status, headers, body = call(nginx.port, "GET", "/a", "127.0.0.9")
            assert status == 200 and body == b'{"upstream":true}\n', (status, body)
        assert len(upstream.seen) == 8
    finally:
        nginx.stop()
        upstream.stop()
