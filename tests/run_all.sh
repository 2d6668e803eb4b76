#!/usr/bin/env bash
# The test command: sets up a fresh Debian 12 machine (see cmd/setup.sh), builds, runs
# every suite (unit, Redis, Redis Cluster and Sentinel, C ABI with its symbol, ABI and
# install checks, Python, the examples of README.md and docs/, the server's unit and
# end-to-end suites, the demo, the Debian packages), then builds and runs every suite of
# C, C++ and the server end to end under ASan+UBSan, and those that start threads under
# ThreadSanitizer, runs the libFuzzer targets for a bounded smoke time, and runs
# clang-tidy over the library. Exits non-zero on the first failure, after printing the
# table of its stages' times. Tests that need Redis start their own redis-server on a free
# loopback port or Unix socket. Every build here treats warnings as errors.
# tests/README.md says how the suites are laid out and how to run one of them.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc)"
# Suites run side by side, twice as many as there are cores: most of their time is spent
# waiting on servers and clocks (every wait is on an event, so a busy machine only makes
# them slower; tests/under_load.sh checks that).
suite_jobs=$((2 * jobs))

# The stage timer: each stage's seconds, printed as a table at the end (and on failure).
started=$SECONDS
stage_started=$SECONDS
stage_names=()
stage_seconds=()
stage_done() {
  stage_names+=("$1")
  stage_seconds+=($((SECONDS - stage_started)))
  echo "run_all: $1 took $((SECONDS - stage_started)) s ($((SECONDS - started)) s in all)"
  stage_started=$SECONDS
}
print_stages() {
  local status=$?
  echo
  printf 'run_all: %-36s %8s\n' stage seconds
  for i in "${!stage_names[@]}"; do
    printf 'run_all: %-36s %8d\n' "${stage_names[$i]}" "${stage_seconds[$i]}"
  done
  if ((status != 0)); then
    printf 'run_all: %-36s %8d\n' "(failed in the next stage, after)" $((SECONDS - stage_started))
  fi
  local all=$((SECONDS - started))
  printf 'run_all: %-36s %8d (%d min %02d s)\n' "in all" "$all" $((all / 60)) $((all % 60))
}
trap print_stages EXIT

# Compiler flags by stage. The main build is RelWithDebInfo's optimisation (-O2, what the
# benchmarks measure) with line tables only (-g1: traces still name files and lines). The
# ASan+UBSan build is not optimised: -O0 compiles in 45% of -O1's time with those two
# sanitizers, and its suites wait on servers far more than they compute. TSan's build keeps
# -O1 (as cheap to compile there, and its suites compute more). The fuzz build keeps -O1
# (what libFuzzer's documentation asks, for the speed of its runs). The clang-tidy build
# only needs its diagnostics: no optimisation.
flags() {
  echo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$1"
  echo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$1"
}
mapfile -t main_flags < <(flags "-O2 -g1 -DNDEBUG")
mapfile -t address_flags < <(flags "-O0 -g1 -DNDEBUG")
mapfile -t thread_flags < <(flags "-O1 -g1 -DNDEBUG")
mapfile -t fuzz_flags < <(flags "-O1 -g1 -DNDEBUG")
mapfile -t tidy_flags < <(flags "-O0 -DNDEBUG")
# Unity builds (CMake joins each target's files, eight at a time, into one translation
# unit): 40% of the compile time. The clang-tidy build compiles the library file by file,
# as a user's plain build does, and the Python wheel's build (tests/python/test_install.py)
# and the add_subdirectory consumer (tests/capi/install_consumer.sh) follow this build's
# choice.
unity=(-G Ninja -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)

"$root/cmd/setup.sh" -DRATEWIN_WARNINGS_AS_ERRORS=ON -DCMAKE_UNITY_BUILD=ON \
  -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 "${main_flags[@]}"
stage_done "the main build"
ctest --test-dir "$root/build" --output-on-failure -j"$suite_jobs"
stage_done "the main suites"

ROOT="$root" source "$root/tests/sanitizer_env.sh"
# Each sanitizer builds what its entries need: ASan+UBSan every suite labelled
# "sanitized" (C, C++ and the server end to end, against this build's server), TSan those
# labelled "threaded" (tests/suites.cmake). Both build the server's gRPC listener (its
# own loops over nghttp2, protobuf's messages) and run its end-to-end suite.
targets=(ratewin_unit_tests ratewin_redis_tests ratewin_cluster_tests ratewin_sentinel_tests
         ratewin_capi_test ratewin_server_tests ratewin_server_redis_tests ratewin-server
         ratewin_rls_python)
for sanitizer in address thread; do
  dir="$root/build-$sanitizer"
  if [[ $sanitizer == address ]]; then
    stage_flags=("${address_flags[@]}")
  else
    stage_flags=("${thread_flags[@]}")
  fi
  label="$(sanitizer_label "$sanitizer")"
  cmake -S "$root" -B "$dir" "${unity[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${stage_flags[@]}" \
    -DRATEWIN_SANITIZE="$sanitizer" \
    -DRATEWIN_WARNINGS_AS_ERRORS=ON -DRATEWIN_BUILD_BENCH=OFF -DRATEWIN_BUILD_PYTHON=OFF \
    -DRATEWIN_BUILD_GRPC=ON >/dev/null
  cmake --build "$dir" -j"$jobs" --target "${targets[@]}"
  stage_done "the $sanitizer sanitizer build"
  ctest --test-dir "$dir" -L "^$label\$" --output-on-failure -j"$suite_jobs"
  stage_done "the $sanitizer sanitizer suites"
done

# libFuzzer smoke runs (clang): gRPC over HTTP/2, the request path, paths and targets, the
# admin API's JSON parser and the rules parser, each for a bounded time from its seed
# corpus (copied: a run adds what it finds to the corpus directory), as many at once as
# there are cores (24 s each: five targets in three rounds of two cores).
cmake -S "$root" -B "$root/build-fuzz" "${unity[@]}" -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo "${fuzz_flags[@]}" \
  -DRATEWIN_SANITIZE=fuzz -DRATEWIN_WARNINGS_AS_ERRORS=ON -DRATEWIN_BUILD_TESTS=OFF \
  -DRATEWIN_BUILD_BENCH=OFF -DRATEWIN_BUILD_PYTHON=OFF -DRATEWIN_BUILD_GRPC=OFF >/dev/null
cmake --build "$root/build-fuzz" -j"$jobs" --target fuzz_grpc fuzz_http fuzz_json fuzz_path fuzz_rules
fuzz() {
  local target="$1" corpus log
  corpus="$(mktemp -d)"
  cp "$root/tests/fuzz/corpus/$target/"* "$corpus/"
  log="$root/build-fuzz/fuzz_$target.log"
  local status=0
  "$root/build-fuzz/tests/fuzz/fuzz_$target" -max_total_time="${RATEWIN_FUZZ_SECONDS:-24}" \
    -print_final_stats=1 "$corpus" >"$log" 2>&1 || status=$?
  rm -rf "$corpus"
  return $status
}
fuzz_targets=(grpc http json path rules)
for ((first = 0; first < ${#fuzz_targets[@]}; first += jobs)); do
  pids=()
  batch=("${fuzz_targets[@]:first:jobs}")
  for target in "${batch[@]}"; do
    fuzz "$target" &
    pids+=("$!")
  done
  for i in "${!batch[@]}"; do
    target="${batch[$i]}"
    log="$root/build-fuzz/fuzz_$target.log"
    if ! wait "${pids[$i]}"; then
      for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
      tail -n 60 "$log"
      echo "run_all: fuzz_$target failed (log: $log)"
      exit 1
    fi
    echo "fuzz_$target: $(grep -E '^Done [0-9]+ runs' "$log")"
  done
done
stage_done "the fuzz build and runs"

# Static analysis of the library sources and the C ABI (.clang-tidy), warnings are errors
# (only those are analysed: the server is not built here). File by file, not a unity build.
cmake -S "$root" -B "$root/build-tidy" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${tidy_flags[@]}" \
  -DRATEWIN_CLANG_TIDY=ON -DRATEWIN_WARNINGS_AS_ERRORS=ON \
  -DRATEWIN_BUILD_TESTS=OFF -DRATEWIN_BUILD_BENCH=OFF -DRATEWIN_BUILD_PYTHON=OFF -DRATEWIN_BUILD_SERVER=OFF \
  -DRATEWIN_BUILD_GRPC=OFF >/dev/null
cmake --build "$root/build-tidy" -j"$jobs"
stage_done "clang-tidy"
echo "run_all: every suite passed"
