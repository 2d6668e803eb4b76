#!/usr/bin/python3
"""What new clients get from ratewin-server during and after a flood of made-up keys.

    cmd/bench/key_flood.py SERVER [--keys 1000000] [--clients 1000] [--connections 4]

Starts SERVER (a ratewin-server binary) on a free loopback port with one tier of 5 a
minute and its default bounds, floods it with --keys requests `GET /` pipelined over
--connections connections, each with an `X-API-Key` of its own (ov-<n>), and meanwhile,
then after, sends --clients new clients (half during the flood, half after) 6 requests
each on a connection of their own. A client got its limit's answer when it got exactly
5 times 200 and then 429. Prints the share that did, the flood's rate, and the engine's
figures from /metrics. Stops the server it started.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

RULES = """
tiers:
  free:
    limits:
      - {name: per-minute, max: 5, window: 60s}
default_tier: free
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flood(port: int, first: int, count: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    batch = 2000

    def send() -> None:
        for start in range(first, first + count, batch):
            end = min(start + batch, first + count)
            sock.sendall(b"".join(
                b"GET / HTTP/1.1\r\nHost: t\r\nX-API-Key: ov-%d\r\n\r\n" % n
                for n in range(start, end)))

    sender = threading.Thread(target=send)
    sender.start()
    answered = 0
    tail = b""
    while answered < count:
        got = sock.recv(1 << 20)
        if not got:
            raise SystemExit("the server closed a flood connection")
        data = tail + got
        answered += data.count(b"HTTP/1.1 ")
        tail = data[-8:]
        answered -= tail.count(b"HTTP/1.1 ")  # (counted again with the next read)
    sender.join()
    sock.close()


def client(port: int, name: str) -> list[int]:
    statuses = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        reader = sock.makefile("rb")
        for _ in range(6):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-API-Key: %s\r\n\r\n" % name.encode())
            status = int(reader.readline().split()[1])
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            statuses.append(status)
    return statuses


def metrics(port: int) -> dict[str, float]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        text = b""
        while chunk := sock.recv(1 << 16):
            text += chunk
    out = {}
    for name in ("ratewin_engine_limiters", "ratewin_engine_active_evictions_total",
                 "ratewin_engine_overflowed_decisions_total", "ratewin_engine_memory_bytes"):
        m = re.search(rf"^{name} (\S+)$", text.decode(), re.M)
        out[name] = float(m.group(1)) if m else float("nan")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ratewin-flood-") as tmp:
        rules = os.path.join(tmp, "rules.yaml")
        with open(rules, "w") as f:
            f.write(RULES)
        server = subprocess.Popen([args.server, "--listen", f"127.0.0.1:{port}", "--rules", rules,
                                   "--log-level", "warning"])
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            each = args.keys // args.connections
            began = time.monotonic()
            floods = [threading.Thread(target=flood, args=(port, i * each, each))
                      for i in range(args.connections)]
            for t in floods:
                t.start()
            answers = []
            during = args.clients // 2
            for c in range(during):
                answers.append(client(port, f"legit-during-{c}"))
                time.sleep(0.01)  # (spread over the flood)
            for t in floods:
                t.join()
            seconds = time.monotonic() - began
            for c in range(args.clients - during):
                answers.append(client(port, f"legit-after-{c}"))
            right = sum(1 for a in answers if a == [200] * 5 + [429])
            right_during = sum(1 for a in answers[:during] if a == [200] * 5 + [429])
            print(f"flood: {each * args.connections} keys over {args.connections} connections "
                  f"in {seconds:.1f} s ({each * args.connections / seconds:,.0f} requests/s)")
            print(f"new clients with their limit's answer (5 x 200, then 429): {right} of "
                  f"{len(answers)} ({100.0 * right / len(answers):.1f}%); during the flood "
                  f"{right_during} of {during}")
            for name, value in metrics(port).items():
                print(f"{name} {value:.0f}")
            wrong = [a for a in answers if a != [200] * 5 + [429]]
            if wrong:
                print("some wrong answers:", wrong[:5])
        finally:
            server.terminate()
            server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
