#!/usr/bin/env bash
# The Debian packages, as a user gets them: cpack builds them from the build folder; their
# names, dependencies, conffiles and shlibs are checked; apt resolves their dependencies
# on this machine (simulated: nothing is installed); they are unpacked into a throwaway
# root (dpkg-deb -x), where the server runs (install_server.sh --root) and the README's C
# and C++ examples are built against the unpacked development package, with CMake and
# with pkg-config, and run on the unpacked library.
#   debian.sh <build dir> <source dir>
set -euo pipefail
build="$1" source="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "packages: $*" >&2; exit 1; }
# grep -q on a pipe quits at the first match; a producer still writing then dies of
# SIGPIPE and pipefail fails the line (ldd did, in CI). matches reads all input first.
matches() { local text; text="$(cat)"; grep -q "$@" <<<"$text"; }

(cd "$build" && cpack -G DEB -B "$work/out") >"$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack failed"; }
version="$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")"
major="${version%%.*}"
arch="$(dpkg --print-architecture)"
lib="$work/out/libratewin${major}_${version}_$arch.deb"
dev="$work/out/libratewin-dev_${version}_$arch.deb"
server="$work/out/ratewin-server_${version}_$arch.deb"
for p in "$lib" "$dev" "$server"; do
  [[ -f $p ]] || fail "$(basename "$p") was not built: $(ls "$work/out")"
done

field() { dpkg-deb -f "$1" "$2"; }
control() { dpkg-deb --ctrl-tarfile "$1" | tar -xO "./$2"; }
[[ "$(field "$dev" Depends)" == "libratewin$major (= $version),"* ]] ||
  fail "libratewin-dev does not depend on its library's version: $(field "$dev" Depends)"
field "$lib" Depends | matches 'libhiredis' || fail "libratewin$major: no shlibs dependencies"
field "$server" Depends | matches 'libyaml-cpp' || fail "ratewin-server: no shlibs dependencies"
control "$lib" shlibs | matches -x "libratewin $major libratewin$major (>= $version)" ||
  fail "libratewin$major's shlibs: $(control "$lib" shlibs)"
control "$lib" postinst | matches ldconfig || fail "libratewin$major does not run ldconfig"
[[ "$(control "$server" conffiles)" == $'/etc/ratewin/rules.yaml\n/etc/default/ratewin-server' ]] ||
  fail "ratewin-server's conffiles: $(control "$server" conffiles)"
# What each package holds, and nothing of another's.
contents() { local p; for p in "$@"; do dpkg-deb -c "$p"; done | awk '{print $6}' | grep -v '/$' | sed 's#^\./#/#' | sort; }
[[ "$(contents "$lib")" == "/usr/lib/libratewin.so.$major"$'\n'"/usr/lib/libratewin.so.$version" ]] ||
  fail "libratewin$major holds: $(contents "$lib")"
contents "$dev" | matches -x /usr/lib/libratewin.so || fail "libratewin-dev lacks the link libratewin.so"
contents "$dev" | matches -x /usr/include/ratewin.h || fail "libratewin-dev lacks ratewin.h"
contents "$dev" | matches -x /usr/lib/pkgconfig/ratewin.pc || fail "libratewin-dev lacks ratewin.pc"
contents "$server" | matches -x /usr/lib/systemd/system/ratewin-server.service ||
  fail "ratewin-server lacks its unit"
if contents "$dev" "$server" | matches 'libratewin\.so\.'; then fail "the library is in two packages"; fi

echo "packages: apt resolves their dependencies (simulated)"
apt-get install --simulate -qq "$lib" "$dev" "$server" >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log"; fail "apt cannot install them"; }

root="$work/root"
for p in "$lib" "$dev" "$server"; do dpkg-deb -x "$p" "$root"; done

echo "packages: the unpacked server"
"$source/tests/server/install_server.sh" --root "$root"

echo "packages: the README's examples against the unpacked development package"
examples="$work/examples"
"$source/tests/readme/examples.sh" "$source" "$examples"
cmake -S "$source/tests/capi/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$root/usr" \
  -DEXAMPLES="$examples" >/dev/null
cmake --build "$work/consumer" -j"$(nproc)" >/dev/null
ldd "$work/consumer/example_c" | matches "$root/usr/lib/libratewin.so.$major" ||
  fail "example_c does not use the unpacked library: $(ldd "$work/consumer/example_c")"
"$work/consumer/example_c" >/dev/null
"$work/consumer/example_cpp" >/dev/null
cc -std=c11 -Wall -Werror "$examples/example.c" -o "$work/example_pc" \
  $(PKG_CONFIG_PATH="$root/usr/lib/pkgconfig" pkg-config --cflags --libs ratewin)
LD_LIBRARY_PATH="$root/usr/lib" "$work/example_pc" >/dev/null
echo "packages: $(cd "$work/out" && ls *.deb | tr '\n' ' ')built, unpacked and run"
