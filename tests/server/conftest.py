"""Fixtures for the ratewin-server end-to-end tests. The binary is $RATEWIN_SERVER
(default build/cmd/ratewin-server). Every server and redis-server a test starts is
stopped by PID when the test ends, whether it passed or not."""

from __future__ import annotations

import os
import pathlib
import shutil
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from server_support import SERVER, Certificates, RedisServer, ServerProcess  # noqa: E402


@pytest.fixture(scope="session")
def server_binary() -> str:
    if not (os.path.isfile(SERVER) and os.access(SERVER, os.X_OK)):
        pytest.fail(f"ratewin-server not found at {SERVER} (build it, or set RATEWIN_SERVER)")
    return SERVER


@pytest.fixture
def redis(tmp_path: pathlib.Path):
    server = RedisServer(tmp_path / "redis")
    try:
        server.start()
    except RuntimeError as e:
        server.stop()
        pytest.fail(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed (cmd/setup.sh installs it)")
    return Certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture
def tls_redis(tmp_path: pathlib.Path, certificates: Certificates):
    """A redis-server serving TLS (server.crt) on tls_port, and plain RESP on port."""
    server = RedisServer(tmp_path / "redis", tls_args=certificates.server_args())
    try:
        server.start()
    except RuntimeError as e:
        server.stop()
        pytest.fail(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def start_server(server_binary: str, tmp_path: pathlib.Path):
    """start_server(*flags, rules=path, redis=RedisServer, admin_token=str, threads=2)
    starts a ratewin-server on a free port and returns its ServerProcess."""
    started: list[ServerProcess] = []

    def start(*flags: str, rules: pathlib.Path | str | None = None, redis: RedisServer | None = None,
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
        log = tmp_path / f"server-{len(started)}.log"
        server = ServerProcess(args, log, env=environment)
        started.append(server)
        try:
            return server.start()
        except RuntimeError as e:
            pytest.fail(str(e))

    try:
        yield start
    finally:
        for server in started:
            server.stop(timeout=5)
