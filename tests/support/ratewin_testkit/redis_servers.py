"""Private Redis (or Valkey) servers for the tests: one server on a free loopback port, a
Unix socket, TLS, or any of them together; a Cluster; a Sentinel set. Which server runs
is RATEWIN_TEST_REDIS's choice: `redis` (the default) runs redis-server and redis-cli,
`valkey` valkey-server and valkey-cli. Nothing here touches a system service: every
process is started here and stopped by PID."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time
from typing import BinaryIO

from .ports import free_port
from .waiting import PATIENCE, wait_until

VARIABLE = "RATEWIN_TEST_REDIS"


@dataclasses.dataclass(frozen=True)
class ServerFlavour:
    """Which server the tests run, and its command-line client."""
    name: str
    server: str
    cli: str


FLAVOURS = {
    "redis": ServerFlavour("redis", "redis-server", "redis-cli"),
    "valkey": ServerFlavour("valkey", "valkey-server", "valkey-cli"),
}


def server_flavour() -> ServerFlavour:
    """The servers RATEWIN_TEST_REDIS names (unset or empty: redis); RuntimeError, saying
    what it may be, for any other value."""
    name = os.environ.get(VARIABLE, "") or "redis"
    if name not in FLAVOURS:
        raise RuntimeError(
            f"{VARIABLE}={name!r} is not a server the tests know: 'redis' (the default) runs "
            "redis-server and redis-cli, 'valkey' runs valkey-server and valkey-cli")
    return FLAVOURS[name]


# --------------------------------------------------------------------------------------
# RESP


class RespError(str):
    """An error reply's text ("ERR ...", "NOAUTH ...")."""


def encode_command(*args: str) -> bytes:
    payload = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode()
        payload += b"$%d\r\n%s\r\n" % (len(b), b)
    return payload


def read_reply(stream: BinaryIO) -> tuple[bytes, object]:
    """One RESP2 reply off `stream`: its bytes as they came, and its value (str for a
    simple string, RespError, int, bytes for a bulk string, None for nil, list)."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError(f"closed mid-reply: {line!r}")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return line, rest.decode()
    if kind == b"-":
        return line, RespError(rest.decode())
    if kind == b":":
        return line, int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return line, None
        data = stream.read(size + 2)
        if len(data) != size + 2:
            raise ConnectionError("closed mid-reply")
        return line + data, data[:-2]
    if kind == b"*":
        count = int(rest)
        if count < 0:
            return line, None
        raw, items = line, []
        for _ in range(count):
            part, value = read_reply(stream)
            raw += part
            items.append(value)
        return raw, items
    raise ConnectionError(f"not a RESP reply: {line!r}")


# --------------------------------------------------------------------------------------
# One server


class RedisServer:
    """A private server (redis-server or valkey-server, see server_flavour): no
    persistence; plain RESP on a free loopback port (`tcp`, the default), on a Unix
    socket in `directory` (`unix`: no port to collide on), or both; with `tls`
    (Certificates.server_args()) TLS on a second free port too. `password` is required
    of clients (requirepass), `config` is written to a file the server reads first (a
    sentinel needs one, and rewrites it), `extra_args` go last on its command line.

    url is the Unix socket's (unix://) if it has one, else the plain port's (redis://);
    tls_url the TLS port's (rediss://). command() speaks RESP itself, cli() runs the
    flavour's command-line client; both on the Unix socket if there is one, else on the
    plain port, and both authenticate with `password`."""

    def __init__(self, directory: pathlib.Path, *, tcp: bool = True, unix: bool = False,
                 tls: list[str] | None = None, password: str | None = None,
                 config: str | None = None, extra_args: list[str] | None = None) -> None:
        if not tcp and not unix:
            raise ValueError("RedisServer: plain RESP on a port (tcp), a Unix socket, or both")
        self.directory = directory
        self.tcp = tcp
        self.unix = unix
        self.socket = directory / "redis.sock"
        self.tls = tls
        self.password = password
        self.config = config
        self.extra_args = extra_args or []
        self.port = 0
        self.tls_port = 0
        self.flavour = server_flavour()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def tcp_url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def unix_url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def url(self) -> str:
        return self.unix_url if self.unix else self.tcp_url

    @property
    def tls_url(self) -> str:
        return f"rediss://127.0.0.1:{self.tls_port}"

    @property
    def log_path(self) -> pathlib.Path:
        return self.directory / "redis.log"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _pick_ports(self) -> None:
        if self.tcp:
            self.port = free_port()
        if self.tls is not None:
            self.tls_port = free_port()
            while self.tls_port == self.port:
                self.tls_port = free_port()

    def _command_line(self) -> list[str]:
        args = [self.flavour.server]
        if self.config is not None:
            args.append(str(self.directory / "redis.conf"))
        args += ["--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(self.directory),
                 "--daemonize", "no", "--loglevel", "warning", "--logfile", str(self.log_path)]
        if self.unix:
            args += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        if self.tls is not None:
            args += ["--tls-port", str(self.tls_port), *self.tls]
        if self.password is not None:
            args += ["--requirepass", self.password]
        return args + self.extra_args

    def start(self, same_port: bool = False) -> None:
        """Starts it on free ports (or again on the ports it had: a restart) and waits
        until it answers. Ports picked free may be taken by the time it binds them: then
        it exits, and others are tried (the same ones, a while longer, for a restart).
        RuntimeError if it cannot be started."""
        if shutil.which(self.flavour.server) is None:
            raise RuntimeError(f"{self.flavour.server} is not installed (cmd/setup.sh installs it)")
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "redis.conf"
        if self.config is not None and not config.exists():  # (a restart keeps its rewrites)
            config.write_text(self.config + "\n")
        picks_ports = self.tcp or self.tls is not None
        for _ in range(50 if same_port else 5 if picks_ports else 1):
            if not same_port:
                self._pick_ports()
            self.process = subprocess.Popen(self._command_line(), stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + PATIENCE
            while self.process.poll() is None and time.monotonic() < deadline:
                if self.ping():
                    return
                time.sleep(0.01)
            self.kill()  # exited (port taken) or never answered: try another port
            if same_port:
                time.sleep(0.1)
        raise RuntimeError(f"could not start {self.flavour.server}: {self.log()[-2000:]}")

    def _connect(self, timeout: float) -> socket.socket:
        if self.unix:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(str(self.socket))
            except OSError:
                s.close()
                raise
            return s
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def _exchange(self, args: tuple[str, ...], timeout: float) -> tuple[bytes, object]:
        """One command on a fresh connection, after AUTH if the server has a password: the
        raw reply and its value (AUTH's, if AUTH was refused)."""
        payload = encode_command(*args)
        if self.password is not None:
            payload = encode_command("AUTH", self.password) + payload
        with self._connect(timeout) as s, s.makefile("rb") as stream:
            s.sendall(payload)
            if self.password is not None:
                raw, value = read_reply(stream)
                if isinstance(value, RespError):
                    return raw, value
            return read_reply(stream)

    def command(self, *args: str, timeout: float = PATIENCE) -> bytes:
        """One command in RESP on a fresh connection; the raw reply."""
        return self._exchange(args, timeout)[0]

    def query(self, *args: str, timeout: float = PATIENCE) -> object:
        """One command in RESP on a fresh connection; the reply's value (see read_reply)."""
        return self._exchange(args, timeout)[1]

    def cli(self, *args: str) -> str:
        """One command through redis-cli (valkey-cli); what it prints, stripped."""
        where = ["-s", str(self.socket)] if self.unix else ["-h", "127.0.0.1", "-p", str(self.port)]
        auth = ["--no-auth-warning", "-a", self.password] if self.password is not None else []
        result = subprocess.run([self.flavour.cli, *where, *auth, *args],
                                capture_output=True, text=True, timeout=PATIENCE)
        return result.stdout.strip()

    def ping(self) -> bool:
        """True if it answers PING (after AUTH, with a password)."""
        try:
            return self.command("PING", timeout=1.0).startswith(b"+PONG")
        except OSError:
            return False

    def pause(self) -> None:
        """SIGSTOP: it holds every connection and answers nothing until resume()."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def kill(self) -> None:
        """Ends it abruptly (SIGKILL, resumed first if paused) and reaps it."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        self.kill()
        self.process = None
        if self.unix and self.socket.exists():
            self.socket.unlink()


# --------------------------------------------------------------------------------------
# Cluster


class RedisCluster:
    """A private Cluster of `primaries` servers (no replicas), joined with the flavour's
    `cli --cluster create`; `url` is a redis-cluster:// address of every node."""

    def __init__(self, directory: pathlib.Path, primaries: int = 3) -> None:
        self.nodes = [RedisServer(directory / f"node{i}",
                                  extra_args=["--cluster-enabled", "yes",
                                              "--cluster-node-timeout", "1000",
                                              "--cluster-require-full-coverage", "no"])
                      for i in range(primaries)]

    @property
    def url(self) -> str:
        return "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> None:
        for n in self.nodes:
            n.start()
        create = subprocess.run(
            [self.nodes[0].flavour.cli, "--cluster", "create",
             *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=PATIENCE, check=False)
        if create.returncode != 0:
            raise RuntimeError(f"{self.nodes[0].flavour.cli} --cluster create failed: "
                               + create.stdout.decode())
        ok = wait_until(lambda: all(b"cluster_state:ok" in n.command("CLUSTER", "INFO")
                                    for n in self.nodes))
        if not ok:
            raise RuntimeError("the cluster did not become healthy")

    def stop(self) -> None:
        for n in self.nodes:
            n.kill()


# --------------------------------------------------------------------------------------
# Sentinel


class RedisSentinel:
    """A primary, its replica, and three sentinels watching them as `name` (quorum 2, the
    primary down after 1 s without an answer, failover-timeout 5 s), the sentinels
    requiring `password`; as tests/redis/sentinel_test.cpp runs them. `url` is the
    redis-sentinel:// address of the three, with the password. start() returns once the
    replica is in sync and every sentinel knows the replica and the other two."""

    def __init__(self, directory: pathlib.Path, name: str = "mymaster",
                 password: str = "s3ntinel") -> None:
        self.directory = directory
        self.name = name
        self.password = password
        self.primary = RedisServer(directory / "primary")
        self.replica = RedisServer(directory / "replica")
        self.sentinels: list[RedisServer] = []

    @property
    def url(self) -> str:
        return ("redis-sentinel://" + ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
                + f"/{self.name}?sentinel_password={self.password}")

    def start(self) -> None:
        self.primary.start()
        self.replica.extra_args = ["--replicaof", "127.0.0.1", str(self.primary.port)]
        self.replica.start()
        config = (f"sentinel monitor {self.name} 127.0.0.1 {self.primary.port} 2\n"
                  f"sentinel down-after-milliseconds {self.name} 1000\n"
                  f"sentinel failover-timeout {self.name} 5000")
        for i in range(3):
            sentinel = RedisServer(self.directory / f"sentinel{i}", password=self.password,
                                   config=config, extra_args=["--sentinel"])
            self.sentinels.append(sentinel)
            sentinel.start()
        if not wait_until(self._ready):
            raise RuntimeError("the sentinels did not get ready: "
                               + "; ".join(s.log()[-500:] for s in self.sentinels))

    def _ready(self) -> bool:
        if b"state=online" not in self.primary.command("INFO", "replication"):
            return False
        for sentinel in self.sentinels:
            reply = sentinel.query("SENTINEL", "master", self.name)
            if not isinstance(reply, list):
                return False
            fields = dict(zip(reply[::2], reply[1::2]))
            if fields.get(b"num-other-sentinels") != b"2" or fields.get(b"num-slaves") != b"1":
                return False
        return True

    def announced_port(self) -> int:
        """The primary's port as the first sentinel names it now (0 if it names none)."""
        reply = self.sentinels[0].query("SENTINEL", "get-master-addr-by-name", self.name)
        return int(reply[1]) if isinstance(reply, list) and len(reply) == 2 else 0

    def stop(self) -> None:
        for server in (*self.sentinels, self.replica, self.primary):
            server.stop()
