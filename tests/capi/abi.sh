#!/usr/bin/env bash
# The C ABI check (libabigail, Debian's abigail-tools).
#   abi.sh check  <libratewin.so.N> <baseline.abi> <headers dir>
#   abi.sh update <libratewin.so.N> <baseline.abi> <headers dir>
# check fails on ANY difference from the recorded baseline, compatible or not (an added
# function too): a deliberate ABI change runs `update` (cmake --build build --target
# ratewin_abi_baseline) and commits the new baseline with the change. The baseline is
# two files: the library's ABI as abidw sees it (types, functions, symbols) and, next
# to it, the header's RATEWIN_* macros (error codes, policies, limits, sizes), which
# are ABI too but leave no trace in the binary.
set -euo pipefail
mode="$1" library="$2" baseline="$3" headers="$4"

dump() {
  # Only what ratewin.h declares, with opaque handles left opaque; no paths, so the
  # dump is the same on every machine with the same compiler.
  abidw --exported-interfaces-only --headers-dir "$headers" --drop-private-types \
    --no-show-locs --no-corpus-path --no-comp-dir-path --out-file "$1" "$library"
}

macros_baseline="$(dirname "$baseline")/ratewin.h.macros"
macros() {
  cc -dM -E -x c "$headers/ratewin.h" | grep -E '^#define RATEWIN_' | sort
}

case "$mode" in
  update)
    dump "$baseline"
    macros >"$macros_baseline"
    echo "abi: wrote $baseline and $macros_baseline"
    ;;
  check)
    current="$(mktemp --suffix=.abi)"
    trap 'rm -f "$current"' EXIT
    dump "$current"
    status=0
    report="$(abidiff --no-default-suppression "$baseline" "$current")" || status=$?
    # abidiff's exit status is a bit field: 1 error, 2 usage, 4 change, 8 incompatible.
    # Added functions and variables are compatible, so they are checked in the report.
    if ((status != 0)) || [[ -n "$report" ]]; then
      echo "abi: libratewin's ABI differs from the baseline $baseline (abidiff status $status):"
      echo "$report"
      echo "abi: if the change is deliberate, run: cmake --build <build> --target ratewin_abi_baseline"
      exit 1
    fi
    current_macros="$(macros)"
    if ! macro_report="$(diff -u "$macros_baseline" - <<<"$current_macros")"; then
      echo "abi: ratewin.h's macros differ from the baseline $macros_baseline:"
      echo "$macro_report"
      echo "abi: if the change is deliberate, run: cmake --build <build> --target ratewin_abi_baseline"
      exit 1
    fi
    echo "abi: $(grep -c '<elf-symbol ' "$current") symbols and $(wc -l <<<"$current_macros") macros, identical to the baseline"
    ;;
  *)
    echo "usage: abi.sh check|update <library> <baseline.abi> <headers dir>" >&2
    exit 2
    ;;
esac
