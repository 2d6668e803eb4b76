#!/usr/bin/env bash
# cmd/setup.sh's add_backports_source on made-up apt directories (never the machine's): the
# bookworm-backports source it writes copies the URIs and Signed-By of the machine's
# bookworm source, in deb822 or one-line format; nothing is written when backports is a
# source already; a machine with no bookworm source fails with a message. apt itself reads
# what it writes.
#   backports_source_test.sh SETUP_SH
set -uo pipefail
setup="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# shellcheck source=/dev/null
source "$setup"
set +e
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# check NAME EXPECTED: add_backports_source on $dir/NAME succeeds and leaves EXPECTED as
# the file it writes ("" for no file).
check() {
  local apt="$dir/$1" expected="$2" said
  local written="$apt/sources.list.d/ratewin-bookworm-backports.sources"
  said="$(add_backports_source "$apt")" || fail "$1: add_backports_source failed"
  if [[ -z $expected ]]; then
    [[ ! -e $written ]] || fail "$1: wrote $written though backports is a source"
    [[ -z $said ]] || fail "$1: said '$said' though it added nothing"
    return
  fi
  [[ $said == *"adding $written"* ]] || fail "$1: did not say so on stdout: '$said'"
  [[ "$(cat "$written" 2>/dev/null)" == "$expected" ]] ||
    fail "$1: wrote:"$'\n'"$(cat "$written" 2>/dev/null)"$'\n'"expected:"$'\n'"$expected"
  # Again: backports is a source now, so nothing more.
  said="$(add_backports_source "$apt")" || fail "$1: a second run failed"
  [[ -z $said ]] || fail "$1: a second run said '$said'"
}

# deb822, as Debian 12's installer writes it, with a disabled stanza first and two URIs.
mkdir -p "$dir/deb822/sources.list.d"
cat >"$dir/deb822/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://disabled.invalid/debian
Suites: bookworm
Components: main
Enabled: no

# the mirror
Types: deb deb-src
URIs: http://a.invalid/debian
 http://b.invalid/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://security.invalid/debian-security
Suites: bookworm-security
Components: main
EOF
check deb822 "Types: deb
URIs: http://a.invalid/debian http://b.invalid/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
# shellcheck disable=SC2016
targets="$(apt-get -o Dir::Etc::sourcelist=/dev/null \
  -o Dir::Etc::sourceparts="$dir/deb822/sources.list.d" \
  indextargets --no-release-info --format '$(RELEASE) $(SITE)' | sort -u)"
[[ $targets == *"bookworm-backports http://a.invalid/debian"* &&
   $targets == *"bookworm-backports http://b.invalid/debian"* ]] ||
  fail "apt does not read the file written for deb822 as bookworm-backports: $targets"

# One-line, in sources.list, with options and a deb-src line before it.
mkdir -p "$dir/one-line/sources.list.d"
cat >"$dir/one-line/sources.list" <<'EOF'
# deb http://old.invalid/debian bookworm main
deb-src http://src.invalid/debian bookworm main
deb [ arch=amd64 signed-by=/etc/apt/keyrings/debian.gpg ] http://one.invalid/debian bookworm main
deb http://one.invalid/debian-security bookworm-security main
EOF
check one-line "Types: deb
URIs: http://one.invalid/debian
Suites: bookworm-backports
Components: main
Signed-By: /etc/apt/keyrings/debian.gpg"

# One-line in sources.list.d/*.list, without options.
mkdir -p "$dir/list/sources.list.d"
echo "deb http://list.invalid/debian bookworm main" >"$dir/list/sources.list.d/debian.list"
check list "Types: deb
URIs: http://list.invalid/debian
Suites: bookworm-backports
Components: main"

# Backports a source already (one-line; deb822): nothing written.
mkdir -p "$dir/has-one-line/sources.list.d"
printf 'deb http://x.invalid/debian %s main\n' bookworm bookworm-backports \
  >"$dir/has-one-line/sources.list"
check has-one-line ""
mkdir -p "$dir/has-deb822/sources.list.d"
printf '%s\n' "Types: deb" "URIs: http://x.invalid/debian" "Suites: bookworm bookworm-backports" \
  "Components: main" >"$dir/has-deb822/sources.list.d/debian.sources"
check has-deb822 ""

# No bookworm source (and a disabled file that would be one): fails, says why, writes nothing.
mkdir -p "$dir/none/sources.list.d"
echo "deb http://x.invalid/debian trixie main" >"$dir/none/sources.list"
echo "deb http://x.invalid/debian bookworm main" >"$dir/none/sources.list.d/debian.list.disabled"
if said="$(add_backports_source "$dir/none" 2>&1)"; then
  fail "none: add_backports_source succeeded without a bookworm source"
fi
[[ $said == *"no Debian source for bookworm"* ]] || fail "none: said '$said'"
[[ ! -e $dir/none/sources.list.d/ratewin-bookworm-backports.sources ]] || fail "none: wrote a file"

if ((failures > 0)); then
  echo "backports_source_test: $failures failed"
  exit 1
fi
echo "backports_source_test: every case passed"
