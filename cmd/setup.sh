#!/usr/bin/env bash
# Prepares a Debian 12 machine for ratewin and builds it in build/: installs the Debian
# packages that are missing (apt-get, as root or through sudo), configures and builds.
# Safe to run again; the README's two commands both start with it. Arguments are passed to
# CMake's configure step (the test command adds -DRATEWIN_WARNINGS_AS_ERRORS=ON).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  g++ cmake make pkg-config    # toolchain (present on most machines already)
  ninja-build                  # the build tool for new build folders (it schedules better than make)
  clang-tidy                   # static analysis in the test command
  libxxhash-dev                # resource hashing
  libhiredis-dev libuv1-dev    # the Redis store: hiredis's reply parser, on a libuv loop
  libssl-dev openssl           # TLS to Redis (OpenSSL); the TLS tests make their certificates
  libcxxopts-dev               # command-line options of ratewin-bench and ratewin-server
  libyaml-cpp-dev              # ratewin-server: the rules file
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler  # its gRPC listener (Envoy's RLS)
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
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# promtool checks the Prometheus alert rules (tests/server/test_operations.py). It is taken
# out of Debian's prometheus package rather than installed: installing it would start a
# Prometheus service on the machine.
promtool_root="$root/build/tools/prometheus"
if ! command -v promtool >/dev/null && [[ ! -x "$promtool_root/usr/bin/promtool" ]]; then
  download="$(mktemp -d)"
  if ! (cd "$download" && apt-get download -qq prometheus 2>/dev/null); then
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
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
