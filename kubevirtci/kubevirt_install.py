"""KubeVirt installed as users install it: its operator manifest, then a KubeVirt CR with
the DRA gates, ``HostDevices`` and the NVMe device-plugin path. Each component is
awaited; a component that is not ready is named with its pods' events and log tail."""

from __future__ import annotations

import copy
import math
import urllib.request
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes.client.rest import ApiException

from core.errors import SuiteUsageError
from core.kube import Kube
from core.timeouts import Timeout, WaitFailed, WaitTimeout, timeout_scale
from core.waits import Verdict, has_condition, is_absent, poll, wait_for
from kubevirtci.discovery import DRA_GATES, parse_version
from kubevirtci.installers import log, pod_failure, pods_of

NVME_DEVICE_PLUGIN = {
    "pciVendorSelector": "1b36:0010",
    "resourceName": "devices.kubevirt.io/nvme",
}
RELEASE_URL = "https://github.com/kubevirt/kubevirt/releases/download/{version}/{file}"
CR_NAME = "kubevirt"
CONTROL_PLANE = ("virt-api", "virt-controller")  # what the operator deploys first
STARTUP_PROBE_PERIOD = 10  # seconds


def release_operator_manifest(version: str) -> list[dict[str, Any]]:
    """The release's kubevirt-operator.yaml, as users apply it."""
    url = RELEASE_URL.format(version=version, file="kubevirt-operator.yaml")
    with urllib.request.urlopen(url, timeout=60) as response:
        return [d for d in yaml.safe_load_all(response.read()) if d]


def with_operator_startup_window(docs: list[dict[str, Any]], seconds: float
                                 ) -> list[dict[str, Any]]:
    """The operator manifest with a startup probe on virt-operator that asks its liveness
    probe's question for ``seconds``. Before its ``main``, virt-operator builds the OpenAPI
    validator of every KubeVirt API (``pkg/virt-api/definitions``: 3.5 s of CPU on a fast
    host); on slow nodes that outlasts the liveness probe's window (about 35 s) and the
    kubelet restarts it forever. The liveness probe stays KubeVirt's own from the first
    answer on."""
    docs = copy.deepcopy(docs)
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if liveness := container.get("livenessProbe"):
                container["startupProbe"] = {
                    **liveness, "initialDelaySeconds": 0, "successThreshold": 1,
                    "periodSeconds": STARTUP_PROBE_PERIOD,
                    "failureThreshold": math.ceil(seconds / STARTUP_PROBE_PERIOD)}
    return docs


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


def kubevirt_cr(namespace: str, configuration: dict[str, Any]) -> dict[str, Any]:
    """A KubeVirt CR with the provider's configuration plus the DRA gates and the NVMe
    device-plugin path."""
    cr: dict[str, Any] = {
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": CR_NAME, "namespace": namespace},
        "spec": {"imagePullPolicy": "IfNotPresent",
                 "configuration": copy.deepcopy(configuration)},
    }
    patch = kubevirt_cr_patch(cr)
    if patch is not None:
        cr["spec"]["configuration"] = patch["spec"]["configuration"]
    return cr


class KubeVirtInstaller:
    """Installs KubeVirt from ``manifest()`` (its operator manifest), or replaces the
    installed KubeVirt when it is another build; ``manifest`` None: KubeVirt was
    deployed by other means (a tree's ``make cluster-sync``) and gets its gates only."""

    def __init__(self, kube: Kube, version: str,
                 manifest: Callable[[], list[dict[str, Any]]] | None,
                 configuration: dict[str, Any], await_node_agents: bool = True) -> None:
        self.kube = kube
        self.version = version
        self.manifest = manifest
        self.configuration = configuration
        self.await_node_agents = await_node_agents

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
        installed = installed_version(cr)
        if cr is not None and self.manifest is not None and installed != self.version:
            log.info(f"KubeVirt {installed} is installed: removing it for {self.version}")
            self._remove(cr)
            cr, action = None, f"replaced {installed}: "
        if cr is None:
            if self.manifest is None:
                raise SuiteUsageError("KubeVirt was to be deployed, and no KubeVirt CR exists",
                                      "check the deployment's output above")
            log.info(f"installing KubeVirt {self.version}: operator manifest")
            docs = self.manifest()
            if timeout_scale() > 1:  # nodes declared slow
                window = Timeout.KUBEVIRT_OPERATOR_READY.seconds
                log.info(f"slow nodes (timeouts x{timeout_scale():g}): virt-operator gets "
                         f"{window:.0f} s to start before its liveness probe counts")
                docs = with_operator_startup_window(docs, window)
            for doc in docs:
                self.kube.apply(doc)
            operator = next(d for d in docs if d["kind"] == "Deployment")
            namespace = operator["metadata"]["namespace"]
            wait_for(self.kube, "CustomResourceDefinition", "kubevirts.kubevirt.io", None,
                     lambda o: has_condition(o, "Established"), Timeout.CRD_ESTABLISHED,
                     "the KubeVirt CRD to be established")
            wait_until_deployment_available(self.kube, operator["metadata"]["name"], namespace,
                                Timeout.KUBEVIRT_OPERATOR_READY)
            log.info("creating the KubeVirt CR (DRA gates, HostDevices, NVMe device plugin)")
            cr = self.kube.apply(kubevirt_cr(namespace, self.configuration))
            action = ("" if action == "already installed" else action) + \
                f"installed {self.version} with its operator"
            if timeout_scale() > 1:
                action += " (a startup probe on virt-operator: slow nodes)"
        patch = kubevirt_cr_patch(cr)
        namespace, name = cr["metadata"]["namespace"], cr["metadata"]["name"]
        if patch is not None:
            log.info(f"enabling {', '.join(DRA_GATES)} and the NVMe device-plugin path")
            self.kube.patch("KubeVirt", name, patch, namespace)
            action += ", DRA gates enabled"
        for component in CONTROL_PLANE:
            wait_until_deployment_available(self.kube, component, namespace,
                                            Timeout.KUBEVIRT_COMPONENT)
        if self.await_node_agents:
            wait_for(self.kube, "KubeVirt", name, namespace,
                     lambda o: has_condition(o, "Available"), Timeout.KUBEVIRT_AVAILABLE,
                     "KubeVirt Available")
        return action

    def _remove(self, cr: dict[str, Any]) -> None:
        """Delete the KubeVirt CR and wait until its operator has removed what it
        deployed (KubeVirt's uninstall); the operator itself is replaced by the apply."""
        name, namespace = cr["metadata"]["name"], cr["metadata"]["namespace"]
        self.kube.delete("KubeVirt", name, namespace)
        wait_for(self.kube, "KubeVirt", name, namespace, is_absent, Timeout.KUBEVIRT_REMOVED,
                 "the KubeVirt CR and its components to be removed")
        for component in (*CONTROL_PLANE, "virt-handler"):
            kind = "DaemonSet" if component == "virt-handler" else "Deployment"
            wait_for(self.kube, kind, component, namespace, is_absent,
                     Timeout.KUBEVIRT_REMOVED, f"{component} to be removed")


def installed_version(cr: dict[str, Any] | None) -> str | None:
    """The KubeVirt build a CR reports as deployed."""
    status = (cr or {}).get("status") or {}
    return status.get("observedKubeVirtVersion") or status.get("operatorVersion")


def deployment_available(kube: Kube, name: str, namespace: str) -> Verdict:
    """Available with a ready replica of its current template; a pod of it that cannot
    run ends the wait."""
    deployment = kube.find("Deployment", name, namespace)
    if deployment is None:
        return False
    status = deployment.get("status") or {}
    # Rolled out: an updated template (another release's operator) is not available
    # while pods of the old one still answer.
    rolled_out = (status.get("observedGeneration", 0) >= deployment["metadata"].get(
        "generation", 1) and status.get("updatedReplicas") == status.get("replicas")
        and not status.get("unavailableReplicas"))
    if has_condition(deployment, "Available") and status.get("readyReplicas") and rolled_out:
        return True
    return pod_failure(pods_of(kube, deployment)) or False


def wait_until_deployment_available(kube: Kube, name: str, namespace: str,
                                    timeout: Timeout) -> None:
    log.info(f"waiting for {namespace}/{name}")
    try:
        poll(lambda: deployment_available(kube, name, namespace), timeout,
             f"{name} to be available")
    except (WaitTimeout, WaitFailed) as err:
        raise type(err)(f"{err}\n{component_report(kube, name, namespace)}") from err


def component_report(kube: Kube, name: str, namespace: str) -> str:
    """The pods of a component with their events and last log lines."""
    deployment = kube.find("Deployment", name, namespace)
    if deployment is None:
        return f"{namespace}/{name} does not exist (the operator has not created it)"
    lines = []
    events = kube.list("Event", namespace)
    for pod in pods_of(kube, deployment):
        pod_name = pod["metadata"]["name"]
        lines.append(f"pod {pod_name}: {(pod.get('status') or {}).get('phase')}")
        lines += [f"  event {e.get('reason')}: {e.get('message')}" for e in events
                  if e["involvedObject"].get("name") == pod_name][-5:]
        # A crash-looping container's current log is often empty: its last run's says why.
        restarted = any(c.get("restartCount") for c in
                        (pod.get("status") or {}).get("containerStatuses") or [])
        try:
            lines += [f"  {'previous ' if restarted else ''}log {line}" for line in
                      kube.logs(pod_name, namespace, tail=10, previous=restarted).splitlines()]
        except ApiException as err:
            lines.append(f"  (no log: {err.reason})")
    return "\n".join(lines) or f"{namespace}/{name} has no pods"


def supports_virt_template_switch(version: str) -> bool:
    """``virtTemplateDeployment`` exists in the KubeVirt CR from v1.9 on."""
    return (parse_version(version) or (0, 0)) >= (1, 9)
