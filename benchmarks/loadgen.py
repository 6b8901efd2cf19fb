"""An open-loop load generator for fixed offered rates (Python, raw sockets + ssl, threads).

Requests are scheduled at fixed intervals (rate/s) whatever the server does; each one's latency
is measured from its *scheduled* send time, so a stalled server shows up as latency instead of
silently lowering the offered rate (no coordinated omission). `conns` keep-alive TLS connections
take scheduled requests from a queue, as the API server's connection pool would. If every
connection is busy, the request waits, and that wait is counted in its latency.
"""

from __future__ import annotations

import queue
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field


def tls_context(ca_file: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


class Conn:
    # Send the request line and headers and the body as two writes (two TLS records), as the API
    # server's Go client does, instead of one (lowrate.py --split).
    split = False

    def __init__(self, host: str, port: int, ctx: ssl.SSLContext, timeout: float = 10):
        self.host, self.port, self.ctx, self.timeout = host, port, ctx, timeout
        self.sock: ssl.SSLSocket | None = None
        self.buf = b""

    def _connect(self) -> None:
        raw = socket.create_connection((self.host, self.port), timeout=self.timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self.ctx.wrap_socket(raw, server_hostname="localhost")
        self.buf = b""

    def post(self, path: str, body: bytes) -> int:
        """Send one POST and read the whole answer; returns the HTTP status."""
        if self.sock is None:
            self._connect()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        try:
            if self.split:
                self.sock.sendall(head)
                self.sock.sendall(body)
            else:
                self.sock.sendall(head + body)
            return self._read()
        except (OSError, ValueError):
            self.close()
            raise

    def _read(self) -> int:
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by server")
            self.buf += chunk
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        close = False
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"connection" and v.strip().lower() == b"close":
                close = True
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by server mid-body")
            rest += chunk
        self.buf = rest[length:]
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None


@dataclass
class Result:
    rate: float
    seconds: float
    sent: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, from scheduled send time
    errors: int = 0
    non_200: int = 0
    achieved: float = 0.0

    def pct(self, p: float) -> float:
        xs = sorted(self.latencies)
        if not xs:
            return float("nan")
        return xs[min(len(xs) - 1, int(round(p / 100 * len(xs) + 0.5)) - 1)]


def open_loop(
    host: str,
    port: int,
    ca_file: str,
    bodies: list[bytes],
    rate: float,
    seconds: float,
    conns: int = 8,
    path: str = "/mutate",
) -> Result:
    ctx = tls_context(ca_file)
    res = Result(rate, seconds)
    q: queue.Queue = queue.Queue()
    lock = threading.Lock()
    pool = [Conn(host, port, ctx) for _ in range(conns)]
    ready = threading.Barrier(conns + 1)

    def worker(c: Conn) -> None:
        # A warm pool: handshake and one unmeasured request per connection before the clock
        # starts. (Not connect-all-then-send: gunicorn gthread ties a thread to a new connection
        # until its first request arrives, so idle fresh connections can starve a worker.)
        try:
            c.post(path, bodies[0])
        except Exception:
            pass
        ready.wait()
        while True:
            item = q.get()
            if item is None:
                return
            scheduled, body = item
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            try:
                status = c.post(path, body)
                done = time.perf_counter()
                with lock:
                    res.latencies.append(done - scheduled)
                    if status != 200:
                        res.non_200 += 1
            except Exception:
                with lock:
                    res.errors += 1

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in pool]
    for t in threads:
        t.start()
    ready.wait()
    n = int(rate * seconds)
    start = time.perf_counter() + 0.05
    interval = 1.0 / rate
    for i in range(n):  # the scheduler: enqueue each request shortly before its time
        scheduled = start + i * interval
        ahead = scheduled - time.perf_counter() - 0.002
        if ahead > 0:
            time.sleep(ahead)
        q.put((scheduled, bodies[i % len(bodies)]))
        res.sent += 1
    for _ in threads:
        q.put(None)
    deadline = time.perf_counter() + 30
    for t in threads:
        t.join(max(0.1, deadline - time.perf_counter()))
    res.achieved = len(res.latencies) / (time.perf_counter() - start)
    for c in pool:
        c.close()
    return res


def burst(
    host: str, port: int, ca_file: str, bodies: list[bytes], total: int = 2000, conns: int = 32, path: str = "/mutate"
) -> dict:
    """`total` requests as fast as possible over `conns` fresh connections (handshakes included,
    as when a job controller creates a gang of pods right after a webhook restart). Returns the
    time from the first send to the last answer."""
    ctx = tls_context(ca_file)
    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "errors": 0, "non_200": 0}
    go = threading.Event()

    def worker() -> None:
        c = Conn(host, port, ctx, timeout=60)
        go.wait()
        while True:
            with lock:
                i = state["next"]
                if i >= total:
                    break
                state["next"] = i + 1
            try:
                status = c.post(path, bodies[i % len(bodies)])
                with lock:
                    state["ok"] += 1
                    if status != 200:
                        state["non_200"] += 1
            except Exception:
                with lock:
                    state["errors"] += 1
        c.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(conns)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    go.set()
    for t in threads:
        t.join(120)
    return {
        "answers": state["ok"],
        "errors": state["errors"],
        "non_200": state["non_200"],
        "time_to_last_answer_s": round(time.perf_counter() - t0, 3),
    }
