#!/usr/bin/env bash
# Installs a build into a temporary prefix and builds the README's C and C++ examples
# against the installed tree only, through CMake (find_package(ratewin)) and through
# pkg-config with docs/c-and-cpp.md's own commands, then runs them; and builds them once more in
# a project that vendors ratewin's source with add_subdirectory.
#   install_consumer.sh <build dir> <source dir>
set -euo pipefail
build="$1" source="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir="$(cd "$prefix" && ls -d lib*/pkgconfig | head -n1 | xargs dirname)"
for f in include/ratewin.h include/ratewin/ratewin.h "$libdir/libratewin.so.1" \
         "$libdir/libratewin_cxx.a" "$libdir/cmake/ratewin/ratewin-config.cmake" \
         "$libdir/pkgconfig/ratewin.pc" "$libdir/pkgconfig/ratewin-cxx.pc"; do
  [[ -e "$prefix/$f" ]] || { echo "install_consumer: $f was not installed"; exit 1; }
done

examples="$work/examples"
"$source/tests/readme/examples.sh" "$source" "$examples"

echo "install_consumer: find_package(ratewin) from $prefix"
cmake -S "$source/tests/capi/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DEXAMPLES="$examples" >/dev/null
cmake --build "$work/cmake-build" -j"$(nproc)" >/dev/null
"$work/cmake-build/example_c"
"$work/cmake-build/example_cpp"

echo "install_consumer: a C program needs none of the C++ library's dependencies"
# pkg-config finds none of libxxhash, hiredis and libuv here.
PKG_CONFIG_LIBDIR="$work/no-pkgconfig" cmake -S "$source/tests/capi/consumer" \
  -B "$work/c-only" -DCMAKE_PREFIX_PATH="$prefix" -DEXAMPLES="$examples" -DC_ONLY=ON >/dev/null
cmake --build "$work/c-only" >/dev/null
"$work/c-only/example_c" >/dev/null
if PKG_CONFIG_LIBDIR="$work/no-pkgconfig" cmake -S "$source/tests/capi/consumer" \
  -B "$work/cxx-missing" -DCMAKE_PREFIX_PATH="$prefix" -DEXAMPLES="$examples" \
  >"$work/cxx-missing.log" 2>&1; then
  echo "install_consumer: COMPONENTS cxx was found without its dependencies"
  exit 1
fi
grep -q "libxxhash" "$work/cxx-missing.log" || {
  echo "install_consumer: the cxx component's failure does not name what is missing:"
  cat "$work/cxx-missing.log"
  exit 1
}

echo "install_consumer: pkg-config, with docs/c-and-cpp.md's commands"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
cd "$examples"
commands="$work/commands.sh"
cmake -DROOT="$source" -DNAME=build-installed -DOUT="$commands" \
  -P "$source/tests/readme/extract.cmake"
bash -euo pipefail "$commands"
LD_LIBRARY_PATH="$prefix/$libdir" ./example
./example_cpp

echo "install_consumer: add_subdirectory(ratewin) in another project"
# (It compiles the library again: with the generator and the unity-build choice of the
# build under test, which is what the test command's time depends on.)
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
choices=(-G "$(cache_value CMAKE_GENERATOR)")
[[ "$(cache_value CMAKE_UNITY_BUILD)" =~ ^(ON|TRUE|1)$ ]] && choices+=(-DCMAKE_UNITY_BUILD=ON)
cmake -S "$source/tests/capi/subdirectory" -B "$work/subdirectory" "${choices[@]}" \
  -DRATEWIN_SOURCE="$source" -DEXAMPLES="$examples" >/dev/null
cmake --build "$work/subdirectory" -j"$(nproc)" --target example_c example_cpp >/dev/null
"$work/subdirectory/example_c" >/dev/null
"$work/subdirectory/example_cpp" >/dev/null
