"""The DRA driver named by the profile, installed from its manifests; idempotent, and
awaited with named timeouts (KubeVirt's installer is kubevirt_install.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import yaml

from core.errors import SuiteUsageError
from core.kube import Kube
from core.profile import DriverProfile
from core.timeouts import Timeout, WaitTimeout
from core.waits import Stop, Verdict, container_failure, has_condition, poll, wait_for

log = logging.getLogger("kdc.install")


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
            log.info(f"applying {manifest}")
            docs = [self.adapt(d) for d in yaml.safe_load_all(manifest.read_text()) if d]
            apply_documents(self.kube, docs)
            for doc in docs:
                if doc["kind"] == "DaemonSet":
                    wait_until_rolled_out(self.kube, doc["metadata"]["name"],
                                     doc["metadata"]["namespace"])
        wait_for(
            self.kube, "DeviceClass", self.profile.device_class, None,
            lambda o: o is not None, Timeout.DRIVER_READY, "driver DeviceClass",
        )
        try:
            wait_until_slices_published(self.kube, self.profile.driver)
        except WaitTimeout:
            # Its plugin rolled out and publishes nothing: the driver's failure, which the
            # tests name (SANITY-001), not a cluster the run cannot use.
            return (f"driver {self.profile.driver} applied; it published no device within "
                    f"{Timeout.SLICES_PUBLISHED.seconds:.0f} s")
        return f"driver {self.profile.driver} applied, ResourceSlices published"


def apply_documents(kube: Kube, documents: list[dict[str, Any] | None]) -> None:
    """Server-side apply each document: created when absent, updated when changed."""
    for doc in documents:
        if doc:
            kube.apply(doc)


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


def pods_of(kube: Kube, workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a DaemonSet or Deployment selects (by its matchLabels)."""
    labels = (workload["spec"].get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in labels.items())
    return kube.list("Pod", workload["metadata"]["namespace"], label_selector=selector)


def pod_failure(pods: list[dict[str, Any]]) -> Stop | None:
    """The first pod whose container cannot run, as a reason to stop waiting."""
    for pod in pods:
        failure = container_failure(pod)
        if failure:
            return Stop(f"pod {pod['metadata']['name']} on {pod['spec'].get('nodeName')}: "
                        f"{failure}")
    return None


def pods_ready_on_every_node(pods: list[dict[str, Any]], nodes: int) -> Verdict:
    """A DaemonSet's pods: one Ready on each of ``nodes`` nodes. A crash-looping pod ends
    the wait (it can look Ready between restarts, and passes ``kubectl rollout status``)."""
    failure = pod_failure(pods)
    if failure:
        return failure
    ready_nodes = {p["spec"].get("nodeName") for p in pods
                   if p["metadata"].get("deletionTimestamp") is None
                   and has_condition(p, "Ready")}
    return len(ready_nodes) >= nodes


def wait_until_rolled_out(kube: Kube, name: str, namespace: str) -> None:
    log.info(f"waiting for DaemonSet {namespace}/{name} to roll out")
    ds = wait_for(kube, "DaemonSet", name, namespace, daemonset_rolled_out,
                  Timeout.DRIVER_READY, "DaemonSet rollout (updated and ready on every node)")
    assert ds is not None
    desired = ds["status"]["desiredNumberScheduled"]
    poll(lambda: pods_ready_on_every_node(pods_of(kube, ds), desired),
        Timeout.DRIVER_READY, f"DaemonSet {namespace}/{name}'s pods Ready on every node")


def wait_until_slices_published(kube: Kube, driver: str) -> None:
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
