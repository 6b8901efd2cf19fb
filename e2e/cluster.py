"""A real Kubernetes control plane on loopback for the end-to-end suite, and the webhook as it
runs in production against it.

Started here, each as a child process whose PID is recorded and stopped by that PID (also on
an exception, SIGINT/SIGTERM or interpreter exit):

- etcd (one member, plain HTTP on 127.0.0.1, data in a temporary folder);
- kube-apiserver (TLS on 127.0.0.1 with a CA made here, RBAC authorization, an admin
  authenticated by a static token, service-account tokens signed by a key made here,
  `--endpoint-reconciler-type=none` because a loopback address cannot be published in the
  `kubernetes` Endpoints, the default admission plugins, PodSecurity among them, and an audit
  log of the verifier's ServiceAccount's requests alone (`audit_requests`));
- kube-controller-manager (service accounts, their tokens, Jobs, namespaces' cleanup) with
  `--use-service-account-credentials`;
- `rdma-webhook serve` without `--cluster-state`: it finds the API through a kubeconfig that
  holds a token issued by the TokenRequest API for the ServiceAccount of deploy/.

There is no kubelet and no scheduler here: pods stay Pending, which is all admission needs. The
tests that need pods to run start one node (e2e/node.py: kube-scheduler, kubelet, containerd) with
the `node` fixture; the API server is ready for it from the start (the Node authorizer, a token for
the node's kubelet, a client certificate to reach kubelets, 10.96.0.1 among its certificate's names,
and `--enable-aggregator-routing`, so that it calls a webhook Service at its endpoints).

The binaries come from e2e/build-controlplane.sh (Kubernetes and etcd built from the Go
modules under e2e/). Run `python -m e2e.cluster` to bring a cluster up by hand (Ctrl-C stops it).
"""

from __future__ import annotations

import atexit
import base64
import datetime as dt
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.serving.certs import make_ca, make_serving, write_certs

ROOT = Path(__file__).resolve().parent.parent
ADMIN_TOKEN_USER = "e2e-admin"
NODE_NAME = "e2e-node"  # the one node of e2e/node.py, when a test starts it
ISSUER = "https://kubernetes.default.svc.cluster.local"

_RUNNING: dict[int, "Process"] = {}  # pid -> every child still to be stopped

# Everything here is on loopback: never through a proxy a machine may have configured.
for _var in ("NO_PROXY", "no_proxy"):
    os.environ[_var] = ",".join(filter(None, [os.environ.get(_var), "127.0.0.1", "localhost"]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(
    what: str, check: Callable[[], Any], timeout: float, interval: float = 0.2, proc: "Process | None" = None
) -> Any:
    """Call `check` until it returns something truthy; fail after `timeout` seconds (or at once
    if `proc` exited), naming `what`."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as exc:  # not up yet
            last = exc
        if proc is not None and proc.popen.poll() is not None:
            raise RuntimeError(
                f"{proc.name} exited with {proc.popen.returncode} while waiting for {what}; "
                f"last lines of {proc.log}:\n{proc.tail()}"
            )
        if time.monotonic() > deadline:
            detail = f" (last error: {last})" if last else ""
            tail = f"\nlast lines of {proc.log}:\n{proc.tail()}" if proc is not None else ""
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s{detail}{tail}")
        time.sleep(interval)


class Process:
    """A child process with its output in a log file, stopped by its PID."""

    def __init__(
        self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ):
        self.name, self.argv, self.log = name, argv, log
        self.logfile = open(log, "ab")
        self.logfile.write(f"\n==== {time.strftime('%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
        self.logfile.flush()
        self.popen = subprocess.Popen(
            argv,
            stdout=self.logfile,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        _RUNNING[self.pid] = self

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 20.0, sig: int = signal.SIGTERM) -> int | None:
        """Signal the process by its PID, wait, then SIGKILL it if it is still there."""
        if self.popen.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(10)
        _RUNNING.pop(self.pid, None)
        self.logfile.close()
        return self.popen.returncode


def stop_all() -> None:
    for proc in reversed(list(_RUNNING.values())):
        proc.stop(timeout=10)


atexit.register(stop_all)


def _on_signal(signum, frame):  # turn SIGTERM into an exception so `finally` blocks and fixtures run
    raise KeyboardInterrupt(f"signal {signum}")


def install_signal_handlers() -> None:
    signal.signal(signal.SIGTERM, _on_signal)


def _write(path: Path, data: bytes | str, private: bool = False) -> Path:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    if private:
        path.chmod(0o600)
    return path


def kubeconfig(server: str, ca_file: Path, token: str, user: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
            "current-context": "e2e",
        }
    )


def kubectl_binary(bin_dir: Path | None = None) -> str:
    """kubectl from PATH, else the one e2e/build-controlplane.sh built."""
    found = shutil.which("kubectl")
    if found:
        return found
    if bin_dir is not None and (bin_dir / "kubectl").exists():
        return str(bin_dir / "kubectl")
    raise RuntimeError("kubectl not found on PATH nor in the control-plane build")


def _client_cert(ca, ca_key, common_name: str, groups: Iterable[str] = (), days: int = 30):
    """A client certificate of the cluster CA and its key: the API server (and a kubelet) reads the
    user from CN and the groups from O."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


AUDITED = ["system:serviceaccount:rdma-webhook:rdma-webhook-verifier"]
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": AUDITED}, {"level": "None"}],
}


def audit_requests(log: Path, user: str, namespace: str | None = None, name: str | None = None) -> Counter:
    """The requests of `user` the API server audited (in `namespace`, on the object `name`, when
    given): a count per (verb, resource, subresource), each request once whatever stages it was
    logged at (a follow read of a log or a watch is logged when its response starts and when it
    ends)."""
    seen: dict[str, tuple[str, str, str]] = {}
    if not log.exists():
        return Counter()
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line being written
        ref = event.get("objectRef") or {}
        if event.get("user", {}).get("username") != user or (namespace and ref.get("namespace") != namespace):
            continue
        if name and ref.get("name") != name:
            continue
        seen[event["auditID"]] = (event["verb"], ref.get("resource", ""), ref.get("subresource", ""))
    return Counter(seen.values())


class ControlPlane:
    def __init__(self, bin_dir: Path, workdir: Path):
        self.bin = Path(bin_dir)
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.port, self.kcm_port = free_port(), free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.admin_token = base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
        self.etcd: Process | None = None
        self.apiserver: Process | None = None
        self.kcm: Process | None = None
        self._pki()
        self.audit_log = self.dir / "audit.log"
        self.audit_policy = _write(self.dir / "audit-policy.yaml", yaml.safe_dump(AUDIT_POLICY))

    # --- files ----------------------------------------------------------------------------------

    def _pki(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir(exist_ok=True)
        ca, ca_key = make_ca("rdma-webhook e2e cluster CA")
        # 10.96.0.1: the `kubernetes` Service's address, through which pods on the node reach us
        cert, key = make_serving(
            ca,
            ca_key,
            ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            ["127.0.0.1", "10.96.0.1"],
        )
        pem = serialization.Encoding.PEM
        pkcs8 = dict(
            encoding=pem, format=serialization.PrivateFormat.PKCS8, encryption_algorithm=serialization.NoEncryption()
        )
        self.ca_file = _write(pki / "ca.crt", ca.public_bytes(pem))
        self.ca_key_file = _write(pki / "ca.key", ca_key.private_bytes(**pkcs8), private=True)
        self.tls_cert = _write(pki / "apiserver.crt", cert.public_bytes(pem))
        self.tls_key = _write(pki / "apiserver.key", key.private_bytes(**pkcs8), private=True)
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.sa_key = _write(pki / "sa.key", sa.private_bytes(**pkcs8), private=True)
        self.sa_pub = _write(
            pki / "sa.pub", sa.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
        # The node's kubelet (e2e/node.py) authenticates as system:node:<name>, authorized by the
        # Node authorizer; the API server reaches kubelets with a client certificate of the CA.
        self.node_token = base64.urlsafe_b64encode(os.urandom(24)).decode().rstrip("=")
        self.token_file = _write(
            pki / "tokens.csv",
            f'{self.admin_token},{ADMIN_TOKEN_USER},e2e-admin-uid,"system:masters"\n'
            f'{self.node_token},system:node:{NODE_NAME},e2e-node-uid,"system:nodes"\n',
            private=True,
        )
        kubelet_client, kubelet_client_key = _client_cert(
            ca, ca_key, "kube-apiserver-kubelet-client", ["system:masters"]
        )
        self.kubelet_client_cert = _write(pki / "apiserver-kubelet-client.crt", kubelet_client.public_bytes(pem))
        self.kubelet_client_key = _write(
            pki / "apiserver-kubelet-client.key", kubelet_client_key.private_bytes(**pkcs8), private=True
        )
        self.admin_kubeconfig = _write(
            self.dir / "admin.kubeconfig",
            kubeconfig(self.server, self.ca_file, self.admin_token, ADMIN_TOKEN_USER),
            private=True,
        )

    # --- processes ------------------------------------------------------------------------------

    def start(self) -> "ControlPlane":
        try:
            self.start_etcd()
            self.start_apiserver()
            self.start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.etcd = Process(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--name",
                "e2e",
                "--data-dir",
                str(self.dir / "etcd"),
                "--listen-client-urls",
                self.etcd_url,
                "--advertise-client-urls",
                self.etcd_url,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"e2e={peer}",
                "--initial-cluster-state",
                "new",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
            self.dir / "etcd.log",
        )
        wait_for(
            "etcd /health",
            lambda: json.loads(_get(self.etcd_url + "/health")).get("health") == "true",
            60,
            proc=self.etcd,
        )

    def apiserver_argv(self) -> list[str]:
        return [
            str(self.bin / "kube-apiserver"),
            "--etcd-servers",
            self.etcd_url,
            "--bind-address",
            "127.0.0.1",
            "--advertise-address",
            "127.0.0.1",
            "--secure-port",
            str(self.port),
            "--tls-cert-file",
            str(self.tls_cert),
            "--tls-private-key-file",
            str(self.tls_key),
            "--client-ca-file",
            str(self.ca_file),
            "--cert-dir",
            str(self.dir / "apiserver-certs"),
            "--token-auth-file",
            str(self.token_file),
            "--authorization-mode",
            "Node,RBAC",
            "--kubelet-client-certificate",
            str(self.kubelet_client_cert),
            "--kubelet-client-key",
            str(self.kubelet_client_key),
            "--kubelet-certificate-authority",
            str(self.ca_file),
            "--kubelet-preferred-address-types",
            "InternalIP",
            # webhooks (and aggregated APIs) behind a Service are called at the Service's endpoints
            # (the pods' addresses), not its cluster IP: no kube-proxy is needed on the API server's
            # side, as on control planes that run no kube-proxy
            "--enable-aggregator-routing=true",
            "--service-account-issuer",
            ISSUER,
            "--service-account-key-file",
            str(self.sa_pub),
            "--service-account-signing-key-file",
            str(self.sa_key),
            "--service-cluster-ip-range",
            "10.96.0.0/16",
            "--endpoint-reconciler-type",
            "none",
            "--enable-admission-plugins",
            "PodSecurity",
            "--allow-privileged=true",
            "--profiling=false",
            # the verifier's own requests, one audit line each (Metadata: who, verb, resource,
            # subresource, namespace), nobody else's: what e2e measures of its API cost
            "--audit-policy-file",
            str(self.audit_policy),
            "--audit-log-path",
            str(self.audit_log),
            "--audit-log-format",
            "json",
            "--v",
            "1",
        ]

    def start_apiserver(self, timeout: float = 180) -> None:
        self.apiserver = Process("kube-apiserver", self.apiserver_argv(), self.dir / "kube-apiserver.log")
        wait_for(
            "kube-apiserver /readyz", lambda: self.get("/readyz") == b"ok", timeout, interval=0.5, proc=self.apiserver
        )

    def restart_apiserver(self, before_start: Callable[[], None] | None = None) -> None:
        assert self.apiserver is not None
        self.apiserver.stop()
        if before_start is not None:
            before_start()
        self.start_apiserver()

    def start_controller_manager(self, timeout: float = 180) -> None:
        kc = str(self.admin_kubeconfig)
        self.kcm = Process(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                "--kubeconfig",
                kc,
                "--authentication-kubeconfig",
                kc,
                "--authorization-kubeconfig",
                kc,
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(self.kcm_port),
                "--cert-dir",
                str(self.dir / "kcm-certs"),
                "--use-service-account-credentials",
                "--service-account-private-key-file",
                str(self.sa_key),
                "--root-ca-file",
                str(self.ca_file),
                "--leader-elect=false",
                "--controllers",
                "*",
                "--v",
                "1",
            ],
            self.dir / "kube-controller-manager.log",
        )
        # Pods need their namespace's `default` ServiceAccount, which the controller-manager makes.
        wait_for(
            "the default ServiceAccount (kube-controller-manager running)",
            lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default"),
            timeout,
            interval=0.5,
            proc=self.kcm,
        )

    def stop(self) -> None:
        for proc in (self.kcm, self.apiserver, self.etcd):
            if proc is not None:
                proc.stop()

    # --- clients --------------------------------------------------------------------------------

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> tuple[int, bytes]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {token or self.admin_token}",
                "Content-Type": content_type,
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def get(self, path: str) -> bytes | None:
        status, data = self.request("GET", path, timeout=10)
        return data if status == 200 else None

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = False,
        timeout: float = 120,
        kubeconfig_file: Path | None = None,
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [kubectl_binary(self.bin), "--kubeconfig", str(kubeconfig_file or self.admin_kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def apply(self, docs: Iterable[dict], *extra: str) -> subprocess.CompletedProcess:
        return self.kubectl("apply", "-f", "-", *extra, input=yaml.safe_dump_all(list(docs)), check=True)

    def etcd_revision(self) -> int:
        doc = json.loads(_post(self.etcd_url + "/v3/kv/range", {"key": base64.b64encode(b"/").decode()}))
        return int(doc["header"]["revision"])

    def etcd_compact(self, revision: int | None = None) -> int:
        revision = revision or self.etcd_revision()
        _post(self.etcd_url + "/v3/kv/compaction", {"revision": str(revision), "physical": True})
        return revision


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read()


def _post(url: str, body: Any) -> bytes:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read()


# --- the webhook as deployed ------------------------------------------------------------------------


def render_deploy(cp: ControlPlane, path: str = "deploy") -> list[dict]:
    """`kubectl kustomize deploy/`, exactly as a user applies it."""
    proc = subprocess.run(
        [kubectl_binary(cp.bin), "kustomize", str(ROOT / path)], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {path} failed:\n{proc.stderr}")
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def pick(docs: Iterable[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]
    if len(found) != 1:
        raise LookupError(f"expected one {kind} {name or ''} in the rendered manifests, found {len(found)}")
    return found[0]


def loopback_webhooks(docs: list[dict], port: int, ca_bundle: str) -> list[dict]:
    """The rendered webhook configurations with `clientConfig` pointed at the webhook on loopback;
    nothing else is changed (rules, selectors, matchConditions, timeouts, failure policies)."""
    out = []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        doc = json.loads(json.dumps(pick(docs, kind, "rdma-webhook")))
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
        out.append(doc)
    return out


def service_account_kubeconfig(
    cp: ControlPlane, namespace: str, name: str, path: Path, seconds: int = 24 * 3600
) -> Path:
    """A kubeconfig holding a token for the ServiceAccount, issued by the TokenRequest API (what the
    kubelet mounts into the webhook's pod in a real cluster)."""
    status, data = cp.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
    )
    if status != 201:
        raise RuntimeError(f"TokenRequest for {namespace}/{name}: HTTP {status}: {data[:300]!r}")
    token = json.loads(data)["status"]["token"]
    return _write(
        path, kubeconfig(cp.server, cp.ca_file, token, f"system:serviceaccount:{namespace}:{name}"), private=True
    )


class Webhook:
    """`rdma-webhook serve` on loopback, as the Deployment runs it, minus the container."""

    def __init__(
        self,
        workdir: Path,
        kubeconfig_file: Path | None,
        policies: Path = ROOT / "policies",
        workers: int = 2,
        port: int | None = None,
        certs: Path | None = None,
        name: str = "webhook",
        launcher: list[str] | None = None,
        extra_args: list[str] | None = None,
    ):
        self.launcher = launcher  # argv before "serve" (default: the installed rdma-webhook)
        self.extra_args = list(extra_args or [])  # more `serve` flags (e.g. --check-admission-policy)
        self.dir = Path(workdir)
        self.kubeconfig, self.policies, self.workers = kubeconfig_file, policies, workers
        self.port = port or free_port()
        self.name = name
        self.certs = certs or self.dir / f"{name}-certs"
        if not (self.certs / "tls.crt").exists():
            write_certs(self.certs, "rdma-webhook", "rdma-webhook", ips=["127.0.0.1"])
        self.ca_bundle = base64.b64encode((self.certs / "ca.crt").read_bytes()).decode()
        self.proc: Process | None = None

    def start(self, wait_ready: bool = True, timeout: float = 120) -> "Webhook":
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(self.dir / f"{self.name}-metrics")
        shutil.rmtree(env["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
        os.makedirs(env["PROMETHEUS_MULTIPROC_DIR"])
        exe = Path(sys.executable).with_name("rdma-webhook")
        launcher = self.launcher or ([str(exe)] if exe.exists() else [sys.executable, "-m", "webhook"])
        argv = [
            *launcher,
            "serve",
            "--policies",
            str(self.policies),
            "--tls-cert",
            str(self.certs / "tls.crt"),
            "--tls-key",
            str(self.certs / "tls.key"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
            *self.extra_args,
        ]
        self.proc = Process(self.name, argv, self.dir / f"{self.name}.log", env=env, cwd=ROOT)
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs / "ca.crt"))

    def get(self, path: str, timeout: float = 5) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{self.port}{path}", context=self.ssl_context(), timeout=timeout
            ) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def ready_all(self, probes: int = 6) -> bool:
        """/readyz answered 200 by several requests in a row (each may reach another worker)."""
        return all(self.get("/readyz")[0] == 200 for _ in range(probes))

    def wait_ready(self, timeout: float = 120) -> None:
        wait_for(f"{self.name} /readyz", self.ready_all, timeout, interval=0.3, proc=self.proc)

    def admissions(self, namespace: str | None = None) -> list[dict]:
        """The admission log lines (one JSON object per admission) written so far, optionally
        only those of one namespace."""
        out = []
        try:
            text = (self.dir / f"{self.name}.log").read_text(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            if '"msg": "admission"' not in line and '"msg":"admission"' not in line:
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if namespace is None or doc.get("namespace") == namespace:
                out.append(doc)
        return out

    def stop(self) -> int | None:
        return self.proc.stop(timeout=40) if self.proc is not None else None


def install_webhook(cp: ControlPlane, workdir: Path, docs: list[dict] | None = None) -> Webhook:
    """Namespace, ServiceAccount and RBAC of deploy/, a token for that ServiceAccount, the webhook
    started with it, and the webhook configurations of deploy/ once it is ready."""
    docs = docs if docs is not None else render_deploy(cp)
    cp.apply(
        [
            pick(docs, "Namespace", "rdma-webhook"),
            pick(docs, "ServiceAccount", "rdma-webhook"),
            pick(docs, "ClusterRole", "rdma-webhook"),
            pick(docs, "ClusterRoleBinding", "rdma-webhook"),
        ]
    )
    kc = service_account_kubeconfig(cp, "rdma-webhook", "rdma-webhook", Path(workdir) / "webhook.kubeconfig")
    hook = Webhook(workdir, kc).start()
    cp.apply(loopback_webhooks(docs, hook.port, hook.ca_bundle))
    return hook


def build_binaries() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "e2e" / "build-controlplane.sh")], stdout=subprocess.PIPE, text=True, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def main() -> int:  # pragma: no cover - manual use
    install_signal_handlers()
    bin_dir = Path(os.environ.get("RDMA_WEBHOOK_E2E_BIN") or build_binaries())
    workdir = Path(tempfile.mkdtemp(prefix="rdma-webhook-e2e-"))
    cp = ControlPlane(bin_dir, workdir)
    try:
        cp.start()
        print(f"control plane up; KUBECONFIG={cp.admin_kubeconfig}", flush=True)
        if "--no-webhook" not in sys.argv:
            hook = install_webhook(cp, workdir)
            print(f"webhook serving on 127.0.0.1:{hook.port}; logs in {workdir}", flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        stop_all()


if __name__ == "__main__":
    sys.exit(main())
