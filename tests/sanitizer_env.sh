# Sourced by the test command (run_all.sh) and tests/under_load.sh: the sanitizers' run
# options, and which ctest label each sanitizer build runs.
#   ROOT must be set to the repository's root before sourcing.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# (tests/tsan.supp: descriptors Debian's libuv closes out of TSan's sight, nothing else.)
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$ROOT/tests/tsan.supp}"

# The label of the entries a build made with -DRATEWIN_SANITIZE=$1 runs (tests/suites.cmake):
# ASan+UBSan every C, C++ and server end-to-end part ("sanitized"), TSan the parts that
# start threads or talk to the threaded server ("threaded"); none for a plain build.
sanitizer_label() {
  case "$1" in
    address) echo sanitized ;;
    thread) echo threaded ;;
    *) echo "" ;;
  esac
}
