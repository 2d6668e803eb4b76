"""Rules reloads: the watched file (a good edit takes effect, a bad one is rejected naming
its line while the last good rules keep working), SIGHUP and POST /admin/reload, and an
invalid file at startup."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from ratewin_testkit import SERVER, Client, wait_until, write_rules

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def rules_text(version: str, max_: int) -> str:
    return f"""
        version: "{version}"
        tiers:
          free:
            limits:
              - name: burst
                max: {max_}
                window: 1m
        default_tier: free
        """


def admin_rules(server) -> dict:
    r = server.get("/admin/rules", AUTH)
    assert r.status == 200, r
    return r.json()


def metrics_version(server) -> str:
    for line in server.metrics().splitlines():
        if line.startswith("ratewin_server_rules_info{"):
            return line.split('version="', 1)[1].split('"', 1)[0]
    raise AssertionError("no ratewin_server_rules_info")


def test_watched_file_good_edit_applies_new_rules(start_server, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", rules_text("v1", 2))
    server = start_server(rules=path, admin_token=TOKEN)
    before = admin_rules(server)
    assert before["version"].startswith("v1@") and before["path"] == str(path)
    assert before["last_error"] == ""
    assert before["rules"]["tiers"]["free"]["limits"][0]["max"] == 2
    assert metrics_version(server) == before["version"]
    assert server.metric('ratewin_server_rules_reloads_total{result="ok"}') == 1
    assert server.get("/", {"X-API-Key": "k"}).headers["x-ratelimit-limit"] == "2"

    write_rules(path, rules_text("v2", 5))  # edited in place
    assert wait_until(lambda: admin_rules(server)["version"].startswith("v2@"), 3), admin_rules(server)
    after = admin_rules(server)
    assert after["version"] != before["version"] and after["last_error"] == ""
    assert metrics_version(server) == after["version"]
    assert server.get("/healthz").json()["rules"] == after["version"]
    assert server.metric('ratewin_server_rules_reloads_total{result="ok"}') >= 2
    assert server.metric('ratewin_server_rules_reloads_total{result="rejected"}') == 0
    assert "rules " + after["version"] + " active (file changed)" in server.log()
    # The new limit applies (the key already used 1 of its 5).
    with Client(server.port) as c:
        got = [c.get("/", {"X-API-Key": "k"}) for _ in range(5)]
    assert got[0].headers["x-ratelimit-limit"] == "5"
    assert [r.status for r in got] == [200, 200, 200, 200, 429]

    # A replaced file (a new inode, as editors and deploy tools do) is seen too.
    replacement = tmp_path / "rules.yaml.new"
    write_rules(replacement, rules_text("v3", 9))
    os.replace(replacement, path)
    assert wait_until(lambda: admin_rules(server)["version"].startswith("v3@"), 3)
    assert server.get("/", {"X-API-Key": "fresh"}).headers["x-ratelimit-limit"] == "9"


def test_watched_file_bad_edit_is_rejected_and_old_rules_stay(start_server, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", rules_text("v1", 2))
    server = start_server(rules=path, admin_token=TOKEN)
    good = admin_rules(server)["version"]
    assert server.get("/", {"X-API-Key": "k"}).status == 200

    write_rules(path, atomic=True, text="""
        version: "broken"
        tiers:
          free:
            limits:
              - name: burst
                max: 50
                windw: 1m
        default_tier: free
        """)
    assert wait_until(
        lambda: server.metric('ratewin_server_rules_reloads_total{result="rejected"}') == 1, 3)
    expected = f'{path}:7:9: tiers.free.limits[0]: unknown field "windw"'
    state = admin_rules(server)
    assert state["version"] == good
    assert state["last_error"].startswith(expected), state["last_error"]
    assert expected in server.log()
    assert f"rules rejected (file changed), keeping {good}: {expected}" in server.log()
    assert server.metric("ratewin_server_rules_last_error") == 1
    assert metrics_version(server) == good
    # The old rules keep limiting: max 2, one used already.
    with Client(server.port) as c:
        got = [c.get("/", {"X-API-Key": "k"}) for _ in range(2)]
    assert [r.status for r in got] == [200, 429]
    assert got[0].headers["x-ratelimit-limit"] == "2"
    # An explicit reload of the same bad file says why it failed.
    r = server.call("POST", "/admin/reload", headers=AUTH)
    assert r.status == 422 and r.json()["error"].startswith(expected), r

    # A YAML syntax error names its line too.
    write_rules(path, 'version: "x"\ntiers: [\n', atomic=True)
    assert wait_until(
        lambda: server.metric('ratewin_server_rules_reloads_total{result="rejected"}') >= 3, 3)
    assert admin_rules(server)["last_error"].startswith(f"{path}:3:1: YAML syntax"), \
        admin_rules(server)

    # Fixed: the error clears and the new rules apply.
    write_rules(path, rules_text("v2", 4))
    assert wait_until(lambda: admin_rules(server)["version"].startswith("v2@"), 3)
    assert admin_rules(server)["last_error"] == ""
    assert server.metric("ratewin_server_rules_last_error") == 0
    assert server.get("/", {"X-API-Key": "k"}).headers["x-ratelimit-limit"] == "4"


def test_files_beside_the_rules_file_are_not_loads(start_server, tmp_path):
    """The watch sees the whole folder (a symlink swapped there is a new version), but
    only new bytes of the rules file are a load: files beside it are not counted, and a
    bad edit is counted and logged once however often the folder changes after it."""
    path = write_rules(tmp_path / "rules.yaml", rules_text("v1", 2))
    server = start_server(rules=path, admin_token=TOKEN)
    ok = 'ratewin_server_rules_reloads_total{result="ok"}'
    rejected = 'ratewin_server_rules_reloads_total{result="rejected"}'

    def touch_neighbours(round_: int) -> None:
        for name in ["notes.txt", ".rules.yaml.swp", "other.yaml"]:
            (tmp_path / name).write_text(f"round {round_}\n")
        (tmp_path / "other.yaml").rename(tmp_path / f"other-{round_}.yaml")
        time.sleep(0.5)  # past the watch's debounce (100 ms for other files)

    touch_neighbours(1)
    assert server.metric(ok) == 1 and server.metric(rejected) == 0
    assert "active (file changed)" not in server.log()

    write_rules(path, atomic=True, text=rules_text("v2", 3).replace("max: 3", "max: -3"))
    assert wait_until(lambda: server.metric(rejected) == 1, 3)
    touch_neighbours(2)
    touch_neighbours(3)
    assert server.metric(rejected) == 1 and server.metric(ok) == 1
    assert server.log().count("rules rejected (file changed)") == 1, server.log()
    assert admin_rules(server)["last_error"] != ""
    # An explicit reload is a load, and says why again.
    server.signal(signal.SIGHUP)
    assert wait_until(lambda: server.metric(rejected) == 2, 3)
    assert server.log().count("rules rejected (SIGHUP)") == 1

    write_rules(path, atomic=True, text=rules_text("v3", 4))
    assert wait_until(lambda: admin_rules(server)["version"].startswith("v3@"), 3)
    touch_neighbours(4)
    assert server.metric(ok) == 2 and server.metric(rejected) == 2
    assert admin_rules(server)["last_error"] == ""


def test_sighup_and_admin_reload(start_server, tmp_path):
    """The rules path is a symlink into another directory: edits to the target are not
    seen by the watch on the link's directory, so only SIGHUP (or the admin API) picks
    them up."""
    (tmp_path / "watched").mkdir()
    (tmp_path / "elsewhere").mkdir()
    target = write_rules(tmp_path / "elsewhere" / "real.yaml", rules_text("v1", 2))
    link = tmp_path / "watched" / "rules.yaml"
    link.symlink_to(target)
    server = start_server(rules=link, admin_token=TOKEN)
    v1 = admin_rules(server)["version"]
    assert v1.startswith("v1@")

    write_rules(target, rules_text("v2", 6))
    time.sleep(0.4)  # longer than the watch's debounce: nothing happens by itself
    assert admin_rules(server)["version"] == v1
    server.signal(signal.SIGHUP)
    assert wait_until(lambda: admin_rules(server)["version"].startswith("v2@"), 2)
    assert "active (SIGHUP)" in server.log()
    assert server.get("/", {"X-API-Key": "k"}).headers["x-ratelimit-limit"] == "6"

    write_rules(target, rules_text("v3", 7))
    r = server.call("POST", "/admin/reload", headers=AUTH)
    assert r.status == 200, r
    assert r.json()["version"].startswith("v3@")
    assert admin_rules(server)["version"] == r.json()["version"]
    assert server.get("/", {"X-API-Key": "k2"}).headers["x-ratelimit-limit"] == "7"
    # Reloading unchanged bytes keeps the version.
    again = server.call("POST", "/admin/reload", headers=AUTH)
    assert again.status == 200 and again.json()["version"] == r.json()["version"]
    assert server.alive()


def test_switching_algorithm_keeps_counts_while_the_window_stays(start_server, tmp_path):
    """The rule is counted under its name: a reload from sliding_window to strict_window
    with the same window and subintervals decides from what was already counted; a
    fixed_window (one subinterval: another geometry) starts from nothing."""

    def text(version: str, algorithm: str, subintervals: str = "") -> str:
        return f"""
            version: "{version}"
            tiers:
              free:
                limits:
                  - name: burst
                    max: 3
                    window: 1m
                    {algorithm}
                    {subintervals}
            default_tier: free
            """

    def limit(server) -> dict:
        return admin_rules(server)["rules"]["tiers"]["free"]["limits"][0]

    path = write_rules(tmp_path / "rules.yaml", text("v1", ""))
    server = start_server(rules=path, admin_token=TOKEN)
    assert limit(server)["algorithm"] == "sliding_window"
    assert admin_rules(server)["rules"]["defaults"]["algorithm"] == "sliding_window"
    with Client(server.port) as c:
        assert [c.get("/", {"X-API-Key": "k"}).headers["x-ratelimit-remaining"]
                for _ in range(2)] == ["2", "1"]

        write_rules(path, text("v2", "algorithm: strict_window"), atomic=True)
        assert wait_until(lambda: admin_rules(server)["version"].startswith("v2@"), 3)
        assert limit(server)["algorithm"] == "strict_window"
        assert limit(server)["subintervals"] == 10
        got = [c.get("/", {"X-API-Key": "k"}) for _ in range(2)]
        assert [r.status for r in got] == [200, 429], got
        assert got[0].headers["x-ratelimit-remaining"] == "0"
        assert got[0].headers["ratelimit-policy"] == '"tier:free/burst";q=3;w=60'

        # fixed_window refuses subintervals other than 1: rejected, the strict rule stays.
        write_rules(path, text("v3", "algorithm: fixed_window", "subintervals: 4"), atomic=True)
        assert wait_until(
            lambda: server.metric('ratewin_server_rules_reloads_total{result="rejected"}') == 1, 3)
        assert admin_rules(server)["last_error"].startswith(
            f"{path}:9:23: tiers.free.limits[0].subintervals: fixed_window has one subinterval, "
            "the whole window (window: 1m): subintervals: 4 says otherwise"), admin_rules(server)
        assert c.get("/", {"X-API-Key": "k"}).status == 429

        write_rules(path, text("v4", "algorithm: fixed_window"), atomic=True)
        assert wait_until(lambda: admin_rules(server)["version"].startswith("v4@"), 3)
        assert limit(server)["algorithm"] == "fixed_window"
        assert limit(server)["subintervals"] == 1
        r = c.get("/", {"X-API-Key": "k"})
        assert r.status == 200 and r.headers["x-ratelimit-remaining"] == "2", r
        assert r.headers["ratelimit-policy"] == '"tier:free/burst";q=3;w=60'


def test_switching_between_a_window_and_a_token_bucket(start_server, tmp_path):
    """A token bucket keeps one time, not counts: a reload from sliding_window to
    token_bucket starts the bucket full and enforces it at once; one that changes only its
    burst keeps its state; back to sliding_window, the ring's counts are what they were."""

    def text(version: str, fields: str) -> str:
        return f"""
            version: "{version}"
            tiers:
              free:
                limits:
                  - name: api
                    max: 3
                    window: 1m
                    {fields}
            default_tier: free
            """

    def limit(server) -> dict:
        return admin_rules(server)["rules"]["tiers"]["free"]["limits"][0]

    def reload(server, version: str, fields: str) -> None:
        write_rules(path, text(version, fields), atomic=True)
        assert wait_until(lambda: admin_rules(server)["version"].startswith(version + "@"), 3)

    key = {"X-API-Key": "k"}
    path = write_rules(tmp_path / "rules.yaml", text("v1", ""))
    server = start_server(rules=path, admin_token=TOKEN)
    assert "burst" not in limit(server)
    with Client(server.port) as c:
        assert [c.get("/", key).headers["x-ratelimit-remaining"] for _ in range(2)] == ["2", "1"]

        # 3 a minute, one every 20 s, at most 2 at once: full, whatever the ring counted.
        reload(server, "v2", "algorithm: token_bucket\n                    burst: 2")
        assert limit(server)["algorithm"] == "token_bucket"
        assert limit(server)["burst"] == 2
        assert limit(server)["subintervals"] == 1
        got = [c.get("/", key) for _ in range(3)]
        assert [r.status for r in got] == [200, 200, 429], got
        assert [r.headers["x-ratelimit-remaining"] for r in got] == ["1", "0", "0"]
        assert got[0].headers["x-ratelimit-limit"] == "2"
        assert got[0].headers["ratelimit-policy"] == '"tier:free/api";q=2;w=40'
        assert got[2].headers["retry-after"] == "20", got[2]

        # burst belongs to token_bucket: rejected naming the line, the bucket stays.
        reload_errors = 'ratewin_server_rules_reloads_total{result="rejected"}'
        write_rules(path, text("v3", "algorithm: sliding_window\n                    burst: 2"),
                    atomic=True)
        assert wait_until(lambda: server.metric(reload_errors) == 1, 3)
        assert admin_rules(server)["last_error"].startswith(
            f"{path}:9:16: tiers.free.limits[0].burst: burst applies to token_bucket only, not to "
            "sliding_window"), admin_rules(server)
        assert c.get("/", key).status == 429

        # A larger burst: the same bucket, so the two taken still count against it.
        reload(server, "v4", "algorithm: token_bucket\n                    burst: 3")
        got = [c.get("/", key) for _ in range(2)]
        assert [r.status for r in got] == [200, 429], got
        assert got[0].headers["x-ratelimit-limit"] == "3"
        assert got[0].headers["x-ratelimit-remaining"] == "0"

        # Back to the window: its counts are the 2 made before the bucket.
        reload(server, "v5", "")
        assert limit(server)["algorithm"] == "sliding_window"
        got = [c.get("/", key) for _ in range(2)]
        assert [r.status for r in got] == [200, 429], got
        assert got[0].headers["x-ratelimit-remaining"] == "0"
        assert got[0].headers["ratelimit-policy"] == '"tier:free/api";q=3;w=60'


def test_invalid_rules_at_startup_exit_1_naming_the_line(server_binary, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", """
        endpoints:
          - name: e
            path: /e
            limits:
              - name: b
                max: 0
                window: 1s
        """)
    result = subprocess.run([SERVER, "--listen", "127.0.0.1:0", "--rules", str(path)],
                            capture_output=True, text=True, timeout=10)
    assert result.returncode == 1
    assert result.stdout == ""
    assert f"rules: {path}:6:14: endpoints[0].limits[0].max:" in result.stderr, result.stderr


REVOKING = """
version: "{version}"
tiers:
  free:
    limits:
      - {{name: burst, max: 100, window: 1m}}
default_tier: free
deny:
  - revoked
"""


def test_a_file_written_in_place_goes_live_only_once_whole(start_server, tmp_path):
    """Before: a deploy tool wrote the file up to just before `deny:`, flushed, and 0.4 s
    later wrote the rest; in between (100 ms after the first write) the revoked key got 200.
    A file written in place is reloaded once it has stood unchanged for --reload-settle-ms;
    one renamed into place at once."""
    path = write_rules(tmp_path / "rules.yaml", REVOKING.format(version="v1"))
    server = start_server(rules=path, admin_token=TOKEN)
    assert server.get("/", {"X-API-Key": "revoked"}).status == 403
    whole = REVOKING.format(version="v2").lstrip("\n")
    cut = whole.index("deny:")
    with open(path, "w") as f:
        f.write(whole[:cut])
        f.flush()
        for _ in range(8):  # 0.4 s, asking all along
            time.sleep(0.05)
            assert server.get("/", {"X-API-Key": "revoked"}).status == 403
        f.write(whole[cut:])
    assert wait_until(lambda: admin_rules(server)["version"].startswith("v2@"), 3)
    assert server.get("/", {"X-API-Key": "revoked"}).status == 403
    assert server.metric('ratewin_server_rules_reloads_total{result="rejected"}') == 0
    # Renamed into place: live at once (well within the settle time).
    write_rules(path, REVOKING.format(version="v3"), atomic=True)
    assert wait_until(lambda: admin_rules(server)["version"].startswith("v3@"), 0.6)


def test_an_empty_or_ruleless_file_is_refused_unless_allowed(start_server, server_binary, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", REVOKING.format(version="v1"))
    server = start_server(rules=path, admin_token=TOKEN)
    good = admin_rules(server)["version"]
    for rejected, text in enumerate(["", "version: \"only\"\n"], start=1):
        write_rules(path, text, atomic=True)
        assert wait_until(lambda: server.metric(
            'ratewin_server_rules_reloads_total{result="rejected"}') == rejected, 3)
        assert admin_rules(server)["version"] == good
        assert "no limit, allow or deny entry" in admin_rules(server)["last_error"]
        assert server.get("/", {"X-API-Key": "revoked"}).status == 403
    # At start too, unless --allow-empty-rules.
    run = subprocess.run([server_binary, "--listen", "127.0.0.1:0", "--rules", str(path)],
                         capture_output=True, timeout=10)
    assert run.returncode == 1 and b"--allow-empty-rules" in run.stderr, run
    allowed = start_server("--allow-empty-rules", rules=path)
    assert allowed.get("/", {"X-API-Key": "revoked"}).status == 200


def test_metrics_and_health_do_not_wait_on_a_reload(start_server, tmp_path):
    """Before: with a 6.8 MB rules file renamed into place and --threads 1, /metrics took
    1,008 ms and /healthz 908: the reload held the lock they take for its whole parse, so
    one request at most was answered while it parsed. Now requests go on being answered
    all through the parse: counted, not timed. (A parse cannot be held on an event as a
    read can: see HeldRules. It is the same machine that parses and answers, so the count
    does not depend on its speed: a 120,000-glob parse takes thousands of times as long as
    a request, however busy the machine; the 600 s only bounds a hang.)"""
    path = write_rules(tmp_path / "rules.yaml", rules_text("v1", 2))
    server = start_server(rules=path, admin_token=TOKEN, threads=1)
    big = write_rules(tmp_path / "big.yaml", big_rules(120_000))
    answered = 0
    with Client(server.port, timeout=600) as c:
        c.get("/metrics")
        began = time.monotonic()
        os.replace(big, path)
        while not metrics_version(server).startswith("big@"):
            for target in ("/metrics", "/healthz"):
                assert c.get(target).status == 200
                answered += 1
            assert time.monotonic() - began < 600, "the reload never ended"
    assert answered >= 6, answered


class HeldRules:
    """The rules file made a FIFO (a named pipe) in place of its file: a reload that reads
    it waits in its open and read until release() writes the new rules, so a test holds a
    reload on an event of its own instead of racing a slow parse against the machine's
    speed. opened(): a reload has it open (it is under way, and its request was taken)."""

    def __init__(self, path) -> None:
        self.path = path
        self.fd: int | None = None
        os.remove(path)
        os.mkfifo(path)

    def opened(self, timeout: float = 30.0) -> bool:
        def writer() -> bool:
            try:  # (ENXIO while nobody has it open for reading)
                self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return False
            return True
        return bool(self.fd is not None or wait_until(writer, timeout))

    def release(self, text: str) -> None:
        """The reload reads `text` (dedented, as write_rules writes it), then its end."""
        assert self.fd is not None, "release() before opened()"
        staged = write_rules(self.path.with_name(self.path.name + ".staged"), text)
        data = staged.read_bytes()
        os.set_blocking(self.fd, True)
        while data:
            data = data[os.write(self.fd, data):]
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "HeldRules":
        return self

    def __exit__(self, *exc) -> None:
        # A reload still holding it reads an empty file (rejected) and ends, so that the
        # server can stop.
        if self.fd is None:
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return
        os.close(self.fd)
        self.fd = None


class AdminReload:
    """POST /admin/reload on a connection of its own (`client`), its answer awaited on a
    thread: answer() gives it, or fails saying how the connection ended without one."""

    def __init__(self, port: int) -> None:
        self.client = Client(port, timeout=120)
        self.reply = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.reply = self.client.call("POST", "/admin/reload", headers=AUTH)
        except BaseException as e:  # (the connection closed without an answer)
            self.error = e
        finally:
            self.done.set()

    def answer(self, timeout: float = 120.0):
        assert self.done.wait(timeout), "neither an answer nor a close"
        assert self.reply is not None, f"the reload got no answer: {self.error!r}"
        return self.reply

    def __enter__(self) -> "AdminReload":
        return self

    def __exit__(self, *exc) -> None:
        # (A thread still waiting ends with the server; closing the socket does not wake
        # its recv.)
        self.client.close()


def unwatched_rules(tmp_path, text: str):
    """The rules path, a link to a file in a folder not watched (as in
    test_sighup_and_admin_reload): only SIGHUP and the admin API read the file, never the
    watch. Returns the link (for --rules) and the file."""
    (tmp_path / "watched").mkdir()
    (tmp_path / "elsewhere").mkdir()
    real = write_rules(tmp_path / "elsewhere" / "real.yaml", text)
    link = tmp_path / "watched" / "rules.yaml"
    link.symlink_to(real)
    return link, real


def big_rules(count: int) -> str:
    keys = "".join(f'  - {{match: "key-{i:06d}-*", tier: free}}\n' for i in range(count))
    return (f'version: "big"\ntiers:\n  free:\n    limits:\n'
            f'      - {{name: burst, max: 5, window: 1m}}\ndefault_tier: free\nkeys:\n{keys}')


def test_an_admin_reload_parses_off_the_loop_that_took_it(start_server, tmp_path):
    """Before: POST /admin/reload read and parsed the file on the loop that took the
    request, so with --threads 1 every other request waited for the whole parse. The
    reload is held in its read (the rules file a FIFO not written yet) rather than timed
    against the machine's speed: on the loop, it would hold the loop, and /healthz would
    get no answer."""
    link, real = unwatched_rules(tmp_path, rules_text("v1", 2))
    server = start_server(rules=link, admin_token=TOKEN, threads=1)
    with HeldRules(real) as held, AdminReload(server.port) as reload:
        assert held.opened(), "the reload never opened the rules file"
        with Client(server.port) as c:
            for _ in range(3):
                assert c.get("/healthz").json()["rules"].startswith("v1@")
                assert c.get("/metrics").status == 200
        assert not reload.done.is_set(), reload.reply
        assert admin_rules(server)["reloading"] is True
        held.release(big_rules(1_000))
        r = reload.answer()
    assert r.status == 200 and r.json()["version"].startswith("big@"), r
    assert server.get("/healthz").json()["rules"] == r.json()["version"]
    assert admin_rules(server)["reloading"] is False


def test_a_reload_that_outlasts_the_request_timeout_still_gets_its_answer(start_server, tmp_path):
    """Before: a reload whose read and parse outlasted --request-timeout-ms (a 120,000-glob
    file on a busy machine) lost its answer: the timeout closed the connection with the
    answer owed. The server owes that answer to work of its own, not to a slow client.
    The reload is held until the request timeout has passed, as an event: a connection of
    the same loop (--threads 1), accepted after the reload's request was taken, has had
    its own request timeout (408); the reload's connection, timed out first before, is
    still open."""
    link, real = unwatched_rules(tmp_path, rules_text("v1", 2))
    server = start_server("--request-timeout-ms", "2000", rules=link, admin_token=TOKEN,
                          threads=1)
    with HeldRules(real) as held, AdminReload(server.port) as reload:
        assert held.opened(), "the reload never opened the rules file"
        with Client(server.port, timeout=60) as probe:
            probe.conn.connect()
            probe.conn.sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")  # never ended
            head = b""
            while b"\r\n" not in head:
                chunk = probe.conn.sock.recv(4096)
                assert chunk, f"closed without a 408: {head!r}"
                head += chunk
            assert head.startswith(b"HTTP/1.1 408 "), head
        assert not reload.done.is_set(), (reload.reply, reload.error)
        held.release(rules_text("v2", 7))
        r = reload.answer()
        assert r.status == 200 and r.json()["version"].startswith("v2@"), r
        # Its connection goes on.
        assert reload.client.get("/healthz").json()["rules"] == r.json()["version"]
    assert admin_rules(server)["version"] == r.json()["version"]


def test_a_reload_past_its_wait_is_answered_202_and_admin_rules_tells_how_it_ended(
        start_server, tmp_path):
    """A reload has an end all the same: its answer waits --reload-wait-ms at most, then
    a 202 says it goes on, and GET /admin/rules says its outcome once "reloading" is
    false. The client was not the slow one: its connection goes on."""
    link, real = unwatched_rules(tmp_path, rules_text("v1", 2))
    server = start_server("--reload-wait-ms", "300", rules=link, admin_token=TOKEN, threads=1)
    v1 = admin_rules(server)["version"]
    with HeldRules(real) as held, AdminReload(server.port) as reload:
        assert held.opened(), "the reload never opened the rules file"
        r = reload.answer()  # (held all along: only the wait can have ended it)
        assert r.status == 202 and r.json()["reloading"] is True, r
        assert r.headers["location"] == "/admin/rules", r
        state = admin_rules(server)
        assert state["reloading"] is True and state["version"] == v1, state
        assert reload.client.get("/healthz").status == 200
        held.release(rules_text("v2", 7).replace("window:", "windw:"))
        assert wait_until(lambda: admin_rules(server)["reloading"] is False, 30)
    state = admin_rules(server)
    assert state["version"] == v1, state
    expected = f'{link}:7:9: tiers.free.limits[0]: unknown field "windw"'
    assert state["last_error"].startswith(expected), state
    assert "rules rejected (admin API)" in server.log()
    assert server.metric('ratewin_server_connections_total{outcome="timed_out"}') == 0
