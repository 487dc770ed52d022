# A private CA and a certificate it signed for 127.0.0.1, made by the `openssl` command (the
# `cryptography` package is not a dependency), for the loopback servers that speak HTTPS.
"""`make_pki`: a private CA, a server certificate it signed, and a CA that signed nothing."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

__all__ = ["Pki", "make_pki", "server_context"]


class Pki:
    """A private CA (`ca`), a server certificate it signed for 127.0.0.1 (`cert`, `key`), and
    another CA that signed nothing here (`stranger`)."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.ca = str(where / "ca.pem")
        self.cert = str(where / "server.pem")
        self.key = str(where / "server.key")
        self.stranger = str(where / "stranger.pem")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _make_ca(where: Path, name: str) -> tuple[str, str]:
    cert, key = str(where / f"{name}.pem"), str(where / f"{name}.key")
    _openssl(
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
        *("-nodes", "-days", "2", "-keyout", key, "-out", cert),
        *("-subj", f"/CN=llamafast test {name}"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
    )
    return cert, key


def make_pki(where: Path) -> Pki:
    """A Pki in the directory `where`, made by the openssl command."""
    out = Pki(where)
    ca, ca_key = _make_ca(where, "ca")
    _make_ca(where, "stranger")
    csr = str(where / "server.csr")
    _openssl(
        *("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-keyout", out.key, "-out", csr, "-subj", "/CN=127.0.0.1"),
    )
    ext = where / "server.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        *("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial"),
        *("-days", "1", "-out", out.cert, "-extfile", str(ext)),
    )
    return out


def server_context(pki: Pki) -> ssl.SSLContext:
    """A server's TLS context with `pki`'s certificate."""
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(pki.cert, pki.key)
    return served
