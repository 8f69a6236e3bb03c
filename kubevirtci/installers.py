"""Installers: KubeVirt with the DRA gates and the NVMe device-plugin path, and the DRA
driver named by the profile. Each is idempotent and waits for readiness with a named
timeout."""

from __future__ import annotations

import copy
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes import utils
from kubernetes.client.rest import ApiException

from core.errors import SuiteUsageError
from core.kube import Kube
from core.profile import DriverProfile
from core.timeouts import Timeout, WaitTimeout
from core.waits import Stop, Verdict, container_failure, has_condition, poll, wait_for
from kubevirtci.discovery import DRA_GATES

NVME_DEVICE_PLUGIN = {
    "pciVendorSelector": "1b36:0010",
    "resourceName": "devices.kubevirt.io/nvme",
}
KUBEVIRT_RELEASE_URL = "https://github.com/kubevirt/kubevirt/releases/download/{version}/{file}"


def kubevirt_cr_patch(cr: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that turns on the DRA gates and permits the NVMe device-plugin
    path; None when the CR already has both (idempotence)."""
    config = copy.deepcopy((cr.get("spec") or {}).get("configuration") or {})
    dev = config.setdefault("developerConfiguration", {})
    gates = list(dev.get("featureGates") or [])
    added_gates = [g for g in DRA_GATES if g not in gates]
    permitted = config.setdefault("permittedHostDevices", {})
    pci = list(permitted.get("pciHostDevices") or [])
    has_nvme = any(d.get("resourceName") == NVME_DEVICE_PLUGIN["resourceName"] for d in pci)
    if not added_gates and has_nvme:
        return None
    dev["featureGates"] = gates + added_gates
    if not has_nvme:
        permitted["pciHostDevices"] = [*pci, dict(NVME_DEVICE_PLUGIN)]
    return {"spec": {"configuration": config}}


def _progress(message: str) -> None:
    sys.stderr.write(f"[install] {message}\n")


class KubeVirtInstaller:
    def __init__(self, kube: Kube, version: str) -> None:
        self.kube = kube
        self.version = version

    def existing_cr(self) -> dict[str, Any] | None:
        try:
            items = self.kube.list("KubeVirt")
        except ApiException as err:
            if err.status == 404:  # CRD absent: KubeVirt is not installed
                return None
            raise
        return items[0] if items else None

    def install(self) -> str:
        """Returns what was done, for the run log."""
        cr = self.existing_cr()
        action = "already installed"
        if cr is None:
            _progress(f"installing KubeVirt {self.version} (operator and CR)")
            for file in ("kubevirt-operator.yaml", "kubevirt-cr.yaml"):
                url = KUBEVIRT_RELEASE_URL.format(version=self.version, file=file)
                apply_url(self.kube, url)
            cr = self.existing_cr()
            assert cr is not None, "kubevirt-cr.yaml created no KubeVirt CR"
            action = f"installed {self.version}"
        patch = kubevirt_cr_patch(cr)
        namespace, name = cr["metadata"]["namespace"], cr["metadata"]["name"]
        if patch is not None:
            _progress(f"enabling {', '.join(DRA_GATES)} and the NVMe device-plugin path")
            self.kube.patch("KubeVirt", name, patch, namespace)
            action += ", DRA gates enabled"
        wait_for(
            self.kube, "KubeVirt", name, namespace,
            lambda o: has_condition(o, "Available"), Timeout.KUBEVIRT_AVAILABLE,
            "KubeVirt Available",
        )
        return action


class DriverInstaller:
    def __init__(self, kube: Kube, profile: DriverProfile,
                 adapt: Callable[[dict[str, Any]], dict[str, Any]] = lambda doc: doc) -> None:
        self.kube = kube
        self.profile = profile
        self.adapt = adapt

    def install(self) -> str:
        if not self.profile.manifests:
            return "driver manifests not given by the profile: expecting it installed"
        for manifest in self.profile.manifests:
            if not manifest.is_file():
                raise SuiteUsageError(
                    f"profile {self.profile.source} names missing manifest {manifest}",
                    "fix install.manifests in the profile (paths are relative to it)",
                )
            _progress(f"applying {manifest}")
            docs = [self.adapt(d) for d in yaml.safe_load_all(manifest.read_text()) if d]
            apply_documents(self.kube, docs)
            for doc in docs:
                if doc["kind"] == "DaemonSet":
                    wait_for_rollout(self.kube, doc["metadata"]["name"],
                                     doc["metadata"]["namespace"])
        wait_for(
            self.kube, "DeviceClass", self.profile.device_class, None,
            lambda o: o is not None, Timeout.DRIVER_READY, "driver DeviceClass",
        )
        wait_for_slices(self.kube, self.profile.driver)
        return f"driver {self.profile.driver} applied, ResourceSlices published"


def apply_documents(kube: Kube, documents: list[dict[str, Any] | None]) -> None:
    """Server-side apply each document: created when absent, updated when changed."""
    for doc in documents:
        if doc:
            kube.apply(doc)


def apply_url(kube: Kube, url: str) -> None:
    """Create every object of a release manifest (any kind); existing ones are kept."""
    with urllib.request.urlopen(url, timeout=60) as response:
        documents = [d for d in yaml.safe_load_all(response.read()) if d]
    for doc in documents:
        try:
            utils.create_from_dict(kube.api_client, doc)
        except utils.FailToCreateError as err:
            if any(e.status != 409 for e in err.api_exceptions):
                raise


def daemonset_rolled_out(ds: dict[str, Any] | None) -> bool:
    """Every scheduled pod runs the current template and is ready."""
    if ds is None:
        return False
    status = ds.get("status") or {}
    desired = status.get("desiredNumberScheduled", -1)
    return (
        status.get("observedGeneration", 0) >= ds["metadata"].get("generation", 1)
        and desired > 0
        and status.get("updatedNumberScheduled") == desired
        and status.get("numberReady") == desired
        and not status.get("numberUnavailable")
    )


def pods_ready_on_every_node(pods: list[dict[str, Any]], nodes: int) -> Verdict:
    """A DaemonSet's pods: one Ready on each of ``nodes`` nodes. A crash-looping pod ends
    the wait (it can look Ready between restarts, and passes ``kubectl rollout status``)."""
    for pod in pods:
        failure = container_failure(pod)
        if failure:
            return Stop(f"pod {pod['metadata']['name']} on {pod['spec'].get('nodeName')}: "
                        f"{failure}")
    ready_nodes = {p["spec"].get("nodeName") for p in pods
                   if p["metadata"].get("deletionTimestamp") is None
                   and has_condition(p, "Ready")}
    return len(ready_nodes) >= nodes


def wait_for_rollout(kube: Kube, name: str, namespace: str) -> None:
    _progress(f"waiting for DaemonSet {namespace}/{name} to roll out")
    ds = wait_for(kube, "DaemonSet", name, namespace, daemonset_rolled_out,
                  Timeout.DRIVER_READY, "DaemonSet rollout (updated and ready on every node)")
    assert ds is not None
    selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
    desired = ds["status"]["desiredNumberScheduled"]
    poll(lambda: pods_ready_on_every_node(
        kube.list("Pod", namespace, label_selector=selector), desired),
        Timeout.DRIVER_READY, f"DaemonSet {namespace}/{name}'s pods Ready on every node")


def wait_for_slices(kube: Kube, driver: str) -> None:
    """Wait until the driver has published at least one ResourceSlice with devices."""
    def published() -> bool:
        return any(
            (s.get("spec") or {}).get("driver") == driver and (s["spec"].get("devices") or [])
            for s in kube.list("ResourceSlice")
        )

    try:
        poll(published, Timeout.SLICES_PUBLISHED, f"ResourceSlices of {driver}")
    except WaitTimeout as err:
        raise WaitTimeout(f"{err}: check the driver DaemonSet's pods and logs") from err
