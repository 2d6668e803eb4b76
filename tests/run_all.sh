#!/usr/bin/env bash
# The test command: sets up a fresh Debian 12 machine (see cmd/setup.sh), builds, runs
# every suite (unit, Redis, Redis Cluster and Sentinel, C ABI with its symbol, ABI and
# install checks, Python, the examples of README.md and docs/, the server's unit and
# end-to-end suites, the demo), then builds and runs the unit, Redis (single, Cluster, Sentinel), C ABI and
# server suites (against a sanitized server) under AddressSanitizer+UBSan and under
# ThreadSanitizer, runs the libFuzzer targets for a bounded smoke time, and runs
# clang-tidy over the library. Exits non-zero on the first failure. Tests that need Redis
# start their own redis-server on a free loopback port or Unix socket (the cluster tests
# six of them, joined by redis-cli --cluster create; the Sentinel tests a primary, a
# replica and three sentinels). Every build here treats warnings as errors.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc)"
# Each stage says how long it took (the whole command is meant to stay under 35 minutes
# on a 2-core machine; compiling is most of it).
started=$SECONDS
stage_started=$SECONDS
stage_done() {
  echo "run_all: $1 took $((SECONDS - stage_started)) s ($((SECONDS - started)) s in all)"
  stage_started=$SECONDS
}

# Compiler flags by stage. The main build is RelWithDebInfo's optimisation (-O2, what the
# benchmarks measure) with line tables only (-g1: a fifth less compile time than -g; traces
# still name files and lines). The sanitizer and fuzz builds use -O1 -g1, which the
# sanitizers' documentation suggests: half the compile time of -O2 -g, and the suites ran
# as fast under TSan. The clang-tidy build only needs its diagnostics: no optimisation.
flags() {
  echo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$1"
  echo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$1"
}
mapfile -t main_flags < <(flags "-O2 -g1 -DNDEBUG")
mapfile -t checked_flags < <(flags "-O1 -g1 -DNDEBUG")
mapfile -t tidy_flags < <(flags "-O0 -DNDEBUG")

"$root/cmd/setup.sh" -DRATEWIN_WARNINGS_AS_ERRORS=ON "${main_flags[@]}"
stage_done "the main build"
ctest --test-dir "$root/build" --output-on-failure -j"$jobs"
stage_done "the main suites"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# (tests/tsan.supp: descriptors Debian's libuv closes out of TSan's sight, nothing else.)
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp"
for sanitizer in address thread; do
  dir="$root/build-$sanitizer"
  # gRPC (the server's --grpc-listen) under ASan only: TSan reports races inside Debian's
  # uninstrumented gRPC and Abseil, which it cannot see synchronise. Under TSan the
  # service's asynchronous completions are checked by server_redis instead.
  grpc=ON
  grpc_targets=(ratewin_rls_python)
  if [[ $sanitizer == thread ]]; then
    grpc=OFF
    grpc_targets=()
  fi
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${checked_flags[@]}" \
    -DRATEWIN_SANITIZE="$sanitizer" \
    -DRATEWIN_WARNINGS_AS_ERRORS=ON -DRATEWIN_BUILD_BENCH=OFF -DRATEWIN_BUILD_PYTHON=OFF \
    -DRATEWIN_BUILD_GRPC="$grpc" >/dev/null
  cmake --build "$dir" -j"$jobs" --target ratewin_unit_tests ratewin_redis_tests ratewin_cluster_tests \
    ratewin_sentinel_tests ratewin_capi_test ratewin_server_tests ratewin_server_redis_tests \
    ratewin-server "${grpc_targets[@]}"
  stage_done "the $sanitizer sanitizer build"
  # The server's end-to-end suite runs against this sanitized server binary.
  ctest --test-dir "$dir" -R "^(unit|redis|redis_cluster|redis_sentinel|capi|server_units|server_redis|server_e2e)$" \
    --output-on-failure
  stage_done "the $sanitizer sanitizer suites"
done
# libFuzzer smoke runs (clang): the request path, paths and targets, the admin API's JSON
# parser and the rules parser, each for a bounded time from its seed corpus (copied: a run
# adds what it finds to the corpus directory).
cmake -S "$root" -B "$root/build-fuzz" -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "${checked_flags[@]}" -DRATEWIN_SANITIZE=fuzz -DRATEWIN_WARNINGS_AS_ERRORS=ON -DRATEWIN_BUILD_TESTS=OFF \
  -DRATEWIN_BUILD_BENCH=OFF -DRATEWIN_BUILD_PYTHON=OFF -DRATEWIN_BUILD_GRPC=OFF >/dev/null
cmake --build "$root/build-fuzz" -j"$jobs" --target fuzz_http fuzz_json fuzz_path fuzz_rules
for target in http json path rules; do
  corpus="$(mktemp -d)"
  cp "$root/tests/fuzz/corpus/$target/"* "$corpus/"
  log="$root/build-fuzz/fuzz_$target.log"
  if ! "$root/build-fuzz/tests/fuzz/fuzz_$target" -max_total_time="${RATEWIN_FUZZ_SECONDS:-30}" \
      -print_final_stats=1 "$corpus" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "run_all: fuzz_$target failed (log: $log)"
    exit 1
  fi
  echo "fuzz_$target: $(grep -E '^Done [0-9]+ runs' "$log")"
  rm -rf "$corpus"
done
stage_done "the fuzz build and runs"
# Static analysis of the library sources and the C ABI (.clang-tidy), warnings are errors
# (only those are analysed: the server is not built here).
cmake -S "$root" -B "$root/build-tidy" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${tidy_flags[@]}" -DRATEWIN_CLANG_TIDY=ON -DRATEWIN_WARNINGS_AS_ERRORS=ON \
  -DRATEWIN_BUILD_TESTS=OFF -DRATEWIN_BUILD_BENCH=OFF -DRATEWIN_BUILD_PYTHON=OFF -DRATEWIN_BUILD_SERVER=OFF \
  -DRATEWIN_BUILD_GRPC=OFF >/dev/null
cmake --build "$root/build-tidy" -j"$jobs"
stage_done "clang-tidy"
echo "run_all: every suite passed"
