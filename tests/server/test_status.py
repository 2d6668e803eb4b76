"""The status page: GET /status behind the admin token (as a bearer token, or as a Basic
password so that a browser can ask for it), self-contained (a Content-Security-Policy
that allows nothing from elsewhere), rendered by Debian's headless Chromium against a
server with traffic and Redis: the DOM holds the rules, their counts and rates, the most
refused keys (as text, never markup), the store's state and live nodes, the overrides and
the rules version. A screenshot is saved beside the server binary (status-page.png)."""

from __future__ import annotations

import base64
import html.parser
import os
import pathlib
import shutil
import subprocess
import threading

from ratewin_testkit import PATIENCE, SERVER, Client, store_up, wait_until, write_rules

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
BASIC = {"Authorization": "Basic " + base64.b64encode(f"ops:{TOKEN}".encode()).decode()}
# A key that, were the embedded figures not escaped, would open a comment in which the
# element's end tag no longer ends it (the page blanked), and inject markup.
HOSTILE_KEY = 'k-<!--<script><img src=x onerror="document.title=1">'

RULES = """
    version: "status-v7"
    endpoints:
      - name: search
        path: /search
        limits:
          - {name: burst, max: 100, window: 1s}
    tiers:
      free:
        limits:
          - {name: per-key, max: 3, window: 1m}
          - {name: trial, max: 1, window: 1m, mode: shadow}
    default_tier: free
    """


class Dom(html.parser.HTMLParser):
    """Rows of the rendered tables (by table id: a list of (row attributes, cell texts)),
    and the text of elements with an id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[dict, list[str]]]] = {}
        self.by_id: dict[str, str] = {}
        self._table: str | None = None
        self._in_body = False
        self._row: tuple[dict, list[str]] | None = None
        self._cell: list[str] | None = None
        self._ids: list[tuple[str, str, int]] = []  # (id, tag, depth)
        self._depth = 0
        self.body: dict = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self._depth += 1
        if "id" in a:
            self._ids.append((a["id"], tag, self._depth))
            self.by_id.setdefault(a["id"], "")
        if tag == "body":
            self.body = a
        if tag == "table":
            self._table = a.get("id")
            self.tables.setdefault(self._table, [])
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self._row = (a, [])
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row[1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "tbody":
            self._in_body = False
        elif tag == "table":
            self._table = None
        self._ids = [i for i in self._ids if i[2] < self._depth]
        self._depth -= 1

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        for name, _, _ in self._ids:
            self.by_id[name] += data


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError("chromium is not installed (cmd/setup.sh installs Debian's chromium)")


def headless(url: str, *flags: str) -> subprocess.CompletedProcess[str]:
    # (--no-sandbox: the tests run as root; the page is our own, on loopback.)
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", "--virtual-time-budget=4000", *flags, url],
        capture_output=True, text=True, timeout=2 * PATIENCE,
        env={**os.environ, "HOME": os.environ.get("TMPDIR", "/tmp")})


def test_the_status_page_renders_the_servers_figures_in_headless_chromium(start_server, redis, tmp_path):
    path = write_rules(tmp_path / "rules.yaml", RULES)
    server = start_server(rules=path, redis=redis, admin_token=TOKEN)
    store_up(server)
    assert server.call("POST", "/admin/overrides", headers=AUTH,
                       body=b'{"key": "vip", "multiplier": 4, "ttl_s": 600}').status == 200
    with Client(server.port) as c:
        statuses = [c.get("/", {"X-API-Key": HOSTILE_KEY}).status for _ in range(5)]
        statuses += [c.get("/search", {"X-API-Key": "ann"}).status for _ in range(4)]
        statuses += [c.get("/", {"X-API-Key": "busy"}).status for _ in range(3)]
    assert statuses == [200, 200, 200, 429, 429, 200, 200, 200, 429, 200, 200, 200]
    # The rates are over the last ten seconds or so, and headless Chromium may take longer
    # than that to start on a busy machine: "busy" is refused again and again (every
    # 0.2 s) until the page has been read, so that the page has a refusal rate to show.
    stop = threading.Event()
    busy_refused: list[int] = []

    def keep_refusing() -> None:
        with Client(server.port) as c:
            while not stop.is_set():
                busy_refused.append(c.get("/", {"X-API-Key": "busy"}).status)
                stop.wait(0.2)

    refuser = threading.Thread(target=keep_refusing)
    refuser.start()
    try:
        check_the_page(server)
    finally:
        stop.set()
        refuser.join(PATIENCE)
    assert busy_refused and set(busy_refused) == {429}, busy_refused


def check_the_page(server) -> None:
    # Auth: the admin token, as a bearer token or a Basic password (any user); Basic is
    # for the status page only, not for the admin API a forged request could reach.
    anonymous = server.get("/status")
    assert anonymous.status == 401
    assert anonymous.headers["www-authenticate"].startswith("Basic realm=")
    assert server.get("/admin/rules", BASIC).status == 401
    assert server.get("/status", {"Authorization": "Basic " + base64.b64encode(b"ops:wrong").decode()}).status == 401
    page = server.get("/status", AUTH)
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in page.headers["content-security-policy"]
    # Self-contained: nothing loaded from elsewhere.
    for needle in ("src=\"http", "href=\"http", "@import", "url(http"):
        assert needle not in page.text
    # The hostile key is data inside the page, never markup.
    assert HOSTILE_KEY not in page.text
    figures = wait_until(lambda: (f := server.get("/status.json", BASIC).json())
                         and f["rules"]["limits"][0]["refused_per_s"] > 0 and f)
    assert figures["rules"]["version"].startswith("status-v7")
    assert figures["store"] == {**figures["store"], "kind": "redis", "up": True, "live_nodes": 1}

    screenshot = pathlib.Path(SERVER).resolve().parent / "status-page.png"
    screenshot.unlink(missing_ok=True)
    url = f"http://ops:{TOKEN}@127.0.0.1:{server.port}/status"
    dumped = headless(url, "--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    dom = Dom()
    dom.feed(dumped.stdout)

    assert dom.by_id["rules-version"].startswith("status-v7")
    assert dom.by_id["store-badge"] == "up"
    assert dom.by_id["store-state"] == "up"
    assert dom.by_id["live-nodes"] == "1"
    assert dom.by_id["write-latency"].startswith("p50 ")
    limits = {row[0]["data-rule"]: row[1] for row in dom.tables["limits"]}
    assert set(limits) == {"tier:free/per-key", "tier:free/trial", "endpoint:search/burst"}, limits
    per_key = limits["tier:free/per-key"]
    assert per_key[0] == "tier:free/per-key" and per_key[1].startswith("3/1m")
    # Allowed: the 200s above, 9. Refused: the three 429s above, and busy's since.
    assert len(per_key) == 8 and per_key[6] == "9" and int(per_key[7]) > 3, per_key
    assert float(per_key[4]) > 0  # refused per second, over the last seconds
    assert "shadow" in limits["tier:free/trial"][0]
    top = {row[0]["data-key"]: row[1] for row in dom.tables["top"]}
    assert top[HOSTILE_KEY][1] == HOSTILE_KEY and top[HOSTILE_KEY][3] == "2"
    assert top["ann"][3] == "1"
    # The script ran, and refreshed the figures from /status.json.
    assert dom.by_id["refresh"].startswith("updated"), dom.by_id["refresh"]
    assert int(dom.body.get("data-refreshes", "0")) >= 1
    overrides = {row[0]["data-key"]: row[1] for row in dom.tables["overrides"]}
    assert overrides["vip"][1] == "x4"

    shot = headless(url, f"--screenshot={screenshot}", "--window-size=1280,900",
                    "--hide-scrollbars")
    assert shot.returncode == 0, shot.stderr[-3000:]
    data = screenshot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
    assert int.from_bytes(data[16:20], "big") == 1280
