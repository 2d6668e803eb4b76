"""The HTTP transport: malformed and oversized input, slow and idle clients, keep-alive,
pipelining, the connection bound, graceful shutdown on SIGTERM, --trust-proxy, and the
/healthz and /metrics endpoints."""

from __future__ import annotations

import errno
import http.client
import json
import os
import select
import signal
import socket
import threading
import time

import pytest

from ratewin_testkit import (PATIENCE, Client, RawReader, metric_value, raw_connect, raw_get,
                            wait_until, write_rules)

RULES = """
version: "http-v1"
tiers:
  free:
    limits:
      - {name: per-minute, max: 3, window: 1m}
default_tier: free
deny:
  - "ip:10.6.6.6"
  - "revoked-*"
"""


@pytest.fixture
def rules(tmp_path):
    return write_rules(tmp_path / "rules.yaml", RULES)


def test_malformed_request_gets_400_then_close(start_server, rules):
    server = start_server(rules=rules)
    for garbage in [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
                    b"GET / HTTP/9.9.9\r\n\r\n"]:
        with raw_connect(server.port) as s:
            s.sendall(garbage)
            reader = RawReader(s)
            r = reader.response()
            assert r.status == 400, (garbage, r)
            assert r.headers["connection"] == "close"
            assert "error" in r.json()
            assert reader.closed(), garbage
    # A good request on the same connection before the garbage is answered first.
    with raw_connect(server.port) as s:
        s.sendall(raw_get("/ok", [("X-API-Key", "k")]) + b"\x00\x01garbage\r\n\r\n")
        reader = RawReader(s)
        assert reader.response().status == 200
        assert reader.response().status == 400
        assert reader.closed()
    assert server.get("/healthz").status == 200


def test_oversized_headers_431_and_long_url_414(start_server, rules):
    server = start_server(rules=rules)
    # Just under the 16 KiB header limit is fine.
    r = server.get("/", {"X-API-Key": "k", "X-Filler": "a" * (15 * 1024)})
    assert r.status == 200, r
    for headers in ({"X-Filler": "a" * (17 * 1024)},
                    {f"X-F{i}": "b" * 200 for i in range(90)}):  # many headers adding up
        with raw_connect(server.port) as s:
            s.sendall(raw_get("/", headers.items()))
            reader = RawReader(s)
            r = reader.response()
            assert r.status == 431, r
            assert r.headers["connection"] == "close"
            assert reader.closed()
    with raw_connect(server.port) as s:  # more than 100 header fields
        s.sendall(raw_get("/", [(f"X-{i}", "v") for i in range(120)]))
        assert RawReader(s).response().status == 431
    with raw_connect(server.port) as s:
        s.sendall(raw_get("/" + "u" * (9 * 1024)))
        reader = RawReader(s)
        r = reader.response()
        assert r.status == 414, r
        assert reader.closed()
    assert server.get("/" + "u" * 7000, {"X-API-Key": "k2"}).status == 200


def test_oversized_body_413(start_server, rules):
    server = start_server(rules=rules)
    r = server.call("POST", "/upload", headers={"X-API-Key": "k"}, body=b"x" * (60 * 1024))
    assert r.status == 200, r
    # Declared too large: answered at once, without waiting for the body.
    with raw_connect(server.port) as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n")
        reader = RawReader(s)
        r = reader.response()
        assert r.status == 413, r
        assert r.headers["connection"] == "close"
        assert reader.closed()
    # Chunked, growing past the limit.
    with raw_connect(server.port) as s:
        chunk = b"x" * 16384
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        try:
            for _ in range(5):
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass
        r = RawReader(s).response()
        assert r.status == 413, r


def test_slow_client_gets_408_and_close(start_server, rules):
    server = start_server("--request-timeout-ms", "300", rules=rules)
    started = time.monotonic()  # (the deadline runs from the accept, after this)
    with raw_connect(server.port) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        reader = RawReader(s)
        # Trickling bytes does not extend the deadline: a header line every 50 ms until
        # the answer comes (were each byte to extend it, none would come while they do).
        trickled_until = time.monotonic() + PATIENCE
        while not select.select([s], [], [], 0.05)[0]:
            assert time.monotonic() < trickled_until, "trickling kept the request alive"
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break  # closed: its answer is read below
        r = reader.response()
        elapsed = time.monotonic() - started
        assert r.status == 408, r
        assert r.headers["connection"] == "close"
        assert elapsed >= 0.3 - 0.01, elapsed  # not before the deadline
        assert reader.closed()
    # A quick request is not affected.
    assert server.get("/", {"X-API-Key": "k"}).status == 200
    assert server.metric('ratewin_server_connections_total{outcome="timed_out"}') >= 1


def test_request_deadline_starts_with_each_request(start_server, rules):
    """The 408 deadline runs from a request's first byte: a request that begins in the
    same read that completes the one before it gets its own full time. (A 4 s deadline:
    each step below may come a second late, on a busy machine, and still land where it
    must.)"""
    server = start_server("--request-timeout-ms", "4000", rules=rules)
    began = time.monotonic()  # (before /first's deadline starts: at the accept)
    with raw_connect(server.port) as s:
        reader = RawReader(s)
        s.sendall(b"GET /first HTTP/1.1\r\nHost: x\r\n")
        time.sleep(2)
        second_began = time.monotonic()
        s.sendall(b"\r\nGET /second HTTP/1.1\r\nHost: x\r\n")  # /second starts ~2 s in
        first = reader.response()
        assert first.status == 200 and first.json()["endpoint"] == "/first", first
        # Past /first's deadline (and so past any deadline /second could have inherited
        # from it), well within /second's own.
        time.sleep(max(0.0, began + 5 - time.monotonic()))
        s.sendall(b"\r\n")
        second = reader.response()
        assert second.status == 200, (
            f"/second ({time.monotonic() - second_began:.2f} s old, timeout 4 s) got {second}")
        assert second.json()["endpoint"] == "/second"


def test_silent_connection_is_closed_after_the_request_timeout(start_server, rules):
    """A connection that sends nothing gets the request timeout, not the idle timeout
    (which is for the time between requests): silent clients cannot hold every slot.
    (The idle timeout is longer than any wait here: a close is the request timeout's.)"""
    server = start_server("--request-timeout-ms", "300", "--idle-timeout-ms", "600000",
                          "--max-connections", "4", rules=rules, threads=1)
    started = time.monotonic()
    silent = [raw_connect(server.port) for _ in range(4)]
    try:
        for s in silent:
            assert RawReader(s).closed(), "a silent connection was kept past the request timeout"
        assert time.monotonic() - started >= 0.3 - 0.01
        # The slots are free again.
        assert wait_until(lambda: server.get("/healthz").status == 200)
    finally:
        for s in silent:
            s.close()
    # Once a request has been answered, the idle timeout applies between requests.
    with raw_connect(server.port) as s:
        reader = RawReader(s)
        s.sendall(raw_get("/", [("X-API-Key", "k")]))
        assert reader.response().status == 200
        assert not reader.closed(0.8), "closed after the request timeout between requests"
        s.sendall(raw_get("/", [("X-API-Key", "k")]))
        assert reader.response().status == 200
    # A request trickled in from the connection's first byte has no more time than that:
    # cut (408) by the deadline that ran from the accept. (Should its bytes come after it,
    # on a busy machine, the connection is closed as a silent one, for the same deadline.)
    with raw_connect(server.port) as s:
        time.sleep(0.2)
        try:
            s.sendall(b"GET / HTTP/1.1\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        reader = RawReader(s)
        if not reader.closed():
            assert reader.response().status == 408, reader.buffer


def test_head_response_has_no_body(start_server, rules):
    """RFC 9110 9.3.2: no content in a response to HEAD. A body would be read as the start
    of the next response on a keep-alive connection."""
    server = start_server(rules=rules)
    with raw_connect(server.port) as s:
        s.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + raw_get("/healthz"))
        data = b""
        while data.count(b"HTTP/1.1 200") < 2 and len(data) < 4096:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK"), data
        assert rest.startswith(b"HTTP/1.1 200 OK"), f"HEAD response carried a body: {data!r}"
    with Client(server.port) as c:
        h = c.call("HEAD", "/", {"X-API-Key": "head"})
        assert h.status == 200 and h.body == b""
        assert h.headers["x-ratelimit-limit"] == "3"
        assert c.get("/healthz").json()["status"] == "ok"


def test_idle_keep_alive_connection_is_closed(start_server, rules):
    # (A request timeout longer than any wait here: a close is the idle timeout's. Requests
    # 0.3 s apart keep a connection of a 2 s idle timeout for longer than that: each may
    # come 1.7 s late on a busy machine.)
    server = start_server("--idle-timeout-ms", "2000", "--request-timeout-ms", "600000",
                          rules=rules)
    with raw_connect(server.port) as s:
        started = time.monotonic()  # (idle from the answer on, after this)
        s.sendall(raw_get("/", [("X-API-Key", "k")]))
        reader = RawReader(s)
        r = reader.response()
        assert r.status == 200 and "connection" not in r.headers
        assert reader.closed(), "idle connection not closed"
        assert time.monotonic() - started >= 2 - 0.01
    # Idle timeout is not applied while requests keep coming.
    with Client(server.port) as c:
        assert c.get("/healthz").status == 200
        sock = c.conn.sock
        kept = time.monotonic() + 3
        while time.monotonic() < kept:
            time.sleep(0.3)
            assert c.get("/healthz").status == 200
        assert c.conn.sock is sock


def test_keep_alive_reuses_one_connection(start_server, rules):
    server = start_server(rules=rules)
    accepted = server.metric('ratewin_server_connections_total{outcome="accepted"}')
    with Client(server.port) as c:
        first = c.get("/", {"X-API-Key": "k"})
        sock = c.conn.sock
        assert sock is not None
        second = c.get("/", {"X-API-Key": "k"})
        third = c.get("/healthz")
        assert c.conn.sock is sock, "the client had to reconnect"
    assert [first.status, second.status, third.status] == [200, 200, 200]
    assert [first.headers["x-ratelimit-remaining"], second.headers["x-ratelimit-remaining"]] == ["2", "1"]
    # 3 requests, 1 more connection (and 1 for this scrape... counted after it is read)
    assert server.metric('ratewin_server_connections_total{outcome="accepted"}') == accepted + 2
    # Connection: close is honoured.
    with raw_connect(server.port) as s:
        s.sendall(raw_get("/healthz", [("Connection", "close")]))
        reader = RawReader(s)
        r = reader.response()
        assert r.status == 200 and r.headers["connection"] == "close"
        assert reader.closed()
    # HTTP/1.0 without keep-alive closes too.
    with raw_connect(server.port) as s:
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        reader = RawReader(s)
        assert reader.response().status == 200
        assert reader.closed()


def test_pipelined_requests_answered_in_order(start_server, rules):
    server = start_server(rules=rules)
    with raw_connect(server.port) as s:
        s.sendall(raw_get("/p1", [("X-API-Key", "pipe")]) + raw_get("/p2", [("X-API-Key", "pipe")]) +
                  raw_get("/p3", [("X-API-Key", "pipe")]) + raw_get("/p4", [("X-API-Key", "pipe")]))
        reader = RawReader(s)
        got = [reader.response() for _ in range(4)]
        assert [r.status for r in got] == [200, 200, 200, 429]
        assert [r.json().get("endpoint") for r in got[:3]] == ["/p1", "/p2", "/p3"]
        assert [r.headers["x-ratelimit-remaining"] for r in got] == ["2", "1", "0", "0"]
        # Still open for more.
        s.sendall(raw_get("/healthz") + b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                  b"X-API-Key: other\r\n\r\nhello" + raw_get("/p5", [("X-API-Key", "other")]))
        assert reader.response().json()["status"] == "ok"
        assert reader.response().json()["endpoint"] == "/x"
        assert reader.response().json()["endpoint"] == "/p5"


def test_a_pipelined_flood_takes_turns_with_the_other_connections_of_its_loop(start_server):
    # One loop, one connection pipelining a flood of requests, another asking /metrics
    # again and again. Before, a full read was followed by more in the same turn (up to
    # 32 of 16 KiB): the other connection waited behind about 13,000 of the flood's
    # requests each time (and under a slow build its request timed out before it was read).
    server = start_server(threads=1)
    request = raw_get("/flood")
    flood = raw_connect(server.port)
    stop = False

    def drain() -> None:
        while not stop:
            try:
                if not flood.recv(1 << 20):
                    return
            except OSError:
                return

    reader = threading.Thread(target=drain)
    reader.start()
    def send() -> None:
        try:
            while not stop:
                flood.sendall(request * 10_000)
        except OSError:
            pass  # (closed below once the test has its counts)

    sender = threading.Thread(target=send)
    sender.start()
    asked = raw_connect(server.port)
    answers = RawReader(asked)

    def answered() -> int:
        asked.sendall(raw_get("/metrics"))
        text = answers.response().body.decode()
        return int(sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
                       if line.startswith("ratewin_server_requests_total{")))

    # How many of the flood's requests were served during a round trip of /metrics, for
    # round trips during which the flood was served at all (its sender does not always
    # keep the socket full). A read holds 16 KiB / 35 bytes = 468 of them: with a read per
    # turn, a round trip sees one or two reads go by, more when this client is slow to ask
    # again (as a busy machine makes it), never fewer. So round trips are made until one
    # sees at most three. (Before: 10,000 and more, every time.)
    between: list[int] = []
    try:
        assert wait_until(lambda: answered() > 2_000)  # the flood is being served
        last = answered()
        deadline = time.monotonic() + PATIENCE
        while not (between and min(between) <= 3 * 469):
            assert time.monotonic() < deadline, sorted(between)
            now = answered()
            if now - last - 1 > 0:
                between.append(now - last - 1)
            last = now
    finally:
        stop = True
        flood.shutdown(socket.SHUT_RDWR)
        flood.close()
        asked.close()
        sender.join()
        reader.join()


def test_at_the_bound_the_longest_waiting_for_its_request_makes_room(start_server, rules):
    # At the bound with no connection idle (both are sending a request), a new one closes
    # the one that has waited longest for its request to come whole, and is served. (It
    # was closed at once itself: clients that never finish a request held every slot.)
    server = start_server("--max-connections", "2", rules=rules, threads=1)
    held = [raw_connect(server.port), raw_connect(server.port)]
    readers = [RawReader(s) for s in held]
    try:
        for s in held:
            s.sendall(b"GET /healthz HTTP/1.1\r\n")  # a request begun
        # (Accepted before the next: one loop takes its connections in turn, and a new
        # connection is waiting for its request from its accept.)
        extra = raw_connect(server.port)
        extra.sendall(raw_get("/healthz"))
        assert RawReader(extra).response().status == 200
        extra.close()
        assert readers[0].closed(), f"the longest waiting not closed; got {readers[0].buffer!r}"
        assert readers[0].buffer == b""
        # The other still works.
        held[1].sendall(b"Host: t\r\n\r\n")
        assert readers[1].response().status == 200
    finally:
        for s in held:
            s.close()
    assert server.metric('ratewin_server_connections_total{outcome="slow_closed"}') >= 1
    assert server.metric('ratewin_server_connections_total{outcome="refused"}') == 0


def test_at_the_bound_the_longest_idle_connection_makes_room(start_server, rules):
    """Before: 200 keep-alive connections asking once every 4 s (idle timeout 5 s) held
    every slot of --max-connections 200, and every new client was closed at once. (Here
    the idle timeout is longer than the test: what closes a connection is the bound.)"""
    server = start_server("--max-connections", "20", "--idle-timeout-ms", "600000",
                          rules=rules, threads=1)
    held = [raw_connect(server.port) for _ in range(20)]
    try:
        for s in held:
            s.sendall(raw_get("/healthz"))
            assert RawReader(s).response().status == 200
        held[0].sendall(raw_get("/healthz"))  # the first is now the most recently busy
        assert RawReader(held[0]).response().status == 200
        newcomers = []
        for i in range(5):  # new clients are served, each closing the longest idle
            s = raw_connect(server.port)
            newcomers.append(s)
            s.sendall(raw_get("/healthz"))
            assert RawReader(s).response().status == 200
        for i in range(1, 6):  # the longest idle were closed, in order
            assert RawReader(held[i]).closed(), i
        assert not RawReader(held[0]).closed(0.2)  # busy since: still open
        assert not RawReader(held[6]).closed(0.2)
        for s in newcomers:
            s.close()
        # (This scrape, at the bound, makes room by closing the longest idle.)
        assert server.metric('ratewin_server_connections_total{outcome="idle_closed"}') >= 5
        assert server.metric('ratewin_server_connections_total{outcome="refused"}') == 0
    finally:
        for s in held:
            s.close()


def test_at_the_bound_slow_and_silent_clients_make_room(start_server, rules):
    """Before: with --max-connections 40, 10 connections from each of 4 addresses that send
    nothing or one byte every 0.5 s, reopened when closed, refused a real client 48 times
    of 50: only idle connections were closed for a newcomer. Now, none being idle, the
    one that has waited longest for its request makes room."""
    server = start_server("--max-connections", "40", "--request-timeout-ms", "5000",
                          rules=rules, threads=2)
    stop = threading.Event()

    def attacker(address: str, drip: bool) -> None:
        held: list[socket.socket] = []
        try:
            while not stop.is_set():
                while len(held) < 10 and not stop.is_set():
                    try:
                        s = socket.socket()
                        s.bind((address, 0))
                        s.connect(("127.0.0.1", server.port))
                        s.setblocking(False)
                        held.append(s)
                    except OSError:
                        break
                for s in list(held):
                    try:
                        if drip:
                            s.send(b"G")  # one byte of a request line, never finished
                        if s.recv(1) == b"":
                            raise ConnectionResetError
                    except BlockingIOError:
                        pass
                    except OSError:  # closed by the server: reopened on the next round
                        held.remove(s)
                        s.close()
                stop.wait(0.5)
        finally:
            for s in held:
                s.close()

    attackers = [threading.Thread(target=attacker, args=(f"127.0.0.{2 + i}", i % 2 == 1))
                 for i in range(4)]
    for t in attackers:
        t.start()
    served = 0
    try:
        # The attackers hold every slot (or nearly) before the real client comes.
        def open_connections() -> float:
            try:
                return metric_value(server.get("/metrics").text,
                                    "ratewin_server_open_connections") or 0
            except Exception:  # (the scrape refused at the bound, as the old server did)
                return 0
        assert wait_until(lambda: open_connections() >= 38)
        for _ in range(50):
            try:
                with raw_connect(server.port) as s:
                    s.sendall(raw_get("/healthz"))
                    served += RawReader(s).response().status == 200
            except Exception:  # closed at once: not served
                pass
            time.sleep(0.05)  # (pacing: the attackers reopen meanwhile)
    finally:
        stop.set()
        for t in attackers:
            t.join(PATIENCE)
    assert served >= 49, served
    assert server.metric('ratewin_server_connections_total{outcome="slow_closed"}') >= 1


def test_connections_per_address_are_bounded(start_server, rules):
    server = start_server("--max-connections-per-address", "3", rules=rules, threads=1)
    mine = [raw_connect(server.port) for _ in range(3)]
    try:
        for s in mine:
            s.sendall(raw_get("/healthz"))
            assert RawReader(s).response().status == 200
        extra = raw_connect(server.port)
        try:
            extra.sendall(raw_get("/healthz"))
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert RawReader(extra).closed()
        extra.close()
        with Client(server.port, source="127.0.0.2") as other:  # another address
            assert other.get("/healthz").status == 200
        mine.pop().close()

        def open_connections() -> float | None:
            with Client(server.port, source="127.0.0.2") as scrape:
                return metric_value(scrape.get("/metrics").text,
                                    "ratewin_server_open_connections")

        # Room for one more once the server has closed it: two of this address and the
        # scrape's own are open.
        assert wait_until(lambda: open_connections() == 3)
        with Client(server.port) as again:
            assert again.get("/healthz").status == 200
        assert server.metric(
            'ratewin_server_connections_total{outcome="address_refused"}') == 1
    finally:
        for s in mine:
            s.close()


def test_sigterm_drains_in_flight_request_and_exits_0(start_server, rules):
    server = start_server(rules=rules, threads=2)
    idle = raw_connect(server.port)
    idle.sendall(raw_get("/healthz"))
    idle_reader = RawReader(idle)
    assert idle_reader.response().status == 200
    busy = raw_connect(server.port)
    busy.sendall(b"GET /in-flight HTTP/1.1\r\nHost: x\r\nX-API-Key: k\r\n")  # half a request

    def open_connections() -> float | None:  # (asked on the idle connection)
        idle.sendall(raw_get("/metrics"))
        return metric_value(idle_reader.response().text, "ratewin_server_open_connections")

    # The busy one accepted (from then on SIGTERM drains it rather than refusing it).
    assert wait_until(lambda: open_connections() == 2)
    server.signal(signal.SIGTERM)
    try:
        assert wait_until(lambda: "SIGTERM: draining" in server.log()), server.log()
        # The idle keep-alive connection is closed, new connections are refused.
        assert idle_reader.closed()

        def refused() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", server.port), timeout=0.5) as s:
                    s.sendall(raw_get("/healthz"))
                    return RawReader(s).closed(0.5)  # accepted by a closing socket at most
            except OSError as e:
                return e.errno in (errno.ECONNREFUSED, errno.ECONNRESET)

        assert wait_until(refused)
        assert server.alive(), "exited with a request in flight"
        # A second signal (Ctrl-C twice, a supervisor signalling the group and the PID)
        # does not cut the drain short: the server answers the rest of the request after
        # them (a fatal signal ends a process before it runs again).
        server.signal(signal.SIGTERM)
        server.signal(signal.SIGINT)
        assert server.alive(), "a repeated signal ended the drain"
        # The rest of the request: answered, with Connection: close, then the server exits.
        busy.sendall(b"\r\n")
        reader = RawReader(busy)
        r = reader.response()
        assert r.status == 200, r
        assert r.json()["endpoint"] == "/in-flight"
        assert r.headers["connection"] == "close"
        assert reader.closed()
        assert server.wait(PATIENCE) == 0, server.log()
        assert "drained; exiting" in server.log()
    finally:
        idle.close()
        busy.close()


def test_sigterm_drain_deadline_closes_stuck_connections(start_server, rules):
    # (A request timeout longer than any wait here: only the drain deadline can close the
    # stuck connection and let the server exit.)
    server = start_server("--drain-timeout-ms", "300", "--request-timeout-ms", "600000",
                          rules=rules, threads=1)
    busy = raw_connect(server.port)
    try:
        busy.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finished
        # Accepted (one loop takes its connections in turn): drained, not refused.
        assert server.get("/healthz").status == 200
        started = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.wait(PATIENCE) == 0, server.log()
        assert time.monotonic() - started >= 0.3 - 0.01
        assert "drain deadline" in server.log()
        assert RawReader(busy).closed()
    finally:
        busy.close()


def test_trust_proxy_uses_last_forwarded_address(start_server, rules):
    plain = start_server(rules=rules)
    # Without --trust-proxy the header is ignored: the key is the connection's address.
    r = plain.get("/", {"X-Forwarded-For": "10.6.6.6"})
    assert r.status == 200, r
    r = plain.get("/", {"X-Forwarded-For": "1.2.3.4, 10.6.6.6"})
    assert r.status == 200, r
    # ...so every such request shares ip:127.0.0.1's limit of 3
    assert plain.get("/", {"X-Forwarded-For": "10.9.9.9"}).status == 200
    assert plain.get("/", {"X-Forwarded-For": "10.9.9.8"}).status == 429

    proxied = start_server("--trust-proxy", "127.0.0.1", rules=rules)
    assert proxied.get("/", {"X-Forwarded-For": "10.6.6.6"}).status == 403
    assert proxied.get("/", {"X-Forwarded-For": "1.2.3.4, 10.6.6.6"}).status == 403
    assert proxied.get("/", {"X-Forwarded-For": "1.2.3.4,10.6.6.6 "}).status == 403
    # Only the last entry counts: earlier ones are the client's own claims.
    assert proxied.get("/", {"X-Forwarded-For": "10.6.6.6, 1.2.3.4"}).status == 200
    # Each forwarded address has its own limit.
    assert [proxied.get("/", {"X-Forwarded-For": "10.0.0.1"}).status for _ in range(4)] == \
        [200, 200, 200, 429]
    assert proxied.get("/", {"X-Forwarded-For": "10.0.0.2"}).status == 200
    # Without the header, the connection's address.
    assert proxied.get("/").status == 200
    # An API key still wins over the address.
    assert proxied.get("/", {"X-Forwarded-For": "10.6.6.6", "X-API-Key": "k"}).status == 200


def test_trust_proxy_with_forwarded_for_on_several_lines(start_server, rules):
    """A proxy may append its own X-Forwarded-For line instead of extending the client's
    (HAProxy's `option forwardfor` does). Several lines of one field are one list (RFC 9110
    5.3), so the last entry is still the proxy's: the client's own line must not decide."""
    server = start_server("--trust-proxy", "127.0.0.1/32", rules=rules)

    def get(*forwarded: str) -> int:
        with raw_connect(server.port) as s:
            s.sendall(raw_get("/", [("X-Forwarded-For", f) for f in forwarded]))
            return RawReader(s).response().status

    # The client wrote 10.6.6.6 (denied); the proxy saw 1.2.3.4 connect.
    assert get("10.6.6.6", "1.2.3.4") == 200
    assert get("1.2.3.4", "10.6.6.6") == 403
    # Rotating its own line must not give a client a fresh limit (3 per minute per address).
    assert [get(f"10.0.0.{i}", "5.6.7.8") for i in range(4)] == [200, 200, 200, 429]


def test_healthz_and_metrics(start_server, rules):
    server = start_server(rules=rules)
    h = server.get("/healthz")
    assert h.status == 200 and h.headers["content-type"] == "application/json"
    health = h.json()
    assert health["status"] == "ok" and health["store"] == "none"
    assert health["rules"].startswith("http-v1@") and f"rules {health['rules']})" in server.banner
    assert len(health["rules"].split("@")[1]) == 16

    with Client(server.port) as c:
        statuses = [c.get("/", {"X-API-Key": "m"}).status for _ in range(5)]
        assert c.get("/", {"X-Forwarded-For": "x"}).status == 200
    assert statuses == [200, 200, 200, 429, 429]
    assert server.get("/", {"X-API-Key": "revoked-1"}).status == 403

    m = server.get("/metrics")
    assert m.status == 200
    assert m.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = m.text
    assert "# TYPE ratewin_server_requests_total counter" in text
    assert server.metric('ratewin_server_requests_total{status="200",rule="tier:free/per-minute"}') == 4
    assert server.metric('ratewin_server_requests_total{status="429",rule="tier:free/per-minute"}') == 2
    assert server.metric('ratewin_server_requests_total{status="403",rule="deny"}') == 1
    assert f'ratewin_server_rules_info{{version="{health["rules"]}"}} 1' in text
    assert server.metric('ratewin_server_rules_reloads_total{result="ok"}') == 1
    assert server.metric('ratewin_server_rules_reloads_total{result="rejected"}') == 0
    assert server.metric("ratewin_server_rules_limits") == 1
    assert server.metric("ratewin_store_up") == 1
    assert server.metric("ratewin_store_configured") == 0
    assert server.metric('ratewin_engine_decisions_total{result="allowed"}') == 4
    assert server.metric('ratewin_engine_decisions_total{result="rejected"}') == 2
    assert server.metric("ratewin_server_decision_seconds_count") == 6
    assert server.metric('ratewin_server_decision_seconds_bucket{le="+Inf"}') == 6
    assert server.metric("ratewin_server_open_connections") >= 1
    assert server.metric("ratewin_server_overrides") == 0
    for line in text.splitlines():  # every line is a comment or "name[{labels}] number"
        if line and not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])
    # /healthz and /metrics are not rate limited
    for _ in range(5):
        assert server.get("/healthz", {"X-API-Key": "m"}).status == 200


def test_without_rules_only_health_metrics_and_admin_are_served(start_server):
    """With no --rules nothing would be limited: rather than "allowed" for every request
    (a gateway pointed here by mistake, a unit that lost its flag), 404 but for /healthz,
    /metrics and the admin paths; forward-auth checks too (a gateway fails closed)."""
    server = start_server(admin_token="t0ken")
    with Client(server.port) as c:
        for path in ("/anything", "/", "/ratewin/check"):
            r = c.get(path, {"X-API-Key": "k"})
            assert r.status == 404 and b"no rules" in r.body, (path, r)
        assert c.get("/healthz").status == 200
        assert c.get("/metrics").status == 200
        assert c.get("/admin/overrides", {"Authorization": "Bearer t0ken"}).status == 200
    assert json.loads(server.get("/healthz").body)["rules"].startswith("unversioned@")
    assert server.metric('ratewin_server_requests_total{status="404",rule="no-rules"}') == 3


def test_peer_reset_while_responses_are_queued_does_not_kill_the_server(start_server, rules):
    """SIGPIPE: a client that resets its connection with responses still being written."""
    server = start_server(rules=rules, threads=1)
    # libuv writes without MSG_NOSIGNAL: a write to a reset connection raises SIGPIPE,
    # which the server must ignore. Deterministically first:
    server.signal(signal.SIGPIPE)
    # (Answered after it, it was not ended by it: a fatal signal ends a process before it
    # runs again.)
    assert server.get("/healthz").status == 200
    assert server.alive(), "SIGPIPE ended the server"
    # Then the way it happens.
    burst = raw_get("/x") * 20000
    for _ in range(3):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", server.port))
        s.sendall(burst)
        # Responses pile up: the client reads none.
        assert wait_until(lambda: server.metric("ratewin_server_connection_buffer_bytes") > 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # RST
    # Each reset connection closed (the scrape's own is the one open), and the server runs.
    assert wait_until(lambda: server.metric("ratewin_server_open_connections") == 1), server.log()
    assert server.alive(), server.log()
    assert server.get("/healthz").status == 200


def test_client_that_never_reads_is_bounded_and_closed(start_server, rules):
    """Pipelining without reading: parsing stops once a connection's output is full, and
    the connection is closed after a request timeout without progress."""
    server = start_server("--request-timeout-ms", "2000", "--idle-timeout-ms", "2000",
                          "--max-connections", "4", rules=rules, threads=1)
    def rss_kib() -> int:
        with open(f"/proc/{server.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    def metric(name: str) -> float | None:
        # A scrape is a fourth connection: at --max-connections with none idle the server
        # closes a new one at once (the client retries), as it does while its loop has not
        # yet seen the previous scrape's close. wait_until asks again.
        try:
            return server.metric(name)
        except (ConnectionResetError, http.client.RemoteDisconnected):
            return None
    before = rss_kib()
    socks = []
    try:
        for _ in range(3):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", server.port))
            s.setblocking(False)
            try:
                for _ in range(40):  # as much as the socket takes: ~2.5 MB of /metrics
                    s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 1500)
            except BlockingIOError:
                pass
            socks.append(s)
        # Their answers pile up (or, on a busy machine, they have been closed already).
        assert wait_until(lambda: (metric("ratewin_server_connection_buffer_bytes") or 0) > 0
                          or metric("ratewin_server_open_connections") == 1)
        # Each connection holds at most its capped output and one read of input (not
        # measurable under a sanitizer, whose allocator keeps freed memory aside).
        if not os.environ.get("RATEWIN_SANITIZE"):
            assert rss_kib() - before < 3 * 2048, (before, rss_kib())
        # They make no progress: closed after the timeout, and their slots come back.
        # (The scrape's own connection is the one left.)
        assert wait_until(lambda: metric("ratewin_server_open_connections") == 1)
        assert server.get("/healthz").status == 200
    finally:
        for s in socks:
            s.close()


def test_expect_100_continue_and_http10_keep_alive(start_server, rules):
    server = start_server(rules=rules)
    s = raw_connect(server.port)
    try:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                  b"Expect: 100-continue\r\n\r\n")
        assert s.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        s.sendall(b"hello")
        reader = RawReader(s)
        assert reader.response().status == 200
        s.sendall(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r = reader.response()
        assert r.status == 200 and r.headers["connection"].lower() == "keep-alive", r
        s.sendall(b"GET /b HTTP/1.0\r\n\r\n")
        assert reader.response().status == 200
        assert reader.closed()  # HTTP/1.0 without keep-alive: closed after the response
    finally:
        s.close()


def test_absolute_form_target_is_matched_by_its_path(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: login
            path: /auth/login
            limits:
              - {name: per-minute, max: 1, window: 1m}
        """)
    server = start_server(rules=rules)
    with Client(server.port) as c:
        assert c.get("/auth/login").status == 200
        r = c.get("http://elsewhere/auth/login?x=1")
        assert r.status == 429 and r.json()["limit"] == "endpoint:login/per-minute", r


STRICT_FRAMING = [
    # (why, raw request, status)
    ("space before a colon", b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400),
    ("obs-fold", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n more\r\n\r\n", 400),
    ("bare LF", b"GET / HTTP/1.1\nHost: x\n\n", 400),
    ("bare LF after a header", b"GET / HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n", 400),
    ("bare CR", b"GET / HTTP/1.1\r\nHost: x\rX-A: 1\r\n\r\n", 400),
    ("bare LF after a chunk size",
     b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n", 400),
    ("chunk data not followed by CRLF",
     b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n", 400),
    ("bad chunk size",
     b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n", 400),
    ("no Host", b"GET / HTTP/1.1\r\n\r\n", 400),
    ("two Hosts", b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
    ("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    ("HTTP/1.2", b"GET / HTTP/1.2\r\nHost: x\r\n\r\n", 505),
    ("HTTP/0.9 style", b"GET /\r\n\r\n", 505),
    ("malformed version", b"GET / HTTP/1.x\r\nHost: x\r\n\r\n", 400),
    ("Transfer-Encoding and Content-Length",
     b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
     b"0\r\n\r\n", 400),
    ("differing Content-Lengths",
     b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
    ("a coding before chunked",
     b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400),
    ("a coding after chunked",
     b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400),
    ("absolute form, port out of range", b"GET http://h:99999/api/x HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("absolute form, unclosed IPv6", b"GET http://[::1/api/x HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("absolute form, bad host", b"GET http://a!b/api/x HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("absolute form, userinfo", b"GET http://u@h/api/x HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("absolute form, no path", b"GET http://h HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("absolute form, other scheme", b"GET ftp://h/api/x HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("asterisk form for GET", b"GET * HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("authority form", b"CONNECT h:443 HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("invalid percent-encoding", b"GET /api/%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("encoded slash", b"GET /api%2Fx HTTP/1.1\r\nHost: h\r\n\r\n", 400),
    ("path parameter", b"GET /api;x/y HTTP/1.1\r\nHost: h\r\n\r\n", 400),
]


@pytest.mark.parametrize("why,raw,status", STRICT_FRAMING, ids=[c[0] for c in STRICT_FRAMING])
def test_strict_framing_refuses_what_could_pass_as_something_else(start_server, rules, why, raw, status):
    server = start_server(rules=rules, threads=1)
    with raw_connect(server.port) as s:
        # A good request first: the bad one is answered after it, then the connection closes.
        s.sendall(raw_get("/first", [("X-API-Key", "k")]) + raw)
        reader = RawReader(s)
        assert reader.response().status == 200
        r = reader.response()
        assert r.status == status, (why, r)
        assert r.headers["connection"] == "close"
        assert reader.closed()


def test_trailers_never_supply_the_client_key_or_address(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: per-minute, max: 1, window: 1m}
        default_tier: free
        allow:
          - vip
        deny:
          - "ip:10.6.6.6"
        """)
    server = start_server("--trust-proxy", "127.0.0.1/32", rules=rules)

    def chunked(trailers: bytes) -> bytes:
        return (b"POST /t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"2\r\nhi\r\n0\r\n" + trailers + b"\r\n")

    with raw_connect(server.port) as s:
        reader = RawReader(s)
        s.sendall(chunked(b"X-API-Key: vip\r\n"))
        r = reader.response()
        assert r.status == 200 and r.headers.get("x-ratelimit-policy") != "allow-list", r
        assert r.headers["x-ratelimit-limit"] == "1", r  # counted as the connection's address
        s.sendall(chunked(b"X-API-Key: vip\r\nAuthorization: Bearer vip\r\n"))
        assert reader.response().status == 429  # ip:127.0.0.1 again, not vip
        s.sendall(chunked(b"X-Forwarded-For: 10.6.6.6\r\n"))
        assert reader.response().status == 429  # not denied as 10.6.6.6: still 127.0.0.1
    # The same key in the head is allow-listed: the trailer was the only difference.
    with raw_connect(server.port) as s:
        s.sendall(b"POST /t HTTP/1.1\r\nHost: x\r\nX-API-Key: vip\r\nTransfer-Encoding: chunked\r\n"
                  b"\r\n2\r\nhi\r\n0\r\n\r\n")
        assert RawReader(s).response().headers["x-ratelimit-policy"] == "allow-list"


def test_no_spelling_of_a_path_dodges_its_endpoint_limit(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: x
            path: /api/x
            limits:
              - {name: per-minute, max: 1, window: 1m}
          - name: items
            path: "/api/*/items"
            limits:
              - {name: per-minute, max: 1, window: 1m}
        """)
    server = start_server(rules=rules, threads=1)
    same = ["/api/x", "/%61pi/x", "/%61%70%69/x", "/%41%50%49/../%61%70%69/x", "/a%70i/x", "/API/../api/x", "//api//x",
            "/api/./x", "/foo/../api/x", "/%2e%2e/api/x", "/api/x/.", "/api/x/%2e", "/api/x/",
            "/api/x/y/..", "/api/%2E/x", "/api/.%2e/api/x", "/api/x?q=1", "/api/x/sub",
            "http://h/api/x", "HTTP://H:80/%61pi/x?y", "http://[::1]:8080/api/x/."]
    with Client(server.port) as c:
        assert c.get("/api/x", {"X-API-Key": "k"}).status == 200
        for path in same:
            r = c.get(path, {"X-API-Key": "k"})
            assert r.status == 429 and r.json()["limit"] == "endpoint:x/per-minute", (path, r)
        assert c.get("/api/v1/items", {"X-API-Key": "k"}).status == 200
        for path in ["/api/v1/items/", "/api/v%31/items", "/api/v1//items", "/api/./v1/%69tems",
                     "/api/v1/items/."]:
            r = c.get(path, {"X-API-Key": "k"})
            assert r.status == 429 and r.json()["limit"] == "endpoint:items/per-minute", (path, r)
        # Double encoding is not decoded twice: a different path (no endpoint).
        assert c.get("/%2561pi/x", {"X-API-Key": "k"}).status == 200
    # What backends disagree on is refused.
    for path in ["/api%2Fx", "/api%2fx", "/api/x%5C", "/api\\x", "/api/x;a=b", "/api%3Bx/x",
                 "/api/%zz", "/api/x%4", "/api/x%00", "/api/%C0%AEx", "/api/x#frag"]:
        with raw_connect(server.port) as s:
            s.sendall(raw_get(path, [("X-API-Key", "k")]))
            r = RawReader(s).response()
            assert r.status == 400, (path, r)


def test_trust_proxy_ignores_a_forwarded_value_that_is_not_an_address(start_server, tmp_path):
    rules = write_rules(tmp_path / "rules.yaml", """
        tiers:
          free:
            limits:
              - {name: rps, max: 1, window: 10s}
        default_tier: free
        """)
    server = start_server("--trust-proxy", "127.0.0.1/32", rules=rules)
    with Client(server.port) as c:
        assert c.get("/", {"X-Forwarded-For": "not-an-address"}).status == 200
        # Counted as the connection's address, whatever the junk says.
        r = c.get("/", {"X-Forwarded-For": "still junk"})
        assert r.status == 429, r
        assert c.get("/", {"X-Forwarded-For": "192.0.2.9"}).status == 200
