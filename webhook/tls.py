"""The serving TLS context: TLS 1.2 or newer, forward-secret AEAD ciphers only, optional client
certificate authentication, and certificate rotation without a restart.

`ReloadingContext.get()` is called for every new connection. It re-reads the certificate and key
when their files change on disk (a stat of each file per new connection, a few microseconds; the
API server keeps its connections alive, so new ones are rare), builds a fresh context and swaps it
in; connections already open keep theirs. Checking on every new connection, rather than at most
once a second per worker, means no worker hands out the old certificate after the files changed. A half-written or mismatched pair is logged
and ignored until it is whole, so a rotation never drops the server to no certificate.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

from cryptography import x509

from webhook import metrics

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


class ReloadingContext:
    def __init__(self, cert_file: str, key_file: str, client_ca: str | None = None, check_every: float = 0.0):
        self.cert_file, self.key_file, self.client_ca = cert_file, key_file, client_ca
        self.check_every = check_every
        self._lock = threading.Lock()
        self._next_check = 0.0
        self._stamp = self._file_stamp()
        self._bad_stamp: tuple | None = None  # a pair that failed to load: not retried until it changes
        self._ctx = build_context(cert_file, key_file, client_ca)
        self._record_expiry()

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

    def _record_expiry(self) -> None:
        try:
            metrics.CERT_EXPIRY.set(certificate_expiry(self.cert_file))
        except (OSError, ValueError):
            pass

    def get(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now < self._next_check:
            return self._ctx
        with self._lock:
            if now < self._next_check:
                return self._ctx
            self._next_check = now + self.check_every
            stamp = self._file_stamp()
            if stamp != self._stamp and stamp != self._bad_stamp:
                try:
                    ctx = build_context(self.cert_file, self.key_file, self.client_ca)
                except (OSError, ssl.SSLError, ValueError) as exc:
                    self._bad_stamp = stamp
                    log.warning("new certificate not loaded yet (%s); still serving the previous one", exc)
                else:
                    self._ctx, self._stamp = ctx, stamp
                    self._record_expiry()
                    log.info("serving certificate reloaded from %s", self.cert_file)
        return self._ctx
