"""A development certificate authority and the certificates a deployment
needs: the controller's server certificate, and one client certificate per
party (switch, scheduler, agent, operator). Made with `cryptography`; for
production, bring certificates from your own CA.

A client certificate's common name is the identity the role policy names.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DAYS = 365
# The parties `railyard certs init` makes a client certificate for, by file name.
CLIENTS = ("switch", "scheduler", "agent", "operator", "prometheus")
# The server certificate's common name: the daemon's own identity when it probes itself.
SERVER_NAME = "railyard-controller"


@dataclass(frozen=True)
class Issued:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Railyard"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def new_ca(
    common_name: str = "Railyard development CA", now: dt.datetime | None = None, days: int = DEFAULT_DAYS
) -> Issued:
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def issue(
    ca: Issued,
    common_name: str,
    *,
    server_names: tuple[str, ...] = (),
    now: dt.datetime | None = None,
    days: int = DEFAULT_DAYS,
) -> Issued:
    """A certificate signed by `ca`. With `server_names` (DNS names or IP
    addresses) it is a server certificate, otherwise a client one."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    # A server certificate also serves as the controller's own client identity:
    # a replica probing itself (`railyard health`, the Kubernetes readiness probe).
    usage = (
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        if server_names
        else [ExtendedKeyUsageOID.CLIENT_AUTH]
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    )
    if server_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(n) for n in server_names]), critical=False
        )
    return Issued(builder.sign(ca.key, hashes.SHA256()), key)


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def write(issued: Issued, directory: Path, stem: str) -> None:
    """`stem`.crt, and `stem`.key readable by its owner only."""
    (directory / f"{stem}.crt").write_bytes(issued.cert_pem())
    key_path = directory / f"{stem}.key"
    key_path.touch(mode=0o600)
    key_path.chmod(0o600)
    key_path.write_bytes(issued.key_pem())


def read(directory: Path, stem: str) -> Issued:
    """`stem`.crt and `stem`.key, as `write` left them (e.g. the CA, to issue more)."""
    key = serialization.load_pem_private_key((directory / f"{stem}.key").read_bytes(), None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{directory / stem}.key is not an EC key")
    return Issued(x509.load_pem_x509_certificate((directory / f"{stem}.crt").read_bytes()), key)


def init_dir(directory: Path, server_names: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")) -> list[str]:
    """A CA (ca.crt, ca.key), the controller's server certificate (server.*)
    and one client certificate per party (CLIENTS). Refuses a directory that
    already holds a CA: certificates are not silently replaced."""
    if (directory / "ca.crt").exists():
        raise FileExistsError(f"{directory / 'ca.crt'} exists: remove the directory to make new certificates")
    directory.mkdir(parents=True, exist_ok=True)
    ca = new_ca()
    write(ca, directory, "ca")
    write(issue(ca, SERVER_NAME, server_names=server_names), directory, "server")
    for party in CLIENTS:
        write(issue(ca, party), directory, party)
    return ["ca", "server", *CLIENTS]


def server_files_problem(cert: bytes, key: bytes, ca: bytes) -> tuple[str, str, str] | None:
    """(option, what is wrong, what is allowed) for the first of a server's
    TLS files that cannot serve, checked before any listener opens (gRPC
    says only "failed to bind" for each); None when all three can."""
    try:
        certificate = x509.load_pem_x509_certificate(cert)
    except ValueError as exc:
        return "tls-cert", f"not a PEM certificate ({_first_line(exc)})", "the server's certificate, PEM"
    try:
        private = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError) as exc:
        return "tls-key", f"not an unencrypted PEM private key ({_first_line(exc)})", "the certificate's key, PEM"
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if private.public_key().public_bytes(*spki) != certificate.public_key().public_bytes(*spki):
        return "tls-key", "does not match the certificate of --tls-cert", "the private key of that certificate"
    blocks = re.findall(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", ca, re.DOTALL)
    try:
        if not blocks:
            raise ValueError("no BEGIN CERTIFICATE block")
        for block in blocks:
            x509.load_pem_x509_certificate(block)
    except ValueError as exc:
        return "tls-ca", f"holds no usable PEM certificate ({_first_line(exc)})", "the CA's certificate(s), PEM"
    return None


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:120]
