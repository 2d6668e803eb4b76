#!/usr/bin/env bash
# Prepares a Debian 12 machine for ratewin and builds it in build/: installs the Debian
# packages that are missing (apt-get, as root or through sudo), configures and builds.
# Safe to run again; the README's two commands both start with it. Arguments are passed to
# CMake's configure step (the test command adds -DRATEWIN_WARNINGS_AS_ERRORS=ON).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive

# valkey-server 8 (with valkey-cli, in valkey-tools, which it depends on): the Redis,
# Cluster and Sentinel suites run against it too (RATEWIN_TEST_REDIS=valkey, ctest's
# *_valkey entries). Debian 12 has it in bookworm-backports only, which a machine may not
# have among its apt sources: then setup adds it, with the URIs of the machine's own
# Debian source for bookworm (no mirror is named here).

# Prints a deb822 stanza for bookworm-backports made from the first enabled deb source for
# the suite $1 under the apt directory $2 (its sources.list.d/*.sources, then sources.list
# and sources.list.d/*.list): that source's URIs, and its Signed-By if it has one. Fails,
# printing nothing, if there is no such source.
backports_from() {
  local suite="$1" apt="$2" file
  # deb822: stanzas of "Field: value" lines (continuation lines start with a space),
  # separated by blank lines. (The awk programs' $ are awk's.)
  # shellcheck disable=SC2016
  local deb822='
    function reset() { types = ""; suites = ""; uris = ""; enabled = ""; signed = ""; field = "" }
    function flush() {
      if (!done && (" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ") &&
          tolower(enabled) != "no" && uris != "") {
        print "Types: deb"; print "URIs: " uris; print "Suites: bookworm-backports"
        print "Components: main"
        if (signed != "") print "Signed-By: " signed
        done = 1
      }
      reset()
    }
    BEGIN { reset() }
    /^#/ { next }
    /^[ \t]*$/ { flush(); next }
    /^[ \t]/ {
      if (field == "signed-by") signed = signed "\n" $0
      else if (field == "uris") {
        line = $0
        gsub(/^[ \t]+|[ \t]+$/, "", line)
        uris = uris " " line
      }
      next
    }
    {
      colon = index($0, ":")
      if (colon == 0) next
      field = tolower(substr($0, 1, colon - 1))
      value = substr($0, colon + 1)
      gsub(/^[ \t]+|[ \t]+$/, "", value)
      if (field == "types") types = value
      else if (field == "suites") suites = value
      else if (field == "uris") uris = value
      else if (field == "enabled") enabled = value
      else if (field == "signed-by") signed = value
    }
    END { flush(); exit !done }'
  # One-line: deb [options] URI SUITE COMPONENT...
  # shellcheck disable=SC2016
  local one_line='
    !done && $1 == "deb" {
      i = 2
      options = ""
      if ($i ~ /^\[/) {
        options = $i
        while ($i !~ /\]$/ && i < NF) { i++; options = options " " $i }
        i++
      }
      if ($(i + 1) != suite) next
      print "Types: deb"; print "URIs: " $i; print "Suites: bookworm-backports"
      print "Components: main"
      if (match(options, /signed-by=[^] \t]+/))
        print "Signed-By: " substr(options, RSTART + 10, RLENGTH - 10)
      done = 1
    }
    END { exit !done }'
  for file in "$apt"/sources.list.d/*.sources; do
    [[ -f $file ]] && awk -v suite="$suite" "$deb822" "$file" && return 0
  done
  for file in "$apt/sources.list" "$apt"/sources.list.d/*.list; do
    [[ -f $file ]] && awk -v suite="$suite" "$one_line" "$file" && return 0
  done
  return 1
}

# Makes bookworm-backports an apt source under the apt directory $1 (/etc/apt) unless it is
# one already: $1/sources.list.d/ratewin-bookworm-backports.sources, and says so. Fails if
# there is no bookworm source to copy.
add_backports_source() {
  local apt="$1" stanza
  backports_from bookworm-backports "$apt" >/dev/null && return 0
  local file="$apt/sources.list.d/ratewin-bookworm-backports.sources"
  if ! stanza="$(backports_from bookworm "$apt")"; then
    echo "setup: bookworm-backports is not an apt source, and no Debian source for bookworm" \
      "under $apt gives its address: add one for valkey-server 8" >&2
    return 1
  fi
  echo "setup: bookworm-backports (for valkey-server 8) was not an apt source: adding $file," \
    "with the URIs of the machine's bookworm source"
  if [[ -w $apt/sources.list.d ]]; then
    printf '%s\n' "$stanza" >"$file"
  else
    printf '%s\n' "$stanza" | $sudo tee "$file" >/dev/null
  fi
}

# (Sourced, as a check of add_backports_source on a copy of /etc/apt does, setup stops
# here.)
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

packages=(
  g++ cmake make pkg-config    # toolchain (present on most machines already)
  ninja-build                  # the build tool for new build folders (it schedules better than make)
  clang-tidy                   # static analysis in the test command
  libxxhash-dev                # resource hashing
  libhiredis-dev libuv1-dev    # the Redis store: hiredis's reply parser, on a libuv loop
  libssl-dev openssl           # TLS to Redis (OpenSSL); the TLS tests make their certificates
  libcxxopts-dev               # command-line options of ratewin-bench and ratewin-server
  libyaml-cpp-dev              # ratewin-server: the rules file
  libnghttp2-dev libprotobuf-dev protobuf-compiler  # its gRPC listener (Envoy's RLS): HTTP/2, messages
  protobuf-compiler-grpc       # grpc_python_plugin: the end-to-end tests' health service stub
  python3-grpcio python3-protobuf  # the gRPC listener's end-to-end tests
  clang-14 libclang-rt-14-dev  # the libFuzzer smoke runs in the test command
  doctest-dev                  # unit tests
  redis-server                 # the tests, the benchmarks and the demo start their own
  redis-tools                  # redis-cli: the cluster tests make their own local cluster
  nginx                        # the forward-auth test runs Debian's nginx (auth_request) in front
  pybind11-dev python3-dev     # the Python extension, for Debian's /usr/bin/python3
  python3-pytest python3-mypy  # the Python suite and its check of the type stubs
  python3-venv python3-pip python3-setuptools python3-wheel  # pip-installing the package
  python3-flask python3-fastapi python3-starlette python3-httpx  # ratewin.flask, ratewin.fastapi
  gunicorn uvicorn             # their suites' runs with 2 workers sharing Redis
  abigail-tools                # the C ABI check (abidw, abidiff)
  systemd                      # systemd-analyze verify of the server's unit (nothing is started)
  dpkg-dev file binutils       # cpack -G DEB: dpkg-shlibdeps, file and readelf find the packages' dependencies
  gnuplot-nox                  # ratewin-bench accuracy --plot
  chromium                     # the status page's test renders it in headless Chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

valkey="$(dpkg-query -W -f='${Status} ${Version}' valkey-server 2>/dev/null || true)"
if [[ $valkey != "install ok installed "* ]] || dpkg --compare-versions "${valkey##* }" lt 8; then
  add_backports_source /etc/apt
  echo "setup: installing valkey-server 8 from bookworm-backports"
  $sudo apt-get update -qq
  # The package enables and starts a valkey-server service (port 6379) unless
  # /usr/sbin/policy-rc.d refuses; the tests start their own. So it is refused for this
  # install (unless the machine has a policy of its own), then the service is disabled at
  # boot, and stopped should the machine's own policy have let it start.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# cmd/setup.sh, while it installs valkey-server\nexit 101\n' |
      $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    own_policy=1
    trap '$sudo rm -f "$policy"' EXIT  # however setup ends
  fi
  installed=0
  $sudo apt-get install -y -qq --no-install-recommends -t bookworm-backports valkey-server \
    >/dev/null && installed=1
  if ((own_policy == 1)); then
    $sudo rm -f "$policy"
    trap - EXIT
  fi
  ((installed == 1)) || { echo "setup: apt-get install valkey-server failed" >&2; exit 1; }
  $sudo systemctl disable --quiet valkey-server.service 2>/dev/null ||
    $sudo update-rc.d valkey-server disable >/dev/null 2>&1 || true
  if [[ -d /run/systemd/system ]]; then
    $sudo systemctl stop valkey-server.service
  elif [[ -x /etc/init.d/valkey-server ]]; then
    $sudo /etc/init.d/valkey-server stop >/dev/null
  fi
fi

# promtool checks the Prometheus alert rules (tests/server/test_operations.py). It is taken
# out of Debian's prometheus package rather than installed: installing it would start a
# Prometheus service on the machine.
promtool_root="$root/build/tools/prometheus"
if ! command -v promtool >/dev/null && [[ ! -x "$promtool_root/usr/bin/promtool" ]]; then
  download="$(mktemp -d)"
  if ! (cd "$download" && apt-get download -qq prometheus 2>/dev/null); then
    $sudo apt-get update -qq
    (cd "$download" && apt-get download -qq prometheus)
  fi
  mkdir -p "$promtool_root"
  dpkg-deb -x "$download"/prometheus_*.deb "$promtool_root"
  rm -rf "$download"
fi

# Ninja for a new build folder; one made before keeps the generator it was made with.
generator=()
[[ -f "$root/build/CMakeCache.txt" ]] || generator=(-G Ninja)
cmake -S "$root" -B "$root/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$root/build" -j"$(nproc)"
