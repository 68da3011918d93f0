"""TLS: with --tls-cert/--tls-key the server speaks HTTPS only, with that certificate."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lsmstore.testing.server_process import start_server


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_https_with_the_given_certificate(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server = start_server(tmp_path / "home", "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert server.url.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(cert))
        r = httpx.get(server.api + "/repositories", auth=server.admin, verify=ctx)
        assert r.status_code == 200
        assert httpx.get(server.url + "/healthz", verify=ctx).status_code == 200
        plain = server.url.replace("https://", "http://")
        try:
            answered = httpx.get(plain + "/healthz", timeout=10).status_code == 200
        except httpx.HTTPError:
            answered = False
        assert not answered  # no plain HTTP beside HTTPS
    finally:
        assert server.stop() == 0
