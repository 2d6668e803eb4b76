"""The test certificates of tests/support/make_certs.sh."""

from __future__ import annotations

import pathlib
import subprocess

from .paths import ROOT

MAKE_CERTS = ROOT / "tests" / "support" / "make_certs.sh"


class Certificates:
    """The certificates of tests/support/make_certs.sh in `directory`: ca.crt,
    server.crt/.key (for 127.0.0.1 and localhost), client.crt/.key, expired.crt/.key,
    other-ca.crt and other.crt/.key (signed by other-ca)."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        subprocess.run(["bash", str(MAKE_CERTS), str(directory)], check=True, timeout=120,
                       stdout=subprocess.DEVNULL)

    def __getitem__(self, name: str) -> str:
        return str(self.directory / name)

    def server_args(self, name: str = "server", auth_clients: bool = False) -> list[str]:
        """A Redis/Valkey server's TLS flags (RedisServer's `tls`): the certificate `name`
        (name.crt, name.key), ca.crt trusted for client certificates, required if
        `auth_clients`."""
        return ["--tls-cert-file", self[f"{name}.crt"], "--tls-key-file", self[f"{name}.key"],
                "--tls-ca-cert-file", self["ca.crt"],
                "--tls-auth-clients", "yes" if auth_clients else "no"]
