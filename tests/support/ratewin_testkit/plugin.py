"""The fixtures both pytest trees share, loaded by each conftest.py with
`pytest_plugins = ["ratewin_testkit.plugin"]`. Every server a fixture starts is stopped by
PID when the test ends, whether it passed or not.

- redis: a private Redis (or Valkey) server; on a loopback port, or on a Unix socket
  only where the tree's `redis_unix_socket` fixture says True (tests/python's does).
- tls_redis: one serving TLS (server.crt) on tls_port too, plain RESP on port (and the
  Unix socket where the tree asks for it).
- redis_sentinel: a primary, a replica and three sentinels (RedisSentinel).
- certificates: tests/support/make_certs.sh's, once a session.
- server_binary, start_server: ratewin-server ($RATEWIN_SERVER) on free ports.

RATEWIN_TEST_REDIS chooses the servers (redis_servers.server_flavour); a value it does
not know stops the session before any test runs."""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

from .certificates import Certificates
from .ratewin_server import SERVER, ServerLauncher, ServerProcess
from .redis_servers import VARIABLE, RedisSentinel, RedisServer, server_flavour


def pytest_configure(config: pytest.Config) -> None:
    try:
        server_flavour()
    except RuntimeError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_report_header(config: pytest.Config) -> str:
    flavour = server_flavour()
    return f"{VARIABLE}={flavour.name}: {flavour.server} and {flavour.cli}"


def _started(server: RedisServer | RedisSentinel):
    """Starts `server` (pytest.fail if it cannot), yields it, stops it."""
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
def redis_unix_socket() -> bool:
    """Whether the redis and tls_redis fixtures listen on a Unix socket (their url then)
    rather than only on loopback ports; a tree's conftest.py overrides it."""
    return False


@pytest.fixture
def redis(tmp_path: pathlib.Path, redis_unix_socket: bool):
    yield from _started(RedisServer(tmp_path / "redis", tcp=not redis_unix_socket,
                                    unix=redis_unix_socket))


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed (cmd/setup.sh installs it)")
    return Certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture
def tls_redis(tmp_path: pathlib.Path, certificates: Certificates, redis_unix_socket: bool):
    """A server serving TLS with server.crt on tls_port, and plain RESP on port (and on
    its Unix socket, where the tree asks for one: for cli())."""
    yield from _started(RedisServer(tmp_path / "redis", unix=redis_unix_socket,
                                    tls=certificates.server_args()))


@pytest.fixture
def redis_sentinel(tmp_path: pathlib.Path):
    yield from _started(RedisSentinel(tmp_path / "sentinel"))


@pytest.fixture(scope="session")
def server_binary() -> str:
    if not (os.path.isfile(SERVER) and os.access(SERVER, os.X_OK)):
        pytest.fail(f"ratewin-server not found at {SERVER} (build it, or set RATEWIN_SERVER)")
    return SERVER


@pytest.fixture
def start_server(server_binary: str, tmp_path: pathlib.Path):
    """start_server(*flags, rules=path, redis=RedisServer, admin_token=str, threads=2,
    env=dict) starts a ratewin-server on a free port and returns its ServerProcess
    (ServerLauncher)."""
    launcher = ServerLauncher(tmp_path)

    def start(*flags: str, **settings) -> ServerProcess:
        try:
            return launcher(*flags, **settings)
        except RuntimeError as e:
            pytest.fail(str(e))

    try:
        yield start
    finally:
        launcher.stop_all()
