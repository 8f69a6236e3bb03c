"""Every DRA shape a VM can use, each checked at every level its devices reach (the
claim's allocation, the launcher pod, KubeVirt's metadata, the domain XML and the guest):
the shapes of KubeVirt's own DRA end-to-end tests (tests/compute/dra.go, v1.9.0, which
check only that the VMI runs), and one VM given several devices by one claim or several."""

from __future__ import annotations

import pytest

from core import waits
from core.errors import KnownBugSeen
from core.timeouts import Timeout, WaitFailed, WaitTimeout
from fixtures import markers, vms
from fixtures.builders.resourceclaim import (
    attribute_equals,
    new_resource_claim,
    with_first_available,
    with_match_attribute,
    with_request,
    with_request_cel_selector,
)
from fixtures.builders.resourceclaimtemplate import new_resource_claim_template
from fixtures.builders.vmi import with_claim_reference, with_claim_template
from fixtures.claims import REQUEST, free_devices, plain_claim
from fixtures.devices import PCI_BUS_ID, allocated_devices
from fixtures.dra_checks import VmDevice, check_every_level
from fixtures.launcher import metadata_dir, read_metadata_files
from kubevirtci.capabilities import Capability
from kubevirtci.discovery import NUMA_NODE

pytestmark = [markers.device_info, markers.requires_running_vms, markers.dra_launcher,
              markers.vm_running, markers.requires(Capability.GUEST_ACCESS)]


def _device(profile, name, entry, request=REQUEST, template=False) -> VmDevice:
    return VmDevice(name, profile.device_kind, entry, request, template)


def _vm(name, profile, entries, devices):
    """A VM naming its claims (``entries``: resourceClaims options) and its devices."""
    return vms.guest_vm(name, profile, *entries, *(
        vms.dra_device(profile, d.name, d.entry, d.request) for d in devices))


@markers.devices(2)
@markers.requirement("SHAPE-001")
def test_vms_sharing_one_claim_template_each_get_a_claim_and_device_of_their_own(
    kube, objects, namespace, profile, reach
):
    """Mirrors KubeVirt's "should create four VMIs backed by the ResourceClaimTemplate"."""
    objects.create(new_resource_claim_template(
        "nvme-tpl", with_request(REQUEST, profile.device_class)))
    device = _device(profile, "nvme", "nvme", template=True)
    for name in ("vm-a", "vm-b"):
        objects.create(_vm(name, profile, [with_claim_template("nvme", "nvme-tpl")], [device]))
    running = [vms.running(kube, name, namespace) for name in ("vm-a", "vm-b")]
    got = [check_every_level(kube, reach, vm, [device], profile)["nvme"] for vm in running]
    claims = [vms.pod_claim_names(vm.pod)["nvme"] for vm in running]
    assert claims[0] != claims[1], f"both VMs' launchers use one claim, {claims[0]}"
    assert _identity(got[0], running[0]) != _identity(got[1], running[1]), (
        f"both VMs were given one device: {got[0]}")


@markers.devices(2)
@markers.requirement("SHAPE-002")
def test_vms_each_with_a_precreated_claim_get_their_own_device(
    kube, objects, namespace, profile, reach
):
    """Mirrors KubeVirt's "should create four VMIs and pre-created ResourceClaims
    individually"."""
    device = _device(profile, "nvme", "nvme")
    for name in ("vm-a", "vm-b"):
        objects.create(plain_claim(f"{name}-nvme", profile))
        objects.create(_vm(name, profile, [with_claim_reference("nvme", f"{name}-nvme")],
                           [device]))
    running = [vms.running(kube, name, namespace) for name in ("vm-a", "vm-b")]
    got = [check_every_level(kube, reach, vm, [device], profile)["nvme"] for vm in running]
    assert _identity(got[0], running[0]) != _identity(got[1], running[1]), (
        f"both VMs were given one device: {got[0]}")


@pytest.mark.parametrize("selected_by", ["driver-attribute", "pciBusID"])
@markers.requirement("SHAPE-003")
def test_cel_selector_allocates_the_selected_device_to_the_vm(
    kube, objects, namespace, profile, reach, selected_by, free_device):
    """Mirrors KubeVirt's "should allocate a vfio-gpu device matching the vendorID" (a
    driver attribute: here the profile's identity attribute) and "... matching the
    standardized pciBusId attribute"."""
    chosen = free_device()
    attribute = profile.identity_attribute if selected_by == "driver-attribute" else PCI_BUS_ID
    value = str(chosen.attributes[attribute])
    objects.create(new_resource_claim(
        "nvme", with_request(REQUEST, profile.device_class),
        with_request_cel_selector(REQUEST, attribute_equals(attribute, value))))
    device = _device(profile, "nvme", "nvme")
    objects.create(_vm("vm", profile, [with_claim_reference("nvme", "nvme")], [device]))
    vm = vms.running(kube, "vm", namespace)
    got = check_every_level(kube, reach, vm, [device], profile)["nvme"]
    assert str(got[attribute]) == value, (
        f"the selector asked for {attribute} == {value!r}; the VM was given {got[attribute]!r}")


@markers.exclusive_devices
@markers.requires(Capability.TWO_DEVICES_PER_NODE)
@markers.requirement("SHAPE-004")
def test_match_attribute_across_two_requests_gives_the_vm_two_matching_devices(
    kube, objects, namespace, profile, reach
):
    """Mirrors KubeVirt's "should allocate vfio-gpu devices sharing vendorID via
    matchAttribute", on an attribute every free device of a node shares (as vendorID
    there): the constraint must be honoured, and both devices must reach the guest."""
    attribute = _shared_attribute(kube, profile)
    objects.create(new_resource_claim(
        "pair", with_request("first", profile.device_class),
        with_request("second", profile.device_class),
        with_match_attribute(attribute, "first", "second")))
    devices = [_device(profile, "nvme-a", "pair", "first"),
               _device(profile, "nvme-b", "pair", "second")]
    objects.create(_vm("vm", profile, [with_claim_reference("pair", "pair")], devices))
    vm = vms.running(kube, "vm", namespace)
    got = check_every_level(kube, reach, vm, devices, profile)
    assert got["nvme-a"][attribute] == got["nvme-b"][attribute], (attribute, got)


@markers.devices(2)
@markers.exclusive_devices
@markers.requires(Capability.TWO_DEVICES_PER_NUMA_NODE)
@markers.requirement("SHAPE-010")
def test_two_requests_aligned_on_the_numa_node_give_the_vm_two_devices_of_that_node(
    kube, objects, namespace, profile, reach
):
    """On NUMA machines, as the servers carrying GPUs and NVMe are: two requests of one
    claim aligned on the standard NUMA attribute (as claims align devices of several
    drivers) give the VM two devices of one NUMA node, each reaching the guest."""
    objects.create(new_resource_claim(
        "pair", with_request("first", profile.device_class),
        with_request("second", profile.device_class),
        with_match_attribute(NUMA_NODE, "first", "second")))
    devices = [_device(profile, "nvme-a", "pair", "first"),
               _device(profile, "nvme-b", "pair", "second")]
    objects.create(_vm("vm", profile, [with_claim_reference("pair", "pair")], devices))
    vm = vms.running(kube, "vm", namespace)
    got = check_every_level(kube, reach, vm, devices, profile)
    assert got["nvme-a"][PCI_BUS_ID] != got["nvme-b"][PCI_BUS_ID], got
    assert got["nvme-a"][NUMA_NODE] == got["nvme-b"][NUMA_NODE], (NUMA_NODE, got)


@markers.devices(2)
@markers.requires(Capability.TWO_DEVICES_PER_NODE)
@markers.requirement("SHAPE-005")
def test_each_request_of_one_claim_reaches_the_vm_as_its_own_device(
    kube, objects, namespace, profile, reach
):
    """Mirrors KubeVirt's "should allocate three vfio-gpu devices via separate requests"
    (two here: a node's pool): one claim, a request per host device, none dropped."""
    objects.create(new_resource_claim(
        "pair", with_request("first", profile.device_class),
        with_request("second", profile.device_class)))
    devices = [_device(profile, "nvme-a", "pair", "first"),
               _device(profile, "nvme-b", "pair", "second")]
    objects.create(_vm("vm", profile, [with_claim_reference("pair", "pair")], devices))
    vm = vms.running(kube, "vm", namespace)
    got = check_every_level(kube, reach, vm, devices, profile)
    assert got["nvme-a"][PCI_BUS_ID] != got["nvme-b"][PCI_BUS_ID], got


@markers.devices(2)
@markers.requires(Capability.TWO_DEVICES_PER_NODE)
@markers.requirement("SHAPE-006")
def test_two_claims_in_one_vm_each_reach_the_vm(kube, objects, namespace, profile, reach):
    objects.create(plain_claim("first", profile))
    objects.create(plain_claim("second", profile))
    devices = [_device(profile, "nvme-a", "first"), _device(profile, "nvme-b", "second")]
    objects.create(_vm("vm", profile, [with_claim_reference("first", "first"),
                                       with_claim_reference("second", "second")], devices))
    vm = vms.running(kube, "vm", namespace)
    got = check_every_level(kube, reach, vm, devices, profile)
    assert got["nvme-a"][PCI_BUS_ID] != got["nvme-b"][PCI_BUS_ID], got


@markers.first_available
@markers.requirement("SHAPE-007")
def test_a_first_available_request_reaches_the_vm(kube, objects, namespace, profile, reach):
    """A request served by the first of its subrequests that fits. The KEP-5304 API names
    the device's metadata entry "<request>/<subrequest>" (DeviceMetadataRequest.Name, as
    in the allocation result); the VMI names the request, which is all it can name."""
    objects.create(new_resource_claim("nvme", with_first_available(
        REQUEST, ("first", profile.device_class))))
    device = _device(profile, "nvme", "nvme")
    objects.create(_vm("vm", profile, [with_claim_reference("nvme", "nvme")], [device]))
    try:
        vm = vms.running(kube, "vm", namespace)
    except (WaitFailed, WaitTimeout) as err:
        why = vms.unsynchronized_message(kube.find("VirtualMachineInstance", "vm", namespace))
        if why and "not found in metadata" in why and f"{REQUEST}/first" in why:
            raise KnownBugSeen(
                f"KubeVirt looks the device up as request {REQUEST!r}, the metadata names it "
                f"{REQUEST}/first as the API says: {why}") from err
        pytest.fail(f"the VM with a firstAvailable request does not run: {why or err}",
                    pytrace=False)
    check_every_level(kube, reach, vm, [device], profile)
    if reach.metadata:
        claim = vms.pod_claim_names(vm.pod)["nvme"]
        [document] = read_metadata_files(kube, vm.pod, metadata_dir(
            reach.release, "claim", claim, REQUEST))
        names = [r["name"] for r in document["metadata"]["requests"]]
        assert names == [f"{REQUEST}/first"], f"the metadata names the request {names}"


@markers.devices(2)
@markers.requires(Capability.TWO_DEVICES_PER_NODE)
@markers.requirement("SHAPE-008")
def test_a_request_for_two_devices_named_once_is_refused_with_kubevirts_reason(
    kube, objects, namespace, profile
):
    """KubeVirt passes one device per request: a request allocated two devices, named by
    one VMI device, leaves the VMI unsynchronized with KubeVirt's reason (virt-launcher,
    pkg/dra/utils.go), and deleting the VM frees both devices."""
    objects.create(new_resource_claim("pair", with_request(REQUEST, profile.device_class,
                                                           count=2)))
    objects.create(_vm("vm", profile, [with_claim_reference("pair", "pair")],
                       [_device(profile, "nvme", "pair")]))
    vmi = waits.wait_for(
        kube, "VirtualMachineInstance", "vm", namespace, _names_the_device_count,
        Timeout.VMI_RUNNING, "KubeVirt to refuse two devices for one VMI device")
    assert vmi["status"].get("phase") != "Running", vms.unsynchronized_message(vmi)
    kube.delete("VirtualMachine", "vm", namespace)
    waits.wait_until_gone(kube, "VirtualMachineInstance", "vm", namespace)
    assert not allocated_devices(waits.wait_until_claim_deallocated(kube, "pair", namespace))


@markers.across_device_kinds
@markers.devices(2)
@markers.requires(Capability.TWO_DEVICES_PER_NODE)
@markers.requirement("SHAPE-009")
def test_one_claim_serves_a_gpu_and_a_host_device_of_one_vm(
    kube, objects, namespace, profile, reach
):
    """One claim, two requests: the first to ``gpus[]``, the second to ``hostDevices[]``
    (KubeVirt's two DRA paths in one VMI, each with its own alias and lookup)."""
    if set(profile.device_kinds) != {"gpu", "hostDevice"}:
        pytest.skip(f"profile {profile.name} declares deviceKinds {list(profile.device_kinds)}"
                    ": its devices do not go to both lists")
    objects.create(new_resource_claim(
        "pair", with_request("first", profile.device_class),
        with_request("second", profile.device_class)))
    devices = [VmDevice("nvme-gpu", "gpu", "pair", "first"),
               VmDevice("nvme-hostdev", "hostDevice", "pair", "second")]
    objects.create(vms.guest_vm(
        "vm", profile, with_claim_reference("pair", "pair"),
        *(vms.dra_device(profile.with_kind(d.kind), d.name, d.entry, d.request)
          for d in devices)))
    vm = vms.running(kube, "vm", namespace)
    got = check_every_level(kube, reach, vm, devices, profile)
    assert got["nvme-gpu"][PCI_BUS_ID] != got["nvme-hostdev"][PCI_BUS_ID], got


def _names_the_device_count(vmi) -> bool:
    """KubeVirt's reason: the request, and the one device it takes."""
    message = (vms.unsynchronized_message(vmi) or "").lower()
    return f'"{REQUEST}"' in message and "one device per request" in message


def _identity(attributes, vm) -> tuple[str, str]:
    """A device across the cluster: its node and its PCI address (addresses repeat on
    other nodes)."""
    return vm.node, str(attributes[PCI_BUS_ID])


def _shared_attribute(kube, profile) -> str:
    """A required attribute whose value every free device of some node shares (the
    reference driver: its controllers' PCIe root)."""
    by_node: dict[str, list] = {}
    for device in free_devices(kube, profile):
        by_node.setdefault(device.node, []).append(device)
    for attribute in profile.required_attributes:
        for devices in by_node.values():
            values = {str(d.attributes[attribute]) for d in devices if attribute in d.attributes}
            if len(devices) >= 2 and len(values) == 1 and all(
                    attribute in d.attributes for d in devices):
                return attribute
    pytest.fail(f"no attribute of {profile.required_attributes} has one value on two free "
                f"devices of a node, for matchAttribute", pytrace=False)
