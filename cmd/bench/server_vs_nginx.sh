#!/usr/bin/env bash
# HTTP benchmark: ratewin-server against nginx's limit_req, under the same wrk load.
#
# Eight cases, each on its own freshly started server on a free loopback port:
#   nginx-reject          nginx limit_req, 10 r/s per client address, no burst -> ~all 429
#   nginx-allow           the same with a rate too high to reach (and a burst:
#                         nginx counts whole milliseconds)                  -> all 200
#   ratewin-local-reject  ratewin-server, local mode, 10 per 1s per client  -> ~all 429
#   ratewin-local-allow   the same limit with max 4000000000                -> all 200
#   ratewin-redis-reject  ratewin-server sharing counts through a private redis-server
#   ratewin-redis-allow
#   ratewin-redis-tls-allow  the same, to the same redis-server's TLS port (rediss://,
#                         certificates made for the run by tests/support/make_certs.sh)
#   ratewin-redis-batched-allow  ratewin-redis-allow with --write-mode batched (admissions
#                         counted in memory, flushed every interval)
# Before each timed run curl checks the claimed status (429 after a few requests, or
# 200 throughout); after it, wrk's "Non-2xx or 3xx responses" gives the share refused.
# wrk drives one client (127.0.0.1), with the same options for every case. Also shown:
# the server's CPU time per request (from /proc; steadier than requests/s on a busy
# machine) and one response's size.
#
# Usage: cmd/bench/server_vs_nginx.sh [--runs N] [--duration D] [--connections C]
#                                      [--wrk-threads T] [--threads N] [--cases LIST]
#   --runs N         run every case N times, alternating (forward, then backward order),
#                    and report medians; a ratio is the median of the per-run ratios
#                    (default 1; RUNS)
#   --duration D     wrk -d per case (default 10s; DURATION)
#   --connections C  wrk -c (default 50; CONNECTIONS)
#   --wrk-threads T  wrk -t (default 2; WRK_THREADS)
#   --threads N      nginx worker_processes and ratewin-server --threads (default 2;
#                    SERVER_THREADS)
#   --cases LIST     comma-separated subset of the cases above (default all; CASES)
# Environment: RATEWIN_SERVER (default <repo>/build/cmd/ratewin-server), NGINX, WRK,
# REDIS_SERVER (paths of the programs).
# Build first: cmake --build build -j2 --target ratewin-server
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
templates="$here/server_vs_nginx"

runs="${RUNS:-1}"
duration="${DURATION:-10s}"
connections="${CONNECTIONS:-50}"
wrk_threads="${WRK_THREADS:-2}"
server_threads="${SERVER_THREADS:-2}"
cases="${CASES:-nginx-reject,ratewin-local-reject,ratewin-redis-reject,nginx-allow,ratewin-local-allow,ratewin-redis-allow,ratewin-redis-tls-allow,ratewin-redis-batched-allow}"
ratewin_server="${RATEWIN_SERVER:-$root/build/cmd/ratewin-server}"
nginx_bin="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
wrk_bin="${WRK:-$(command -v wrk || echo wrk)}"
redis_bin="${REDIS_SERVER:-$(command -v redis-server || echo redis-server)}"
python=/usr/bin/python3
[[ -x $python ]] || python=python3

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "server_vs_nginx: $*" >&2; exit 1; }

while (($#)); do
  case $1 in
    --runs) runs=${2:?}; shift 2 ;;
    --runs=*) runs=${1#*=}; shift ;;
    --duration) duration=${2:?}; shift 2 ;;
    --duration=*) duration=${1#*=}; shift ;;
    --connections) connections=${2:?}; shift 2 ;;
    --connections=*) connections=${1#*=}; shift ;;
    --wrk-threads) wrk_threads=${2:?}; shift 2 ;;
    --wrk-threads=*) wrk_threads=${1#*=}; shift ;;
    --threads) server_threads=${2:?}; shift 2 ;;
    --threads=*) server_threads=${1#*=}; shift ;;
    --cases) cases=${2:?}; shift 2 ;;
    --cases=*) cases=${1#*=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "--runs must be a positive whole number: $runs"

all_cases=(nginx-reject nginx-allow ratewin-local-reject ratewin-local-allow
           ratewin-redis-reject ratewin-redis-allow ratewin-redis-tls-allow
           ratewin-redis-batched-allow)
IFS=, read -r -a selected <<<"$cases"
need_redis=0
need_tls=0
for c in "${selected[@]}"; do
  [[ " ${all_cases[*]} " == *" $c "* ]] || die "unknown case: $c (one of: ${all_cases[*]})"
  [[ $c == ratewin-redis-* ]] && need_redis=1
  [[ $c == ratewin-redis-tls-* ]] && need_tls=1
done

# nginx and wrk are the benchmark's own needs (not the build's): installed here if missing.
missing=()
command -v "$nginx_bin" >/dev/null || [[ -n ${NGINX:-} ]] || missing+=(nginx-light)
command -v "$wrk_bin" >/dev/null || [[ -n ${WRK:-} ]] || missing+=(wrk)
if ((${#missing[@]} > 0)); then
  echo "server_vs_nginx: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
  wrk_bin="$(command -v wrk || echo wrk)"
fi
[[ -x $ratewin_server ]] ||
  die "no ratewin-server at $ratewin_server (build it: cmake --build build -j2 --target ratewin-server, or set RATEWIN_SERVER)"
for tool in "$nginx_bin" "$wrk_bin" curl "$python"; do
  command -v "$tool" >/dev/null || die "not found: $tool"
done
((need_redis == 0)) || command -v "$redis_bin" >/dev/null || die "not found: $redis_bin"
((need_tls == 0)) || command -v openssl >/dev/null || die "not found: openssl (for the TLS case's certificates)"

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ratewin-server-vs-nginx.XXXXXX")"
pids=()  # every process this script started and may still have to stop

cleanup() {
  local status=$? pid
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A copy, so that a rebuild while the benchmark runs cannot swap the binary between cases.
cp "$ratewin_server" "$tmp/ratewin-server"
built="$ratewin_server, built $(date -r "$ratewin_server" '+%F %T')"
ratewin_server="$tmp/ratewin-server"

forget() {  # remove a PID from the cleanup list
  local keep=() p
  for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  pids=("${keep[@]+"${keep[@]}"}")
}

stop() {  # stop one of our processes by PID and wait for it
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  forget "$pid"
}

free_port() {
  "$python" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

wait_for_port() {  # port pid log: wait until the port accepts connections
  local port=$1 pid=$2 log=$3 i
  for ((i = 0; i < 200; i++)); do
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; die "process $pid exited at startup"; }
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  cat "$log" >&2
  die "nothing listens on 127.0.0.1:$port"
}

# --- servers -------------------------------------------------------------------------

server_pid=""
server_port=""

start_nginx() {  # rate [burst]
  local rate=$1 burst="${2:+ burst=$2 nodelay}" port user_line=""
  port="$(free_port)"
  (($(id -u) == 0)) && user_line="user root;"
  rm -rf "$tmp/www" && mkdir -p "$tmp/www"
  printf '{"ok":true}' >"$tmp/www/ok.json"
  sed -e "s|@USER_LINE@|$user_line|" -e "s|@WORKERS@|$server_threads|" \
      -e "s|@TMP@|$tmp|g" -e "s|@PORT@|$port|" -e "s|@RATE@|$rate|" -e "s/@BURST@/$burst/" \
      "$templates/nginx.conf.in" >"$tmp/nginx.conf"
  : >"$tmp/nginx-error.log"
  "$nginx_bin" -p "$tmp" -e "$tmp/nginx-error.log" -c "$tmp/nginx.conf" \
    >"$tmp/nginx.out" 2>&1 &
  server_pid=$!
  pids+=("$server_pid")
  wait_for_port "$port" "$server_pid" "$tmp/nginx.out"
  server_port=$port
}

start_ratewin() {  # rules-file [redis-url key-prefix [flag...]]
  local rules=$1 extra=()
  [[ -n ${2:-} ]] && extra=(--redis "$2" --key-prefix "$3" "${@:4}")
  : >"$tmp/ratewin.out"
  "$ratewin_server" --listen 127.0.0.1:0 --rules "$rules" --threads "$server_threads" \
    --log-level warning --drain-timeout-ms 1000 "${extra[@]+"${extra[@]}"}" \
    >"$tmp/ratewin.out" 2>"$tmp/ratewin.err" &
  server_pid=$!
  pids+=("$server_pid")
  local i line=""
  for ((i = 0; i < 200; i++)); do
    line="$(grep -m1 'listening on' "$tmp/ratewin.out" || true)"
    [[ -n $line ]] && break
    kill -0 "$server_pid" 2>/dev/null ||
      { cat "$tmp/ratewin.err" >&2; die "ratewin-server exited at startup"; }
    sleep 0.05
  done
  [[ -n $line ]] || { cat "$tmp/ratewin.err" >&2; die "ratewin-server did not start"; }
  server_port="$(sed -n 's/.*listening on [^ ]*:\([0-9][0-9]*\) .*/\1/p' <<<"$line")"
  [[ -n $server_port ]] || die "cannot read the port from: $line"
}

redis_pid=""
redis_url=""
redis_tls_url=""
start_redis() {  # with need_tls, also a TLS port, with certificates made into $tmp/certs
  local port tls_port="" tls_args=()
  port="$(free_port)"
  mkdir -p "$tmp/redis"
  if ((need_tls)); then
    "$root/tests/support/make_certs.sh" "$tmp/certs"
    tls_port="$(free_port)"
    while [[ $tls_port == "$port" ]]; do tls_port="$(free_port)"; done
    tls_args=(--tls-port "$tls_port" --tls-cert-file "$tmp/certs/server.crt"
              --tls-key-file "$tmp/certs/server.key" --tls-ca-cert-file "$tmp/certs/ca.crt"
              --tls-auth-clients no)
  fi
  "$redis_bin" --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "$tmp/redis" --daemonize no --logfile "$tmp/redis/redis.log" \
    "${tls_args[@]+"${tls_args[@]}"}" &
  redis_pid=$!
  pids+=("$redis_pid")
  wait_for_port "$port" "$redis_pid" "$tmp/redis/redis.log"
  redis_url="redis://127.0.0.1:$port"
  if [[ -n $tls_port ]]; then
    wait_for_port "$tls_port" "$redis_pid" "$tmp/redis/redis.log"
    redis_tls_url="rediss://127.0.0.1:$tls_port?tls_ca_file=$tmp/certs/ca.crt"
  fi
}

# --- checks and measurement ----------------------------------------------------------

# curl N requests over one connection; prints "status bytes" per response (bytes: headers
# plus body, what goes over the wire for each answer).
probe() {  # url count
  local url=$1 n=$2 args=() i
  for ((i = 0; i < n; i++)); do args+=(-o /dev/null "$url"); done
  curl -s --max-time 10 -w '%{http_code} %{size_header} %{size_download}\n' "${args[@]}" |
    awk '{print $1, $2 + $3}'
}

check() {  # case-name url expect(reject|allow) -> sets resp_bytes
  local name=$1 url=$2 expect=$3 out statuses
  if [[ $expect == reject ]]; then
    out="$(probe "$url" 20)"
    statuses="$(awk '{print $1}' <<<"$out" | tr '\n' ' ')"
    # The last 5 of 20 quick requests must all be refused (10 r/s; a limit of 10/s).
    [[ "$(tail -n 5 <<<"$out" | awk '$1 == 429' | wc -l)" == 5 ]] ||
      die "$name: expected 429s after a few requests, got: $statuses"
  else
    out="$(probe "$url" 20)"
    statuses="$(awk '{print $1}' <<<"$out" | tr '\n' ' ')"
    [[ "$(awk '$1 == 200' <<<"$out" | wc -l)" == 20 ]] ||
      die "$name: expected 20 x 200, got: $statuses"
  fi
  resp_bytes="$(tail -n 1 <<<"$out" | awk '{print $2}')"
}

# CPU time (clock ticks, user + system, every thread) of a process and its children: the
# server's nginx workers, or ratewin-server; plus redis-server in the Redis cases.
cpu_ticks() {  # pid...
  local total=0 pid stat rest f
  for pid in "$@" $(pgrep -P "$1" 2>/dev/null || true); do
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || continue
    rest=${stat##*) }  # after the command name, which may hold spaces
    read -r -a f <<<"$rest"
    total=$((total + f[11] + f[12]))  # utime, stime (fields 14 and 15)
  done
  echo "$total"
}
clk_tck="$(getconf CLK_TCK)"

declare -A rps_list rej_total req_total err_total bytes_of lat_list cpu_total redis_cpu_total
run_case() {  # case-name run-number
  local name=$1 run=$2 expect
  expect=${name##*-}
  case $name in
    nginx-reject) start_nginx 10r/s ;;
    nginx-allow) start_nginx 100000000r/s 1000000 ;;
    ratewin-local-*) start_ratewin "$templates/rules-$expect.yaml" ;;
    ratewin-redis-tls-*) start_ratewin "$templates/rules-$expect.yaml" "$redis_tls_url" "bench-$name-$run" ;;
    ratewin-redis-batched-*) start_ratewin "$templates/rules-$expect.yaml" "$redis_url" "bench-$name-$run" \
                               --write-mode batched ;;
    ratewin-redis-*) start_ratewin "$templates/rules-$expect.yaml" "$redis_url" "bench-$name-$run" ;;
  esac
  local url="http://127.0.0.1:$server_port/"
  check "$name" "$url" "$expect"
  bytes_of[$name]=$resp_bytes

  local out cpu_before cpu_after redis_before=0 redis_after=0
  cpu_before="$(cpu_ticks "$server_pid")"
  [[ $name == ratewin-redis-* ]] && redis_before="$(cpu_ticks "$redis_pid")"
  out="$("$wrk_bin" -t"$wrk_threads" -c"$connections" -d"$duration" "$url" 2>&1)" ||
    { echo "$out" >&2; die "$name: wrk failed"; }
  cpu_after="$(cpu_ticks "$server_pid")"
  [[ $name == ratewin-redis-* ]] && redis_after="$(cpu_ticks "$redis_pid")"
  stop "$server_pid"
  server_pid=""
  [[ $name == nginx-* && -s $tmp/nginx-error.log ]] &&
    { echo "$name: nginx error log:" >&2; cat "$tmp/nginx-error.log" >&2; }

  local rps requests non2xx errors latency
  rps="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")"
  requests="$(awk '/ requests in / {print $1}' <<<"$out")"
  non2xx="$(awk '/Non-2xx or 3xx responses:/ {print $NF}' <<<"$out")"
  errors="$(awk '/Socket errors:/ {gsub(",", ""); print $4 + $6 + $8 + $10}' <<<"$out")"
  latency="$(awk '$1 == "Latency" {print $2}' <<<"$out")"
  [[ -n $rps && -n $requests ]] || { echo "$out" >&2; die "$name: cannot parse wrk's output"; }
  rps_list[$name]+="$rps "
  lat_list[$name]+="$latency "
  req_total[$name]=$((${req_total[$name]:-0} + requests))
  rej_total[$name]=$((${rej_total[$name]:-0} + ${non2xx:-0}))
  err_total[$name]=$((${err_total[$name]:-0} + ${errors:-0}))
  local cpu=$((cpu_after - cpu_before + redis_after - redis_before))
  cpu_total[$name]=$((${cpu_total[$name]:-0} + cpu))
  redis_cpu_total[$name]=$((${redis_cpu_total[$name]:-0} + redis_after - redis_before))
  local redis_note=""
  [[ $name == ratewin-redis-* ]] && redis_note=" of which redis-server $("$python" -c \
    "print('%.1f' % (1e6 * ($redis_after - $redis_before) / $clk_tck / max(1, $requests)))")"
  printf '  run %d %-22s %10.0f req/s  %6.2f%% non-2xx  (%d requests, %d socket errors, latency avg %s, server CPU %s us/request%s)\n' \
    "$run" "$name" "$rps" "$("$python" -c "print(100.0 * ${non2xx:-0} / max(1, $requests))")" \
    "$requests" "${errors:-0}" "$latency" \
    "$("$python" -c "print('%.1f' % (1e6 * $cpu / $clk_tck / max(1, $requests)))")" "$redis_note" >&2
}

# --- main ----------------------------------------------------------------------------

echo "ratewin-server vs nginx limit_req: wrk -t$wrk_threads -c$connections -d$duration, $runs run(s)," \
  "server threads/workers $server_threads, $(nproc) CPUs" >&2
echo "  $("$nginx_bin" -v 2>&1), $("$wrk_bin" -v 2>&1 | head -n 1 | awk '{print $1, $2}')" >&2
echo "  ratewin-server: $built" >&2
echo "  load average before: $(cut -d' ' -f1-3 /proc/loadavg) (other work on this machine skews every case)" >&2
((need_redis == 0)) || { start_redis; echo "  private redis-server on $redis_url${redis_tls_url:+, TLS: $redis_tls_url}" >&2; }

for ((run = 1; run <= runs; run++)); do
  order=("${selected[@]}")
  if ((run % 2 == 0)); then  # backward on even runs, so drift favours no case
    order=()
    for ((i = ${#selected[@]} - 1; i >= 0; i--)); do order+=("${selected[i]}"); done
  fi
  for name in "${order[@]}"; do run_case "$name" "$run"; done
done

# --- report --------------------------------------------------------------------------

echo "  load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {
  if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2];
  else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
declare -A med
echo
if ((runs > 1)); then
  printf '%-22s %14s %12s %12s %11s %12s %6s %9s\n' case "median req/s" "min req/s" "max req/s" "% rejected" "CPU us/req" bytes sock.err
else
  printf '%-22s %14s %11s %12s %6s %9s %12s\n' case "requests/s" "% rejected" "CPU us/req" bytes sock.err "latency avg"
fi
for name in "${all_cases[@]}"; do
  [[ -n ${rps_list[$name]:-} ]] || continue
  med[$name]="$(median <<<"${rps_list[$name]}")"
  pct="$("$python" -c "print('%.2f' % (100.0 * ${rej_total[$name]} / max(1, ${req_total[$name]})))")"
  cpu="$("$python" -c "print('%.1f' % (1e6 * ${cpu_total[$name]} / $clk_tck / max(1, ${req_total[$name]})))")"
  if ((runs > 1)); then
    read -r lo hi < <(tr ' ' '\n' <<<"${rps_list[$name]}" | sed '/^$/d' | sort -g |
                      awk 'NR == 1 {lo = $1} {hi = $1} END {print lo, hi}')
    printf '%-22s %14.0f %12.0f %12.0f %11s %12s %6s %9s\n' "$name" "${med[$name]}" "$lo" "$hi" \
      "$pct" "$cpu" "${bytes_of[$name]}" "${err_total[$name]}"
  else
    printf '%-22s %14.0f %11s %12s %6s %9s %12s\n' "$name" "${med[$name]}" "$pct" "$cpu" \
      "${bytes_of[$name]}" "${err_total[$name]}" "${lat_list[$name]% }"
  fi
done
echo "% rejected: wrk's non-2xx share over all runs. CPU us/req: the server's CPU time (user +"
echo "system, nginx's workers; plus redis-server's in the Redis cases) per request, over all runs:"
echo "less sensitive than requests/s to other load on the machine. bytes: one response's headers"
echo "+ body as curl saw it."

# A ratio is the median over runs of the per-run ratio (each run has every case back to
# back), as in ratewin-bench: load from elsewhere on a shared machine tends to hit the
# cases of one run alike, and a ratio of medians would mix runs.
declare -A ratio_of
ratio() {  # label numerator denominator
  [[ -n ${rps_list[$2]:-} && -n ${rps_list[$3]:-} ]] || return 0
  local summary
  summary="$("$python" -c '
import sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
r = sorted(x / y for x, y in zip(a, b))
n = len(r)
m = r[n // 2] if n % 2 else (r[n // 2 - 1] + r[n // 2]) / 2
print("%.2f %.2f %.2f" % (m, r[0], r[-1]))' "${rps_list[$2]}" "${rps_list[$3]}")"
  local lo hi
  read -r "ratio_of[$2]" lo hi <<<"$summary"
  if ((runs > 1)); then
    printf '%-44s %6.2fx  (per run %.2f-%.2f)\n' "$1" "${ratio_of[$2]}" "$lo" "$hi"
  else
    printf '%-44s %6.2fx\n' "$1" "${ratio_of[$2]}"
  fi
}
echo
ratio "ratewin local rejecting / nginx rejecting" ratewin-local-reject nginx-reject
ratio "ratewin local allowing  / nginx allowing" ratewin-local-allow nginx-allow
ratio "ratewin redis rejecting / nginx rejecting" ratewin-redis-reject nginx-reject
ratio "ratewin redis allowing  / nginx allowing" ratewin-redis-allow nginx-allow
ratio "ratewin redis allowing / local allowing" ratewin-redis-allow ratewin-local-allow
ratio "ratewin redis TLS allowing / redis allowing" ratewin-redis-tls-allow ratewin-redis-allow
ratio "ratewin batched allowing / local allowing" ratewin-redis-batched-allow ratewin-local-allow
declare -A redis_cpu_per
for name in ratewin-redis-allow ratewin-redis-tls-allow ratewin-redis-batched-allow; do
  [[ -n ${req_total[$name]:-} ]] || continue
  redis_cpu_per[$name]="$("$python" -c \
    "print('%.2f' % (1e6 * ${redis_cpu_total[$name]} / $clk_tck / max(1, ${req_total[$name]} - ${rej_total[$name]})))")"
  echo "redis-server CPU per admitted request ($name): ${redis_cpu_per[$name]} us"
done
if [[ -n ${redis_cpu_per[ratewin-redis-allow]:-} && -n ${redis_cpu_per[ratewin-redis-tls-allow]:-} ]]; then
  echo "redis-server CPU per admitted request, TLS / plain: $("$python" -c \
    "print('%.2f' % (${redis_cpu_per[ratewin-redis-tls-allow]} / max(1e-9, ${redis_cpu_per[ratewin-redis-allow]})))")x (over TLS: encryption included)"
fi
# (ratio_of is keyed by the numerator: the last ratio of ratewin-redis-allow is over local.)
if [[ -n ${ratio_of[ratewin-redis-allow]:-} && -n ${rps_list[ratewin-local-allow]:-} ]]; then
  if "$python" -c "import sys; sys.exit(0 if ${ratio_of[ratewin-redis-allow]} >= 0.5 else 1)"; then
    echo "target (ratewin redis allowing >= 0.5x ratewin local allowing): met"
  else
    echo "target (ratewin redis allowing >= 0.5x ratewin local allowing): NOT met"
  fi
fi
if [[ -n ${ratio_of[ratewin-redis-batched-allow]:-} ]]; then
  if "$python" -c "import sys; sys.exit(0 if ${ratio_of[ratewin-redis-batched-allow]} >= 0.9 else 1)"; then
    echo "target (ratewin redis batched allowing >= 0.9x ratewin local allowing): met"
  else
    echo "target (ratewin redis batched allowing >= 0.9x ratewin local allowing): NOT met"
  fi
fi
if [[ -n ${ratio_of[ratewin-local-reject]:-} ]]; then
  if "$python" -c "import sys; sys.exit(0 if ${ratio_of[ratewin-local-reject]} >= 1.0 else 1)"; then
    echo "target (ratewin local rejecting >= 1.0x nginx rejecting): met"
  else
    echo "target (ratewin local rejecting >= 1.0x nginx rejecting): NOT met"
  fi
fi
