"""webhook/serving/certs.py in-process: the CA and serving certificate `rdma-webhook certs` writes,
read back with `cryptography` as the API server's TLS client reads them and checked with real TLS
handshakes on loopback (an OpenSSL server socket in a thread, a verifying client), and its
refusals: what the operator is told, and that nothing is written then. The command itself as a
user runs it (a process of its own): tests/cli/test_main.py."""

from __future__ import annotations

import base64
import datetime as dt
import os
import ssl
import stat
import time

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from serving.test_tls import handshake
from webhook.cli.main import main
from webhook.serving.certs import CertsError, load_ca, make_ca, make_serving, service_dns_names, write_certs

FILES = ("ca.crt", "ca.key", "tls.crt", "tls.key")


def read_cert(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def read_key(path):
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def served_to(directory, server_hostname: str, ca_file=None) -> bytes:
    """The certificate a verifying client (trusting `ca_file`, else directory/ca.crt) got from a
    TLS server on loopback serving directory/tls.crt and tls.key, dialled as `server_hostname`;
    ssl.SSLCertVerificationError when the client refuses it."""
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    ctx = ssl.create_default_context(cafile=ca_file or directory / "ca.crt")
    _version, _cipher, cert, data = handshake(served, ctx, server_hostname)
    assert data == b"ok"
    return cert


def der(path) -> bytes:
    return read_cert(path).public_bytes(serialization.Encoding.DER)


@pytest.fixture
def written(tmp_path):
    """What `rdma-webhook certs --service rdma-webhook --namespace gpu-operator --dns ... --ip ...`
    writes, with the time just before and after. Made for each test: mutmut links the code a
    fixture runs to the first test that asks for it only, and the tests here check what it wrote."""
    out = tmp_path / "out"
    before = dt.datetime.now(dt.timezone.utc)
    bundle = write_certs(
        out,
        "rdma-webhook",
        "gpu-operator",
        dns=["webhook.example.com", "rdma-webhook.gpu-operator.svc"],
        ips=["127.0.0.1", "::1"],
    )
    after = dt.datetime.now(dt.timezone.utc)
    return out, bundle, before, after


def test_the_service_is_named_in_every_form_the_api_server_may_dial():
    assert service_dns_names("rdma-webhook", "gpu-operator") == [
        "rdma-webhook",
        "rdma-webhook.gpu-operator",
        "rdma-webhook.gpu-operator.svc",
        "rdma-webhook.gpu-operator.svc.cluster.local",
    ]


def test_a_client_trusting_the_bundle_accepts_every_service_name_and_no_other(written):
    out, bundle, _, _ = written
    assert sorted(os.listdir(out)) == sorted(FILES)  # no temporary file left
    assert base64.b64decode(bundle) == (out / "ca.crt").read_bytes()
    names = [*service_dns_names("rdma-webhook", "gpu-operator"), "webhook.example.com", "127.0.0.1", "::1"]
    for name in names:
        assert served_to(out, name) == der(out / "tls.crt"), name
    for stranger in ("other.gpu-operator.svc", "rdma-webhook.default.svc", "10.0.0.1"):
        with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
            served_to(out, stranger)
    cert = read_cert(out / "tls.crt")
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.value.get_values_for_type(x509.DNSName) == [  # each name once, in the order given
        *service_dns_names("rdma-webhook", "gpu-operator"),
        "webhook.example.com",
    ]
    assert [str(ip) for ip in san.value.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "rdma-webhook"


def test_a_client_trusting_another_ca_refuses_the_certificate(written, tmp_path):
    out = written[0]
    write_certs(tmp_path, "rdma-webhook", "gpu-operator")
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        served_to(out, "rdma-webhook.gpu-operator.svc", ca_file=tmp_path / "ca.crt")


def within(value: dt.datetime, low: dt.datetime, high: dt.datetime) -> bool:
    """`value` (whole seconds, as X.509 holds it) lies between `low` and `high`."""
    return low.replace(microsecond=0) <= value <= high


def test_validity_starts_five_minutes_back_and_lasts_the_days_asked(written, tmp_path):
    """Five minutes back: a node or API server whose clock is a little behind still accepts the
    certificate the moment it is written. 365 days by default, the CA ten years."""
    out, _, before, after = written
    five = dt.timedelta(minutes=5)
    for name, days in (("tls.crt", 365), ("ca.crt", 3650)):
        cert = read_cert(out / name)
        assert within(cert.not_valid_before_utc, before - five, after - five), name
        assert within(cert.not_valid_after_utc, before + dt.timedelta(days=days), after + dt.timedelta(days=days))
    before = dt.datetime.now(dt.timezone.utc)
    write_certs(tmp_path, "s", "n", days=30)
    after = dt.datetime.now(dt.timezone.utc)
    cert = read_cert(tmp_path / "tls.crt")
    assert within(cert.not_valid_before_utc, before - five, after - five)
    assert within(cert.not_valid_after_utc, before + dt.timedelta(days=30), after + dt.timedelta(days=30))
    write_certs(tmp_path, "s", "n", days=1, reuse_ca=True)  # the shortest validity there is
    cert = read_cert(tmp_path / "tls.crt")
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(days=1, minutes=5)
    before = dt.datetime.now(dt.timezone.utc)
    ca, ca_key = make_ca("a CA", days=2)
    cert, _ = make_serving(ca, ca_key, ["x"])
    after = dt.datetime.now(dt.timezone.utc)
    assert within(ca.not_valid_after_utc, before + dt.timedelta(days=2), after + dt.timedelta(days=2))
    assert within(cert.not_valid_after_utc, before + dt.timedelta(days=365), after + dt.timedelta(days=365))


def test_the_ca_only_signs_and_the_serving_certificate_only_serves(written):
    """What a verifier reads: the CA may sign certificates (not CAs below it), the serving
    certificate is no CA, signs nothing but its handshakes and is for TLS servers only."""
    out = written[0]
    ca, tls = read_cert(out / "ca.crt"), read_cert(out / "tls.crt")
    ca_key, tls_key = read_key(out / "ca.key"), read_key(out / "tls.key")
    assert (
        ca.subject
        == ca.issuer
        == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rdma-webhook CA (rdma-webhook.gpu-operator)")])
    )
    assert tls.issuer == ca.subject
    tls.verify_directly_issued_by(ca)
    ca.verify_directly_issued_by(ca)
    for cert in (ca, tls):
        assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)
        assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey) and cert.public_key().curve.name == "secp256r1"
    assert ca_key.public_key() == ca.public_key() and tls_key.public_key() == tls.public_key()
    assert ca.serial_number != tls.serial_number

    def ext(cert, kind):
        found = cert.extensions.get_extension_for_class(kind)
        return found.critical, found.value

    usage = dict.fromkeys(
        ["content_commitment", "key_encipherment", "data_encipherment", "key_agreement", "key_cert_sign", "crl_sign"],
        False,
    )
    assert ext(ca, x509.BasicConstraints) == (True, x509.BasicConstraints(ca=True, path_length=0))
    assert ext(ca, x509.KeyUsage) == (
        True,
        x509.KeyUsage(
            **{**usage, "digital_signature": True, "key_cert_sign": True, "crl_sign": True},
            encipher_only=False,
            decipher_only=False,
        ),
    )
    assert ext(ca, x509.SubjectKeyIdentifier) == (False, x509.SubjectKeyIdentifier.from_public_key(ca.public_key()))
    assert len(ca.extensions) == 3
    assert ext(tls, x509.BasicConstraints) == (True, x509.BasicConstraints(ca=False, path_length=None))
    assert ext(tls, x509.KeyUsage) == (
        True,
        x509.KeyUsage(**{**usage, "digital_signature": True}, encipher_only=False, decipher_only=False),
    )
    assert ext(tls, x509.ExtendedKeyUsage) == (False, x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]))
    assert ext(tls, x509.AuthorityKeyIdentifier) == (
        False,
        x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()),
    )
    assert ext(tls, x509.SubjectAlternativeName)[0] is False
    assert len(tls.extensions) == 5


def test_the_certificate_is_named_after_the_service(tmp_path):
    write_certs(tmp_path, "ib-admission", "kube-system")
    cert = read_cert(tmp_path / "tls.crt")
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "ib-admission"


def test_validity_does_not_depend_on_the_machines_time_zone(tmp_path, monkeypatch):
    """cryptography reads a datetime without a zone as UTC: the local time of a machine east or
    west of Greenwich would move the validity by hours (a certificate not valid yet)."""
    for zone in ("Etc/GMT+10", "Etc/GMT-12"):  # ten hours behind UTC, twelve ahead
        monkeypatch.setenv("TZ", zone)
        time.tzset()
        try:
            before = dt.datetime.now(dt.timezone.utc)
            write_certs(tmp_path / zone, "s", "n", days=10)
            after = dt.datetime.now(dt.timezone.utc)
        finally:
            monkeypatch.undo()
            time.tzset()
        five = dt.timedelta(minutes=5)
        for name, days in (("tls.crt", 10), ("ca.crt", 3650)):
            cert = read_cert(tmp_path / zone / name)
            assert within(cert.not_valid_before_utc, before - five, after - five), (zone, name)
            end = dt.timedelta(days=days)
            assert within(cert.not_valid_after_utc, before + end, after + end), (zone, name)


def test_the_longest_validity_ends_in_year_9999_in_any_time_zone(tmp_path, monkeypatch):
    """The last day a certificate (and Python's datetime) can hold is 31 December 9999, counted
    from today in UTC: in a zone whose date is another, one day more or less is still judged by
    UTC's date."""
    utc = dt.datetime.now(dt.timezone.utc)
    # a zone whose date differs from UTC's now: twelve hours behind before noon, fourteen ahead after
    monkeypatch.setenv("TZ", "Etc/GMT+12" if utc.hour < 12 else "Etc/GMT-14")
    time.tzset()
    try:
        longest = (dt.date(9999, 12, 31) - dt.datetime.now(dt.timezone.utc).date()).days
        write_certs(tmp_path, "s", "n", days=longest)
        with pytest.raises(CertsError) as err:
            write_certs(tmp_path, "s", "n", days=longest + 1, reuse_ca=True)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert read_cert(tmp_path / "tls.crt").not_valid_after_utc.date() == dt.date(9999, 12, 31)
    assert str(err.value) == f"--days {longest + 1}: past the last date a certificate can hold"


def test_without_a_dns_name_the_certificate_is_named_after_the_webhook():
    ca, ca_key = make_ca("a CA")
    cert, key = make_serving(ca, ca_key, [], ips=["10.96.0.10"])
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "rdma-webhook"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert list(san) == [x509.IPAddress(__import__("ipaddress").ip_address("10.96.0.10"))]
    assert key.public_key() == cert.public_key()


def test_keys_are_readable_by_their_owner_only(tmp_path):
    old = os.umask(0)  # the modes as written, whatever the caller's umask
    try:
        write_certs(tmp_path / "a" / "b", "s", "n")  # parents created
    finally:
        os.umask(old)
    modes = {name: stat.S_IMODE(os.stat(tmp_path / "a" / "b" / name).st_mode) for name in FILES}
    assert modes == {"ca.crt": 0o644, "ca.key": 0o600, "tls.crt": 0o644, "tls.key": 0o600}


def test_a_temporary_file_left_by_an_interrupted_run_is_overwritten_whole(tmp_path):
    """A run killed between writing `.tls.crt.tmp` and renaming it leaves the file; the next run
    writes over it from the start and nothing of the old one is left in tls.crt."""
    (tmp_path / ".tls.crt.tmp").write_bytes(b"x" * 20000)
    (tmp_path / ".ca.key.tmp").write_bytes(b"y" * 20000)
    write_certs(tmp_path, "s", "n")
    tls = read_cert(tmp_path / "tls.crt")
    assert (tmp_path / "tls.crt").read_bytes() == tls.public_bytes(serialization.Encoding.PEM)
    assert b"y" not in (tmp_path / "ca.key").read_bytes().split(b"-----END PRIVATE KEY-----")[1]
    assert sorted(os.listdir(tmp_path)) == sorted(FILES)


def test_a_renewal_under_the_same_ca_keeps_every_deployed_bundle_valid(tmp_path):
    first = write_certs(tmp_path, "rdma-webhook", "gpu-operator")
    kept = {name: (tmp_path / name).read_bytes() for name in ("ca.crt", "ca.key")}
    old = der(tmp_path / "tls.crt")
    again = write_certs(tmp_path, "rdma-webhook", "gpu-operator", dns=["extra.example.com"], reuse_ca=True)
    assert again == first
    assert {name: (tmp_path / name).read_bytes() for name in ("ca.crt", "ca.key")} == kept
    new = served_to(tmp_path, "extra.example.com")
    assert new == der(tmp_path / "tls.crt") != old


def test_a_ca_key_that_is_not_the_certificates_is_refused(tmp_path):
    write_certs(tmp_path / "one", "s", "n")
    write_certs(tmp_path / "two", "s", "n")
    os.replace(tmp_path / "two" / "ca.key", tmp_path / "one" / "ca.key")
    message = f"{tmp_path / 'one' / 'ca.key'} is not the key of {tmp_path / 'one' / 'ca.crt'}"
    with pytest.raises(ValueError) as err:
        load_ca(tmp_path / "one")
    assert str(err.value) == message
    before = (tmp_path / "one" / "tls.crt").read_bytes()
    with pytest.raises(ValueError) as err:
        write_certs(tmp_path / "one", "s", "n", reuse_ca=True)
    assert str(err.value) == message and (tmp_path / "one" / "tls.crt").read_bytes() == before
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    (tmp_path / "one" / "ca.key").write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(ValueError) as err:
        load_ca(tmp_path / "one")
    assert str(err.value) == message
    write_certs(tmp_path / "three", "s", "n")
    cert, key = load_ca(tmp_path / "three")
    assert cert == read_cert(tmp_path / "three" / "ca.crt") and key.public_key() == cert.public_key()


def test_reuse_without_a_ca_is_refused_and_creates_nothing(tmp_path):
    out = tmp_path / "new"
    with pytest.raises(CertsError) as err:
        write_certs(out, "s", "n", reuse_ca=True)
    assert str(err.value) == f"{out}: no ca.crt/ca.key to reuse; drop --reuse-ca to create a new CA"
    assert not out.exists()


@pytest.mark.parametrize("present", ["ca.crt", "ca.key"])
def test_half_a_ca_is_a_ca_not_replaced_and_not_reused(tmp_path, present):
    write_certs(tmp_path / "full", "s", "n")
    out = tmp_path / "half"
    out.mkdir()
    os.replace(tmp_path / "full" / present, out / present)
    with pytest.raises(CertsError) as err:
        write_certs(out, "s", "n")
    assert str(err.value) == (
        f"{out} already holds a CA: a new one invalidates every caBundle deployed with it. "
        "Renew the serving certificate with --reuse-ca, or replace the CA with --force"
    )
    missing = "ca.key" if present == "ca.crt" else "ca.crt"
    with pytest.raises(CertsError) as err:
        write_certs(out, "s", "n", reuse_ca=True)
    assert str(err.value) == f"{out / missing}: missing; drop --reuse-ca to create a new CA"
    assert os.listdir(out) == [present]


def test_force_replaces_the_ca(tmp_path):
    first = write_certs(tmp_path, "s", "n")
    old_ca = (tmp_path / "ca.crt").read_bytes()
    with pytest.raises(CertsError):
        write_certs(tmp_path, "s", "n")
    assert (tmp_path / "ca.crt").read_bytes() == old_ca
    second = write_certs(tmp_path, "s", "n", force=True)
    assert second != first and base64.b64decode(second) == (tmp_path / "ca.crt").read_bytes() != old_ca
    assert served_to(tmp_path, "s.n.svc") == der(tmp_path / "tls.crt")


@pytest.mark.parametrize(
    "days, message",
    [
        ("0", "--days 0: the serving certificate must be valid for 1 day or more"),
        ("-3", "--days -3: the serving certificate must be valid for 1 day or more"),
        ("4000000", "--days 4000000: past the last date a certificate can hold"),
        ("1000000000", "--days 1000000000: past the last date a certificate can hold"),
    ],
)
def test_a_validity_no_certificate_can_have_is_refused_with_status_1(tmp_path, capsys, days, message):
    """`--days 0` wrote a certificate already expired, `--days -3` failed with cryptography's own
    words, a number of days past year 9999 with a traceback; nothing is written."""
    out = tmp_path / "out"
    status = main(["certs", "--service", "s", "--namespace", "n", "--out", str(out), "--days", days])
    captured = capsys.readouterr()
    assert (status, captured.out, captured.err) == (1, "", f"error: {message}\n")
    assert not out.exists()
