#!/usr/bin/python3
"""The demo: two ratewin-server instances sharing one private Redis, a burst of traffic
spread over both, and a table of what each admitted against the configured limits.

Started by cmd/demo.sh after the build. Everything it starts it stops (by PID). If
redis-server cannot be started it says so and runs one local-only instance instead.
"""
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.environ.get("RATEWIN_SERVER", os.path.join(ROOT, "build", "cmd", "ratewin-server"))
RULES = os.path.join(ROOT, "cmd", "server", "demo.rules.yaml")
# (client key, its limit in the demo rules, requests to send)
CLIENTS = [("free_alice", 50, 150), ("free_carol", 50, 80), ("pro_bob", 200, 500)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(workdir):
    exe = shutil.which("redis-server")
    if exe is None:
        return None, None, "redis-server is not installed"
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, None, f"redis-server exited with status {proc.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port, None
        except OSError:
            time.sleep(0.05)
    stop(proc)
    return None, None, "redis-server did not answer within 5 s"


def start_server(redis_port):
    args = [SERVER, "--listen", "127.0.0.1:0", "--rules", RULES, "--threads", "2",
            "--log-level", "warning", "--key-prefix", "demo"]
    if redis_port is not None:
        args += ["--redis", f"redis://127.0.0.1:{redis_port}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
    if not match:
        stop(proc)
        raise SystemExit(f"demo: ratewin-server did not start: {line.strip()!r}")
    return proc, int(match.group(1))


def stop(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def send(port, key, count, results, sample):
    """Sends `count` requests on one keep-alive connection; counts statuses."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(count):
        conn.request("GET", "/api/items", headers={"X-API-Key": key})
        response = conn.getresponse()
        body = response.read()
        results[response.status] = results.get(response.status, 0) + 1
        if response.status == 429 and not sample:
            sample.append((response.getheaders(), body.decode()))
    conn.close()


def main():
    workdir = tempfile.mkdtemp(prefix="ratewin-demo-")
    redis, servers = None, []
    try:
        redis, redis_port, why = start_redis(workdir)
        if redis is None:
            print(f"demo: cannot start Redis ({why}): running ONE local-only instance instead")
            servers = [start_server(None)]
        else:
            servers = [start_server(redis_port), start_server(redis_port)]
        mode = f"sharing Redis on 127.0.0.1:{redis_port}" if redis else "local-only"
        print(f"demo: {len(servers)} ratewin-server instance(s) on ports "
              f"{', '.join(str(p) for _, p in servers)}, {mode}; rules {RULES}")

        # Every client's requests go to every instance at once: one thread per
        # (client, instance), the client's burst split evenly.
        results = {(key, i): {} for key, _, _ in CLIENTS for i in range(len(servers))}
        sample = []
        threads = []
        started = time.monotonic()
        for key, _, total in CLIENTS:
            for i, (_, port) in enumerate(servers):
                share = total // len(servers) + (1 if i < total % len(servers) else 0)
                threads.append(threading.Thread(
                    target=send, args=(port, key, share, results[(key, i)], sample)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started

        names = [f"instance {chr(ord('A') + i)}" for i in range(len(servers))]
        header = f"{'client':<12} {'limit/10s':>9} {'sent':>6}"
        for n in names:
            header += f" {n + ' ok':>13} {n + ' 429':>14}"
        header += f" {'allowed':>8} {'rejected':>9}  verdict"
        print(f"\n{len(CLIENTS)} clients, {sum(c[2] for c in CLIENTS)} requests in "
              f"{elapsed:.2f} s, spread over {len(servers)} instance(s):\n")
        print(header)
        print("-" * len(header))
        totals = [0, 0, 0, 0]
        ok_all = True
        for key, limit, sent in CLIENTS:
            line = f"{key:<12} {limit:>9} {sent:>6}"
            allowed = rejected = 0
            for i in range(len(servers)):
                r = results[(key, i)]
                line += f" {r.get(200, 0):>13} {r.get(429, 0):>14}"
                allowed += r.get(200, 0)
                rejected += r.get(429, 0)
            verdict = "= limit" if allowed == limit else f"OFF BY {allowed - limit:+d}"
            ok_all &= allowed == limit and allowed + rejected == sent
            line += f" {allowed:>8} {rejected:>9}  {verdict}"
            print(line)
            totals = [totals[0] + limit, totals[1] + sent, totals[2] + allowed,
                      totals[3] + rejected]
        print("-" * len(header))
        pad = " " * (len(names) * 29)
        print(f"{'total':<12} {totals[0]:>9} {totals[1]:>6}{pad} {totals[2]:>8} {totals[3]:>9}")
        if sample:
            headers, body = sample[0]
            shown = [f"{k}: {v}" for k, v in headers
                     if k.lower().startswith(("x-ratelimit", "ratelimit", "retry-after"))]
            print("\nA rejected response:\n  HTTP/1.1 429 Too Many Requests\n  " +
                  "\n  ".join(shown) + f"\n  {body.strip()}")
        print("\ndemo: every client got exactly its limit across the instances"
              if ok_all else "\ndemo: some client's total differs from its limit (see above)")
        return 0 if ok_all else 1
    finally:
        for proc, _ in servers:
            stop(proc)
        stop(redis)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
