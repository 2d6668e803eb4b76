#!/usr/bin/env bash
# Makes the certificates the TLS tests and benchmarks use, in DIR, with the openssl
# command: a CA (ca.crt), a server certificate for 127.0.0.1 and localhost signed by it
# (server.crt, server.key), a client certificate for mutual TLS (client.crt,
# client.key), a server certificate that expired yesterday (expired.crt, expired.key),
# and a second CA with a server certificate of its own, which clients trusting ca.crt
# refuse (other-ca.crt, other.crt, other.key). Keys are unencrypted, for tests only.
#   make_certs.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "$dir"
cd "$dir"
quiet() { "$@" >/dev/null 2>&1 || { echo "make_certs: failed: $*" >&2; "$@"; exit 1; }; }
key() { quiet openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
ca() {  # name subject
  key "$1.key"
  quiet openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 30 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
}
signed() {  # name subject ca days extensions
  key "$1.key"
  quiet openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$2"
  printf '%s\n' "$5" > "$1.ext"
  quiet openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial \
    -out "$1.crt" -days "$4" -extfile "$1.ext"
  rm -f "$1.csr" "$1.ext"
}
server_ext="subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth"
ca ca "ratewin test CA"
ca other-ca "another CA"
signed server localhost ca 30 "$server_ext"
signed client "ratewin test client" ca 30 "extendedKeyUsage=clientAuth"
signed expired localhost ca -1 "$server_ext"
signed other localhost other-ca 30 "$server_ext"
