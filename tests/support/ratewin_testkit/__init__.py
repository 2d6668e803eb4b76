"""The Python test-support kit, shared by tests/python and tests/server (each conftest.py
puts tests/support on sys.path and loads ratewin_testkit.plugin's fixtures). Modules by
job: ports (free_port), waiting (wait_until, and PATIENCE: the bound of a wait for what
is bound to happen), redis_servers (RedisServer, RedisCluster, RedisSentinel, chosen by
RATEWIN_TEST_REDIS), certificates (Certificates), http_helpers (request, Client, Reply,
raw sockets, http_get, metric_value), ratewin_server (the ratewin-server launcher,
write_rules, store_up, degraded, shared_admissions) and plugin (the pytest fixtures).
Every process started here is stopped by PID. The names are re-exported here."""

from __future__ import annotations

from .certificates import Certificates
from .http_helpers import (Client, RawReader, Reply, http_get, metric_value, raw_connect,
                           raw_get, request)
from .paths import ROOT
from .ports import free_port
from .ratewin_server import (EXAMPLE_RULES, SERVER, ServerLauncher, ServerProcess, degraded,
                             shared_admissions, store_up, write_rules)
from .redis_servers import (RedisCluster, RedisSentinel, RedisServer, RespError,
                            ServerFlavour, server_flavour)
from .waiting import PATIENCE, wait_until

__all__ = [
    "Certificates", "Client", "EXAMPLE_RULES", "PATIENCE", "ROOT", "RawReader", "RedisCluster",
    "RedisSentinel", "RedisServer", "Reply", "RespError", "SERVER", "ServerFlavour",
    "ServerLauncher", "ServerProcess", "degraded", "free_port", "http_get", "metric_value",
    "raw_connect", "raw_get", "request", "server_flavour", "shared_admissions", "store_up",
    "wait_until", "write_rules",
]
