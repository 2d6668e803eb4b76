// GET /status: one self-contained HTML page (status_page.h). The figures are embedded in it
// (the JSON of /status.json, in a script element that is data, not code), rendered by its
// script at once, then refreshed from /status.json every 2 s. Everything that comes from
// clients or the rules file (keys, endpoints, rule names, errors) is set as text.
#include "admin/status_page.h"

#include <string>
#include <string_view>

namespace ratewin::server {

namespace {

constexpr std::string_view kHead = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ratewin-server status</title>
<style>
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#f7f8fa; --ok:#1a7f37; --bad:#b42318; --warn:#b54708; --bar:#d92d20; --bar-ok:#2e90fa; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; flex-wrap:wrap; align-items:baseline; gap:8px 24px; padding:16px 24px; background:#fff; border-bottom:1px solid var(--line); }
header h1 { font-size:18px; margin:0; }
header .meta { color:var(--muted); }
main { padding:16px 24px; display:grid; gap:16px; grid-template-columns:repeat(auto-fit, minmax(420px, 1fr)); }
section { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 16px; }
section.wide { grid-column:1 / -1; }
h2 { font-size:15px; margin:0 0 8px; }
table { width:100%; border-collapse:collapse; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { color:var(--muted); font-weight:600; font-size:12px; text-transform:uppercase; letter-spacing:.03em; }
td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
td.key { font-family:ui-monospace, SFMono-Regular, Menlo, monospace; word-break:break-all; }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-weight:600; font-size:12px; color:#fff; }
.up { background:var(--ok); } .down { background:var(--bad); } .none { background:var(--muted); }
.shadow { color:var(--warn); font-weight:600; }
.empty { color:var(--muted); font-style:italic; }
.error { color:var(--bad); }
.bar { height:6px; background:var(--bar-ok); border-radius:3px; overflow:hidden; min-width:60px; }
.bar > span { display:block; height:100%; background:var(--bar); }
.bar.idle { background:var(--line); }
dl { display:grid; grid-template-columns:max-content 1fr; gap:4px 16px; margin:0; }
dt { color:var(--muted); } dd { margin:0; font-variant-numeric:tabular-nums; }
#refresh { color:var(--muted); }
</style>
</head>
<body>
<header>
  <h1>ratewin-server</h1>
  <span class="meta">version <span id="server-version"></span></span>
  <span class="meta">rules <span id="rules-version"></span></span>
  <span class="meta" id="rls-meta" hidden>rls <span id="rls-version"></span></span>
  <span class="meta">up <span id="uptime"></span></span>
  <span class="meta">store <span id="store-badge" class="badge"></span></span>
  <span id="refresh"></span>
</header>
<main>
  <section class="wide">
    <h2>Limits</h2>
    <table id="limits">
      <thead><tr><th>Rule</th><th>Limit</th><th>Algorithm</th><th class="n">Allowed/s</th><th class="n">Refused/s</th><th>Refused share</th><th class="n">Allowed</th><th class="n">Refused</th></tr></thead>
      <tbody></tbody>
    </table>
    <p id="rules-error" class="error"></p>
    <p id="rls-error" class="error"></p>
  </section>
  <section>
    <h2>Most refused keys</h2>
    <table id="top">
      <thead><tr><th>Rule</th><th>Key</th><th>Endpoint</th><th class="n">Refused</th><th class="n">Recent/s</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section>
    <h2>Store</h2>
    <dl id="store"></dl>
  </section>
  <section>
    <h2>Overrides in force</h2>
    <table id="overrides">
      <thead><tr><th>Key</th><th>Override</th><th class="n">Expires in</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
</main>
<script type="application/json" id="initial">)html";

constexpr std::string_view kTail = R"html(</script>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function num(x, digits) {
  if (typeof x !== "number" || !isFinite(x)) return "-";
  return x.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
}
function duration(s) {
  s = Math.max(0, Math.round(s));
  const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return d ? d + "d " + h + "h" : h ? h + "h " + m + "m" : m ? m + "m " + (s % 60) + "s" : s + "s";
}
function fill(tbody, rows, columns, empty) {
  tbody.replaceChildren();
  if (rows.length === 0) {
    const tr = el("tr"), td = el("td", empty, "empty");
    td.colSpan = columns;
    tr.append(td);
    tbody.append(tr);
  }
  for (const r of rows) tbody.append(r);
}
function render(s) {
  $("server-version").textContent = s.server.version;
  $("rules-version").textContent = s.rules.version;
  $("uptime").textContent = duration(s.server.uptime_s);
  const badge = $("store-badge");
  badge.textContent = s.store.kind === "none" ? "none (local)" : s.store.up ? "up" : "down";
  badge.className = "badge " + (s.store.kind === "none" ? "none" : s.store.up ? "up" : "down");

  fill($("limits").tBodies[0], s.rules.limits.map((l) => {
    const tr = el("tr");
    tr.dataset.rule = l.rule;
    const name = el("td", l.rule, "rule");
    if (l.mode === "shadow") {
      name.append(" ", el("span", "shadow", "shadow"));
      if (l.shadow_refusals) name.append(el("div", "would have refused " + num(l.shadow_refusals, 0), "shadow"));
    }
    const total = l.allowed + l.refused;
    const bar = el("div", undefined, total ? "bar" : "bar idle"), part = el("span");
    part.style.width = (total ? 100 * l.refused / total : 0).toFixed(1) + "%";
    bar.append(part);
    const share = el("td", undefined, "share");
    share.append(bar);
    tr.append(name, el("td", l.limit, "limit"), el("td", l.algorithm),
              el("td", num(l.allowed_per_s), "n allowed-rate"), el("td", num(l.refused_per_s), "n refused-rate"),
              share, el("td", num(l.allowed, 0), "n allowed"), el("td", num(l.refused, 0), "n refused"));
    return tr;
  }), 8, "no limits: every request is allowed");
  $("rules-error").textContent = s.rules.last_error ? "last reload failed: " + s.rules.last_error : "";
  $("rls-meta").hidden = !s.rls;
  if (s.rls) $("rls-version").textContent = s.rls.version + " (" + s.rls.rate_limits + " rate limits)";
  $("rls-error").textContent = s.rls && s.rls.last_error ? "--rls-config: last reload failed: " + s.rls.last_error : "";

  const top = [];
  for (const rule of s.top.rules) {
    for (const k of rule.keys) {
      const tr = el("tr");
      tr.dataset.key = k.key;
      tr.append(el("td", rule.rule, "rule"), el("td", k.key, "key"), el("td", k.endpoint || "-"),
                el("td", num(k.refusals, 0), "n refusals"), el("td", num(k.per_second, 2), "n"));
      top.push(tr);
    }
    if (rule.other.recent > 0) {
      const tr = el("tr");
      tr.append(el("td", rule.rule, "rule"), el("td", "other keys", "empty"), el("td", "-"),
                el("td", num(rule.other.refusals, 0), "n"), el("td", "", "n"));
      top.push(tr);
    }
  }
  fill($("top").tBodies[0], top, 5, "nobody is being refused");

  const store = $("store");
  store.replaceChildren();
  const item = (name, value, id) => {
    const dd = el("dd", value);
    if (id) dd.id = id;
    store.append(el("dt", name), dd);
  };
  if (s.store.kind === "none") {
    item("store", "none: counts are this instance's own", "store-state");
  } else {
    item("Redis", s.store.up ? "up" : "down: " + s.store.reason, "store-state");
    item("live nodes", num(s.store.live_nodes, 0), "live-nodes");
    item("write latency", "p50 " + num(s.store.write_p50_ms, 2) + " ms, p99 " + num(s.store.write_p99_ms, 2) + " ms", "write-latency");
    item("writes", num(s.store.writes_ok, 0) + " ok, " + num(s.store.writes_failed, 0) + " failed");
    item("circuit opened", num(s.store.circuit_opens, 0) + " times");
  }
  item("limiters", num(s.store.limiters, 0));

  fill($("overrides").tBodies[0], s.overrides.in_force.map((o) => {
    const tr = el("tr");
    tr.dataset.key = o.key;
    const what = o.limit !== undefined ? "max " + o.limit : "x" + o.multiplier;
    tr.append(el("td", o.key, "key"), el("td", what), el("td", duration(o.expires_in_s), "n"));
    return tr;
  }), 3, "none");
  $("refresh").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
}
render(JSON.parse($("initial").textContent));
let failures = 0;
async function refresh() {
  try {
    // (From the page's origin and path: a page opened with user:password@ in its URL
    // resolves relative URLs with them, which fetch refuses; the browser sends the
    // credentials it was given for the page.)
    const r = await fetch(new URL("status.json", location.origin + location.pathname),
                          { cache: "no-store", credentials: "same-origin" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    failures = 0;
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  } catch (e) {
    failures++;
    $("refresh").textContent = "refresh failed (" + e.message + ")";
  }
  setTimeout(refresh, failures ? 5000 : 2000);
}
setTimeout(refresh, 2000);
</script>
</body>
</html>
)html";

}  // namespace

void status_page(std::string_view figures, Response& response) {
  response.content_type = "text/html; charset=utf-8";
  // Nothing from elsewhere: no external script, style, image, font or frame, and no
  // request but to this server; not framed by others; not cached.
  response.headers.emplace_back(
      "Content-Security-Policy",
      "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
      "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
      "frame-ancestors 'none'");
  response.headers.emplace_back("X-Content-Type-Options", "nosniff");
  response.headers.emplace_back("Cache-Control", "no-store");
  std::string& b = response.body;
  b.reserve(kHead.size() + figures.size() + kTail.size() + 16);
  b = kHead;
  // The JSON inside a script element, with '<', '>' and '&' written as JSON's \u escapes
  // (they occur in JSON only inside strings, where the escape is the same string): no
  // text in it (a client's key) can close the element ("</script"), nor open a comment
  // ("<!--"), in which a later "<script" would make the element's own end tag not end
  // it and blank the page. U+2028 and U+2029 too, which a script reading the text as
  // code would take for line ends.
  for (std::size_t i = 0; i < figures.size(); ++i) {
    const char c = figures[i];
    if (c == '<') {
      b += "\\u003c";
    } else if (c == '>') {
      b += "\\u003e";
    } else if (c == '&') {
      b += "\\u0026";
    } else if (c == '\xE2' && i + 2 < figures.size() && figures[i + 1] == '\x80' &&
               (figures[i + 2] == '\xA8' || figures[i + 2] == '\xA9')) {
      b += figures[i + 2] == '\xA8' ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      b += c;
    }
  }
  b += kTail;
}

}  // namespace ratewin::server
