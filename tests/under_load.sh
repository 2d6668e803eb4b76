#!/usr/bin/env bash
# Runs ctest suites again and again beside a CPU hog, and says how each fared: the check
# that no test measures the machine's speed.
#
#   tests/under_load.sh [--rounds N] [--build DIR] [--hogs K] [--jobs J] [SUITE...]
#
# SUITE is a suite (redis: every entry redis.*) or one ctest entry (redis.batched);
# `ctest --test-dir DIR -N` lists them. Every suite of DIR by default. Each round runs
# every suite once, one suite at a time and its entries J at a time (twice the cores, as
# the test command does), while K busy processes (two by default, as many as this
# machine's cores) spin beside them. DIR is build/ by default; build-address or
# build-thread for the sanitizer builds the test command makes, whose entries are chosen
# as the test command chooses them (the label "sanitized" or "threaded") and run with its
# sanitizer options (tests/sanitizer_env.sh). It ends the hog it started (by PID) however
# it exits, and exits non-zero if any run failed. A failing run's output is kept in
# DIR/under_load/<suite>.<round>.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=5
build="$root/build"
hogs=2
jobs=$((2 * $(nproc)))
suites=()
while (($# > 0)); do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --build) build="$(cd "$2" && pwd)"; shift 2 ;;
    --hogs) hogs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "under_load: unknown option $1" >&2; exit 2 ;;
    *) suites+=("$1"); shift ;;
  esac
done
[[ -f "$build/CTestTestfile.cmake" ]] || { echo "under_load: no ctest suites in $build (build first)" >&2; exit 2; }
ROOT="$root" source "$root/tests/sanitizer_env.sh"
label="$(sanitizer_label "$(sed -n 's/^RATEWIN_SANITIZE:[A-Z]*=//p' "$build/CMakeCache.txt")")"
only=()
[[ -z $label ]] || only=(-L "^$label\$")
if ((${#suites[@]} == 0)); then
  mapfile -t suites < <(ctest --test-dir "$build" -N "${only[@]}" | sed -n 's/^ *Test *#[0-9]*: \([^.]*\).*/\1/p' |
                        awk '!seen[$0]++')
fi

# The hog: K shell loops that never sleep, each a process of its own.
hog_pids=()
stop_hog() {
  for pid in "${hog_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${hog_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  hog_pids=()
}
trap stop_hog EXIT
for ((i = 0; i < hogs; i++)); do
  bash -c 'while :; do :; done' &
  hog_pids+=("$!")
done

logs="$build/under_load"
mkdir -p "$logs"
declare -A passed failed seconds
for suite in "${suites[@]}"; do passed[$suite]=0; failed[$suite]=0; seconds[$suite]=0; done
for ((round = 1; round <= rounds; round++)); do
  for suite in "${suites[@]}"; do
    log="$logs/$suite.$round.log"
    began=$SECONDS
    if ctest --test-dir "$build" -R "^${suite//./\\.}(\\.|\$)" "${only[@]}" -j"$jobs" \
          --output-on-failure >"$log" 2>&1 &&
        grep -q "100% tests passed" "$log"; then
      passed[$suite]=$((passed[$suite] + 1))
      rm -f "$log"
      result=passed
    else
      failed[$suite]=$((failed[$suite] + 1))
      result="FAILED (log: $log)"
    fi
    seconds[$suite]=$((seconds[$suite] + SECONDS - began))
    echo "under_load: round $round/$rounds: $suite $result in $((SECONDS - began)) s"
  done
done
stop_hog

echo
echo "under_load: $rounds rounds beside $hogs busy processes, $build${label:+ (label $label)}, $jobs entries at a time"
printf '%-28s %7s %7s %12s\n' suite passed failed "s a round"
status=0
for suite in "${suites[@]}"; do
  printf '%-28s %7d %7d %12d\n' "$suite" "${passed[$suite]}" "${failed[$suite]}" \
    $((seconds[$suite] / rounds))
  ((failed[$suite] == 0)) || status=1
done
exit $status
