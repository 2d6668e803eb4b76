"""ratewin-server processes for the end-to-end tests: started on port 0 (the port read
from the line it prints once ready), stderr to a log file, stopped by PID; and what the
tests give them (rules files) and wait for (the store up)."""

from __future__ import annotations

import os
import pathlib
import re
import select
import signal
import subprocess
import textwrap
import time
from typing import TYPE_CHECKING, Mapping

from .http_helpers import Reply, metric_value, request
from .paths import ROOT
from .waiting import PATIENCE, wait_until

if TYPE_CHECKING:
    from .redis_servers import RedisCluster, RedisSentinel, RedisServer

SERVER = os.environ.get("RATEWIN_SERVER", str(ROOT / "build" / "cmd" / "ratewin-server"))
EXAMPLE_RULES = ROOT / "cmd" / "server" / "rules.example.yaml"

# "127.0.0.1:port", or ":::port" for a test that listens on [::] (its own --listen wins).
LISTENING = re.compile(rb"^ratewin-server listening on .*:(\d+) \((.*)\)\s*$")
# "127.0.0.1:port", or "unix:/path" (no port: grpc_port stays 0).
GRPC_LISTENING = re.compile(rb"^ratewin-server gRPC listening on (?:unix:\S+|.*:(\d+)) \((.*)\)\s*$")


class ServerProcess:
    """One ratewin-server; stderr goes to a log file the tests can read."""

    def __init__(self, args: list[str], log_path: pathlib.Path, env: Mapping[str, str] | None = None):
        self.args = args
        self.log_path = log_path
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.grpc_port = 0  # with --grpc-listen
        self.banner = ""
        self.grpc_banner = ""  # with --grpc-listen
        self.returncode: int | None = None

    def start(self, timeout: float = PATIENCE) -> "ServerProcess":
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [SERVER, "--listen", "127.0.0.1:0", *self.args],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                env=self.env)
        deadline = time.monotonic() + timeout
        m = self._banner(deadline, LISTENING)
        self.port = int(m.group(1))
        self.banner = m.group(0).decode().strip()
        if "--grpc-listen" in self.args:
            m = self._banner(deadline, GRPC_LISTENING)
            self.grpc_port = int(m.group(1) or 0)
            self.grpc_banner = m.group(0).decode().strip()
        return self

    def _banner(self, deadline: float, pattern: re.Pattern[bytes]) -> re.Match[bytes]:
        """The next line on stdout, which must match `pattern`."""
        line = self._line(deadline)
        m = pattern.match(line)
        if m is None:
            self.kill()
            raise RuntimeError(f"unexpected line {line!r}")
        return m

    def _line(self, deadline: float) -> bytes:
        """The next line on stdout, by the deadline."""
        assert self.process is not None and self.process.stdout is not None
        line = b""
        fd = self.process.stdout.fileno()
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RuntimeError(f"ratewin-server did not start: {self.log()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1)
            if not chunk:  # exited
                self.wait(5)
                raise RuntimeError(
                    f"ratewin-server exited ({self.returncode}) before listening: {self.log()}")
            line += chunk
        return line

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        assert self.process is not None and self.process.poll() is None
        os.kill(self.process.pid, signum)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        self.returncode = self.process.wait(timeout=timeout)
        return self.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        if self.process is not None:
            self.returncode = self.process.returncode
            if self.process.stdout is not None:
                self.process.stdout.close()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not exit in time (a sanitizer's exit checks
        take a while). The exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return self.returncode

    # Convenience: HTTP against this server.
    def get(self, path: str = "/", headers: Mapping[str, str] | None = None, **kw) -> Reply:
        return request(self.port, "GET", path, headers=headers, **kw)

    def call(self, method: str, path: str, **kw) -> Reply:
        return request(self.port, method, path, **kw)

    def metrics(self) -> str:
        r = self.get("/metrics")
        assert r.status == 200, r
        return r.text

    def metric(self, name_and_labels: str) -> float | None:
        return metric_value(self.metrics(), name_and_labels)


class ServerLauncher:
    """The start_server fixture's logic: launcher(*flags, rules=path, redis=a RedisServer,
    RedisCluster or RedisSentinel (its url), admin_token=str, threads=2, env=extra
    variables) starts a ratewin-server on a free port, its log in `directory`, and returns
    its ServerProcess (RuntimeError if it does not start); stop_all() stops every one."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self.started: list[ServerProcess] = []

    def __call__(self, *flags: str, rules: pathlib.Path | str | None = None,
                 redis: "RedisServer | RedisCluster | RedisSentinel | None" = None,
                 admin_token: str | None = None, threads: int = 2,
                 env: dict[str, str] | None = None) -> ServerProcess:
        args = ["--threads", str(threads), *flags]
        if rules is not None:
            args += ["--rules", str(rules)]
        if redis is not None:
            args += ["--redis", redis.url]
        if admin_token is not None:
            args += ["--admin-token", admin_token]
        environment = {k: v for k, v in os.environ.items() if k != "RATEWIN_ADMIN_TOKEN"}
        environment.update(env or {})
        log = self.directory / f"server-{len(self.started)}.log"
        server = ServerProcess(args, log, env=environment)
        self.started.append(server)
        return server.start()

    def stop_all(self, timeout: float = 30.0) -> None:
        for server in self.started:
            server.stop(timeout=timeout)


def degraded(reply: Reply) -> bool:
    """Whether the server decided on its own counts, its store (Redis) not having answered
    in time, as it says in the reply."""
    return reply.headers.get("x-ratelimit-policy") == "degraded"


def shared_admissions(replies: list[Reply], limit: int) -> int:
    """How many of `replies` were admitted (returned), asserting that servers counting
    together in Redis admitted `limit` of them: exactly, when every decision was made on
    the shared counts. One that Redis did not answer within the server's deadline (100
    ms, which a sanitizer-built server on a busy machine may miss) is made on the server's
    own counts, as the failure policy says, and marked degraded: such admissions may come
    on top of the limit, never in place of it."""
    admitted = sum(r.status == 200 for r in replies)
    over = sum(r.status == 200 and degraded(r) for r in replies)
    assert limit <= admitted <= limit + over, [(r.status, degraded(r)) for r in replies]
    return admitted


def store_up(*servers: ServerProcess) -> None:
    """Waits until each server's engine is connected to Redis (it starts either way)."""
    for s in servers:
        assert wait_until(lambda s=s: s.get("/healthz").json()["store"] == "up"), s.log()


def write_rules(path: pathlib.Path, text: str, atomic: bool = False) -> pathlib.Path:
    """Writes a rules file (dedented): in place, or (atomic) by renaming a new file over
    it, so that a watcher never sees it half-written."""
    content = textwrap.dedent(text).lstrip("\n")
    if not atomic:
        path.write_text(content)
        return path
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(content)
    os.replace(temporary, path)
    return path
