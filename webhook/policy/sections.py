"""The sections of a policy document compiled, one small compiler per section, into a `Policy`.

`webhook.policy.compiler` checks a document against its schema (and migrates v1alpha1) first; what
reaches these compilers is valid by the schema, and they check what a schema cannot: names Kubernetes
accepts, resources listed once, an interface each network has to itself, a fabric's fields its
transport reads, an NCCL block that keeps NCCL on RDMA. Each reports into one list of `PolicyError`s
so that one lint run names every problem of a file, in the file's order.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from webhook.grammar import k8s
from webhook.fabrics import transports
from webhook.core.model import GPUS_FIELD, Claim, Device, Dra, EnvSetting, PluginMount, Policy, Proof, Sidecar
from webhook.fabrics.gke import GkeNetwork
from webhook.fabrics.multus import Network
from webhook.policy.claim_template import ALIGNMENT_ATTRIBUTES
from webhook.policy.errors import PolicyError

_RANGE = re.compile(r"^(.*)\[(\d+)-(\d+)\]$")
_LOGGING = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")  # NCCL's logging: a user's own value wins (core.model.EnvSetting)


def _expand_devices(patterns: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for pattern in patterns:
        m = _RANGE.match(pattern)
        if m:
            stem, lo, hi = m.group(1), int(m.group(2)), int(m.group(3))
            out.extend(f"{stem}{i}" for i in range(lo, hi + 1))
        else:
            out.append(pattern)
    return tuple(out)


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strs(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _quantity_bytes(value: Any, file: str, name: str, fld: str, errors: list[PolicyError]) -> int | None:
    if value is None or not isinstance(value, (str, int, float)):
        return None
    try:
        q = k8s.parse_quantity(value)
    except ValueError:
        errors.append(PolicyError(file, name, fld, f"{value!r} is not a Kubernetes quantity (e.g. 64Gi)"))
        return None
    if q <= 0 or q != int(q):
        errors.append(PolicyError(file, name, fld, f"{value!r} must be a positive whole number of bytes"))
        return None
    return int(q)


def _check_resource(res: str, fld: str, file: str, name: str | None, errors: list[PolicyError]) -> None:
    problem = k8s.is_extended_resource_name(res)
    if problem:
        errors.append(PolicyError(file, name, fld, f"{res!r} is not a valid extended resource name: {problem}"))


# -- one compiler per section of a policy document ------------------------------------------
# Each takes the document (valid by the schema), appends what is wrong with its section to `errors`
# and returns it compiled; `compile_sections` runs them in the file's order and builds the Policy.


def compile_sections(doc: dict[str, Any], file: str, name: str | None) -> tuple[Policy | None, list[PolicyError]]:
    """The Policy of a document the schema accepts (v1alpha2), or (None, every problem of its sections)."""
    errors: list[PolicyError] = []
    if isinstance(name, str) and not k8s.is_dns1123_label(name):
        errors.append(PolicyError(file, name, "name", "must be a DNS-1123 label (lowercase letters, digits and '-')"))
    gpu_resources = _gpu_resources(doc, file, name, errors)
    devices = _devices(doc, file, name, errors)
    equivalent = _equivalent_resources(doc, file, name, errors)
    networks = _networks(doc, file, name, errors)
    gke_networks = _gke_networks(doc, networks, file, name, errors)
    plugin_mounts = tuple(
        PluginMount(m["hostDir"].rstrip("/") or "/", m["mountPath"].rstrip("/") or "/")
        for m in doc.get("pluginMounts") or ()
    )
    sidecar = Sidecar(doc["sidecar"]["name"], doc["sidecar"]["image"]) if doc.get("sidecar") is not None else None
    claim = _claim(doc, file, name, errors)
    dra = _dra(doc, file, name, errors)
    families = _families(doc, devices, networks)
    host_network = _host_network(doc, devices, networks, gke_networks, claim, dra, file, name, errors)
    shm_fixed, shm_per_gpu, shm_max = _shm(doc, file, name, errors)
    fabric, table = _fabric(doc, file, name, errors)
    env = _nccl(doc, fabric, table, bool(networks or gke_networks), file, name, errors)
    if errors:
        return None, errors

    selector_spec = doc["namespaceSelector"]
    own = tuple([d.resource for d in devices] + [n.resource for n in networks if n.resource])
    return Policy(
        name=name,
        description=doc["description"].strip(),
        source=file,
        priority=int(doc.get("priority", 0)),
        selector_spec=selector_spec,
        selector_size=k8s.selector_size(selector_spec),
        gpu_resources=gpu_resources,
        fabric=fabric,
        signatures=table,
        watched=tuple(sig.variable for sig in table),
        warned=tuple(sig.variable for sig in table if sig.severity == transports.WARN),
        scanned=frozenset([sig.variable for sig in table] + ["NCCL_DEBUG"]),
        devices=tuple(devices),
        networks=tuple(networks),
        claim=claim,
        equivalent_resources=equivalent,
        dra=dra,
        families=families,
        host_network=host_network,
        own_resources=own,
        expected_resources=frozenset((*own, *gpu_resources)),
        network_resources=frozenset(
            n.resource for n in networks if n.resource and transports.NETWORK_DEVICE in families
        ),
        shm_fixed=shm_fixed,
        shm_per_gpu=shm_per_gpu,
        shm_max=shm_max,
        env=tuple(env),
        workload_validation=doc.get("workloadValidation", "Deny"),
        allows_namespace=k8s.compile_selector(selector_spec),
        gke_networks=tuple(gke_networks),
        plugin_mounts=plugin_mounts,
        sidecar=sidecar,
        proof=_proof(doc),
    ), []


def _gpu_resources(doc: dict[str, Any], file: str, name: str | None, errors: list[PolicyError]) -> tuple[str, ...]:
    gpu_resources = tuple(_strs(doc.get("gpuResources")) or ("nvidia.com/gpu",))
    for i, res in enumerate(gpu_resources):
        _check_resource(res, f"gpuResources[{i}]", file, name, errors)
    return gpu_resources


def _devices(doc: dict[str, Any], file: str, name: str | None, errors: list[PolicyError]) -> list[Device]:
    devices = []
    for i, d in enumerate(doc.get("devices") or ()):
        _check_resource(d["resource"], f"devices[{i}].resource", file, name, errors)
        devices.append(Device(d["resource"], int(d.get("count", 1)), bool(d.get("perGpu", False))))
    if len({d.resource for d in devices}) != len(devices):
        errors.append(PolicyError(file, name, "devices", "a resource is listed twice; give each rail its own resource"))
    return devices


def _equivalent_resources(
    doc: dict[str, Any], file: str, name: str | None, errors: list[PolicyError]
) -> tuple[str, ...]:
    equivalent = tuple(doc.get("equivalentResources") or ())
    for i, res in enumerate(equivalent):
        _check_resource(res, f"equivalentResources[{i}]", file, name, errors)
    return equivalent


def _networks(doc: dict[str, Any], file: str, name: str | None, errors: list[PolicyError]) -> list[Network]:
    """The Multus networks: valid names, an interface name each network has to itself."""
    networks = []
    interfaces: set[str] = set()
    for i, n in enumerate(doc.get("networks") or ()):
        if not k8s.is_dns1123_label(n["name"]):
            errors.append(
                PolicyError(
                    file, name, f"networks[{i}].name", f"{n['name']!r} is not a valid NetworkAttachmentDefinition name"
                )
            )
        if "namespace" in n and not k8s.is_dns1123_label(n["namespace"]):
            errors.append(
                PolicyError(file, name, f"networks[{i}].namespace", f"{n['namespace']!r} is not a valid namespace name")
            )
        if n.get("resource") is not None:
            _check_resource(n["resource"], f"networks[{i}].resource", file, name, errors)
        iface = n.get("interface")
        if iface is not None:
            if iface in interfaces or iface in ("eth0", "lo"):
                errors.append(
                    PolicyError(
                        file,
                        name,
                        f"networks[{i}].interface",
                        f"{iface!r} is taken (by another network, or eth0/lo of the pod network)",
                    )
                )
            interfaces.add(iface)
        networks.append(
            Network(
                n["name"],
                n.get("namespace"),
                iface,
                n.get("resource"),
                int(n.get("count", 1)),
                bool(n.get("perGpu", False)),
            )
        )
    if len({(n.namespace, n.name) for n in networks}) != len(networks):
        errors.append(PolicyError(file, name, "networks", "a network is listed twice"))
    return networks


def _gke_networks(
    doc: dict[str, Any], networks: list[Network], file: str, name: str | None, errors: list[PolicyError]
) -> list[GkeNetwork]:
    """GKE multi-networking's networks: as the Multus ones, and never together with them."""
    gke_networks = []
    gke_interfaces: set[str] = set()
    for i, g in enumerate(doc.get("gkeNetworks") or ()):
        if not k8s.is_dns1123_label(g["name"]) or g["name"] == "default":
            errors.append(
                PolicyError(
                    file,
                    name,
                    f"gkeNetworks[{i}].name",
                    f"{g['name']!r} is not the name of a GKE Network besides the pod network 'default'",
                )
            )
        iface = g.get("interface")
        if iface is not None:
            if iface in gke_interfaces or iface in ("eth0", "lo"):
                errors.append(
                    PolicyError(
                        file,
                        name,
                        f"gkeNetworks[{i}].interface",
                        f"{iface!r} is taken (by another network, or eth0/lo of the pod network)",
                    )
                )
            gke_interfaces.add(iface)
        gke_networks.append(GkeNetwork(g["name"], iface))
    if len({g.name for g in gke_networks}) != len(gke_networks):
        errors.append(PolicyError(file, name, "gkeNetworks", "a network is listed twice"))
    if gke_networks and networks:
        errors.append(
            PolicyError(
                file,
                name,
                "gkeNetworks",
                "a pod is attached by Multus (networks) or by GKE multi-networking "
                "(gkeNetworks), not both: give one of them",
            )
        )
    return gke_networks


def _claim(doc: dict[str, Any], file: str, name: str | None, errors: list[PolicyError]) -> Claim | None:
    """The DRA claim the policy adds: its entry name and the templates it is made from or taken for."""
    if doc.get("claim") is None:
        return None
    c = doc["claim"]
    if not k8s.is_dns1123_label(c["name"]):
        errors.append(
            PolicyError(
                file, name, "claim.name", f"{c['name']!r} must be a DNS-1123 label (the pod's resourceClaims entry)"
            )
        )
    aligned = bool(c.get("aligned", False))
    for fld, template in [
        ("claim.template", c["template"]),
        *((f"claim.equivalentTemplates[{i}]", t) for i, t in enumerate(c.get("equivalentTemplates") or ())),
    ]:
        if GPUS_FIELD in template and not (aligned and fld == "claim.template"):
            errors.append(
                PolicyError(
                    file,
                    name,
                    fld,
                    f"{template!r}: {GPUS_FIELD} (the GPU count) is for the template of an aligned claim",
                )
            )
        elif not k8s.is_dns1123_subdomain(template.replace(GPUS_FIELD, "8")):
            errors.append(PolicyError(file, name, fld, f"{template!r} is not a valid ResourceClaimTemplate name"))
    if "alignment" in c and not aligned:
        errors.append(PolicyError(file, name, "claim.alignment", "only meaningful with claim.aligned: true"))
    attribute = ALIGNMENT_ATTRIBUTES[c.get("alignment", "pcieRoot")]
    return Claim(c["name"], c["template"], tuple(c.get("equivalentTemplates") or ()), aligned, attribute)


def _dra(doc: dict[str, Any], file: str, name: str | None, errors: list[PolicyError]) -> Dra | None:
    """The DeviceClasses (by name or by driver) that are this fabric's NICs."""
    if doc.get("dra") is None:
        return None
    d = doc["dra"]
    for i, cls in enumerate(d.get("deviceClasses") or ()):
        if not k8s.is_dns1123_subdomain(cls):
            errors.append(
                PolicyError(file, name, f"dra.deviceClasses[{i}]", f"{cls!r} is not a valid DeviceClass name")
            )
    for i, driver in enumerate(d.get("drivers") or ()):
        if not k8s.is_dns1123_subdomain(driver):
            errors.append(
                PolicyError(
                    file, name, f"dra.drivers[{i}]", f"{driver!r} is not a valid DRA driver name (a DNS subdomain)"
                )
            )
    if d.get("selectors") and not d.get("drivers"):
        errors.append(
            PolicyError(
                file, name, "dra.selectors", "narrows the classes of dra.drivers, and there are none: add drivers"
            )
        )
    if not d.get("deviceClasses") and not d.get("drivers"):
        errors.append(
            PolicyError(
                file, name, "dra", "give deviceClasses or drivers: the DeviceClasses that are this fabric's NICs"
            )
        )
    return Dra(
        frozenset(d.get("deviceClasses") or ()), frozenset(d.get("drivers") or ()), tuple(d.get("selectors") or ())
    )


def _families(doc: dict[str, Any], devices: list[Device], networks: list[Network]) -> frozenset[str]:
    """The device families the policy belongs to: as given, else those of its own devices."""
    if "deviceFamilies" in doc:
        return frozenset(doc["deviceFamilies"])
    derived = []
    if any(dv.resource.startswith(transports.SHARED_DEVICE_PREFIX) for dv in devices):
        derived.append(transports.RDMA_SHARED)
    if networks:
        derived.append(transports.NETWORK_DEVICE)
    return frozenset(derived)


def _host_network(
    doc: dict[str, Any],
    devices: list[Device],
    networks: list[Network],
    gke_networks: list[GkeNetwork],
    claim: Claim | None,
    dra: Dra | None,
    file: str,
    name: str | None,
    errors: list[PolicyError],
) -> str:
    """What pods must do about hostNetwork; and a policy gives some way to its fabric."""
    host_network: str = doc.get("hostNetwork") or ("Forbidden" if networks or gke_networks else "Allowed")
    if host_network == "Required" and networks:
        errors.append(
            PolicyError(
                file,
                name,
                "hostNetwork",
                "Required with Multus networks: Multus attaches no networks to host-network pods",
            )
        )
    if host_network == "Required" and gke_networks:
        errors.append(
            PolicyError(
                file,
                name,
                "hostNetwork",
                "Required with gkeNetworks: GKE attaches no additional networks to host-network pods",
            )
        )
    if (
        not devices
        and not networks
        and not gke_networks
        and claim is None
        and dra is None
        and host_network != "Required"
    ):
        errors.append(
            PolicyError(
                file,
                name,
                "devices",
                "the policy gives no device resource, Multus network or DRA claim "
                "and names no DRA DeviceClass: give one, or set hostNetwork: Required "
                "for a fabric reached through the host's interfaces",
            )
        )
    return host_network


def _shm(
    doc: dict[str, Any], file: str, name: str | None, errors: list[PolicyError]
) -> tuple[int | None, int | None, int | None]:
    """/dev/shm: (fixed size, size per GPU, its maximum) in bytes."""
    shm = _obj(doc.get("shm"))
    if "shm" in doc and ("sizeLimit" in shm) == ("perGpu" in shm):
        errors.append(
            PolicyError(file, name, "shm", "give exactly one of sizeLimit (fixed) or perGpu (with an optional max)")
        )
    if "max" in shm and "perGpu" not in shm:
        errors.append(PolicyError(file, name, "shm.max", "only meaningful with shm.perGpu"))
    shm_fixed = _quantity_bytes(shm.get("sizeLimit"), file, name, "shm.sizeLimit", errors)
    shm_per_gpu = _quantity_bytes(shm.get("perGpu"), file, name, "shm.perGpu", errors)
    shm_max = _quantity_bytes(shm.get("max"), file, name, "shm.max", errors)
    return shm_fixed, shm_per_gpu, shm_max


def _fabric(
    doc: dict[str, Any], file: str, name: str | None, errors: list[PolicyError]
) -> tuple[transports.Fabric, tuple[transports.Signature, ...]]:
    """The fabric and its transport's signature table: the fields that transport reads."""
    fab = doc["fabric"]
    transport = fab.get("transport", "ib-verbs")
    nets = tuple(fab["ncclNet"])
    if any(n.casefold() == "socket" for n in nets):
        errors.append(PolicyError(file, name, "fabric.ncclNet", "'Socket' is NCCL's TCP transport, not an RDMA fabric"))
    judged = {sig.variable for sig in transports.signatures(transport)}
    if "NCCL_IB_HCA" in judged and not fab.get("hcaDevices"):
        errors.append(
            PolicyError(
                file,
                name,
                "fabric.hcaDevices",
                f"required for the {transport} transport (the device names NCCL_IB_HCA must keep)",
            )
        )
    if "FI_PROVIDER" in judged and not fab.get("providers"):
        errors.append(
            PolicyError(
                file,
                name,
                "fabric.providers",
                f"required for the {transport} transport (the FI_PROVIDER values that are RDMA, e.g. efa)",
            )
        )
    for fld in ("hcaDevices", "providers"):
        if fld in fab and ("NCCL_IB_HCA" if fld == "hcaDevices" else "FI_PROVIDER") not in judged:
            errors.append(PolicyError(file, name, f"fabric.{fld}", f"not read by the {transport} transport"))
    fabric = transports.Fabric(
        str(name),
        fab["kind"],
        transport,
        nets,
        _expand_devices(fab.get("hcaDevices") or ()),
        tuple(fab.get("providers") or ()),
        tuple(fab.get("netPlugins") or ()),
    )
    return fabric, transports.signatures(transport)


def _nccl(
    doc: dict[str, Any],
    fabric: transports.Fabric,
    table: tuple[transports.Signature, ...],
    has_networks: bool,
    file: str,
    name: str | None,
    errors: list[PolicyError],
) -> list[EnvSetting]:
    """The NCCL block: valid names, `{interface}` only with networks, and no value that would
    itself send NCCL to TCP."""
    env: list[EnvSetting] = []
    for var, spec in _obj(doc.get("nccl")).items():
        if not isinstance(spec, str) and not (isinstance(spec, dict) and isinstance(spec.get("value"), str)):
            continue  # reported by the schema
        value, enforce = (spec, False) if isinstance(spec, str) else (spec["value"], bool(spec.get("enforce", False)))
        if not isinstance(var, str) or not k8s.is_env_name(var):
            errors.append(PolicyError(file, name, f"nccl.{var}", "not a valid environment variable name"))
            continue
        templated = "{interface" in value
        if templated and not has_networks:
            errors.append(
                PolicyError(
                    file,
                    name,
                    f"nccl.{var}",
                    "{interface}/{interfaces} name the policy's Multus or GKE interfaces, and it has no networks",
                )
            )
        logs = var in _LOGGING and not enforce  # a user's own wins (EnvSetting.yields_to_env_from, only_with)
        env.append(
            EnvSetting(var, value, enforce, templated, logs, "NCCL_DEBUG" if logs and var != "NCCL_DEBUG" else None)
        )
        # The policy's own block must not be what sends NCCL to TCP.
        for sig in table:
            if sig.variable == var and sig.severity == transports.DENY and not templated:
                why = sig.judge(value, fabric)
                if why:
                    effect = why.rsplit("; ", 1)[0] if "; " in why else why
                    errors.append(
                        PolicyError(
                            file,
                            name,
                            f"nccl.{var}",
                            f"{effect}: this policy would put it into every pod it injects; give "
                            f"{var} a value that keeps the {fabric.kind} fabric on RDMA, or leave "
                            f"it out of the nccl block",
                        )
                    )
    return env


def _proof(doc: dict[str, Any]) -> Proof | None:
    """The `proof` section (valid by the schema), its device ranges expanded as hcaDevices' are."""
    spec = doc.get("proof")
    if not isinstance(spec, dict):
        return None
    devices = _expand_devices(spec["devices"]) if spec.get("devices") else None
    return Proof(spec.get("transport"), devices, spec.get("gdr"), spec.get("rails"), spec.get("onFallback", "report"))
