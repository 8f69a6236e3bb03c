"""A driver's kubelet plugin through the events Kubernetes' own DRA tests take Kubernetes'
test driver through (test/e2e_node/dra_test.go, test/e2e/dra/dra.go), here for any
driver a profile describes: a kubelet restart, a rolling update of its DaemonSet, and
its removal.
Each holds the device pool alone: what it disrupts, every test on the node would feel.
A removal test puts the driver back from what it removed, whatever happens."""

from __future__ import annotations

import pytest

from core import waits
from core.profile import Promise
from core.timeouts import Timeout
from fixtures import disruptions, markers
from fixtures.builders.pod import CONTAINER as POD_CONTAINER
from fixtures.builders.pod import (
    new_pod,
    with_container_claim,
    with_pod_claim_reference,
    with_pod_node_selector,
)
from fixtures.claims import REQUEST, pinned_claim
from fixtures.devices import PCI_BUS_ID, Device, published_devices
from fixtures.health import wait_until_health
from kubevirtci.capabilities import Capability

pytestmark = [
    markers.driver_sanity, markers.slow, markers.exclusive_devices,
    markers.requires(Capability.DRA_API, Capability.DRA_DRIVER,
                     Capability.DRIVER_PLUGIN_SOCKET),
]


def _node_slices(kube, profile, node: str) -> dict[str, str]:
    """Name -> UID of the driver's ResourceSlices of ``node``: the same UIDs mean the
    slices were kept, not deleted and published again."""
    return {s["metadata"]["name"]: s["metadata"]["uid"] for s in kube.list("ResourceSlice")
            if s["spec"]["driver"] == profile.driver and s["spec"].get("nodeName") == node}


def _pod_with_device(objects, profile, device: Device, name: str) -> None:
    objects.create(pinned_claim(f"{name}-claim", profile, device))
    objects.create(new_pod(name, profile.test_image,
                           with_pod_claim_reference("dev", f"{name}-claim"),
                           with_container_claim("dev", REQUEST),
                           with_pod_node_selector(device.node)))


@markers.requires(Capability.KUBELET_RESTART)
@markers.requirement("PLUGIN-001")
def test_after_a_kubelet_restart_the_plugin_is_registered_again_and_keeps_its_claims(
        virt_handlers_rediscover, kube, cluster, objects, namespace, profile, plugin,
        prepared, device, free_device):
    """Mirrors "must register after Kubelet restart" (test/e2e_node/dra_test.go)."""
    claim, first = prepared
    published = disruptions.published_on_node(kube, profile.driver, device.node)
    disruptions.restart_kubelet(kube, cluster.provider.node(device.node))
    # The kubelet deletes its node's slices at startup ("must be removed on kubelet
    # startup"); a registered plugin publishes them again.
    disruptions.wait_until_published(kube, profile.driver, device.node, published)
    assert plugin.prepare(claim) == first, "a claim prepared before the restart changed"
    # Only a registered plugin is asked by the kubelet to prepare a new pod's claim.
    _pod_with_device(objects, profile, free_device(node=device.node), "after")
    waits.wait_until_pod_running(kube, "after", namespace)


@markers.requires(Capability.DRIVER_DISRUPTION)
@markers.requirement("PLUGIN-002")
def test_a_rolling_update_keeps_slices_and_prepared_claims_and_runs_new_pods(
        kube, objects, namespace, profile, plugin, prepared, device, free_device):
    """Mirrors "rolling update" (test/e2e/dra/dra.go): the same slices after it, and a
    pod that needs the driver runs, here created while the update rolls."""
    claim, first = prepared
    slices = _node_slices(kube, profile, device.node)
    name, driver_namespace = disruptions.driver_daemonset(kube, profile)
    _pod_with_device(objects, profile, free_device(node=device.node), "during")
    disruptions.roll_daemonset(kube, name, driver_namespace)
    waits.wait_until_pod_running(kube, "during", namespace)
    assert _node_slices(kube, profile, device.node) == slices, "the node's slices were replaced"
    waits.poll(lambda: plugin.serving_answer("prepare", claim) is not None,
               Timeout.PLUGIN_RESTART, "the updated plugin to serve its socket")
    assert plugin.prepare(claim) == first, "a claim prepared before the update changed"


@markers.requires(Capability.DRIVER_DISRUPTION)
@markers.requirement("PLUGIN-003")
def test_a_removed_driver_takes_its_slices_with_it_and_publishes_them_again_when_back(
        kube, profile):
    """Mirrors "must be removed after plugin unregistration" (test/e2e_node/dra_test.go);
    the driver is put back whatever happens."""
    devices = _driver_devices(kube, profile)
    assert devices, f"driver {profile.driver} publishes no device"
    removed = disruptions.remove_daemonset(kube, *disruptions.driver_daemonset(kube, profile))
    try:
        waits.poll(lambda: not _driver_devices(kube, profile), Timeout.SLICES_REMOVED,
                   f"the ResourceSlices of the removed driver {profile.driver} to go")
    finally:
        disruptions.restore_daemonset(kube, removed)
    waits.poll(lambda: _driver_devices(kube, profile) == devices, Timeout.SLICES_PUBLISHED,
               f"driver {profile.driver} to publish its devices again")


def _driver_devices(kube, profile) -> list[tuple[str, str, str]]:
    """(node, pool, device) of every device the driver publishes."""
    return sorted((d.node, d.pool, d.name)
                  for d in published_devices(kube.list("ResourceSlice"), profile.driver))


@markers.requires(Capability.NODE_ACCESS, Capability.DRIVER_DISRUPTION)
@markers.requirement("PLUGIN-005")
def test_device_health_follows_the_device_and_the_plugin(
        kube, cluster, objects, namespace, profile, free_device):
    """Mirrors "should reflect device health changes in the Pod's status" and "should
    update health to Unknown when plugin stops and recover upon restart"
    (test/e2e_node/dra_test.go): Healthy; Unhealthy while the device is off the bus;
    Healthy once a rescan gives it back; Unknown while the plugin is gone; Healthy again."""
    if profile.health_reporting != Promise.YES:
        pytest.skip(f"profile {profile.name} does not promise to report device health "
                    f"(promises.healthReporting: {profile.health_reporting})")
    device = free_device()
    _pod_with_device(objects, profile, device, "watched")
    pod = waits.wait_until_pod_running(kube, "watched", namespace)
    node = cluster.provider.node(device.node)
    published = disruptions.published_on_node(kube, profile.driver, device.node)

    def reported(health: str) -> None:
        wait_until_health(kube, pod, POD_CONTAINER, "dev", REQUEST, health)

    reported("Healthy")
    disruptions.remove_function(node, str(device.attributes[PCI_BUS_ID]))
    try:
        reported("Unhealthy")
    finally:
        disruptions.rescan_bus(node)
        disruptions.wait_until_published(kube, profile.driver, device.node, published)
    reported("Healthy")
    removed = disruptions.remove_daemonset(kube, *disruptions.driver_daemonset(kube, profile))
    try:
        reported("Unknown")
    finally:
        disruptions.restore_daemonset(kube, removed)
    reported("Healthy")
