"""Claims are released when VMs go away and nothing leaks over fast restart cycles."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from core import waits
from core.timeouts import Timeout
from fixtures import markers, vms
from fixtures.builders.vmi import with_claim_reference, with_node_selector
from fixtures.claims import REQUEST, pinned_claim, plain_claim
from fixtures.devices import allocated_devices

pytestmark = [markers.lifecycle, markers.requires_running_vms, markers.dra_launcher,
              markers.vm_running]

RESTART_CYCLES = 5


def _vm(name, profile, claim, node):
    return vms.guest_vm(name, profile, with_claim_reference("nvme", claim),
                        vms.dra_device(profile, "nvme", "nvme", REQUEST),
                        with_node_selector(node))


@markers.requirement("LIFE-001")
def test_deleting_a_vm_deallocates_its_claim_and_the_device_is_reusable(
    kube, objects, namespace, profile, free_device):
    device = free_device()
    objects.create(pinned_claim("first", profile, device))
    objects.create(_vm("vm-1", profile, "first", device.node))
    vms.running(kube, "vm-1", namespace)
    kube.delete("VirtualMachine", "vm-1", namespace)
    waits.wait_until_gone(kube, "VirtualMachineInstance", "vm-1", namespace)
    waits.wait_until_claim_deallocated(kube, "first", namespace)
    objects.create(pinned_claim("second", profile, device))
    objects.create(_vm("vm-2", profile, "second", device.node))
    vms.running(kube, "vm-2", namespace)
    got = allocated_devices(waits.wait_until_claim_allocated(kube, "second", namespace))
    assert [d.name for d in got] == [device.name]


@markers.slow
@markers.requirement("LIFE-002")
def test_five_fast_stop_start_cycles_leak_no_claim_or_reservation(
    kube, objects, namespace, profile, free_device):
    device = free_device()
    objects.create(pinned_claim("nvme", profile, device))
    objects.create(_vm("vm", profile, "nvme", device.node))
    claims_before = {c["metadata"]["name"] for c in kube.list("ResourceClaim", namespace)}
    for _ in range(RESTART_CYCLES):
        vms.running(kube, "vm", namespace)
        vms.stop(kube, "vm", namespace)
        vms.start(kube, "vm", namespace)
    vm = vms.running(kube, "vm", namespace)
    claim = waits.wait_until_claim_allocated(kube, "nvme", namespace)
    reserved = claim["status"].get("reservedFor") or []
    assert [r["name"] for r in reserved] == [vm.pod["metadata"]["name"]], reserved
    assert {c["metadata"]["name"] for c in kube.list("ResourceClaim", namespace)} == claims_before
    vms.stop(kube, "vm", namespace)
    waits.wait_until_claim_deallocated(kube, "nvme", namespace)


@markers.requirement("LIFE-003")
def test_a_vm_with_a_dra_device_is_not_live_migratable_and_a_migration_is_refused(
    kube, objects, namespace, profile
):
    """KubeVirt cannot move a passed-through device: virt-handler reports
    ``LiveMigratable=False`` with its reason (pkg/virt-handler/vm.go, no DRA-specific one:
    the host-device or GPU reason), and virt-api refuses a migration naming it."""
    objects.create(plain_claim("nvme", profile))
    objects.create(vms.guest_vm("vm", profile, with_claim_reference("nvme", "nvme"),
                                vms.dra_device(profile, "nvme", "nvme", REQUEST)))
    vms.running(kube, "vm", namespace)
    vmi = waits.wait_for(
        kube, "VirtualMachineInstance", "vm", namespace,
        lambda o: waits.condition(o, "LiveMigratable"), Timeout.VMI_RUNNING,
        "virt-handler to report whether the VMI is live-migratable")
    condition = waits.condition(vmi, "LiveMigratable")
    assert condition["status"] == "False", (
        f"a VMI with a DRA {profile.device_kind} reports LiveMigratable={condition['status']} "
        f"({condition.get('reason')}: {condition.get('message')})")
    # KubeVirt's reason for any host device or GPU (pkg/virt-handler/vm.go), not one
    # of its other reasons (interfaces, CPU mode) a VM might also have
    assert condition.get("reason") == "HostDeviceNotLiveMigratable", condition
    with pytest.raises(ApiException) as err:
        objects.create({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "migrate-vm"}, "spec": {"vmiName": "vm"}})
    assert err.value.status in (400, 422), err.value
    assert condition["reason"] in err.value.body, (
        f"the refusal does not name the VMI's reason {condition['reason']}: {err.value.body}")

