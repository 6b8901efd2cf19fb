"""A CA and a serving certificate for the webhook Service, built with `cryptography`.

`rdma-webhook certs` writes ca.crt, ca.key, tls.crt and tls.key into a folder (keys 0600) and
returns the base64 CA bundle for the webhook configurations' `caBundle`. The serving
certificate names the Service in every form the API server may dial: NAME, NAME.NS,
NAME.NS.svc and NAME.NS.svc.cluster.local, plus any extra DNS names and IP addresses.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
from pathlib import Path
from typing import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def service_dns_names(service: str, namespace: str) -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_ca(common_name: str, days: int = 3650) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def make_serving(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    dns_names: Iterable[str],
    ips: Iterable[str] = (),
    days: int = 365,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    dns_names = list(dict.fromkeys(dns_names))
    key = _key()
    now = dt.datetime.now(dt.timezone.utc)
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_names[0] if dns_names else "rdma-webhook")])
        )
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _write(path: Path, data: bytes, private: bool) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)  # readers never see a half-written file


def load_ca(directory: str | os.PathLike[str]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA a previous run wrote into `directory` (ca.crt, ca.key)."""
    d = Path(directory)
    cert = x509.load_pem_x509_certificate((d / "ca.crt").read_bytes())
    key = serialization.load_pem_private_key((d / "ca.key").read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise ValueError(f"{d / 'ca.key'} is not the key of {d / 'ca.crt'}")
    return cert, key


class CertsError(Exception):
    """A refusal with a message that says what to do."""


def _check_days(days: int) -> None:
    """A validity the serving certificate can have: `--days 0` would write one already expired."""
    if days < 1:
        raise CertsError(f"--days {days}: the serving certificate must be valid for 1 day or more")
    try:
        dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=days)
    except OverflowError:
        raise CertsError(f"--days {days}: past the last date a certificate can hold") from None


def write_certs(
    out: str | os.PathLike[str],
    service: str,
    namespace: str,
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    days: int = 365,
    reuse_ca: bool = False,
    force: bool = False,
) -> str:
    """Write ca.crt, ca.key, tls.crt, tls.key into `out`; return the base64 caBundle. With
    `reuse_ca`, renew only the serving certificate under the CA already in `out`, so the
    webhook configurations' caBundle stays valid through the renewal. A CA already in `out` is
    replaced only with `force`: a new CA invalidates every caBundle deployed with the old one."""
    _check_days(days)
    outdir = Path(out)
    has_ca = (outdir / "ca.crt").exists() or (outdir / "ca.key").exists()
    if reuse_ca and not has_ca:
        raise CertsError(f"{outdir}: no ca.crt/ca.key to reuse; drop --reuse-ca to create a new CA")
    if not reuse_ca and has_ca and not force:
        raise CertsError(
            f"{outdir} already holds a CA: a new one invalidates every caBundle deployed with it. "
            f"Renew the serving certificate with --reuse-ca, or replace the CA with --force"
        )
    outdir.mkdir(parents=True, exist_ok=True)
    if reuse_ca:
        try:
            ca, ca_key = load_ca(outdir)
        except FileNotFoundError as exc:
            raise CertsError(f"{exc.filename}: missing; drop --reuse-ca to create a new CA") from None
    else:
        ca, ca_key = make_ca(f"rdma-webhook CA ({service}.{namespace})")
    cert, key = make_serving(ca, ca_key, service_dns_names(service, namespace) + list(dns), ips, days)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    if not reuse_ca:
        _write(outdir / "ca.crt", ca_pem, private=False)
        _write(outdir / "ca.key", _pem_key(ca_key), private=True)
    _write(outdir / "tls.key", _pem_key(key), private=True)
    _write(outdir / "tls.crt", cert.public_bytes(serialization.Encoding.PEM), private=False)
    return base64.b64encode(ca_pem).decode("ascii")
