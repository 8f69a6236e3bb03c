"""Claim persistence across VM restarts: the claim object, and separately the device."""

from __future__ import annotations

import pytest

from core import waits
from core.profile import Promise
from core.timeouts import Timeout
from fixtures import markers, vms
from fixtures.builders.resourceclaim import with_request
from fixtures.builders.resourceclaimtemplate import new_resource_claim_template
from fixtures.builders.virtualmachine import with_run_strategy, with_vm_claim_template
from fixtures.builders.vmi import with_claim_reference, with_claim_template, with_node_selector
from fixtures.claims import REQUEST, pinned_claim, plain_claim
from fixtures.devices import PCI_BUS_ID, allocated_devices, claim_device_attributes
from fixtures.launcher import metadata_dir, read_metadata_files
from kubevirtci.capabilities import Capability

pytestmark = [markers.persistence, markers.requires_running_vms, markers.dra_launcher,
              markers.vm_running]


def _vm_with_claim(name, profile, claim_name, *options, vm_options=()):
    return vms.guest_vm(
        name, profile,
        with_claim_reference("nvme", claim_name),
        vms.dra_device(profile, "nvme", "nvme", REQUEST),
        *options, vm_options=vm_options,
    )


@pytest.mark.parametrize("cycle", ["stop-start", "restart"])
@markers.requirement("PERSIST-001")
def test_precreated_claim_survives_vm_cycle(kube, objects, namespace, profile, cycle):
    claim = objects.create(plain_claim("nvme", profile))
    objects.create(_vm_with_claim("vm", profile, "nvme"))
    vms.running(kube, "vm", namespace)
    if cycle == "restart":
        vms.restart(kube, "vm", namespace)
    else:
        vms.stop(kube, "vm", namespace)
        stopped = kube.get("ResourceClaim", "nvme", namespace)
        assert stopped["metadata"]["uid"] == claim["metadata"]["uid"]
        assert not (stopped.get("status") or {}).get("reservedFor"), "stopped VM still reserves"
        vms.start(kube, "vm", namespace)
    vms.running(kube, "vm", namespace)
    after = waits.wait_until_claim_allocated(kube, "nvme", namespace)
    assert after["metadata"]["uid"] == claim["metadata"]["uid"]


@markers.requirement("PERSIST-002")
def test_precreated_claim_survives_vm_deletion(kube, objects, namespace, profile):
    claim = objects.create(plain_claim("nvme", profile))
    objects.create(_vm_with_claim("vm", profile, "nvme"))
    vms.running(kube, "vm", namespace)
    kube.delete("VirtualMachine", "vm", namespace)
    waits.wait_until_gone(kube, "VirtualMachineInstance", "vm", namespace)
    after = waits.wait_until_claim_deallocated(kube, "nvme", namespace)
    assert after["metadata"]["uid"] == claim["metadata"]["uid"]


@markers.requirement("PERSIST-003")
def test_template_claim_is_recreated_per_launcher_pod_and_deleted_with_it(
    kube, objects, namespace, profile
):
    objects.create(new_resource_claim_template("nvme-tpl", with_request(REQUEST,
                                                                        profile.device_class)))
    objects.create(vms.guest_vm(
        "vm", profile, with_claim_template("nvme", "nvme-tpl"),
        vms.dra_device(profile, "nvme", "nvme", REQUEST),
    ))
    first = vms.running(kube, "vm", namespace)
    first_claim = vms.pod_claim_names(first.pod)["nvme"]
    first_uid = kube.get("ResourceClaim", first_claim, namespace)["metadata"]["uid"]
    owner = kube.get("ResourceClaim", first_claim, namespace)["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Pod" and owner["name"] == first.pod["metadata"]["name"]
    vms.restart(kube, "vm", namespace)
    second = vms.running(kube, "vm", namespace)
    waits.wait_until_gone(kube, "ResourceClaim", first_claim, namespace)
    second_claim = vms.pod_claim_names(second.pod)["nvme"]
    assert kube.get("ResourceClaim", second_claim, namespace)["metadata"]["uid"] != first_uid


@markers.requires(Capability.GUEST_ACCESS, Capability.LAUNCHER_METADATA)
@markers.requirement("PERSIST-004")
def test_pinned_claim_gets_same_device_after_restart(kube, objects, namespace, profile, guest,
                                                    cluster, free_device):
    device = free_device()
    objects.create(pinned_claim("nvme", profile, device))
    objects.create(_vm_with_claim("vm", profile, "nvme", with_node_selector(device.node)))
    before = vms.running(kube, "vm", namespace)
    bdf_before = read_metadata_files(kube, before.pod, metadata_dir(
        cluster.facts.kubevirt_release, "claim", "nvme", REQUEST))
    serials_before = vms.guest_nvme_serials(guest, before)
    vms.restart(kube, "vm", namespace)
    after = vms.running(kube, "vm", namespace)
    bdf_after = read_metadata_files(kube, after.pod, metadata_dir(
        cluster.facts.kubevirt_release, "claim", "nvme", REQUEST))
    assert bdf_after == bdf_before, "virt-launcher saw a different device after restart"
    assert vms.guest_nvme_serials(guest, after) == serials_before
    if profile.serial_attribute:
        assert str(device.attributes[profile.serial_attribute]) in serials_before


@markers.slow
@markers.requires(Capability.GUEST_ACCESS)
@markers.requirement("PERSIST-005")
def test_data_written_in_guest_is_read_back_after_restart(
    kube, objects, namespace, profile, guest, free_device):
    device = free_device()
    objects.create(pinned_claim("nvme", profile, device))
    objects.create(_vm_with_claim("vm", profile, "nvme", with_node_selector(device.node)))
    vm = vms.running(kube, "vm", namespace)
    token = f"kdc-{namespace}"
    guest.run(vm.name, vm.namespace,
              f"echo {token} | sudo dd of=/dev/nvme0n1 bs=512 count=1 conv=fsync status=none")
    vms.restart(kube, "vm", namespace)
    vm = vms.running(kube, "vm", namespace)
    read = guest.run(vm.name, vm.namespace,
                     "sudo dd if=/dev/nvme0n1 bs=512 count=1 status=none | head -c 64")
    assert token in read


@markers.exclusive_devices
@markers.requirement("PERSIST-006")
def test_unpinned_claim_reports_whether_device_changed_against_profile_promise(
    kube, objects, namespace, profile, record_property
):
    objects.create(plain_claim("nvme", profile))
    objects.create(_vm_with_claim("vm", profile, "nvme"))
    vms.running(kube, "vm", namespace)
    before = allocated_devices(waits.wait_until_claim_allocated(kube, "nvme", namespace))
    vms.stop(kube, "vm", namespace)
    vms.start(kube, "vm", namespace)
    vms.running(kube, "vm", namespace)
    after = allocated_devices(waits.wait_until_claim_allocated(kube, "nvme", namespace))
    changed = [d.key for d in before] != [d.key for d in after]
    record_property("unpinned_device_changed", str(changed).lower())
    if profile.same_device_unpinned == Promise.YES:
        assert not changed, f"profile promises the same device; got {before} then {after}"
    elif profile.same_device_unpinned == Promise.UNKNOWN:
        pytest.xfail(
            f"device {'changed' if changed else 'stayed the same'} after restart; profile "
            f"{profile.name} makes no promise (promises.sameDeviceAfterRestartUnpinned: unknown)"
        )


@markers.exclusive_devices
@markers.requirement("PERSIST-007")
def test_stopped_vm_device_can_be_taken_by_another_vm(
    kube, objects, namespace, profile, free_device
):
    device = free_device()
    objects.create(pinned_claim("a", profile, device))
    objects.create(_vm_with_claim("vm-a", profile, "a", with_node_selector(device.node)))
    vms.running(kube, "vm-a", namespace)
    vms.stop(kube, "vm-a", namespace)
    waits.wait_until_claim_deallocated(kube, "a", namespace)
    objects.create(pinned_claim("b", profile, device))
    objects.create(_vm_with_claim("vm-b", profile, "b", with_node_selector(device.node)))
    vms.running(kube, "vm-b", namespace)
    taken = allocated_devices(waits.wait_until_claim_allocated(kube, "b", namespace))
    assert [d.name for d in taken] == [device.name]


@markers.exclusive_devices
@markers.requirement("PERSIST-008")
def test_pinned_vm_waits_while_its_device_is_held_and_starts_after_release(
    kube, objects, namespace, profile, free_device):
    device = free_device()
    objects.create(pinned_claim("a", profile, device))
    objects.create(_vm_with_claim("vm-a", profile, "a", with_node_selector(device.node),
                                  vm_options=(with_run_strategy("Halted"),)))
    objects.create(pinned_claim("b", profile, device))
    objects.create(_vm_with_claim("vm-b", profile, "b", with_node_selector(device.node)))
    vms.running(kube, "vm-b", namespace)
    vms.start(kube, "vm-a", namespace)
    vmi = waits.wait_for(
        kube, "VirtualMachineInstance", "vm-a", namespace,
        waits.vmi_unschedulable, Timeout.VMI_UNSCHEDULABLE,
        "VMI to report why it cannot be scheduled",
    )
    assert vmi is not None and vmi["status"].get("phase") != "Running"
    reason = next(c for c in vmi["status"]["conditions"] if c["type"] == "PodScheduled")
    assert "claim" in reason.get("message", "").lower(), reason
    vms.stop(kube, "vm-b", namespace)
    vm_a = vms.running(kube, "vm-a", namespace)
    attrs = claim_device_attributes(kube, waits.wait_until_claim_allocated(kube, "a", namespace))
    assert attrs[0].get(PCI_BUS_ID) == device.attributes.get(PCI_BUS_ID)
    assert vm_a.node == device.node


@markers.requires(Capability.PERSISTENT_DRA_CLAIMS)
@markers.requirement("PERSIST-009")
def test_vm_owned_persistent_claim_survives_stop_and_keeps_device(
    kube, objects, namespace, profile
):
    """VEP 344 (gate PersistentDRAClaims) as kubevirt/kubevirt#17957 proposes it: a VM's
    ``spec.resourceClaimTemplates[]`` entry names a ResourceClaimTemplate and carries
    ``persistWhenStopped``; the VMI template's ``resourceClaims`` entry of the same name
    becomes the VM-owned claim ``<vm>-<entry>``, which a stop keeps, allocation and all."""
    objects.create(new_resource_claim_template(
        "nvme-tpl", with_request(REQUEST, profile.device_class)))
    objects.create(vms.guest_vm(
        "vm", profile, with_claim_template("nvme", "nvme-tpl"),
        vms.dra_device(profile, "nvme", "nvme", REQUEST),
        vm_options=(with_vm_claim_template("nvme", "nvme-tpl", persist_when_stopped=True),)))
    vms.running(kube, "vm", namespace)
    claim = waits.wait_until_claim_allocated(kube, "vm-nvme", namespace)
    vms.stop(kube, "vm", namespace)
    kept = kube.get("ResourceClaim", "vm-nvme", namespace)
    assert kept["metadata"]["uid"] == claim["metadata"]["uid"]
    assert allocated_devices(kept) == allocated_devices(claim)

