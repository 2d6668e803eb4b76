#!/usr/bin/python3
"""The gRPC listener under the attacks of issue 38's table, and what a well-behaved
client gets meanwhile.

    cmd/bench/grpc_hostile.py SERVER [--scale 1.0] [--only NAME,...] [--json]

Starts SERVER (a ratewin-server binary) on free loopback ports with --grpc-listen, an
--rls-config folder, --max-memory 256M and --max-buffer-memory 64M (the defaults, given so
that the bound is known), then runs each attack in turn from loopback addresses of its own
(127.0.0.2 and up), bounded in count (times --scale) and time. Meanwhile two well-behaved
clients on 127.0.0.1 call every 20 ms: GET /healthz over keep-alive HTTP/1.1, and
ShouldRateLimit through grpcio. For each attack it prints what the server did, its peak
RSS against the bound (--max-memory + --max-buffer-memory + 64 MiB), the good clients'
p99 and failures, and the server's CPU seconds. Stops the server it started.

The RLS messages for Python come from the build (SERVER's folder's server/rls/python, or
--rls-python). tests/server/test_grpc_hostile.py runs it small (--scale 0.05 --json) and
checks the outcomes and the memory bound; the latency figures are for people (docs/envoy.md).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1 << 20
MAX_MEMORY = 256 * MIB
MAX_BUFFER = 64 * MIB
RSS_BOUND = MAX_MEMORY + MAX_BUFFER + 64 * MIB
METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
CONFIG = """\
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000000}
"""
LISTENING = re.compile(rb"^ratewin-server listening on .*:(\d+) ")
GRPC_LISTENING = re.compile(rb"^ratewin-server gRPC listening on .*:(\d+) ")

# HTTP/2 frames (RFC 9113), enough to speak to the listener as no library would.
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY, CONTINUATION = 0, 1, 3, 4, 7, 9
END_STREAM, END_HEADERS = 0x1, 0x4
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def hpack_int(value: int, bits: int) -> bytes:
    top = (1 << bits) - 1
    if value < top:
        return bytes([value])
    out = [top]
    value -= top
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def hpack_literal(name: str, value: bytes) -> bytes:
    """A field without indexing, its name new (no Huffman)."""
    n = name.encode()
    return b"\x00" + hpack_int(len(n), 7) + n + hpack_int(len(value), 7) + value


def call_block() -> bytes:
    return b"".join(hpack_literal(n, v.encode()) for n, v in (
        (":method", "POST"), (":scheme", "http"), (":path", METHOD), (":authority", "rls"),
        ("content-type", "application/grpc"), ("te", "trailers")))


def greet(sock: socket.socket) -> None:
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0))


def connect(port: int, source: str, timeout: float = 10.0) -> socket.socket:
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (what it sent before is read and dropped)."""
    sock.setblocking(False)
    try:
        while True:
            if not sock.recv(1 << 16):
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def send_until_closed(sock: socket.socket, chunks, deadline: float) -> tuple[int, bool]:
    """Sends the chunks until the server closes, they run out or the deadline: how many
    went, and whether the server closed."""
    sent = 0
    try:
        for chunk in chunks:
            if time.monotonic() > deadline:
                return sent, False
            sock.sendall(chunk)
            sent += 1
    except OSError:
        return sent, True
    return sent, False


class Server:
    def __init__(self, binary: str, folder: pathlib.Path, flags: list[str]) -> None:
        self.log_path = folder / "server.log"
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
             "--rls-config", str(folder / "rls"), "--max-memory", "256M",
             "--max-buffer-memory", "64M", *flags],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log)
        self.port = int(self._line(LISTENING))
        self.grpc_port = int(self._line(GRPC_LISTENING))

    def _line(self, pattern: re.Pattern[bytes]) -> bytes:
        line = self.process.stdout.readline()
        m = pattern.match(line)
        if m is None:
            self.stop()
            raise SystemExit(f"the server said {line!r}: {self.log_path.read_text()}")
        return m.group(1)

    def rss(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_lines(self) -> int:
        return self.log_path.read_bytes().count(b"\n")

    def health(self) -> dict:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request("GET", "/healthz")
            return json.loads(c.getresponse().read())
        finally:
            c.close()

    def stop(self) -> int | None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        return self.process.returncode


class Watch:
    """The good clients (a process of their own, so that an attack's Python does not slow
    them) and the server's memory, while an attack runs."""

    def __init__(self, server: Server, rls_python: str) -> None:
        self.server = server
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.reset()
        self.probe = subprocess.Popen(
            [sys.executable, __file__, "--probe", str(server.port), str(server.grpc_port),
             "--rls-python", rls_python],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self._read_probe, self._memory)]
        for t in self.threads:
            t.start()

    def reset(self) -> dict:
        with self.lock:
            taken = getattr(self, "figures", None)
            self.figures = {"http": [], "grpc": [], "http_failures": 0, "grpc_failures": 0,
                            "rss_peak": 0}
            return taken

    def _read_probe(self) -> None:
        for line in self.probe.stdout:  # "http 0.0012" or "grpc fail"
            kind, value = line.split()
            with self.lock:
                if value == "fail":
                    self.figures[f"{kind}_failures"] += 1
                else:
                    self.figures[kind].append(float(value))

    def _memory(self) -> None:
        while not self.stopping.wait(0.02):
            try:
                rss = self.server.rss()
            except OSError:
                return
            with self.lock:
                self.figures["rss_peak"] = max(self.figures["rss_peak"], rss)

    def close(self) -> None:
        self.stopping.set()
        self.probe.stdin.close()  # (the probe ends when its input does)
        self.probe.wait(60)
        for t in self.threads:
            t.join()


def probe(port: int, grpc_port: int, rls_python: str) -> None:
    """The good clients: every 20 ms, GET /healthz over keep-alive HTTP/1.1 and one
    ShouldRateLimit through grpcio; each answer's seconds (or "fail") on stdout, until
    stdin ends."""
    sys.path.insert(0, rls_python)
    import grpc  # noqa: E402  (python3-grpcio)
    from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402
    stopping = threading.Event()
    out = threading.Lock()

    def say(kind: str, seconds: float | None) -> None:
        with out:
            print(kind, "fail" if seconds is None else f"{seconds:.6f}", flush=True)

    def http_client() -> None:
        c = None
        while not stopping.wait(0.02):
            started = time.monotonic()
            try:
                if c is None:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                                   source_address=("127.0.0.1", 0))
                c.request("GET", "/healthz")
                r = c.getresponse()
                r.read()
                say("http", time.monotonic() - started if r.status == 200 else None)
            except (OSError, http.client.HTTPException):
                say("http", None)
                c = None

    def grpc_client() -> None:
        request = rls_pb2.RateLimitRequest(domain="edge")
        entry = request.descriptors.add().entries.add()
        entry.key, entry.value = "remote_address", "good"
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            call = channel.unary_unary(
                METHOD, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                response_deserializer=rls_pb2.RateLimitResponse.FromString)
            while not stopping.wait(0.02):
                started = time.monotonic()
                try:
                    ok = call(request, timeout=30).overall_code == rls_pb2.RateLimitResponse.OK
                    say("grpc", time.monotonic() - started if ok else None)
                except grpc.RpcError:
                    say("grpc", None)

    clients = [threading.Thread(target=f) for f in (http_client, grpc_client)]
    for t in clients:
        t.start()
    sys.stdin.read()
    stopping.set()
    for t in clients:
        t.join()


def p99(samples: list[float]) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


# The attacks: each returns what it saw the server do (a dict for --json).

def greeting_only(ctx) -> dict:
    """Connections that send the HTTP/2 preface and nothing more, from one address."""
    n = max(20, int(1400 * ctx.scale))
    held = []
    for _ in range(n):
        try:
            s = connect(ctx.server.grpc_port, "127.0.0.2")
            greet(s)
            held.append(s)
        except OSError:
            pass
    time.sleep(1.0)  # (the figures of the good clients while they are held)
    closed = sum(closed_by_server(s) for s in held)
    for s in held:
        s.close()
    return {"connections": n, "closed_at_once": closed,
            "said": f"{n} greeted, {closed} closed at once (over the per-address bound)"}


def continuation_flood(ctx) -> dict:
    """One stream's header block continued by 16 KB CONTINUATION frames."""
    n = max(200, int(40000 * ctx.scale))
    s = connect(ctx.server.grpc_port, "127.0.0.3")
    greet(s)
    s.sendall(frame(HEADERS, 0, 1, call_block()))
    chunk = frame(CONTINUATION, 0, 1, b"\x00" * 16384)
    sent, closed = send_until_closed(s, (chunk for _ in range(n)), time.monotonic() + 20)
    closed = closed or closed_by_server(s) or wait_closed(s, 5)
    s.close()
    return {"frames_sent": sent, "closed": closed,
            "said": f"connection closed; {sent} of {n} frames written by then" if closed
                    else "connection kept"}


def wait_closed(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        while sock.recv(1 << 16):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:
        return True


def half_open_streams(ctx) -> dict:
    """Streams that send their headers and part of a message, never the rest; four
    connections."""
    n = max(200, int(20000 * ctx.scale))
    block = call_block()
    part = b"\x00" + struct.pack(">I", 2048) + b"x" * 1024
    results = []
    for _ in range(4):
        s = connect(ctx.server.grpc_port, "127.0.0.4")
        greet(s)
        chunks = (frame(HEADERS, END_HEADERS, 2 * i + 1, block) + frame(DATA, 0, 2 * i + 1, part)
                  for i in range(n))
        sent, closed = send_until_closed(s, chunks, time.monotonic() + 10)
        results.append((s, sent, closed))
    time.sleep(1.0)
    closed = sum(c or closed_by_server(s) for s, _, c in results)
    for s, _, _ in results:
        s.close()
    return {"streams_sent": sum(r[1] for r in results), "connections_closed": closed,
            "said": f"{sum(r[1] for r in results)} streams sent on 4 connections, "
                    f"{closed} closed by the server"}


def huge_values(ctx) -> dict:
    """Descriptor values of 1 MB (each call unique), then 1000-byte ones with a limit
    override each, then one /metrics scrape."""
    rls_pb2, grpc = ctx.rls_pb2, ctx.grpc
    codes: dict[str, int] = {}
    with grpc.insecure_channel(f"127.0.0.1:{ctx.server.grpc_port}",
                               options=[("grpc.max_send_message_length", 4 * MIB)]) as ch:
        call = ch.unary_unary(METHOD,
                              request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                              response_deserializer=rls_pb2.RateLimitResponse.FromString)

        def one(value: str, override: bool) -> None:
            r = rls_pb2.RateLimitRequest(domain="edge")
            d = r.descriptors.add()
            e = d.entries.add()
            e.key, e.value = "remote_address", value
            if override:
                d.limit.requests_per_unit = 5
                d.limit.unit = 1  # SECOND
            try:
                call(r, timeout=30)
                key = "OK"
            except grpc.RpcError as failure:
                key = failure.code().name
            codes[key] = codes.get(key, 0) + 1
        for i in range(max(5, int(100 * ctx.scale))):
            one(f"{i:08d}" + "v" * MIB, False)
        for i in range(max(50, int(1000 * ctx.scale))):
            one(f"{i:08d}" + "w" * 992, True)
    started = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", ctx.server.port, timeout=60)
    c.request("GET", "/metrics")
    size = len(c.getresponse().read())
    c.close()
    return {"codes": codes, "metrics_bytes": size,
            "said": f"{codes}; /metrics {size / 1024:.0f} KiB in "
                    f"{(time.monotonic() - started) * 1000:.0f} ms"}


def reload_refused(ctx, change, undo, name: str) -> dict:
    """Applies a change to the --rls-config folder, SIGHUP, and waits for the refusal
    (health's rls.last_error); then undoes it and waits for the good load again."""
    change()
    ctx.server.process.send_signal(1)  # SIGHUP
    error = ""
    deadline = time.monotonic() + 60
    while not error and time.monotonic() < deadline:
        error = ctx.server.health()["rls"]["last_error"]
        time.sleep(0.05)
    undo()
    ctx.server.process.send_signal(1)
    while ctx.server.health()["rls"]["last_error"] and time.monotonic() < deadline:
        time.sleep(0.05)
    # (The message begins with the file's path, a temporary folder's here.)
    said = error.split(".yaml:", 1)[-1] if ".yaml:" in error else error
    return {"refused": bool(error), "error": error, "said": f"{name}: {said[:90]}"}


def alias_bomb(ctx) -> dict:
    """A YAML file of nested aliases (1,048,576 rate limits once expanded)."""
    lines = ["domain: bomb", "descriptors:", "  - key: l0", "    descriptors: &l0"]
    lines += [f"      - {{key: a{j}, rate_limit: {{unit: second, requests_per_unit: 1}}}}"
              for j in range(4)]
    for level in range(1, 11):
        lines += [f"  - key: l{level}", f"    descriptors: &l{level}"]
        lines += [f"      - {{key: b{j}, descriptors: *l{level - 1}}}" for j in range(4)]
    path = ctx.folder / "rls" / "bomb.yaml"
    text = "\n".join(lines) + "\n"
    result = reload_refused(ctx, lambda: path.write_text(text), path.unlink, "nested aliases")
    result["file_bytes"] = len(text)
    return result


def stream_resets(ctx) -> dict:
    """Streams opened and reset at once, as fast as the connection takes them; a new
    connection when one ends."""
    seconds = max(2.0, 10 * ctx.scale)
    block = call_block()
    deadline = time.monotonic() + seconds
    resets = 0
    ended = 0
    while time.monotonic() < deadline:
        s = connect(ctx.server.grpc_port, "127.0.0.5")
        greet(s)
        stream = 1

        def batches():
            nonlocal stream
            while True:
                out = []
                for _ in range(500):
                    out.append(frame(HEADERS, END_HEADERS, stream, block) +
                               frame(RST_STREAM, 0, stream, struct.pack(">I", 8)))
                    stream += 2
                yield b"".join(out)
        sent, closed = send_until_closed(s, batches(), deadline)
        resets += sent * 500
        if closed or closed_by_server(s):
            ended += 1
        s.close()
    return {"resets_sent": resets, "connections_ended": ended,
            "said": f"{resets} streams opened and reset in {seconds:.0f} s (written, not all "
                    f"read), {ended} connections ended by GOAWAY"}


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field_bytes(number: int, data: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(data)) + data


def bad_fields(ctx) -> dict:
    """An override unit of 257, a hits_addend of 2^64-1, calls with invalid UTF-8, one call
    of 100,000 descriptors, one of 65."""
    grpc = ctx.grpc
    out: dict[str, object] = {}
    before = ctx.server.log_lines()
    entry = field_bytes(1, b"remote_address") + field_bytes(2, b"x")
    with grpc.insecure_channel(f"127.0.0.1:{ctx.server.grpc_port}",
                               options=[("grpc.max_send_message_length", 16 * MIB)]) as ch:
        raw = ch.unary_unary(METHOD)  # bytes in, bytes out

        answer = ctx.rls_pb2.RateLimitResponse

        def code(message: bytes) -> str:
            """The call's status; for OK, the answer's overall code."""
            try:
                return answer.Code.Name(answer.FromString(raw(message, timeout=30)).overall_code)
            except grpc.RpcError as failure:
                return failure.code().name
        domain = field_bytes(1, b"edge")
        override = field_bytes(2, varint(1 << 3) + varint(5) + varint(2 << 3) + varint(257))
        out["unit_257"] = code(domain + field_bytes(2, field_bytes(1, entry) + override))
        addend = field_bytes(3, varint(1 << 3) + varint(2**64 - 1))
        out["hits_addend_max"] = code(domain + field_bytes(2, field_bytes(1, entry) + addend))
        bad = field_bytes(1, field_bytes(1, b"remote_address") + field_bytes(2, b"\xff\xfe"))
        utf8 = [code(domain + field_bytes(2, bad)) for _ in range(max(100, int(5000 * ctx.scale)))]
        out["invalid_utf8"] = {c: utf8.count(c) for c in set(utf8)}
        many = field_bytes(2, field_bytes(1, entry))
        out["descriptors_100000"] = code(domain + many * 100000)
        out["descriptors_65"] = code(domain + many * 65)
    out["log_lines"] = ctx.server.log_lines() - before
    out["said"] = ", ".join(f"{k} {v}" for k, v in out.items())
    return out


def config_folder(ctx) -> dict:
    """The --rls-config folder emptied, its file cut to `domain: edge`, a dangling link, a
    FIFO named x.yaml: each refused, the last good configuration kept."""
    rls = ctx.folder / "rls"
    config = rls / "config.yaml"
    aside = ctx.folder / "config.yaml"
    results = {}
    results["emptied"] = reload_refused(ctx, lambda: config.rename(aside),
                                        lambda: aside.rename(config), "emptied")
    results["cut"] = reload_refused(ctx, lambda: config.write_text("domain: edge\n"),
                                    lambda: config.write_text(CONFIG), "cut")
    link = rls / "gone.yaml"
    results["dangling"] = reload_refused(ctx, lambda: link.symlink_to(ctx.folder / "nothing"),
                                         link.unlink, "dangling link")
    fifo = rls / "x.yaml"
    results["fifo"] = reload_refused(ctx, lambda: os.mkfifo(fifo), fifo.unlink, "FIFO")
    return {**{k: v["refused"] for k, v in results.items()},
            "said": "; ".join(f"{k} {'refused' if v['refused'] else 'LOADED'}"
                              for k, v in results.items())}


ATTACKS = {
    "greeting_only": greeting_only,
    "continuation_flood": continuation_flood,
    "half_open_streams": half_open_streams,
    "huge_values": huge_values,
    "alias_bomb": alias_bomb,
    "stream_resets": stream_resets,
    "bad_fields": bad_fields,
    "config_folder": config_folder,
}


class Context:
    pass


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":  # (Watch's good clients)
        probe(int(sys.argv[2]), int(sys.argv[3]), sys.argv[5])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("server")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--only", default="", help="attacks to run, by name, comma-separated")
    parser.add_argument("--rls-python", default="")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--server-flag", action="append", default=[],
                        help="another flag for the server (repeatable)")
    args = parser.parse_args()
    rls_python = args.rls_python or str(pathlib.Path(args.server).resolve().parent /
                                        "server" / "rls" / "python")
    sys.path.insert(0, rls_python)
    import grpc  # noqa: E402  (python3-grpcio)
    from envoy.service.ratelimit.v3 import rls_pb2  # noqa: E402

    names = [n for n in args.only.split(",") if n] or list(ATTACKS)
    unknown = [n for n in names if n not in ATTACKS]
    if unknown:
        raise SystemExit(f"no attack named {unknown}; there are {list(ATTACKS)}")
    ctx = Context()
    ctx.scale, ctx.grpc, ctx.rls_pb2 = args.scale, grpc, rls_pb2
    folder = pathlib.Path(tempfile.mkdtemp(prefix="ratewin-hostile-"))
    ctx.folder = folder
    (folder / "rls").mkdir()
    (folder / "rls" / "config.yaml").write_text(CONFIG)
    ctx.server = Server(args.server, folder, args.server_flag)
    watch = Watch(ctx.server, rls_python)
    rows = []
    try:
        for name in names:
            watch.reset()
            cpu = ctx.server.cpu_seconds()
            seen = ATTACKS[name](ctx)
            time.sleep(0.2)  # (the good clients' figures just after, too)
            figures = watch.reset()
            rows.append({
                "attack": name, **seen,
                "alive": ctx.server.process.poll() is None,
                "rss_peak": figures["rss_peak"], "rss_bound": RSS_BOUND,
                "http_calls": len(figures["http"]), "http_failures": figures["http_failures"],
                "http_p99_ms": p99(figures["http"]),
                "grpc_calls": len(figures["grpc"]), "grpc_failures": figures["grpc_failures"],
                "grpc_p99_ms": p99(figures["grpc"]),
                "server_cpu_s": ctx.server.cpu_seconds() - cpu})
            if not rows[-1]["alive"]:
                break
    finally:
        watch.close()
        code = ctx.server.stop()
        log = ctx.server.log_path.read_text(errors="replace")
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        print(json.dumps({"rows": rows, "exit_code": code, "log_tail": log[-4000:]}))
        return 0
    ms = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    print(f"{'attack':20} {'RSS MiB':>8} {'HTTP p99 ms':>12} {'fails':>5} {'gRPC p99 ms':>12} "
          f"{'fails':>5} {'CPU s':>6}  the server")
    for r in rows:
        print(f"{r['attack']:20} {r['rss_peak'] / MIB:8.0f} {ms(r['http_p99_ms']):>12} "
              f"{r['http_failures']:5d} {ms(r['grpc_p99_ms']):>12} {r['grpc_failures']:5d} "
              f"{r['server_cpu_s']:6.1f}  {r['said']}")
    print(f"RSS bound: {RSS_BOUND / MIB:.0f} MiB (--max-memory 256M + --max-buffer-memory 64M "
          f"+ 64 MiB); the server exited with {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
