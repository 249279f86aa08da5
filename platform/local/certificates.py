"""Certificates made on the spot: a private CA, a server's and clients' (the secured local
broker, the TLS tests)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclasses.dataclass
class Certificates:
    ca: bytes
    server_cert: Path
    server_key: Path
    client_ca: Path
    client_cert: bytes
    client_key: bytes
    stranger_cert: bytes
    stranger_key: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    name: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = issuer or (subject, key)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def make_certificates(folder: Path) -> Certificates:
    """A CA, a server certificate for 127.0.0.1 and localhost, a client certificate it signed,
    and one from another CA; all made here, valid for a day; the server's files and the CA's in
    folder."""
    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("tidelake test CA", ca_key, None, ca=True)
    issuer = (ca.subject, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate("127.0.0.1", server_key, issuer, server=True)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _certificate("a producer", client_key, issuer)
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger = _certificate("a stranger", stranger_key, None)
    (folder / "server.pem").write_bytes(server.public_bytes(pem))
    (folder / "server.key").write_bytes(_key_pem(server_key))
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    return Certificates(
        ca=ca.public_bytes(pem),
        server_cert=folder / "server.pem",
        server_key=folder / "server.key",
        client_ca=folder / "ca.pem",
        client_cert=client.public_bytes(pem),
        client_key=_key_pem(client_key),
        stranger_cert=stranger.public_bytes(pem),
        stranger_key=_key_pem(stranger_key),
    )
