#!/usr/bin/env bash
# The server as `cmake --install` puts it (its component, into a staging root with
# DESTDIR), or as a package unpacked into a root (--root, tests/packages): every file the
# systemd unit names is installed, the unit passes `systemd-analyze verify` (its paths
# moved under the staging root), and the installed server runs: --version, `check` of the
# installed rules, and serving /healthz with them. With DESTDIR, a second install keeps
# the operator's edited rules and writes the shipped ones beside them.
#   install_server.sh <build dir> | --root <root>
set -euo pipefail
work="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "install_server: $*" >&2; exit 1; }

if [[ $1 == --root ]]; then
  root="$2"
  build=""
else
  build="$1"
  root="$work/root"
  DESTDIR="$root" cmake --install "$build" --component server >/dev/null
fi
unit="$(find "$root" -path '*/lib/systemd/system/ratewin-server.service')"
[[ -n $unit ]] || fail "no ratewin-server.service under lib/systemd/system"
bin="$(sed -n 's/^ExecStart=\([^ ]*\) .*/\1/p' "$unit")"
rules="$(sed -n 's/^ExecStart=.* --rules \([^ ]*\) .*/\1/p' "$unit")"
env_file="$(sed -n 's/^EnvironmentFile=-//p' "$unit")"
for f in "$bin" "$rules" "$env_file"; do
  [[ -n $f && -e "$root$f" ]] || fail "the unit names $f, which was not installed"
done
help="$(find "$root" -path '*/share/doc/ratewin-server/ratewin-server.help.txt')"
[[ -n $help ]] && grep -q -- '--rules' "$help" && grep -q 'rediss-sentinel://' "$help" ||
  fail "the --help text was not installed (share/doc/ratewin-server/ratewin-server.help.txt)"
for f in prometheus-alerts.yml grafana-dashboard.json rules.example.yaml; do
  [[ -n "$(find "$root" -path "*/share/ratewin-server/$f")" ]] || fail "$f was not installed"
done
grep -q '^DynamicUser=yes$' "$unit" && grep -q '^ProtectSystem=strict$' "$unit" &&
  grep -q '^ExecReload=/bin/kill -HUP $MAINPID$' "$unit" || fail "the unit lost a setting"

if command -v systemd-analyze >/dev/null; then
  sed "s#$bin#$root$bin#g; s#$rules#$root$rules#g; s#$env_file#$root$env_file#g" "$unit" \
    >"$work/ratewin-server.service"
  out="$(systemd-analyze verify --man=no "$work/ratewin-server.service" 2>&1)" ||
    fail "systemd-analyze verify: $out"
  [[ -z $out ]] || fail "systemd-analyze verify: $out"
else
  fail "systemd-analyze is not installed (cmd/setup.sh installs systemd)"
fi

if [[ -n $build ]]; then
  echo "# edited" >>"$root$rules"
  DESTDIR="$root" cmake --install "$build" --component server >/dev/null
  grep -q '^# edited$' "$root$rules" || fail "a second install overwrote the operator's rules"
  cmp -s "$root$rules.dist" "$root$(dirname "$bin")/../share/ratewin-server/rules.example.yaml" ||
    fail "a second install did not put the shipped rules beside the operator's (rules.yaml.dist)"
fi

[[ "$("$root$bin" --version)" =~ ^ratewin-server\ [0-9] ]] || fail "--version"
"$root$bin" check "$root$rules" >"$work/rules.json" 2>/dev/null || fail "check of the installed rules"
grep -q '"tiers"' "$work/rules.json" || fail "check printed no rules"

# The environment file's arguments, as the unit passes them.
args="$(. "$root$env_file" && echo "$RATEWIN_SERVER_ARGS")"
[[ $args == "--listen 127.0.0.1:8080" ]] || fail "the environment file's RATEWIN_SERVER_ARGS: $args"
"$root$bin" --rules "$root$rules" --listen 127.0.0.1:0 --threads 1 >"$work/out" 2>"$work/log" &
pid=$!
port=""
for _ in $(seq 200); do
  port="$(sed -n 's/^ratewin-server listening on 127.0.0.1:\([0-9]*\) .*/\1/p' "$work/out")"
  [[ -n $port ]] && break
  kill -0 "$pid" 2>/dev/null || fail "the installed server exited: $(cat "$work/log")"
  sleep 0.05
done
[[ -n $port ]] || fail "the installed server did not start: $(cat "$work/log")"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
answer="$(cat <&3)"
exec 3<&-
grep -q '"status":"ok"' <<<"$answer" || fail "/healthz: $answer"
kill -TERM "$pid"
wait "$pid" || fail "the installed server did not exit cleanly"
pid=""
echo "install_server: installed under $(dirname "$(dirname "$bin")"), unit verified, server served"
