"""Certificates and keys of the hermetic cluster: one CA, TLS for every server, a client
certificate for every component, and the service-account signing key. Everything is
loopback-only. What is already there is kept while it still serves (in date, signed by
the current CA, with every name and usage wanted) and issued afresh otherwise, so a kept
cluster can be brought back to health by the next ``up``."""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# A kept cluster (--keep-cluster) lives in its state folder for as long as its user
# likes: it must outlive a month. The CA is re-issued only when damaged or after a
# decade, because re-issuing it touches every component and every pod that trusts it.
CA_LIFETIME = datetime.timedelta(days=3650)
LEAF_LIFETIME = datetime.timedelta(days=365)
# Issued afresh this long before their end, so that a run started on a reused cluster
# never sees one end.
RENEW_MARGIN = datetime.timedelta(days=30)
# Back-dated a little: valid from the moment it is written to every reader, whatever the
# rounding of its dates.
BACKDATE = datetime.timedelta(minutes=5)
CLUSTER_CA = "kdc-hermetic-ca"
Extension = TypeVar("Extension", bound=x509.ExtensionType)


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

    def subject(self) -> x509.Name:
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, self.common_name)]
        if self.organization:  # a client's group, as Kubernetes reads it
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, self.organization))
        return x509.Name(attrs)

    def names(self) -> set[x509.GeneralName]:
        return ({x509.DNSName(n) for n in self.dns_names}
                | {x509.IPAddress(ipaddress.ip_address(ip)) for ip in self.ips})

    def usages(self) -> set[x509.ObjectIdentifier]:
        return ({ExtendedKeyUsageOID.SERVER_AUTH} if self.server else set()) | (
            {ExtendedKeyUsageOID.CLIENT_AUTH} if self.client else set())


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """``path`` holds ``data`` whole or keeps what it held (a crash leaves no half key),
    and the file has ``mode`` from its creation on: a key is never readable by others,
    not even for a moment. The umask can only narrow ``mode``; fchmod sets it exactly."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with open(fd, "wb") as out:
            os.fchmod(fd, mode)
            out.write(data)
            out.flush()
            os.fsync(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _public_bytes(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def _load_matching(cert_path: Path, key_path: Path) -> x509.Certificate | str:
    """The certificate, if its key is there and is its own; else why it cannot serve."""
    if not (cert_path.exists() and key_path.exists()):
        return "missing"
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
    except ValueError:
        return "unreadable"
    if _public_bytes(cert.public_key()) != _public_bytes(key.public_key()):
        return "its key is not the certificate's"
    return cert


def _dates_problem(cert: x509.Certificate, now: datetime.datetime) -> str | None:
    if cert.not_valid_before_utc > now:
        return f"not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    if cert.not_valid_after_utc - now < RENEW_MARGIN:
        return (f"ends {cert.not_valid_after_utc:%Y-%m-%d}, less than "
                f"{RENEW_MARGIN.days} days ahead")
    return None


def _extension(cert: x509.Certificate, kind: type[Extension]) -> Extension | None:
    try:
        return cert.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


class CertificateAuthority:
    def __init__(self, directory: Path, name: str = CLUSTER_CA) -> None:
        self.dir = directory
        self.name = name
        self.cert_path = directory / "ca.crt"
        self.key_path = directory / "ca.key"

    def leaf_paths(self, stem: str) -> tuple[Path, Path]:
        return self.dir / f"{stem}.crt", self.dir / f"{stem}.key"

    def problem(self, now: datetime.datetime | None = None) -> str | None:
        """Why the CA there cannot serve (as of ``now``), or None."""
        cert = _load_matching(self.cert_path, self.key_path)
        if isinstance(cert, str):
            return cert
        constraints = _extension(cert, x509.BasicConstraints)
        if (cert.subject != self.subject() or cert.issuer != cert.subject
                or constraints is None or not constraints.ca):
            return f"not the self-signed CA {self.name}"
        return _dates_problem(cert, now or _utcnow())

    def leaf_problem(self, identity: Identity,
                     now: datetime.datetime | None = None) -> str | None:
        """Why the certificate of ``identity`` there cannot serve (as of ``now``), or None."""
        cert = _load_matching(*self.leaf_paths(identity.stem))
        if isinstance(cert, str):
            return cert
        try:
            cert.verify_directly_issued_by(self._certificate())
        except (ValueError, TypeError, InvalidSignature):
            return "not signed by the current CA"
        if cert.subject != identity.subject():
            return (f"its subject is {cert.subject.rfc4514_string()}, not "
                    f"{identity.subject().rfc4514_string()}")
        lacking = identity.names() - set(_extension(cert, x509.SubjectAlternativeName) or ())
        if lacking:
            return "lacks " + ", ".join(sorted(str(n.value) for n in lacking))
        if identity.usages() - set(_extension(cert, x509.ExtendedKeyUsage) or ()):
            return "lacks a usage (server or client authentication)"
        return _dates_problem(cert, now or _utcnow())

    def ensure(self, now: datetime.datetime | None = None) -> str | None:
        """Issue the CA unless the one there serves; returns why it was issued, or None
        when it was kept. Its leaves no longer verify after a new CA, so the next
        ``ensure_leaf`` of each issues it afresh."""
        now = now or _utcnow()
        why = self.problem(now)
        if why is None:
            return None
        self.dir.mkdir(parents=True, exist_ok=True)
        key = _new_key()
        cert = (
            self._builder(self.subject(), self.subject(), key, now, now + CA_LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ), critical=True)
            .sign(key, hashes.SHA256())
        )
        self._write(self.cert_path, self.key_path, cert, key)
        return why

    def ensure_leaf(self, identity: Identity,
                    now: datetime.datetime | None = None) -> str | None:
        """Issue the certificate of ``identity`` (files ``leaf_paths(stem)``) unless the one
        there serves; returns why it was issued, or None when it was kept."""
        now = now or _utcnow()
        why = self.leaf_problem(identity, now)
        if why is None:
            return None
        ca_cert = self._certificate()
        ca_key = serialization.load_pem_private_key(self.key_path.read_bytes(), None)
        key = _new_key()
        # Never past the CA's own end: such a leaf could not be verified there.
        ends = min(now + LEAF_LIFETIME, ca_cert.not_valid_after_utc)
        builder = (
            self._builder(identity.subject(), ca_cert.subject, key, now, ends)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(sorted(identity.usages(),
                                                        key=lambda oid: oid.dotted_string)),
                           critical=False)
        )
        names = sorted(identity.names(), key=lambda n: (type(n).__name__, str(n.value)))
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        self._write(*self.leaf_paths(identity.stem), cert, key)
        return why

    def service_account_keys(self) -> tuple[Path, Path]:
        """The service-account signing key pair. It has no end date; a new one would
        void every token the cluster has handed out, so it is made only once."""
        private, public = self.dir / "sa.key", self.dir / "sa.pub"
        if not private.exists():
            key = _new_key()
            write_atomically(private, _key_bytes(key))
            write_atomically(public, key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo,
            ), 0o644)
        return private, public

    def subject(self) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.name)])

    def _certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_path.read_bytes())

    @staticmethod
    def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey,
                 now: datetime.datetime, ends: datetime.datetime) -> x509.CertificateBuilder:
        return (x509.CertificateBuilder()
                .subject_name(subject).issuer_name(issuer)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - BACKDATE).not_valid_after(ends))

    @staticmethod
    def _write(cert_path: Path, key_path: Path, cert: x509.Certificate,
               key: ec.EllipticCurvePrivateKey) -> None:
        # The key first: a crash between the two leaves a pair that does not match,
        # which the next check finds and issues afresh.
        write_atomically(key_path, _key_bytes(key))
        write_atomically(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
