"""DRA VMs through the disruptions of a real cluster: a kubelet restart, a rolling
restart of the driver, a launcher pod lost. Each test ends as persistence does (the
claim's allocation, the launcher's metadata, the domain XML and the guest's serial, the
pinned device back after a stop/start) and checks that nothing is left held once the VM
is gone: no reservation, no device on vfio-pci, no CDI spec of the claim."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from core import waits
from core.errors import KnownBugSeen
from core.kube import Kube
from core.profile import Promise
from core.timeouts import Timeout
from fixtures import disruptions, markers, vms
from fixtures.builders.devicetaintrule import new_device_taint_rule, selecting_device
from fixtures.builders.virtualmachine import with_run_strategy
from fixtures.builders.vmi import (
    with_claim_reference,
    with_eviction_strategy,
    with_node_selector,
)
from fixtures.claims import REQUEST, pinned_claim
from fixtures.devices import PCI_BUS_ID, Device
from fixtures.dra_checks import Reach, VmDevice, check_every_level
from fixtures.health import wait_until_health
from fixtures.launcher import COMPUTE
from fixtures.released import wait_until_released
from kubevirtci.capabilities import Capability
from kubevirtci.provider import Node

TOO_MANY_REQUESTS = 429  # how an eviction refused by admission answers

pytestmark = [markers.disruption, markers.requires_running_vms, markers.dra_launcher,
              markers.vm_running, markers.one_device_kind, markers.slow,
              markers.requires(Capability.GUEST_ACCESS, Capability.NODE_ACCESS)]


def _nvme(profile) -> VmDevice:
    return VmDevice("nvme", profile.device_kind, "nvme", REQUEST)


def _pinned_vm_running(kube: Kube, objects, namespace: str, profile, reach: Reach,
                       device: Device, *vmi_options, vm_options=()
                       ) -> tuple[dict[str, Any], vms.RunningVM, str]:
    """A pre-created claim pinned to ``device`` and a VM "vm" on its node using it,
    running and checked at every level: (the claim, the running VM, the device's BDF)."""
    claim = objects.create(pinned_claim("vm-nvme", profile, device))
    objects.create(vms.guest_vm(
        "vm", profile, with_claim_reference("nvme", "vm-nvme"),
        vms.dra_device(profile, "nvme", "nvme", REQUEST), with_node_selector(device.node),
        *vmi_options, vm_options=vm_options))
    vm = vms.running(kube, "vm", namespace)
    bdf = check_every_level(kube, reach, vm, [_nvme(profile)], profile)["nvme"][PCI_BUS_ID]
    return claim, vm, bdf


def _runs_on(kube: Kube, reach: Reach, before: vms.RunningVM, profile, bdf: str) -> None:
    """The same VMI in the same launcher pod, its device still at every level."""
    after = vms.running(kube, before.name, before.namespace)
    _same_launcher(before, after)
    _check_pinned(kube, reach, after, profile, bdf)


def _check_pinned(kube: Kube, reach: Reach, vm: vms.RunningVM, profile,
                  bdf: str) -> None:
    got = check_every_level(kube, reach, vm, [_nvme(profile)], profile)["nvme"]
    assert got[PCI_BUS_ID] == bdf, f"{vm.name} was given {got[PCI_BUS_ID]}, pinned {bdf}"


def _stop_start(kube: Kube, reach: Reach, name: str, namespace: str, profile,
                bdf: str) -> None:
    vms.stop(kube, name, namespace)
    vms.start(kube, name, namespace)
    _check_pinned(kube, reach, vms.running(kube, name, namespace), profile, bdf)


def _delete_and_check_released(kube: Kube, node: Node, name: str, namespace: str,
                               claim: dict[str, Any], bdf: str) -> None:
    kube.delete("VirtualMachine", name, namespace)
    waits.wait_until_gone(kube, "VirtualMachineInstance", name, namespace)
    wait_until_released(kube, node, claim, bdf)


def _next_vmi(kube: Kube, before: vms.RunningVM, why: str) -> vms.RunningVM:
    waits.wait_for(kube, "VirtualMachineInstance", before.name, before.namespace,
                   waits.vmi_restarted(before.vmi["metadata"]["uid"]), Timeout.VM_RESTART,
                   f"a new VMI after {why}")
    return vms.running(kube, before.name, before.namespace)


def _same_launcher(before: vms.RunningVM, after: vms.RunningVM) -> None:
    assert after.pod["metadata"]["uid"] == before.pod["metadata"]["uid"], (
        f"{before.name}'s launcher pod was replaced: the VM did not run on")
    assert after.vmi["metadata"]["uid"] == before.vmi["metadata"]["uid"]


@markers.exclusive_devices  # a kubelet restart touches every test on the node
@markers.kubelet_restart
@markers.requires(Capability.KUBELET_RESTART)
@markers.requirement("DISRUPT-001")
def test_a_dra_vm_runs_on_through_a_kubelet_restart(
        virt_handlers_rediscover, kube, objects, namespace, profile, reach, cluster,
        free_device):
    device = free_device()
    claim, before, bdf = _pinned_vm_running(kube, objects, namespace, profile, reach, device)
    node = cluster.provider.node(device.node)
    published = disruptions.published_on_node(kube, profile.driver, device.node)
    disruptions.restart_kubelet(kube, node)
    if disruptions.virt_handler_restarted(kube, device.node,
                                          virt_handlers_rediscover.get(device.node, 0)):
        raise KnownBugSeen(f"virt-handler on {device.node} restarted during the kubelet "
                           "restart")
    disruptions.wait_until_published(kube, profile.driver, device.node, published)
    _runs_on(kube, reach, before, profile, bdf)
    _stop_start(kube, reach, "vm", namespace, profile, bdf)
    _delete_and_check_released(kube, node, "vm", namespace, claim, bdf)


@markers.exclusive_devices  # every test preparing a device would see the rollout
@markers.requires(Capability.DRIVER_DISRUPTION)
@markers.requirement("DISRUPT-002")
def test_dra_vms_run_on_through_a_rolling_restart_of_the_driver(
        kube, objects, namespace, profile, reach, cluster, free_device):
    device = free_device()
    claim, before, bdf = _pinned_vm_running(kube, objects, namespace, profile, reach, device)
    disruptions.roll_daemonset(kube, *disruptions.driver_daemonset(kube, profile))
    _runs_on(kube, reach, before, profile, bdf)
    # Unprepare and prepare by the new plugin pods.
    _stop_start(kube, reach, "vm", namespace, profile, bdf)
    _delete_and_check_released(kube, cluster.provider.node(device.node), "vm", namespace,
                               claim, bdf)


@markers.requirement("DISRUPT-003")
def test_a_vm_whose_launcher_pod_is_lost_comes_back_with_its_claim_and_device(
        kube, objects, namespace, profile, reach, cluster, free_device):
    device = free_device()
    claim, before, bdf = _pinned_vm_running(kube, objects, namespace, profile, reach, device,
                                            vm_options=(with_run_strategy("Always"),))
    disruptions.lose_pod(kube, before.pod)
    after = _next_vmi(kube, before, "the launcher pod was lost")
    assert vms.pod_claim_names(after.pod)["nvme"] == claim["metadata"]["name"]
    now = kube.get("ResourceClaim", claim["metadata"]["name"], namespace)
    assert now["metadata"]["uid"] == claim["metadata"]["uid"], "the claim was replaced"
    _check_pinned(kube, reach, after, profile, bdf)
    _delete_and_check_released(kube, cluster.provider.node(device.node), "vm", namespace,
                               claim, bdf)


@pytest.mark.parametrize("strategy", ["LiveMigrate", "None"])
@markers.requirement("DISRUPT-004")
def test_an_evicted_dra_vm_acts_as_its_eviction_strategy_says(
        kube, objects, namespace, profile, reach, cluster, free_device, strategy):
    """As ``kubectl drain`` evicts (KubeVirt's pod-eviction admitter decides)."""
    _, before, bdf = _pinned_vm_running(kube, objects, namespace, profile, reach,
                                        free_device(), with_eviction_strategy(strategy))
    if strategy == "LiveMigrate":
        with pytest.raises(ApiException) as refused:
            disruptions.evict(kube, before.pod)
        assert refused.value.status == TOO_MANY_REQUESTS, refused.value
        assert "not live-migratable" in str(refused.value.body), refused.value.body
        _runs_on(kube, reach, before, profile, bdf)
        return
    disruptions.evict(kube, before.pod)
    # runStrategy Always starts it again: the device its launcher held is the next one's.
    _check_pinned(kube, reach, _next_vmi(kube, before, "its launcher was evicted"), profile,
                  bdf)


def _taint(objects, profile, device: Device, namespace: str, effect: str) -> str:
    """A DeviceTaintRule on ``device`` (cluster-scoped: named after the test's
    namespace); returns its name."""
    name = f"{namespace}-{effect.lower()}"[:63]
    objects.create(new_device_taint_rule(
        name, effect, selecting_device(profile.driver, device.pool, device.name)))
    return name


def _pending_reason(kube: Kube, namespace: str, old_uid: str = "") -> str:
    """The scheduler's reason the VMI "vm" (another than ``old_uid``) cannot have its
    launcher scheduled."""
    vmi = waits.wait_for(
        kube, "VirtualMachineInstance", "vm", namespace,
        lambda o: o is not None and o["metadata"]["uid"] != old_uid
        and waits.has_condition(o, "PodScheduled", "False"),
        Timeout.VMI_UNSCHEDULABLE, "the VMI to report that its launcher cannot be scheduled")
    assert vmi is not None and vmi["status"].get("phase") != "Running", vmi
    condition = waits.condition(vmi, "PodScheduled", "False") or {}
    reason = str(condition.get("message") or "")
    assert "claim" in reason.lower(), f"the VMI's reason names no claim: {condition}"
    return reason


@markers.requires(Capability.DEVICE_TAINTS)
@markers.requirement("DISRUPT-005")
def test_a_no_schedule_device_taint_keeps_a_new_vm_pending_until_it_is_gone(
        kube, objects, namespace, profile, reach, free_device):
    device = free_device()
    rule = _taint(objects, profile, device, namespace, "NoSchedule")
    objects.create(pinned_claim("vm-nvme", profile, device))
    objects.create(vms.guest_vm(
        "vm", profile, with_claim_reference("nvme", "vm-nvme"),
        vms.dra_device(profile, "nvme", "nvme", REQUEST), with_node_selector(device.node)))
    _pending_reason(kube, namespace)
    kube.delete("DeviceTaintRule", rule)
    vm = vms.running(kube, "vm", namespace)
    assert check_every_level(kube, reach, vm, [_nvme(profile)], profile)["nvme"], vm.name


@markers.requires(Capability.DEVICE_TAINTS)
@markers.requirement("DISRUPT-006")
def test_a_no_execute_device_taint_evicts_the_launcher_and_the_vm_waits_for_the_device(
        kube, objects, namespace, profile, reach, free_device):
    device = free_device()
    _, before, bdf = _pinned_vm_running(kube, objects, namespace, profile, reach, device)
    rule = _taint(objects, profile, device, namespace, "NoExecute")
    launcher = before.pod["metadata"]["name"]
    waits.wait_until_gone(kube, "Pod", launcher, namespace)
    _pending_reason(kube, namespace, old_uid=before.vmi["metadata"]["uid"])
    kube.delete("DeviceTaintRule", rule)
    _check_pinned(kube, reach, _next_vmi(kube, before, "the taint was removed"), profile, bdf)


@markers.exclusive_devices  # a function off the bus leaves the pool one short for everyone
@markers.requirement("DISRUPT-007")
def test_a_dra_vms_device_off_the_bus_shows_unhealthy_and_comes_back_on_a_rescan(
        kube, objects, namespace, profile, reach, cluster, free_device, record_property):
    if profile.health_reporting != Promise.YES:
        pytest.skip(f"profile {profile.name} does not promise to report device health "
                    f"(promises.healthReporting: {profile.health_reporting})")
    device = free_device()
    _, before, bdf = _pinned_vm_running(kube, objects, namespace, profile, reach, device)
    node = cluster.provider.node(device.node)
    wait_until_health(kube, before.pod, COMPUTE, "nvme", REQUEST, "Healthy")
    published = disruptions.published_on_node(kube, profile.driver, device.node)
    disruptions.remove_function(node, bdf)
    try:
        wait_until_health(kube, before.pod, COMPUTE, "nvme", REQUEST, "Unhealthy")
        vmi = kube.find("VirtualMachineInstance", "vm", namespace) or {}
        status = vmi.get("status") or {}
        # KubeVirt does not act on device health (v1.9): what happened is reported.
        record_property("vm_after_device_removal", f"{status.get('phase')}; conditions " + str(
            [(c.get("type"), c.get("status"), c.get("reason")) for c in
             status.get("conditions") or []]))
    finally:
        disruptions.rescan_bus(node)
        disruptions.wait_until_published(kube, profile.driver, device.node, published)
