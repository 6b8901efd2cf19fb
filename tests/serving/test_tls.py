"""webhook/serving/tls.py in-process: the context `serve` builds, served by an OpenSSL socket in a
thread of the test over loopback, a real client handshaking with it (nothing of ssl mocked); and
its reload when the files change, as a rotation by cert-manager or `rdma-webhook certs` makes it.
The same context over the running server: tests/serving/test_server.py."""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
import socket
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.serving.certs import load_ca, write_certs
from webhook.serving.tls import ServingTLS, build_context, certificate_expiry
from webhook.telemetry import metrics


def certs(directory, service: str = "rdma-webhook") -> dict[str, str]:
    """A CA and serving pair as `rdma-webhook certs` writes them; each `service` its own CA name."""
    write_certs(directory, service, "rdma-webhook", dns=["localhost"], ips=["127.0.0.1"])
    return {name: str(directory / name) for name in ("ca.crt", "tls.crt", "tls.key")}


def client(ca: str, *, version: ssl.TLSVersion | None = None, ciphers: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca)
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    if ciphers is not None:
        ctx.set_ciphers(ciphers)
    return ctx


def handshake(
    served: ssl.SSLContext, ctx: ssl.SSLContext, server_hostname: str = "localhost"
) -> tuple[str, str, bytes, bytes]:
    """(TLS version, cipher, the server certificate the client got, what the server sent after the
    handshake) of one connection over loopback, dialled as `server_hostname`; an ssl.SSLError if
    the client's side fails."""
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve_one() -> None:
            conn, _ = listener.accept()
            try:
                with served.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                conn.close()

        th = threading.Thread(target=serve_one, daemon=True)
        th.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname=server_hostname) as s:
                    data = s.recv(2)
                    return s.version(), s.cipher()[0], s.getpeercert(binary_form=True), data
        finally:
            th.join(10)


def der(pem_file: str) -> bytes:
    with open(pem_file, "rb") as fh:
        return x509.load_pem_x509_certificate(fh.read()).public_bytes(serialization.Encoding.DER)


def client_pair(directory, ca_dir) -> tuple[str, str]:
    """A client certificate (clientAuth) signed by the CA in `ca_dir`: what an API server presents."""
    ca, ca_key = load_ca(ca_dir)
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    crt, pem = directory / "client.crt", directory / "client.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(crt), str(pem)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return certs(tmp_path_factory.mktemp("tls"))


def test_tls12_and_13_handshake_with_the_served_certificate(pair):
    served = build_context(pair["tls.crt"], pair["tls.key"])
    for version, name in ((ssl.TLSVersion.TLSv1_2, "TLSv1.2"), (ssl.TLSVersion.TLSv1_3, "TLSv1.3")):
        got, _, cert, data = handshake(served, client(pair["ca.crt"], version=version))
        assert (got, cert, data) == (name, der(pair["tls.crt"]), b"ok")


def test_tls12_takes_the_servers_aead_order_not_the_clients(pair):
    """A client that prefers ChaCha20 gets AES-GCM, the server's first choice."""
    served = build_context(pair["tls.crt"], pair["tls.key"])
    ctx = client(
        pair["ca.crt"],
        version=ssl.TLSVersion.TLSv1_2,
        ciphers="ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-ECDSA-AES128-GCM-SHA256",
    )
    assert handshake(served, ctx)[1] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    only_chacha = client(pair["ca.crt"], version=ssl.TLSVersion.TLSv1_2, ciphers="ECDHE-ECDSA-CHACHA20-POLY1305")
    assert handshake(served, only_chacha)[1] == "ECDHE-ECDSA-CHACHA20-POLY1305"


@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA256"])
def test_tls12_refuses_a_client_with_only_cbc_suites(pair, cipher):
    served = build_context(pair["tls.crt"], pair["tls.key"])
    with pytest.raises(ssl.SSLError) as err:
        handshake(served, client(pair["ca.crt"], version=ssl.TLSVersion.TLSv1_2, ciphers=cipher + ":@SECLEVEL=0"))
    assert err.value.reason == "SSLV3_ALERT_HANDSHAKE_FAILURE", err.value


def test_the_context_offers_no_compression_and_no_renegotiation(pair):
    """Neither can be asked for by a client Python drives; the context reports both off, and keeps
    every option a server context has by default (OpenSSL's bug workarounds, middlebox
    compatibility for TLS 1.3). It is a server context built without a deprecated protocol."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # ssl.SSLContext() without PROTOCOL_TLS_SERVER warns
        ctx = build_context(pair["tls.crt"], pair["tls.key"])
    assert ctx.options & ssl.OP_NO_COMPRESSION and ctx.options & ssl.OP_NO_RENEGOTIATION
    assert ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).options & ~ctx.options == 0
    assert ctx.verify_mode == ssl.CERT_NONE  # no client CA: no client certificate asked for


def test_a_client_ca_requires_a_client_certificate_it_signed(tmp_path, pair):
    api_ca = tmp_path / "api-ca"
    certs(api_ca, "api")
    crt, key = client_pair(tmp_path / "client", api_ca)
    served = build_context(pair["tls.crt"], pair["tls.key"], str(api_ca / "ca.crt"))
    with_cert = client(pair["ca.crt"])
    with_cert.load_cert_chain(crt, key)
    assert handshake(served, with_cert)[3] == b"ok"
    with pytest.raises(ssl.SSLError) as err:  # TLS 1.3: the server's alert arrives on the first read
        handshake(served, client(pair["ca.crt"]))
    assert err.value.reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED", err.value
    other = tmp_path / "other-ca"
    certs(other, "other")
    stranger = client(pair["ca.crt"])
    stranger.load_cert_chain(*client_pair(tmp_path / "stranger", other))
    with pytest.raises(ssl.SSLError) as err:
        handshake(served, stranger)
    assert err.value.reason == "TLSV1_ALERT_UNKNOWN_CA", err.value


def test_the_expiry_is_the_certificates_and_is_exported(pair):
    with open(pair["tls.crt"], "rb") as fh:
        not_after = x509.load_pem_x509_certificate(fh.read()).not_valid_after_utc.timestamp()
    assert certificate_expiry(pair["tls.crt"]) == not_after
    metrics.CERT_EXPIRY.set(0)
    ServingTLS(pair["tls.crt"], pair["tls.key"])
    assert metrics.CERT_EXPIRY._value.get() == not_after


def rotate(served_dir, fresh_dir, names=("tls.key", "tls.crt")) -> None:
    """Write the fresh files over the served ones as a renewal does (a rename over each)."""
    for name in names:
        shutil.copy(fresh_dir / name, served_dir / f".{name}.new")
        os.replace(served_dir / f".{name}.new", served_dir / name)


def test_a_rotation_is_served_from_the_next_handshake_and_logged(tmp_path, caplog, monkeypatch):
    import tempfile

    scratch = tmp_path / "tmp"  # where the reload takes its private snapshot of the files
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    served_dir, fresh = tmp_path / "served", tmp_path / "fresh"
    files = certs(served_dir)
    new = certs(fresh)
    tls = ServingTLS(files["tls.crt"], files["tls.key"])
    old = der(files["tls.crt"])
    assert tls.refresh() is False  # nothing changed
    assert handshake(tls.context, client(files["ca.crt"]))[2] == old
    metrics.CERT_EXPIRY.set(0)
    rotate(served_dir, fresh)
    with caplog.at_level(logging.INFO, logger="rdma_webhook.tls"):
        assert tls.refresh() is True
        assert tls.refresh() is False  # loaded once
    assert [r.getMessage() for r in caplog.records if r.name == "rdma_webhook.tls"] == [
        f"serving certificate reloaded from {files['tls.crt']}"
    ]
    assert handshake(tls.context, client(new["ca.crt"]))[2] == der(new["tls.crt"])
    assert metrics.CERT_EXPIRY._value.get() == certificate_expiry(new["tls.crt"])
    assert os.listdir(scratch) == []  # the snapshot is removed


def test_a_half_written_pair_is_ignored_until_it_changes_again(tmp_path, caplog):
    served_dir, fresh = tmp_path / "served", tmp_path / "fresh"
    files = certs(served_dir)
    new = certs(fresh)
    tls = ServingTLS(files["tls.crt"], files["tls.key"])
    old = der(files["tls.crt"])
    rotate(served_dir, fresh, names=("tls.crt",))  # the new certificate, the old key: not a pair
    with caplog.at_level(logging.INFO, logger="rdma_webhook.tls"):
        assert tls.refresh() is False
        assert tls.refresh() is False  # not retried while the files stay as they are
    [warning] = [r for r in caplog.records if r.name == "rdma_webhook.tls"]
    assert warning.levelno == logging.WARNING
    assert warning.getMessage().startswith("new certificate not loaded (")
    assert warning.getMessage().endswith("); still serving the previous one")
    assert handshake(tls.context, client(files["ca.crt"]))[2] == old  # still the previous pair
    rotate(served_dir, fresh, names=("tls.key",))  # the key follows: now a pair
    assert tls.refresh() is True
    assert handshake(tls.context, client(new["ca.crt"]))[2] == der(new["tls.crt"])


def test_a_missing_file_keeps_the_previous_pair(tmp_path, caplog):
    files = certs(tmp_path)
    tls = ServingTLS(files["tls.crt"], files["tls.key"])
    os.remove(files["tls.key"])
    with caplog.at_level(logging.WARNING, logger="rdma_webhook.tls"):
        assert tls.refresh() is False
    [warning] = [r.getMessage() for r in caplog.records if r.name == "rdma_webhook.tls"]
    assert warning == (  # the operator reads why
        f"new certificate not loaded ([Errno 2] No such file or directory: {files['tls.key']!r}); "
        "still serving the previous one"
    )
    assert handshake(tls.context, client(files["ca.crt"]))[2] == der(files["tls.crt"])


def test_a_new_client_ca_is_trusted_after_a_refresh(tmp_path):
    files = certs(tmp_path / "served")
    api_ca, next_ca = tmp_path / "api-ca", tmp_path / "next-ca"
    certs(api_ca, "api")
    certs(next_ca, "next")
    trust = tmp_path / "client-ca.crt"
    shutil.copy(api_ca / "ca.crt", trust)
    tls = ServingTLS(files["tls.crt"], files["tls.key"], str(trust))
    renewed = client(files["ca.crt"])
    renewed.load_cert_chain(*client_pair(tmp_path / "renewed", next_ca))
    with pytest.raises(ssl.SSLError):
        handshake(tls.context, renewed)
    bundle = (api_ca / "ca.crt").read_bytes() + (next_ca / "ca.crt").read_bytes()
    (tmp_path / "bundle.new").write_bytes(bundle)
    os.replace(tmp_path / "bundle.new", trust)
    assert tls.refresh() is True
    assert handshake(tls.context, renewed)[3] == b"ok"


def test_a_file_that_is_not_a_certificate_leaves_the_expiry_as_it_was(tmp_path):
    files = certs(tmp_path)
    tls = ServingTLS(files["tls.crt"], files["tls.key"])
    metrics.CERT_EXPIRY.set(123)
    tls.cert_file = files["tls.key"]  # a PEM, but not a certificate
    tls.record_expiry()
    tls.cert_file = str(tmp_path / "missing.crt")
    tls.record_expiry()
    assert metrics.CERT_EXPIRY._value.get() == 123


def test_a_rotation_with_an_unreadable_client_ca_changes_nothing(tmp_path, caplog):
    """A new pair written with a client CA bundle that is not PEM: nothing of it is loaded (the
    whole set is checked first), the previous certificate is still served, and the reason said."""
    served_dir, fresh = tmp_path / "served", tmp_path / "fresh"
    files = certs(served_dir)
    certs(fresh, "fresh")
    api_ca = tmp_path / "api-ca"
    certs(api_ca, "api")
    trust = tmp_path / "client-ca.crt"
    shutil.copy(api_ca / "ca.crt", trust)
    tls = ServingTLS(files["tls.crt"], files["tls.key"], str(trust))
    crt, key = client_pair(tmp_path / "client", api_ca)
    old = der(files["tls.crt"])
    rotate(served_dir, fresh)
    trust.write_bytes(b"not a certificate\n")
    with caplog.at_level(logging.WARNING, logger="rdma_webhook.tls"):
        assert tls.refresh() is False
    [warning] = [r.getMessage() for r in caplog.records if r.name == "rdma_webhook.tls"]
    assert warning.startswith("new certificate not loaded ([X509") and "still serving the previous one" in warning
    ctx = client(files["ca.crt"])
    ctx.load_cert_chain(crt, key)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # to see which certificate is served
    assert handshake(tls.context, ctx)[2] == old
