"""ratewin-server's memory bound (--max-memory) and what a flood of new client keys can
and cannot do: memory stays within the bound, a key's spent quota is never handed back
by an eviction, new clients are still decided by their own limits, and a rules file whose
limits cannot fit is refused."""

from __future__ import annotations

import os
import select
import time
import pathlib
import re
import socket
import threading
import uuid

from ratewin_testkit import PATIENCE, metric_value, raw_connect, wait_until, write_rules


def rss_kib(pid: int) -> int:
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))


# For a server a flood is sent to: the answers a connection is owed are due within the
# request timeout, and a sanitizer-built server on a busy machine can take longer than
# the default 10 s to make those of a flood's pipeline; these tests are about memory.
FLOODED = ("--request-timeout-ms", "600000")


def flood(port: int, keys: list[str], path: str = "/") -> dict[int, int]:
    """Sends one request per key, pipelined over a few connections; counts the statuses."""
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    failures: list[BaseException] = []

    def one_connection(chunk: list[str]) -> None:
        try:
            connection(chunk)
        except BaseException as e:  # (said by the caller: a thread's exception is lost)
            with lock:
                failures.append(e)

    def connection(chunk: list[str]) -> None:
        # (sendall's timeout bounds the whole send, which lasts as long as the server takes
        # to answer the flood: a sanitizer build takes tens of seconds.)
        sock = raw_connect(port, timeout=120 if os.environ.get("RATEWIN_SANITIZE") else 30)
        payload = b"".join(
            f"GET {path} HTTP/1.1\r\nHost: t\r\nX-API-Key: {k}\r\n\r\n".encode() for k in chunk)

        def send() -> None:
            sock.sendall(payload)

        sender = threading.Thread(target=send)
        sender.start()
        data = b""
        seen: dict[int, int] = {}
        answered = 0
        while answered < len(chunk):
            got = sock.recv(1 << 20)
            assert got, "the server closed the connection"
            data += got
            # Each response: a status line, headers, and a Content-Length body.
            while True:
                end = data.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = data[:end].decode("latin-1")
                length = int(re.search(r"(?im)^content-length: *(\d+)", head).group(1))
                if len(data) < end + 4 + length:
                    break
                status = int(head.split(" ", 2)[1])
                seen[status] = seen.get(status, 0) + 1
                data = data[end + 4 + length:]
                answered += 1
        sender.join()
        sock.close()
        with lock:
            for s, n in seen.items():
                statuses[s] = statuses.get(s, 0) + n

    parts = 4
    threads = [threading.Thread(target=one_connection, args=(keys[i::parts],)) for i in range(parts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return statuses


HOURLY = """
version: "hourly"
tiers:
  free:
    limits:
      - name: per-hour
        max: 5
        window: 1h
        subintervals: 3600
default_tier: free
"""


def test_memory_stays_within_the_bound_under_a_flood_of_new_keys(start_server, tmp_path):
    # 3600 subintervals: about 14.4 KB a key. Without a bound in bytes, 60,000 random keys
    # took 16 KB each (953 MB); with --max-memory 32M the limiters stay within it.
    rules = write_rules(tmp_path / "rules.yaml", HOURLY)
    server = start_server("--max-memory", "32M", *FLOODED, rules=rules, threads=2)
    before = rss_kib(server.pid)
    # (Under a sanitizer, each new limiter costs milliseconds: 3,600 buckets to zero. 3,000
    # keys still overflow the bound, which holds 2,304.)
    keys = [uuid.uuid4().hex for _ in range(3_000 if os.environ.get("RATEWIN_SANITIZE") else 60_000)]
    statuses = flood(server.port, keys)
    assert sum(statuses.values()) == len(keys)
    grown = rss_kib(server.pid) - before
    if not os.environ.get("RATEWIN_SANITIZE"):  # (a sanitizer's shadow memory grows too)
        assert grown < 32 * 1024 + 16 * 1024, f"RSS grew {grown} KiB with --max-memory 32M"
    assert server.metric("ratewin_engine_memory_bytes") <= 32 * 1024 * 1024
    # Most keys found no room but that of a live limiter of the flood, evicted into a ghost:
    # each was decided by its own limit (one request of 5 an hour).
    held = 32 * 1024 * 1024 // 14_448  # 2,322 limiters at most (less the ghosts' bytes)
    assert server.metric("ratewin_engine_active_evictions_total") >= len(keys) - held
    assert server.metric("ratewin_engine_overflowed_decisions_total") == 0
    assert statuses == {200: len(keys)}


def test_a_flood_of_new_keys_never_hands_a_spent_quota_back(start_server, tmp_path):
    # Before: with --max-limiters 1000, a key that had used its quota got a 200 after
    # every 2,000 random keys, its limiter evicted to make room.
    rules = write_rules(tmp_path / "rules.yaml", HOURLY)
    server = start_server("--max-limiters", "1000", *FLOODED, rules=rules, threads=2)
    for _ in range(5):
        assert server.get("/", headers={"X-API-Key": "spent"}).status == 200
    assert server.get("/", headers={"X-API-Key": "spent"}).status == 429
    for round_ in range(3):
        flood(server.port, [uuid.uuid4().hex for _ in range(3000)])
        reply = server.get("/", headers={"X-API-Key": "spent"})
        assert reply.status == 429, f"after flood {round_ + 1}: {reply.status}"
    # (Limiters that still count were evicted to make room, their counts kept as ghosts.)
    assert server.metric("ratewin_engine_active_evictions_total") > 0
    assert server.metric("ratewin_engine_limiters") <= 1000


PER_MINUTE = """
tiers:
  free:
    limits:
      - {name: per-minute, max: 5, window: 60s}
default_tier: free
"""


def test_new_clients_get_their_own_limit_during_and_after_a_key_flood(start_server, tmp_path):
    # Before: a flood of made-up keys filled the limiters with live ones, and every new
    # client was then refused by the overflow limiter they shared (5 a minute, together).
    server = start_server("--max-limiters", "2000", *FLOODED,
                          rules=write_rules(tmp_path / "r.yaml", PER_MINUTE),
                          threads=2)
    flood(server.port, [f"ov-{n}" for n in range(20_000)])
    answers = []
    for c in range(100):  # during: a flood between new clients
        flood(server.port, [f"ov-{c}-{n}" for n in range(100)])
        answers.append([server.get("/", headers={"X-API-Key": f"legit{c}"}).status
                        for _ in range(6)])
    for c in range(100, 200):  # after
        answers.append([server.get("/", headers={"X-API-Key": f"legit{c}"}).status
                        for _ in range(6)])
    assert all(a == [200] * 5 + [429] for a in answers), answers
    assert server.metric("ratewin_engine_overflowed_decisions_total") == 0
    assert server.metric("ratewin_engine_limiters") <= 2000


def test_rules_whose_limit_cannot_fit_are_refused(start_server, server_binary, tmp_path):
    # 65535 subintervals: 262 KB a key, more than a 64 KiB bound holds.
    huge = HOURLY.replace("window: 1h\n        subintervals: 3600",
                          "window: 65535s\n        subintervals: 65535")
    rules = write_rules(tmp_path / "rules.yaml", huge)
    import subprocess
    run = subprocess.run([server_binary, "--listen", "127.0.0.1:0", "--max-memory", "64K",
                          "--rules", str(rules)], capture_output=True, timeout=PATIENCE)
    assert run.returncode == 1
    assert b"not one fits in the memory bound" in run.stderr
    assert b"tier:free/per-hour" in run.stderr
    # A reload to such rules is refused, and the last good rules stay.
    good = write_rules(tmp_path / "good.yaml", HOURLY)
    server = start_server("--max-memory", "64K", rules=good, admin_token="t0ken")
    write_rules(good, huge)
    reply = server.call("POST", "/admin/reload", headers={"Authorization": "Bearer t0ken"})
    assert reply.status == 422
    assert "not one fits" in reply.json()["error"]
    assert server.get("/healthz").json()["rules"].startswith("hourly@")
    # Bad values of the flag.
    for bad in ["1000", "12Q", "-5M", ""]:
        run = subprocess.run([server_binary, "--listen", "127.0.0.1:0", "--max-memory", bad],
                             capture_output=True, timeout=PATIENCE)
        assert run.returncode == 2, bad
        assert b"--max-memory" in run.stderr


def stuff_without_reading(port: int, connections: int, seconds: float) -> list[socket.socket]:
    """Opens connections with a small receive buffer, each pipelining `GET /a` without ever
    reading an answer, for as long as the server takes the bytes (at most `seconds`)."""
    request = b"GET /a HTTP/1.1\r\nHost: t\r\n\r\n" * 4000
    socks = []
    for _ in range(connections):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", port))
        s.setblocking(False)
        socks.append(s)
    sent = {s: 0 for s in socks}
    deadline = time.monotonic() + seconds
    open_ = list(socks)
    while open_ and time.monotonic() < deadline:
        _, writable, _ = select.select([], open_, [], 0.2)
        if not writable:
            break  # the server takes no more from any of them
        for s in writable:
            try:
                sent[s] += s.send(request)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # closed by the server
                open_.remove(s)
            if sent[s] > 3 << 20:
                open_.remove(s)
    return socks


def test_clients_that_never_read_their_answers_hold_a_bounded_buffer(start_server, tmp_path):
    # Before: 1,500 such connections grew the server from 5 MB to 614 MB (410 KB each): the
    # output of a 64 KiB read of requests (up to 1 MiB queued) and buffers never given back.
    server = start_server(*FLOODED, rules=write_rules(tmp_path / "r.yaml", PER_MINUTE), threads=1)
    server.get("/metrics")
    before = rss_kib(server.pid)
    # (A sanitizer build, whose RSS is not checked, answers a third as many: its one loop
    # answers this scrape after what the connections sent, which beside a CPU hog took it
    # over 120 s for 300.)
    connections = 100 if os.environ.get("RATEWIN_SANITIZE") else 300
    socks = stuff_without_reading(server.port, connections, 8.0)
    try:
        # (The server may still be answering what it read: the bound only ends a hang.)
        text = server.get("/metrics", timeout=5 * PATIENCE).text
        grown = rss_kib(server.pid) - before
        buffered = metric_value(text, "ratewin_server_connection_buffer_bytes") or 0
        # Each connection: at most 16 KiB of answers in the session, as much queued to the
        # socket, and a 16 KiB read held back (plus what the allocator keeps).
        assert buffered <= connections * 64 * 1024, buffered
        if not os.environ.get("RATEWIN_SANITIZE"):
            assert grown < connections * 100, f"RSS grew {grown} KiB for {connections} connections"
    finally:
        for s in socks:
            s.close()
    assert server.get("/a").status in (200, 429)


def test_non_reading_clients_are_shed_over_max_buffer_memory(start_server, tmp_path):
    # (The flood tests' request timeout: with the default 10 s, a server slower than the
    # flood, a sanitizer build beside a CPU hog, closed all 100 as timed out, one by one,
    # before their buffers together were over the bound; none was shed.)
    server = start_server("--max-buffer-memory", "64K", *FLOODED,
                          rules=write_rules(tmp_path / "r.yaml", PER_MINUTE), threads=1)
    socks = stuff_without_reading(server.port, 100, 5.0)
    try:
        # (100 such connections hold about 660 KB, most of their answers being in the
        # kernel's socket buffers.)
        # (The first is shed once the server has answered enough of what they sent to fill
        # their kernel send buffers and 64K more: a sanitizer build beside a CPU hog may
        # take minutes. The bound only ends a hang.)
        def shed() -> bool:
            try:
                text = server.get("/metrics", timeout=120).text
            except ConnectionError:  # (this scrape was shed, read too slowly: ask again)
                return False
            return metric_value(text, 'ratewin_server_connections_total{outcome="shed"}') > 0
        assert wait_until(shed, timeout=5 * PATIENCE)
        assert server.metric("ratewin_server_open_connections") < 100
    finally:
        for s in socks:
            s.close()
    assert server.get("/a").status in (200, 429)
