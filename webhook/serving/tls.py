"""The serving TLS context: TLS 1.2 or newer, forward-secret AEAD ciphers only, optional client
certificate authentication, and certificate rotation without a restart.

One live `ssl.SSLContext` per worker serves every connection. When the certificate or key files
change on disk (a mounted Secret renewed by cert-manager or by `rdma-webhook certs`), the new
pair is first loaded into a throw-away context; only if that succeeds is it loaded into the live
context in place (`load_cert_chain` replaces the chain and key for every later handshake), from
a private snapshot of the files so that the pair checked is the pair served. A half-written or
mismatched pair is logged and ignored until it changes again, so a rotation never leaves the
server without a certificate, and connections already open keep theirs. The files are checked
(one stat each) on every new connection, so no worker hands out the old certificate after the
files changed (`webhook.serving.worker.Connection` asks before each new connection's TLS session is
made). The worker is one event loop thread, so no handshake runs while the context is reloaded.

Client CAs (`--client-ca`) are added on change; removing a CA from the trust store takes a
restart (OpenSSL cannot drop a loaded CA from a live context).
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import tempfile

from cryptography import x509

from webhook.telemetry import metrics

log = logging.getLogger("rdma_webhook.tls")

# TLS 1.2 suites: ECDHE key exchange and AEAD only. TLS 1.3 suites are all strong and fixed.
CIPHERS_TLS12 = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS:!RSA:!SHA1"


def build_context(cert_file: str, key_file: str, client_ca: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(CIPHERS_TLS12)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca:
        ctx.load_verify_locations(cafile=client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def certificate_expiry(cert_file: str) -> float:
    with open(cert_file, "rb") as fh:
        cert = x509.load_pem_x509_certificate(fh.read())
    return cert.not_valid_after_utc.timestamp()


class ServingTLS:
    """The live context and its reload: `serve`'s uvicorn worker takes `context` and calls
    `refresh()` before each new connection's TLS session (webhook/serving/worker.py)."""

    def __init__(self, cert_file: str, key_file: str, client_ca: str | None = None):
        self.cert_file, self.key_file, self.client_ca = cert_file, key_file, client_ca
        self._stamp = self._file_stamp()
        self._bad_stamp: tuple | None = None  # a pair that failed to load: not retried until it changes
        self.context = build_context(cert_file, key_file, client_ca)
        self.record_expiry()

    def _file_stamp(self) -> tuple:
        stamp = []
        for path in (self.cert_file, self.key_file, self.client_ca):
            if path:
                try:
                    st = os.stat(path)
                    stamp.append((st.st_ino, st.st_size, st.st_mtime_ns))
                except OSError:
                    stamp.append(None)
        return tuple(stamp)

    def record_expiry(self) -> None:
        try:
            metrics.CERT_EXPIRY.set(certificate_expiry(self.cert_file))
        except (OSError, ValueError):
            pass

    def refresh(self) -> bool:
        """Load the files into the live context if they changed and are a valid pair."""
        stamp = self._file_stamp()
        if stamp == self._stamp or stamp == self._bad_stamp:
            return False
        snapshot = tempfile.mkdtemp(prefix="rdma-webhook-tls-")
        try:
            paths = []
            for name, path in (("tls.crt", self.cert_file), ("tls.key", self.key_file), ("ca.crt", self.client_ca)):
                if path:
                    shutil.copyfile(path, os.path.join(snapshot, name))
                    paths.append(os.path.join(snapshot, name))
                else:
                    paths.append(None)
            cert, key, ca = paths
            build_context(cert, key, ca)  # the whole pair must load before the live context changes
            self.context.load_cert_chain(cert, key)
            if ca:
                self.context.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError, ValueError) as exc:
            self._bad_stamp = stamp
            log.warning("new certificate not loaded (%s); still serving the previous one", exc)
            return False
        finally:
            shutil.rmtree(snapshot, ignore_errors=True)
        self._stamp = stamp
        self.record_expiry()
        log.info("serving certificate reloaded from %s", self.cert_file)
        return True
