"""One real node for the end-to-end suite: kube-scheduler, kubelet and containerd 2 on this
machine, joined to the control plane of e2e/cluster.py, so that pods are scheduled, started
and can be talked to (`kubectl exec`, logs).

Started here, each a child process recorded and stopped by its PID like the control plane's:

- containerd (e2e/containerd, built from its Go module) with its own socket, root and state
  under the session's work folder; its CRI plugin runs containers with Debian's runc (through
  the runc shim built beside containerd) and wires pods with Debian's CNI plugins (bridge +
  host-local + loopback, /usr/lib/cni) on a bridge of this session's own (`e2e<hex>`, a /24 of
  10.0.0.0/8 no route of the machine uses). The bridge's address is the node's InternalIP:
  pods reach the host there, and the API server reaches the kubelet and pods.
- the images a pod needs, built here and imported with `ctr images import`, no registry:
  `e2e.local/pause:1` (the sandbox, the static pause program of e2e/containerd/cmd/pause) and
  `e2e.local/shell:1` (Debian's static busybox with its applets: a shell, ls, cat, sleep...).
- kubelet 1.37 (the control plane's release) with `failCgroupV1: false`: this machine has
  cgroup v1 (hybrid), which kubelet 1.35+ refuses unless told; the cgroupfs driver, pods under
  a cgroup root of this session's own, its root dir, pod logs and certificates in the work
  folder. It authenticates as system:node:<name> (a token; the API server authorizes it with
  the Node authorizer), serves TLS with a certificate of the cluster CA, and the API server
  reaches it (exec, logs) with a client certificate of that CA.
- kube-scheduler (same release), with the admin kubeconfig like the controller-manager.
- a fake device plugin (e2e/controlplane/cmd/fake-device-plugin): nvidia.com/gpu x16 as
  /dev/nvidiaN with NVIDIA_VISIBLE_DEVICES, and each RDMA resource the shipped policies name
  (aliyun/erdma, rdma/shared_ib, ...) x16 as /dev/infiniband/fake-<resource>-N with
  FAKE_DEVICES_<RESOURCE>; every device node is the host's /dev/null (char 1:3).

The node registers with a taint (e2e.rdma-webhook.io/node=tests:NoSchedule): only the node tests'
pods (and the chart's Deployment, given the toleration) run there; the rest of the suite's pods
stay Pending as they always have. On demand (`start_service_routing`, the chart's tests), a relay
on the node's address to the API server (which listens on 127.0.0.1 only), an EndpointSlice of the
`kubernetes` Service pointing at it, and kube-proxy (iptables mode): pods' in-cluster config
(10.96.0.1:443, a name of the API server's certificate) then reaches the API server.

The kubelet serves device plugins at /var/lib/kubelet/device-plugins whatever its root dir, and
empties that folder when it starts: one node per machine at a time, which a lock file
(/run/rdma-webhook-e2e-node.lock) makes sessions wait for. The kubelet sets a few kernel tunables
when they differ from what it wants (vm.overcommit_memory, kernel.panic...), the bridge plugin
sets net.ipv4.ip_forward, and the kubelet and kube-proxy add KUBE-* iptables chains (KUBE-FIREWALL,
canaries, Service rules): the tunables are written back at the end, and the chains that were not there before
are removed. `stop()` deletes the node's pods, stops the processes, kills any task still running,
unmounts what was mounted under the work folder (volumes, rootfs, network namespaces), removes
the session's cgroups and deletes the bridge.

Needs root, runc, the CNI plugins and busybox-static (Debian packages: .ci/run installs them).
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import ipaddress
import json
import os
import random
import shlex
import socket
import threading
import shutil
import struct
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Iterable

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from e2e import cluster as c
from webhook.serving.certs import make_serving

CNI_BIN = Path(os.environ.get("RDMA_WEBHOOK_E2E_CNI_BIN", "/usr/lib/cni"))
PAUSE_IMAGE = "e2e.local/pause:1"
SHELL_IMAGE = "e2e.local/shell:1"
NODE_NAME = c.NODE_NAME
# The node is tainted: only pods that tolerate this run on it. The rest of the suite's pods (images
# of no registry, GPUs asked for) stay Pending as they always have, and hold none of its devices.
TAINT = {"key": "e2e.rdma-webhook.io/node", "value": "tests", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Equal", "value": TAINT["value"], "effect": TAINT["effect"]}
# The kubelet serves device plugins at this fixed path, whatever its --root-dir, and empties the
# folder when it starts: one node per machine at a time (NODE_LOCK serialises sessions).
DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
NODE_LOCK = Path("/run/rdma-webhook-e2e-node.lock")
# Tunables the kubelet (setupKernelTunables) or the CNI bridge plugin may write: restored at stop.
SYSCTLS = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    # and kube-proxy's, when started
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
]


class NodeError(RuntimeError):
    pass


# --- images, made here ------------------------------------------------------------------------------


def _static_elf(path: Path) -> bool:
    """True if the ELF file has no program interpreter (a static executable)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit only
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != 3 for i in range(phnum))  # PT_INTERP


def _layer(files: dict[str, tuple[bytes | str, int]]) -> bytes:
    """An uncompressed tar of `files`: path -> (content, mode); a str content is a symlink target."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for path in sorted(files):
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d and d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            content, mode = files[path]
            info = tarfile.TarInfo(path)
            info.mode = mode
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def oci_archive(name: str, files: dict[str, tuple[bytes | str, int]], config: dict, out: Path) -> Path:
    """An OCI image layout in a tar (what `ctr images import` reads): one gzip layer holding
    `files`, the image `config` (Entrypoint, Cmd, Env...) and `name` as the image's name."""
    raw = _layer(files)
    packed = gzip.compress(raw, mtime=0)
    layer = {
        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
        "digest": "sha256:" + hashlib.sha256(packed).hexdigest(),
        "size": len(packed),
    }
    return oci_layout(name, config, layer, "sha256:" + hashlib.sha256(raw).hexdigest(), out, layer_data=packed)


def oci_layout(
    name: str,
    config: dict,
    layer: dict,
    diff_id: str,
    out: Path,
    layer_data: bytes | None = None,
    layer_file: Path | None = None,
) -> Path:
    """The tar of an OCI image layout with one layer: `layer` its descriptor (mediaType, digest,
    size), `diff_id` the digest of its uncompressed tar, its content given as bytes or as a file
    (a root filesystem of hundreds of MB is streamed, never read whole)."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    cfg = blob(json.dumps(image_config, sort_keys=True).encode())
    manifest = blob(
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
                "layers": [layer],
            },
            sort_keys=True,
        ).encode()
    )
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **manifest,
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                },
            }
        ],
    }
    layer_path = "blobs/sha256/" + layer["digest"].split(":", 1)[1]
    with tarfile.open(out, "w") as tar:

        def add(path: str, data: bytes) -> None:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add(f"blobs/sha256/{digest.split(':', 1)[1]}", data)
        if layer_file is not None:
            tar.add(str(layer_file), arcname=layer_path)
        else:
            assert layer_data is not None, "oci_layout: the layer's content, as bytes or a file"
            add(layer_path, layer_data)
    return out


def pause_image(bin_dir: Path, out: Path) -> Path:
    return oci_archive(
        PAUSE_IMAGE,
        {"pause": ((bin_dir / "pause").read_bytes(), 0o755)},
        {"Entrypoint": ["/pause"], "User": "65535:65535"},
        out,
    )


def runc_binary() -> str | None:
    return os.environ.get("RDMA_WEBHOOK_E2E_RUNC") or shutil.which("runc")


def busybox_binary() -> Path:
    for candidate in (os.environ.get("RDMA_WEBHOOK_E2E_BUSYBOX"), "/bin/busybox", "/usr/bin/busybox"):
        if candidate and Path(candidate).is_file() and _static_elf(Path(candidate)):
            return Path(candidate)
    raise NodeError("no static busybox (apt-get install busybox-static; .ci/run does): the test image's shell")


def shell_image(out: Path) -> Path:
    """Debian's static busybox as /bin/busybox and every applet it lists as a symlink in /bin."""
    busybox = busybox_binary()
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    files: dict[str, tuple[bytes | str, int]] = {"bin/busybox": (busybox.read_bytes(), 0o755)}
    files.update({f"bin/{a}": ("busybox", 0o777) for a in applets if a != "busybox"})
    files["tmp/.keep"] = (b"", 0o644)
    return oci_archive(SHELL_IMAGE, files, {"Entrypoint": ["/bin/sh"], "Env": ["PATH=/bin"]}, out)


# --- the fake devices ------------------------------------------------------------------------------

GPUS = 16  # nvidia.com/gpu devices the node advertises (the verifier's test runs eight pods at once)
RDMA_DEVICES = 16  # devices of each RDMA resource of the shipped policies


def policy_resources(folder: Path = c.ROOT / "policies") -> list[str]:
    """Every extended resource the shipped policies name (`resource:` keys: devices, networks)."""
    found: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "resource" and isinstance(value, str) and "/" in value:
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for f in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            walk(doc)
    return sorted(found)


def env_name(resource: str) -> str:
    """FAKE_DEVICES_ALIYUN_ERDMA for aliyun/erdma: the variable listing a container's devices."""
    return "FAKE_DEVICES_" + "".join(ch if ch.isalnum() else "_" for ch in resource).upper()


def device_path(resource: str) -> str:
    """Where device i of an RDMA resource appears in a container (a /dev/null device node)."""
    return "/dev/infiniband/fake-" + "".join(ch if ch.isalnum() else "-" for ch in resource) + "-%d"


def device_plugin_resources() -> list[str]:
    """The fake device plugin's --resource flags: GPUs as /dev/nvidiaN with NVIDIA_VISIBLE_DEVICES
    (as NVIDIA's plugin names them), and each RDMA resource of the shipped policies."""
    flags = [f"nvidia.com/gpu={GPUS}:/dev/nvidia%d:NVIDIA_VISIBLE_DEVICES"]
    flags += [f"{r}={RDMA_DEVICES}:{device_path(r)}:{env_name(r)}" for r in policy_resources() if r != "nvidia.com/gpu"]
    return flags


# --- the host: network, cgroups, mounts -------------------------------------------------------------


def _routes() -> list[ipaddress.IPv4Network]:
    out = subprocess.run(
        ["ip", "-4", "-j", "route", "show", "table", "all"], capture_output=True, text=True, check=True
    ).stdout
    nets = []
    for r in json.loads(out or "[]"):
        dst = r.get("dst", "")
        if dst and dst != "default":
            try:
                nets.append(ipaddress.ip_network(dst if "/" in dst else dst + "/32", strict=False))
            except ValueError:
                pass
    return nets


def pick_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that overlaps no route of this machine (other sessions' bridges included)."""
    taken = [n for n in _routes() if n.version == 4]
    rng = random.Random(os.urandom(8))
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rng.randrange(100, 250)}.{rng.randrange(0, 256)}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return net
    raise NodeError(f"no free /24 in 10.100.0.0-10.249.255.0 (routes: {taken})")


def cgroup_v1_hierarchies() -> list[Path]:
    """Mount points of the cgroup v1 hierarchies (cpu, memory, ..., name=systemd)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup":
            points.append(Path(left.split()[4]))
    return points


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below `folder`, deepest first."""
    root = str(folder.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == root or point.startswith(root + "/"):
            found.append(point)
    return sorted(set(found), key=lambda p: (-p.count("/"), p))


IPTABLES = ("iptables", "ip6tables")


def kube_chains() -> set[tuple[str, str, str]]:
    """(command, table, chain) of every KUBE-* chain: the kubelet makes KUBE-FIREWALL,
    KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT, and jumps to KUBE-FIREWALL from INPUT and OUTPUT."""
    found = set()
    for cmd in IPTABLES:
        if shutil.which(f"{cmd}-save") is None:
            continue
        out = subprocess.run([f"{cmd}-save"], capture_output=True, text=True).stdout
        table = ""
        for line in out.splitlines():
            if line.startswith("*"):
                table = line[1:].strip()
            elif line.startswith(":KUBE-"):
                found.add((cmd, table, line[1:].split()[0]))
    return found


def remove_chains(chains: Iterable[tuple[str, str, str]]) -> None:
    """Delete the rules that jump to each chain, then the chain."""
    for cmd, table, chain in chains:
        rules = subprocess.run([cmd, "-w", "-t", table, "-S"], capture_output=True, text=True).stdout.splitlines()
        for rule in rules:
            words = shlex.split(rule)  # comments are quoted: "kubernetes service portals"
            if words[:1] == ["-A"] and words[-2:] == ["-j", chain] and not words[1].startswith("KUBE-"):
                subprocess.run([cmd, "-w", "-t", table, "-D", *words[1:]], capture_output=True)
        subprocess.run([cmd, "-w", "-t", table, "-F", chain], capture_output=True)
    for cmd, table, chain in chains:
        subprocess.run([cmd, "-w", "-t", table, "-X", chain], capture_output=True)


def read_sysctls() -> dict[str, str]:
    values = {}
    for name in SYSCTLS:
        try:
            values[name] = (Path("/proc/sys") / name).read_text().strip()
        except OSError:
            pass
    return values


# --- pods to the API server --------------------------------------------------------------------------


class Relay:
    """TCP from (host, a free port) to (target_host, target_port), a thread per direction: the API
    server listens on 127.0.0.1 only, which no pod can reach; pods reach this relay on the node's
    address, through the `kubernetes` Service (kube-proxy) or directly."""

    def __init__(self, host: str, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.listener = socket.create_server((host, 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="relay-accept").start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            self.connections += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True, name="relay-pipe").start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for sock in self.connections:
            try:
                sock.close()
            except OSError:
                pass


# --- the node ---------------------------------------------------------------------------------------


class Node:
    def __init__(self, cp: c.ControlPlane, workdir: Path, name: str = NODE_NAME):
        self.cp, self.name, self.bin = cp, name, cp.bin
        self.dir = Path(workdir) / "node"
        self.dir.mkdir(parents=True, exist_ok=True)
        tag = os.urandom(3).hex()
        self.bridge = f"e2e{tag}"
        self.cgroup_root = f"/rdma-webhook-e2e-{tag}"
        self.containerd_dir = self.dir / "containerd"
        self.containerd_sock = self.containerd_dir / "containerd.sock"
        self.kubelet_dir = self.dir / "kubelet"
        self.cni_conf = self.dir / "net.d"
        self.subnet: ipaddress.IPv4Network | None = None
        self.ip = ""
        self.kubelet_port = c.free_port()
        self.containerd: c.Process | None = None
        self.kubelet: c.Process | None = None
        self.scheduler: c.Process | None = None
        self.device_plugin: c.Process | None = None
        self.kube_proxy: c.Process | None = None
        self.relay: Relay | None = None
        self._sysctls: dict[str, str] = {}
        self._chains: set[tuple[str, str, str]] | None = None  # KUBE-* chains before the kubelet
        self._cgroups: list[Path] = []
        self._bridge_made = False
        self.timings: dict[str, float] = {}
        self._lock = None

    # --- start ----------------------------------------------------------------------------------

    def check_host(self) -> None:
        problems = []
        if os.geteuid() != 0:
            problems.append("not root: the kubelet and containerd need root")
        if runc_binary() is None:
            problems.append("runc is not on PATH (apt-get install runc)")
        for plugin in ("bridge", "host-local", "loopback"):
            if not (CNI_BIN / plugin).exists():
                problems.append(f"{CNI_BIN / plugin} missing (apt-get install containernetworking-plugins)")
        if shutil.which("ip") is None:
            problems.append("ip is not on PATH (iproute2)")
        for b in (
            "kubelet",
            "kube-scheduler",
            "fake-device-plugin",
            "containerd",
            "containerd-shim-runc-v2",
            "ctr",
            "pause",
        ):
            if not (self.bin / b).exists():
                problems.append(f"{self.bin / b} missing (e2e/build-controlplane.sh builds it)")
        if not cgroup_v1_hierarchies() and not Path("/sys/fs/cgroup/cgroup.controllers").exists():
            problems.append("no cgroup hierarchy mounted")
        try:
            busybox_binary()
        except NodeError as exc:
            problems.append(str(exc))
        if problems:
            raise NodeError("the node cannot start here:\n  " + "\n  ".join(problems))

    def lock(self, timeout: float = 900) -> None:
        """Wait for this machine's node lock (another session's node holds it until it stops)."""
        self._lock = open(NODE_LOCK, "a")
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NodeError(f"{NODE_LOCK} still held by another session's node after {timeout:.0f}s")
                time.sleep(1)

    def start(self, timeout: float = 180) -> "Node":
        self.check_host()
        try:
            for step in (
                self.lock,
                self.start_network,
                self.make_cgroup_root,
                self.start_containerd,
                self.import_images,
                self.start_kubelet,
                self.start_device_plugin,
                self.start_scheduler,
                self.wait_ready,
            ):
                began = time.monotonic()
                step()
                self.timings[step.__name__] = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def start_network(self) -> None:
        self._sysctls = read_sysctls()
        self._chains = kube_chains()
        self.subnet = pick_subnet()
        self.ip = str(self.subnet.network_address + 1)
        # Made here (the bridge plugin would make it on the first pod) so that the kubelet can
        # bind its address and report it as the node's InternalIP before any pod runs.
        subprocess.run(["ip", "link", "add", "name", self.bridge, "type", "bridge"], check=True, capture_output=True)
        self._bridge_made = True
        subprocess.run(
            ["ip", "addr", "add", f"{self.ip}/{self.subnet.prefixlen}", "dev", self.bridge],
            check=True,
            capture_output=True,
        )
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True, capture_output=True)
        self.cni_conf.mkdir(exist_ok=True)
        conflist = {
            "cniVersion": "1.0.0",
            "name": "e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.dir / "ipam"),
                        "ranges": [[{"subnet": str(self.subnet), "gateway": self.ip}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                }
            ],
        }
        (self.cni_conf / "10-e2e.conflist").write_text(json.dumps(conflist, indent=1))

    def make_cgroup_root(self) -> None:
        """The kubelet's --cgroup-root must exist in every hierarchy; its pods go below it."""
        for hierarchy in cgroup_v1_hierarchies():
            path = hierarchy / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            self._cgroups.append(path)
            if (hierarchy / "cpuset.cpus").exists():  # a new cpuset cgroup starts with no CPUs, no memory nodes
                for f in ("cpuset.cpus", "cpuset.mems"):
                    (path / f).write_text((hierarchy / f).read_text())

    def containerd_config(self) -> str:
        d = self.containerd_dir
        runtime = "io.containerd.cri.v1.runtime"
        images = "io.containerd.cri.v1.images"
        return "\n".join(
            [
                "version = 3",
                "imports = []",  # nothing of /etc/containerd
                f"root = {json.dumps(str(d / 'root'))}",
                f"state = {json.dumps(str(d / 'state'))}",
                "[grpc]",
                f"  address = {json.dumps(str(self.containerd_sock))}",
                "[ttrpc]",
                f"  address = {json.dumps(str(self.containerd_sock) + '.ttrpc')}",
                f"[plugins.'{images}']",
                "  snapshotter = 'overlayfs'",
                f"[plugins.'{images}'.pinned_images]",
                f"  sandbox = '{PAUSE_IMAGE}'",
                f"[plugins.'{runtime}']",
                "  enable_selinux = false",
                # The kubelet asks for negative oom_score_adj (-998 for sandboxes), which needs
                # CAP_SYS_RESOURCE: root lacks it on machines like CI's firecracker VMs, where runc then
                # fails ("failed to update /proc/self/oom_score_adj: Permission denied"). No lower
                # than containerd's own, then.
                "  restrict_oom_score_adj = true",
                # the pods' network namespaces under the state dir: stop() unmounts whatever is left
                "  netns_mounts_under_state_dir = true",
                f"[plugins.'{runtime}'.containerd]",
                "  default_runtime_name = 'runc'",
                f"[plugins.'{runtime}'.containerd.runtimes.runc]",
                "  runtime_type = 'io.containerd.runc.v2'",
                f"[plugins.'{runtime}'.containerd.runtimes.runc.options]",
                f"  BinaryName = {json.dumps(runc_binary())}",
                "  SystemdCgroup = false",
                f"  Root = {json.dumps(str(d / 'runc'))}",  # runc's state: not /run/containerd/runc
                f"[plugins.'{runtime}'.cni]",
                f"  bin_dirs = [{json.dumps(str(CNI_BIN))}]",
                f"  conf_dir = {json.dumps(str(self.cni_conf))}",
                "  max_conf_num = 1",
                "[plugins.'io.containerd.internal.v1.opt']",
                f"  path = {json.dumps(str(d / 'opt'))}",
                "[plugins.'io.containerd.nri.v1.nri']",
                "  disable = true",
                "",
            ]
        )

    def env(self) -> dict[str, str]:
        """PATH with the built binaries first (containerd finds its shim there)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["PATH"] = f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return env

    def start_containerd(self) -> None:
        self.containerd_dir.mkdir(exist_ok=True)
        config = self.containerd_dir / "config.toml"
        config.write_text(self.containerd_config())
        self.containerd = c.Process(
            "containerd",
            [str(self.bin / "containerd"), "--config", str(config), "--log-level", "info"],
            self.dir / "containerd.log",
            env=self.env(),
        )
        c.wait_for(
            "containerd's socket",
            lambda: self.ctr("version", check=False).returncode == 0,
            60,
            interval=0.3,
            proc=self.containerd,
        )

    def ctr(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(self.bin / "ctr"), "--address", str(self.containerd_sock), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
        )
        if check and proc.returncode != 0:
            raise NodeError(f"ctr {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return proc

    def import_image(self, archive: Path) -> None:
        self.ctr("images", "import", "--snapshotter", "overlayfs", str(archive), timeout=600)

    def import_images(self) -> None:
        images = self.dir / "images"
        images.mkdir(exist_ok=True)
        self.import_image(pause_image(self.bin, images / "pause.oci.tar"))
        self.import_image(shell_image(images / "shell.oci.tar"))
        listed = self.ctr("images", "ls", "-q").stdout.split()
        missing = [i for i in (PAUSE_IMAGE, SHELL_IMAGE) if i not in listed]
        if missing:
            raise NodeError(f"images not in containerd after import: {missing} (listed: {listed})")

    def kubelet_config(self) -> dict:
        pki = self.kubelet_dir / "pki"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            # This machine mounts cgroup v1: kubelet 1.35+ refuses to start there unless told.
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "cgroupsPerQOS": True,
            "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
            "address": self.ip,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": c.free_port(),
            "tlsCertFile": str(pki / "kubelet.crt"),
            "tlsPrivateKeyFile": str(pki / "kubelet.key"),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "podLogsDir": str(self.dir / "pod-logs"),
            "failSwapOn": False,
            # A shared machine's disk and memory are no signal for this node: evict nothing, and
            # never collect the imported images (they cannot be pulled back).
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "0%",
                "nodefs.inodesFree": "0%",
                "imagefs.available": "0%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "maxPods": 60,
            "registerWithTaints": [TAINT],
            # the device plugin's resources reach the node's allocatable at the next status update
            "nodeStatusUpdateFrequency": "2s",
        }

    def start_kubelet(self) -> None:
        pki = self.kubelet_dir / "pki"
        pki.mkdir(parents=True, exist_ok=True)
        ca = x509.load_pem_x509_certificate(self.cp.ca_file.read_bytes())
        ca_key = serialization.load_pem_private_key(self.cp.ca_key_file.read_bytes(), password=None)
        cert, key = make_serving(ca, ca_key, [self.name], [self.ip])
        pem = serialization.Encoding.PEM
        c._write(pki / "kubelet.crt", cert.public_bytes(pem))
        c._write(
            pki / "kubelet.key",
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
            private=True,
        )
        config = c._write(self.kubelet_dir / "config.yaml", yaml.safe_dump(self.kubelet_config()))
        kubeconfig = c._write(
            self.kubelet_dir / "kubelet.kubeconfig",
            c.kubeconfig(self.cp.server, self.cp.ca_file, self.cp.node_token, f"system:node:{self.name}"),
            private=True,
        )
        self.kubelet = c.Process(
            "kubelet",
            [
                str(self.bin / "kubelet"),
                "--config",
                str(config),
                "--kubeconfig",
                str(kubeconfig),
                "--root-dir",
                str(self.kubelet_dir / "root"),
                "--hostname-override",
                self.name,
                "--node-ip",
                self.ip,
                "--v",
                "1",
            ],
            self.dir / "kubelet.log",
            env=self.env(),
        )
        c.wait_for(
            f"Node {self.name} registered",
            lambda: self.cp.get(f"/api/v1/nodes/{self.name}"),
            120,
            interval=0.5,
            proc=self.kubelet,
        )

    def start_device_plugin(self, timeout: float = 60) -> None:
        """The fake devices (e2e/controlplane/cmd/fake-device-plugin), registered with the kubelet;
        done when the node's allocatable lists every resource."""
        plugin_dir = DEVICE_PLUGIN_DIR
        c.wait_for(
            "the kubelet's device-plugin socket",
            lambda: (plugin_dir / "kubelet.sock").exists(),
            timeout,
            proc=self.kubelet,
        )
        flags = device_plugin_resources()
        argv = [str(self.bin / "fake-device-plugin"), "--plugin-dir", str(plugin_dir)]
        for flag in flags:
            argv += ["--resource", flag]
        self.device_plugin = c.Process("fake-device-plugin", argv, self.dir / "fake-device-plugin.log")
        counts = {f.split("=", 1)[0]: f.split("=", 1)[1].split(":", 1)[0] for f in flags}

        def advertised() -> bool:
            allocatable = self.node().get("status", {}).get("allocatable", {})
            return all(allocatable.get(r) == n for r, n in counts.items())

        c.wait_for(
            f"the node's allocatable listing {sorted(counts)}",
            advertised,
            timeout,
            interval=0.5,
            proc=self.device_plugin,
        )

    def start_scheduler(self) -> None:
        kc = str(self.cp.admin_kubeconfig)
        self.scheduler = c.Process(
            "kube-scheduler",
            [
                str(self.bin / "kube-scheduler"),
                "--kubeconfig",
                kc,
                "--authentication-kubeconfig",
                kc,
                "--authorization-kubeconfig",
                kc,
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(c.free_port()),
                "--cert-dir",
                str(self.dir / "scheduler-certs"),
                "--leader-elect=false",
                "--v",
                "1",
            ],
            self.dir / "kube-scheduler.log",
        )

    def start_service_routing(self, timeout: float = 60) -> None:
        """What the API server's Services need on this node, started on demand (the chart's
        tests): a relay on the node's address to the API server, the `kubernetes` Service's
        endpoints pointing at it (the API server publishes none: its loopback address cannot be),
        and kube-proxy (iptables mode), so that a pod's in-cluster config (10.96.0.1:443) reaches
        the API server, whose certificate names that address."""
        if self.kube_proxy is not None:
            return
        self.relay = Relay(self.ip, "127.0.0.1", self.cp.port)
        self.cp.apply(
            [
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": "kubernetes-e2e-node",
                        "namespace": "default",
                        "labels": {
                            "kubernetes.io/service-name": "kubernetes",
                            "endpointslice.kubernetes.io/managed-by": "e2e.rdma-webhook.io",
                        },
                    },
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [self.ip], "conditions": {"ready": True}}],
                    "ports": [{"name": "https", "port": self.relay.port, "protocol": "TCP"}],
                }
            ]
        )
        config = c._write(
            self.dir / "kube-proxy.yaml",
            yaml.safe_dump(
                {
                    "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                    "kind": "KubeProxyConfiguration",
                    "clientConnection": {"kubeconfig": str(self.cp.admin_kubeconfig)},
                    "hostnameOverride": self.name,
                    "mode": "iptables",
                    "clusterCIDR": str(self.subnet),
                    "healthzBindAddress": f"127.0.0.1:{c.free_port()}",
                    "metricsBindAddress": f"127.0.0.1:{c.free_port()}",
                    # leave the machine's conntrack table and route_localnet alone
                    "conntrack": {
                        "maxPerCore": 0,
                        "min": 0,
                        "tcpEstablishedTimeout": "0s",
                        "tcpCloseWaitTimeout": "0s",
                    },
                    "iptables": {"localhostNodePorts": False},
                    "nodePortAddresses": [f"{self.ip}/32"],
                }
            ),
        )
        self.kube_proxy = c.Process(
            "kube-proxy",
            [str(self.bin / "kube-proxy"), "--config", str(config), "--v", "1"],
            self.dir / "kube-proxy.log",
            env=self.env(),
        )
        ctx = self.cp.ssl_context()

        def api_via_service() -> bool:
            with socket.create_connection(("10.96.0.1", 443), timeout=3) as raw:
                with ctx.wrap_socket(raw, server_hostname="10.96.0.1") as tls:
                    tls.sendall(
                        b"GET /readyz HTTP/1.0\r\nHost: 10.96.0.1\r\nAuthorization: Bearer "
                        + self.cp.admin_token.encode()
                        + b"\r\n\r\n"
                    )
                    return tls.recv(64).split(b"\r\n", 1)[0].split()[1:2] == [b"200"]

        c.wait_for(
            "the API server through the kubernetes Service (10.96.0.1:443)",
            api_via_service,
            timeout,
            interval=0.5,
            proc=self.kube_proxy,
        )

    def node(self) -> dict:
        status, data = self.cp.request("GET", f"/api/v1/nodes/{self.name}")
        if status != 200:
            raise NodeError(f"GET node {self.name}: HTTP {status}")
        return json.loads(data)

    def ready(self) -> bool:
        conditions = {c_["type"]: c_["status"] for c_ in self.node().get("status", {}).get("conditions", [])}
        return conditions.get("Ready") == "True"

    def wait_ready(self, timeout: float = 120) -> None:
        c.wait_for(f"Node {self.name} Ready", self.ready, timeout, interval=0.5, proc=self.kubelet)
        # Ready, and the node-lifecycle controller has lifted its not-ready taint
        c.wait_for(
            f"Node {self.name} untainted",
            lambda: (
                not [t for t in self.node()["spec"].get("taints", []) if t["key"].startswith("node.kubernetes.io/")]
            ),
            60,
            interval=0.5,
            proc=self.kubelet,
        )

    # --- stop -----------------------------------------------------------------------------------

    def running_tasks(self) -> list[str]:
        proc = self.ctr("tasks", "ls", check=False, timeout=30)
        return [line.split()[0] for line in proc.stdout.splitlines()[1:] if "RUNNING" in line]

    def drain(self, timeout: float = 60) -> None:
        """Delete every pod bound to the node and wait until containerd runs no task: the kubelet
        stops each sandbox through the CRI, which also tears its network down."""
        self.cp.kubectl(
            "delete",
            "pods",
            "--all-namespaces",
            "--field-selector",
            f"spec.nodeName={self.name}",
            "--grace-period=1",
            "--wait=false",
            timeout=60,
        )
        try:
            c.wait_for("the node's containers stopped", lambda: not self.running_tasks(), timeout, interval=1)
        except TimeoutError:
            pass  # stop() kills what is left

    def stop(self) -> None:
        errors: list[str] = []

        def attempt(what: str, fn) -> None:
            try:
                fn()
            except Exception as exc:  # go on: everything below must still be undone
                errors.append(f"{what}: {exc}")

        if (
            self.kubelet is not None
            and self.kubelet.alive()
            and self.containerd is not None
            and self.containerd.alive()
        ):
            attempt("drain", self.drain)
        for proc in (self.kube_proxy, self.scheduler, self.device_plugin, self.kubelet):
            if proc is not None:
                attempt(f"stop {proc.name}", proc.stop)
        if self.containerd is not None and self.containerd.alive():

            def kill_tasks() -> None:
                for task in self.running_tasks():
                    self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task, check=False, timeout=30)
                time.sleep(0.5)
                for line in self.ctr("tasks", "ls", check=False, timeout=30).stdout.splitlines()[1:]:
                    self.ctr("tasks", "delete", "--force", line.split()[0], check=False, timeout=30)

            attempt("kill tasks", kill_tasks)
            attempt("stop containerd", self.containerd.stop)
        if self.relay is not None:
            attempt("relay", self.relay.close)
        attempt("kill shims", self._kill_shims)
        attempt("unmount", self._unmount)
        attempt("cgroups", self._remove_cgroups)
        if self._bridge_made:
            attempt("bridge", lambda: subprocess.run(["ip", "link", "del", self.bridge], capture_output=True))
            self._bridge_made = False
        attempt("sysctls", self._restore_sysctls)
        if self._chains is not None:
            attempt("iptables", lambda: remove_chains(kube_chains() - self._chains))
        if self._lock is not None:
            self._lock.close()  # releases the node lock
            self._lock = None
        if errors:
            print("node teardown: " + "; ".join(errors))

    def _kill_shims(self) -> None:
        """Shims of this containerd still alive (their tasks were deleted, so normally none)."""
        address = str(self.containerd_sock)
        for pid_dir in Path("/proc").iterdir():
            if not pid_dir.name.isdigit():
                continue
            try:
                argv = (pid_dir / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and address.encode() in argv:
                try:
                    os.kill(int(pid_dir.name), 9)
                except ProcessLookupError:
                    pass

    def _unmount(self) -> None:
        for point in mounts_under(self.dir):
            subprocess.run(["umount", "--lazy", point], capture_output=True)

    def _remove_cgroups(self) -> None:
        for top in self._cgroups:
            if not top.exists():
                continue
            for dirpath, _dirs, _files in os.walk(top, topdown=False):
                try:
                    os.rmdir(dirpath)
                except OSError:
                    pass
        self._cgroups = [p for p in self._cgroups if p.exists()]

    def _restore_sysctls(self) -> None:
        for name, value in self._sysctls.items():
            path = Path("/proc/sys") / name
            try:
                if path.read_text().strip() != value:
                    path.write_text(value)
            except OSError:
                pass

    # --- for tests --------------------------------------------------------------------------------

    def pod(self, namespace: str, name: str) -> dict | None:
        status, data = self.cp.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return json.loads(data) if status == 200 else None

    def wait_pod(self, namespace: str, name: str, phases: Iterable[str] = ("Running",), timeout: float = 120) -> dict:
        """The pod once its phase is one of `phases` (Running also needs every container ready);
        NodeError at once if it ends in another phase, or with its events after `timeout`."""
        wanted = set(phases)

        def check():
            pod = self.pod(namespace, name)
            phase = (pod or {}).get("status", {}).get("phase")
            if pod is None or (phase not in wanted and phase not in ("Failed", "Succeeded")):
                return None
            if phase == "Running" and not all(s.get("ready") for s in pod["status"].get("containerStatuses", [])):
                return None
            return pod

        try:
            pod = c.wait_for(
                f"pod {namespace}/{name} {'/'.join(sorted(wanted))}", check, timeout, interval=0.5, proc=self.kubelet
            )
        except TimeoutError as exc:
            events = self.cp.kubectl(
                "get",
                "events",
                "-n",
                namespace,
                "--field-selector",
                f"involvedObject.name={name}",
                "-o",
                "custom-columns=R:.reason,M:.message",
            ).stdout
            raise NodeError(f"{exc}\nevents:\n{events}") from None
        if pod["status"]["phase"] not in wanted:
            raise NodeError(
                f"pod {namespace}/{name} ended {pod['status']['phase']}: {json.dumps(pod['status'])[:3000]}"
            )
        return pod
