#!/usr/bin/env bash
# The README's C and C++ examples, written into a folder as example.c and example.cpp, for
# the tests that build them against an installed or packaged ratewin
# (tests/capi/install_consumer.sh, tests/packages/debian.sh).
#   examples.sh <source dir> <out dir>
set -euo pipefail
source="$1" out="$2"
mkdir -p "$out"
for pair in c:example.c cpp:example.cpp; do
  cmake -DROOT="$source" -DNAME="${pair%%:*}" -DOUT="$out/${pair#*:}" \
    -P "$source/tests/readme/extract.cmake"
done
