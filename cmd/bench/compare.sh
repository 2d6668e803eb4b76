#!/usr/bin/env bash
# cmd/bench/compare.sh [--redis] [--rounds N] [--worktree] REV [-- BENCH-ARGS...]
#
# The cost of a change to a decision path, against an earlier commit, in one run: builds
# REV and HEAD the same way (Release, the benchmark only, each from a clean export of its
# commit), then runs `ratewin-bench local` of each in turn, REV then HEAD, --rounds times
# (default 3), so that a noisy machine slows both alike, and prints each case's medians
# side by side with HEAD's time over REV's (the median of the per-round ratios). With
# --redis, `ratewin-bench redis` is run the same way too (a few minutes a run) and its
# allowed-path, rejected-path and Redis CPU figures are compared. --worktree compares the
# working tree (uncommitted changes included) instead of HEAD. BENCH-ARGS go to every
# `ratewin-bench local` run (e.g. --limiters 100000 for a quicker memory figure).
#
# Builds are kept in ${RATEWIN_COMPARE_DIR:-/tmp/ratewin-compare}/<commit>, so comparing
# against the same REV again builds only HEAD.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds=3
redis=0
worktree=0
rev=""
bench_args=()
while (($# > 0)); do
  case "$1" in
    --redis) redis=1 ;;
    --rounds) rounds="$2"; shift ;;
    --worktree) worktree=1 ;;
    --) shift; bench_args=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) [[ -z "$rev" ]] || { echo "compare: one REV only (got '$rev' and '$1')" >&2; exit 2; }
       rev="$1" ;;
  esac
  shift
done
[[ -n "$rev" ]] || { echo "usage: cmd/bench/compare.sh [--redis] [--rounds N] [--worktree] REV [-- BENCH-ARGS...]" >&2; exit 2; }
base="${RATEWIN_COMPARE_DIR:-/tmp/ratewin-compare}"
mkdir -p "$base"

# Builds ratewin-bench of a commit (or, for "worktree", of the working tree) and prints
# the binary's path.
build() {
  local what="$1" dir src
  if [[ "$what" == worktree ]]; then
    dir="$base/worktree"
    src="$root"
  else
    dir="$base/$what"
    src="$dir/src"
    if [[ ! -x "$dir/build/cmd/ratewin-bench" ]]; then
      rm -rf "$src"
      mkdir -p "$src"
      git -C "$root" archive "$what" | tar -x -C "$src"
    fi
  fi
  if [[ "$what" == worktree || ! -x "$dir/build/cmd/ratewin-bench" ]]; then
    cmake -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DRATEWIN_BUILD_TESTS=OFF \
      -DRATEWIN_BUILD_PYTHON=OFF -DRATEWIN_BUILD_SERVER=OFF -DRATEWIN_BUILD_BENCH=ON \
      -DRATEWIN_INSTALL=OFF >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log" >&2; exit 1; }
    cmake --build "$dir/build" -j"$(nproc)" --target ratewin-bench >"$dir.build.log" 2>&1 ||
      { tail -n 40 "$dir.build.log" >&2; exit 1; }
  fi
  echo "$dir/build/cmd/ratewin-bench"
}

old_commit="$(git -C "$root" rev-parse --short=12 "$rev^{commit}")"
if ((worktree)); then new_commit=worktree; new_label="working tree"; else
  new_commit="$(git -C "$root" rev-parse --short=12 HEAD)"; new_label="HEAD $new_commit"; fi
echo "compare: building $rev ($old_commit) and $new_label (Release, ratewin-bench only)"
old_bench="$(build "$old_commit")"
new_bench="$(build "$new_commit")"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
modes=(local)
((redis)) && modes+=(redis)
for mode in "${modes[@]}"; do
  for ((i = 1; i <= rounds; ++i)); do
    for side in old new; do
      bench="$old_bench"; [[ "$side" == new ]] && bench="$new_bench"
      echo "compare: $mode round $i/$rounds: $side" >&2
      args=()
      [[ "$mode" == local ]] && args=("${bench_args[@]}")
      "$bench" "$mode" "${args[@]}" >"$out/$mode.$side.$i" 2>&1 ||
        { cat "$out/$mode.$side.$i" >&2; echo "compare: $side $mode failed" >&2; exit 1; }
    done
  done
done

/usr/bin/python3 - "$out" "$rounds" "$rev ($old_commit)" "$new_label" "${modes[@]}" <<'PY'
import re, statistics, sys
out, rounds, old_name, new_name, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]

def read(mode, side, i):
    with open(f"{out}/{mode}.{side}.{i}") as f:
        return f.read()

def median(v):
    return statistics.median(v) if v else float("nan")

print(f"\ncompare: {old_name} against {new_name}, {rounds} interleaved runs each; "
      "medians over runs, 'new/old' the median of the per-run ratios (below 1: faster now)")

if "local" in modes:
    row = re.compile(r"^(\S.*?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$")
    def cases(text):
        found = {}
        for line in text.splitlines():
            m = row.match(line)
            if m:
                found[(m.group(1), int(m.group(2)))] = (float(m.group(3)), float(m.group(5)))
        return found
    runs = {s: [cases(read("local", s, i)) for i in range(1, rounds + 1)] for s in ("old", "new")}
    order = list(runs["new"][0].keys())
    print("\nratewin-bench local")
    print(f"{'case':<48} {'thr':>3} {'old ns':>8} {'new ns':>8} {'old xfl':>8} {'new xfl':>8} {'new/old':>8}")
    for key in order:
        if not all(key in r for r in runs["old"] + runs["new"]):
            continue
        old_ns = [r[key][0] for r in runs["old"]]
        new_ns = [r[key][0] for r in runs["new"]]
        ratio = median([n / o for n, o in zip(new_ns, old_ns)])
        print(f"{key[0]:<48} {key[1]:>3} {median(old_ns):8.1f} {median(new_ns):8.1f} "
              f"{median([r[key][1] for r in runs['old']]):8.2f} "
              f"{median([r[key][1] for r in runs['new']]):8.2f} {ratio:8.2f}")
    for key in runs["old"][0]:
        if key not in runs["new"][0]:
            print(f"(only in {old_name}: {key[0]}, {key[1]} threads)")
    for line in read("local", "new", 1).splitlines():
        if line.strip().startswith("memory:"):
            print("\nnew " + line.strip())
    for line in read("local", "old", 1).splitlines():
        if line.strip().startswith("memory:"):
            print("old " + line.strip())

if "redis" in modes:
    allowed = re.compile(r"^(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$")
    rejected = re.compile(r"rejected path: local ([\d.]+) ns/call, with Redis ([\d.]+) ns/call")
    cpu = re.compile(r"summary: Redis CPU per admitted request ([\d.]+) hot / ([\d.]+) cold at N = 12.*?, ([\d.]+) / ([\d.]+) at N = 60")
    def figures(text):
        f = {}
        in_allowed = False
        for line in text.splitlines():
            if line.startswith("allowed path"):
                in_allowed = True
                continue
            m = allowed.match(line.strip()) if in_allowed else None
            if m:
                t = m.group(1)
                f[f"allowed, {t} thr: p50 us"] = float(m.group(5))
                f[f"allowed, {t} thr: calls/s"] = float(m.group(7))
                f[f"allowed, {t} thr: p50 x raw"] = float(m.group(8))
                f[f"allowed, {t} thr: calls x raw"] = float(m.group(9))
            m = rejected.search(line)
            if m:
                f["rejected, local engine: ns/call"] = float(m.group(1))
                f["rejected, Redis engine: ns/call"] = float(m.group(2))
            m = cpu.search(line)
            if m:
                f["Redis CPU us/admission, N=12 hot"] = float(m.group(1))
                f["Redis CPU us/admission, N=12 cold"] = float(m.group(2))
                f["Redis CPU us/admission, N=60 hot"] = float(m.group(3))
                f["Redis CPU us/admission, N=60 cold"] = float(m.group(4))
        return f
    runs = {s: [figures(read("redis", s, i)) for i in range(1, rounds + 1)] for s in ("old", "new")}
    print("\nratewin-bench redis")
    print(f"{'figure':<40} {'old':>12} {'new':>12} {'new/old':>8}")
    for key in runs["new"][0]:
        if not all(key in r for r in runs["old"] + runs["new"]):
            continue
        old_v = [r[key] for r in runs["old"]]
        new_v = [r[key] for r in runs["new"]]
        ratio = median([n / o for n, o in zip(new_v, old_v) if o])
        print(f"{key:<40} {median(old_v):12.2f} {median(new_v):12.2f} {ratio:8.2f}")
PY
