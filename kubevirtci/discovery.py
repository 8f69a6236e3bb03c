"""Capability discovery from a cluster's API, through a read-only path reader so that
recorded API responses can stand in for a cluster in the unit tests."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from core.errors import SuiteUsageError
from core.profile import DriverProfile
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.releases import Release, release_for

DRA_GATES = ("HostDevices", "HostDevicesWithDRA", "GPUsWithDRA")
PERSISTENT_CLAIMS_GATE = "PersistentDRAClaims"
# The standard attribute of a device's NUMA node (k8s.io/dynamic-resource-allocation
# deviceattribute), which claims align devices of several drivers on.
NUMA_NODE = "resource.kubernetes.io/numaNode"


class ApiReader(Protocol):
    def get(self, path: str) -> dict[str, Any] | None:
        """Decoded JSON at ``path``; None when the path is not served (404)."""


@dataclass
class ClusterFacts:
    server_version: str = "unknown"
    dra_versions: list[str] = field(default_factory=list)
    dra_kinds: list[str] = field(default_factory=list)  # resources of resource.k8s.io/v1
    kubevirt_version: str | None = None
    kubevirt_namespace: str | None = None
    kubevirt_phase: str | None = None
    kubevirt_gates: list[str] = field(default_factory=list)
    kubevirt_api_ready: bool = False  # virt-api serves (admission, subresources)
    kubevirt_permits_host_devices: bool = False  # configuration.permittedHostDevices set
    drivers: dict[str, int] = field(default_factory=dict)  # driver -> device count
    devices_per_node: dict[str, dict[str, int]] = field(default_factory=dict)
    # driver -> (node, NUMA node) -> its devices there (those with the NUMA_NODE attribute)
    devices_per_numa_node: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)
    device_plugin_resources: dict[str, dict[str, str]] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    # whether a node's kernel shows a vfio-pci function's vfio-dev device without its
    # /dev/vfio/devices node (None: not known: no node reached, or none bound to vfio-pci)
    vfio_cdev_missing: bool | None = None
    # node -> the state of the profile's kubelet plugin pod there (plugin_pod_states)
    plugin_pods: dict[str, str] = field(default_factory=dict)

    @property
    def kubevirt_release(self) -> Release | None:
        return release_for(parse_version(self.kubevirt_version))


def parse_version(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a release or of a build of a tree (`git describe`)."""
    if not version:
        return None
    core = version.lstrip("v").split("-")[0].split("+")[0].split(".")
    try:
        return int(core[0]), int(core[1]), int(core[2]) if len(core) > 2 else 0
    except (IndexError, ValueError):
        return None


def effective_gates(kubevirt_cr: dict[str, Any], version: str | None) -> list[str]:
    """Gates on in a KubeVirt CR: listed ones, plus the gates its release turns on by
    default (beta from v1.9), less explicitly disabled ones."""
    dev = ((kubevirt_cr.get("spec") or {}).get("configuration") or {}).get(
        "developerConfiguration"
    ) or {}
    enabled = set(dev.get("featureGates") or [])
    # v1.9.0 featuregate.IsEnabled: listed in disabledFeatureGates -> off.
    disabled = set(dev.get("disabledFeatureGates") or [])
    release = release_for(parse_version(version))
    if release:
        enabled |= release.default_on_gates()
    return sorted(enabled - disabled)


def plugin_pods_path(selector: str) -> str:
    return f"/api/v1/pods?labelSelector={quote(selector, safe='')}"


def plugin_pod_states(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Each node's kubelet plugin pod and its state: the reason a container waits
    (CrashLoopBackOff, ImagePullBackOff), else the pod's phase."""
    states: dict[str, str] = {}
    for pod in pods:
        status = pod.get("status") or {}
        waiting = [((c.get("state") or {}).get("waiting") or {}).get("reason")
                   for c in status.get("containerStatuses") or []]
        node = (pod.get("spec") or {}).get("nodeName") or "(no node yet)"
        states[node] = next((w for w in waiting if w), status.get("phase") or "Unknown")
    return states


def discover(api: ApiReader, plugin_pod_selector: str = "") -> ClusterFacts:
    """The cluster's facts; ``plugin_pod_selector``: the driver under test's kubelet
    plugin pods, whose nodes tell a driver that runs from one that is not there."""
    facts = ClusterFacts()
    version = api.get("/version") or {}
    facts.server_version = version.get("gitVersion", "unknown")

    group = api.get("/apis/resource.k8s.io") or {}
    facts.dra_versions = [v["version"] for v in group.get("versions", [])]

    nodes = (api.get("/api/v1/nodes") or {}).get("items", [])
    facts.nodes = sorted(n["metadata"]["name"] for n in nodes)
    for node in nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        extended = {k: v for k, v in allocatable.items() if "/" in k and v not in ("0", 0)}
        if extended:
            facts.device_plugin_resources[node["metadata"]["name"]] = extended

    if "v1" in facts.dra_versions:
        resources = (api.get("/apis/resource.k8s.io/v1") or {}).get("resources", [])
        facts.dra_kinds = sorted(r["name"] for r in resources if "/" not in r["name"])
        slices = (api.get("/apis/resource.k8s.io/v1/resourceslices") or {}).get("items", [])
        for s in slices:
            spec = s.get("spec") or {}
            driver = spec.get("driver", "?")
            count = len(spec.get("devices") or [])
            facts.drivers[driver] = facts.drivers.get(driver, 0) + count
            node = spec.get("nodeName") or "(network)"
            per_node = facts.devices_per_node.setdefault(driver, {})
            per_node[node] = per_node.get(node, 0) + count
            facts.devices_per_numa_node.setdefault(driver, Counter()).update(
                (node, str(attributes[NUMA_NODE]))
                for attributes in ((d.get("attributes") or {}) for d in spec.get("devices") or [])
                if NUMA_NODE in attributes)
    if plugin_pod_selector:
        pods = (api.get(plugin_pods_path(plugin_pod_selector)) or {}).get("items", [])
        facts.plugin_pods = plugin_pod_states(pods)

    if api.get("/apis/kubevirt.io/v1") is not None:
        crs = (api.get("/apis/kubevirt.io/v1/kubevirts") or {}).get("items", [])
        if crs:
            cr = crs[0]
            status = cr.get("status") or {}
            facts.kubevirt_namespace = cr["metadata"].get("namespace")
            facts.kubevirt_phase = status.get("phase")
            facts.kubevirt_version = status.get("observedKubeVirtVersion") or status.get(
                "operatorVersion"
            )
            facts.kubevirt_gates = effective_gates(cr, facts.kubevirt_version)
            config = (cr.get("spec") or {}).get("configuration") or {}
            facts.kubevirt_permits_host_devices = bool(config.get("permittedHostDevices"))
            virt_api = api.get(f"/apis/apps/v1/namespaces/{facts.kubevirt_namespace}"
                               "/deployments/virt-api") or {}
            facts.kubevirt_api_ready = bool(
                (virt_api.get("status") or {}).get("availableReplicas"))
    return facts


def capabilities_from(
    facts: ClusterFacts, driver: str, device_plugin_resource: str | None
) -> Capabilities:
    """What the discovered facts grant. Provider-declared capabilities (guest and node
    access, VFIO) are added by the provider on top."""
    caps = Capabilities()
    if "v1" in facts.dra_versions:
        caps.grant(Capability.DRA_API)
    else:
        served = ", ".join(facts.dra_versions) or "no resource.k8s.io version"
        caps.deny(
            Capability.DRA_API,
            f"cluster {facts.server_version} serves {served}; resource.k8s.io/v1 needs "
            "Kubernetes 1.34+",
        )
    if "devicetaintrules" in facts.dra_kinds:
        caps.grant(Capability.DEVICE_TAINTS)
    else:
        caps.deny(Capability.DEVICE_TAINTS, f"cluster {facts.server_version} does not serve "
                  "resource.k8s.io/v1 DeviceTaintRule (KEP-5055, GA in Kubernetes 1.37)")
    _driver_capabilities(facts, driver, caps)
    _kubevirt_capabilities(facts, caps)
    if device_plugin_resource and any(
        device_plugin_resource in r for r in facts.device_plugin_resources.values()
    ):
        caps.grant(Capability.DEVICE_PLUGIN_NVME)
    else:
        caps.deny(
            Capability.DEVICE_PLUGIN_NVME,
            f"no node has allocatable {device_plugin_resource or '(profile names none)'}",
        )
    return caps


def unpublished(driver: str, plugin_pods: dict[str, str]) -> str:
    """The root cause every test of a driver that publishes no device fails with."""
    where = ", ".join(f"{node} ({state})" for node, state in sorted(plugin_pods.items()))
    return f"driver {driver} publishes no device, yet its kubelet plugin is on {where}"


def _driver_capabilities(facts: ClusterFacts, driver: str, caps: Capabilities) -> None:
    """The driver under test is the subject, never a missing feature: one whose plugin is
    there and publishes no device is faulty (its tests fail); one that is not there at
    all stops the run (check_driver_present)."""
    needs_devices = (Capability.DRA_DRIVER, Capability.TWO_DEVICES_PER_NODE,
                     Capability.TWO_DEVICES_PER_NUMA_NODE)
    if not caps.has(Capability.DRA_API):  # no slices to read: the API's reason says why
        for cap in needs_devices:
            caps.deny(cap, caps.reason_missing(Capability.DRA_API))
    elif facts.drivers.get(driver):
        caps.grant(Capability.DRA_DRIVER)
        if any(n >= 2 for n in facts.devices_per_node.get(driver, {}).values()):
            caps.grant(Capability.TWO_DEVICES_PER_NODE)
        else:
            caps.deny(Capability.TWO_DEVICES_PER_NODE, f"no node has two {driver} devices")
        if max(facts.devices_per_numa_node.get(driver, Counter()).values(), default=0) >= 2:
            caps.grant(Capability.TWO_DEVICES_PER_NUMA_NODE)
        else:
            caps.deny(Capability.TWO_DEVICES_PER_NUMA_NODE,
                      f"no two {driver} devices of a node share a {NUMA_NODE}: its nodes are "
                      "not NUMA machines (the hermetic cluster's are with --numa-nodes 2)")
    elif facts.plugin_pods or driver in facts.drivers:
        reason = (unpublished(driver, facts.plugin_pods) if facts.plugin_pods else
                  f"driver {driver} publishes no device: its ResourceSlices list none")
        for cap in needs_devices:
            caps.fault(cap, f"{reason} (SANITY-001 names what the nodes have)")
    else:
        for cap in needs_devices:
            caps.deny(cap, f"driver {driver} is not on this cluster")


def check_driver_present(facts: ClusterFacts, profile: DriverProfile) -> None:
    """Raise SuiteUsageError when the profile's driver is not on the cluster at all: no
    ResourceSlice of it and no pod of its kubelet plugin. That is bad input (the wrong
    profile, a driver not installed), not a test result."""
    driver = profile.driver
    if "v1" not in facts.dra_versions or driver in facts.drivers or facts.plugin_pods:
        return
    others = ", ".join(sorted(facts.drivers)) or "none"
    raise SuiteUsageError(
        f"driver {driver} (profile {profile.name}) is not on this cluster: no ResourceSlice "
        f"of it and no pod of its kubelet plugin ({profile.plugin_pod_selector}); other "
        f"drivers seen: {others}",
        "install the driver (the profile's install.manifests, on a provider that installs "
        "it), set the profile's pluginPodSelector to its plugin pods' labels, or pass "
        "--profile for the driver the cluster runs")


def _kubevirt_capabilities(facts: ClusterFacts, caps: Capabilities) -> None:
    kubevirt_dependent = (
        Capability.KUBEVIRT,
        Capability.RUNNING_VMS,
        Capability.KUBEVIRT_DRA_GATES,
        Capability.LAUNCHER_METADATA,
        Capability.KUBEVIRT_DEVICE_STATUS,
        Capability.PERSISTENT_DRA_CLAIMS,
    )
    if facts.kubevirt_version is None:
        for cap in kubevirt_dependent:
            caps.deny(cap, "KubeVirt is not installed on this cluster")
        return
    deployed = facts.kubevirt_phase == "Deployed"
    if not deployed and not facts.kubevirt_api_ready:
        for cap in kubevirt_dependent:
            caps.deny(cap, f"KubeVirt {facts.kubevirt_version} is {facts.kubevirt_phase}")
        return
    caps.grant(Capability.KUBEVIRT)
    if deployed:
        caps.grant(Capability.RUNNING_VMS)
    else:  # virt-api serves, but the CR waits for the rest (virt-handler on every node)
        caps.deny(Capability.RUNNING_VMS,
                  f"KubeVirt {facts.kubevirt_version} is {facts.kubevirt_phase}: its node "
                  "agents (virt-handler) are not ready")
    missing = [g for g in DRA_GATES if g not in facts.kubevirt_gates]
    known = facts.kubevirt_release
    if missing:
        maturity = f" ({', '.join(f'{g}: {known.gates[g].maturity}' for g in missing)} in "\
            f"{known.name})" if known else ""
        caps.deny(
            Capability.KUBEVIRT_DRA_GATES,
            f"KubeVirt feature gates {', '.join(missing)} are off{maturity}; add them to "
            "spec.configuration.developerConfiguration.featureGates",
        )
    else:
        caps.grant(Capability.KUBEVIRT_DRA_GATES)
    version = parse_version(facts.kubevirt_version) or (0, 0, 0)
    release = release_for(version)
    if release is None:
        why = (f"KubeVirt {facts.kubevirt_version} is older than v1.6, which brought DRA"
               if version > (0, 0, 0) else
               f"KubeVirt's version {facts.kubevirt_version!r} cannot be read as a release")
        for cap in (Capability.LAUNCHER_METADATA, Capability.KUBEVIRT_DEVICE_STATUS):
            caps.deny(cap, why)
    if release is not None and release.metadata_versions:
        caps.grant(Capability.LAUNCHER_METADATA)
        caps.deny(Capability.KUBEVIRT_DEVICE_STATUS,
                  f"status.deviceStatus DRA attributes were removed in v1.8.0 "
                  f"(cluster runs {facts.kubevirt_version})")
    elif release is not None:
        caps.deny(Capability.LAUNCHER_METADATA,
                  f"KubeVirt {facts.kubevirt_version} predates KEP-5304 metadata files (v1.8+)")
        caps.grant(Capability.KUBEVIRT_DEVICE_STATUS)
    if PERSISTENT_CLAIMS_GATE in facts.kubevirt_gates:
        caps.grant(Capability.PERSISTENT_DRA_CLAIMS)
    elif version < (1, 10):
        # pkg/virt-config/featuregate of v1.9.0 and earlier defines no such gate.
        caps.deny(
            Capability.PERSISTENT_DRA_CLAIMS,
            f"KubeVirt {facts.kubevirt_version} lacks VEP 344 (its feature gates have no "
            f"{PERSISTENT_CLAIMS_GATE}; VM-owned claims are not in any release up to v1.9)",
        )
    else:
        caps.deny(
            Capability.PERSISTENT_DRA_CLAIMS,
            f"feature gate {PERSISTENT_CLAIMS_GATE} (VEP 344) is not enabled on this cluster",
        )
