"""Certificates and keys of the hermetic cluster: one CA, TLS for every server, a client
certificate for every component, and the service-account signing key. Everything is
loopback-only; keys are written 0600."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Identity:
    """A certificate to issue: file stem, subject, SANs and usage."""

    stem: str
    common_name: str
    organization: str | None = None
    dns_names: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    server: bool = False
    client: bool = True


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))
    path.chmod(0o600)


def _name(cn: str, org: str | None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = "kdc-hermetic-ca") -> None:
        self.dir = directory
        self.name = name
        self.cert_path = directory / "ca.crt"
        self.key_path = directory / "ca.key"

    def ensure(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.cert_path.exists() and self.key_path.exists():
            return
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(self.name, None)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ), critical=True)
            .sign(key, hashes.SHA256())
        )
        _write_key(self.key_path, key)
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, identity: Identity) -> tuple[Path, Path]:
        cert_path = self.dir / f"{identity.stem}.crt"
        key_path = self.dir / f"{identity.stem}.key"
        if cert_path.exists() and key_path.exists():
            return cert_path, key_path
        ca_key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
        ca_cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if identity.server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if identity.client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(identity.common_name, identity.organization))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in identity.dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in identity.ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        _write_key(key_path, key)
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return cert_path, key_path

    def service_account_keys(self) -> tuple[Path, Path]:
        private, public = self.dir / "sa.key", self.dir / "sa.pub"
        if not private.exists():
            key = _key()
            _write_key(private, key)
            public.write_bytes(key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo,
            ))
        return private, public
