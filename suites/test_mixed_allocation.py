"""DRA and device-plugin devices side by side: never one device handed out twice."""

from __future__ import annotations

from collections import defaultdict

import pytest
from kubernetes.client.rest import ApiException

from core import waits
from core.errors import KnownBugSeen
from core.kube import RUN_ID_LABEL
from core.timeouts import Timeout
from fixtures import markers, vms
from fixtures.builders.vmi import (
    GPUS,
    HOST_DEVICES,
    with_claim_reference,
    with_device,
    with_node_selector,
)
from fixtures.claims import REQUEST, free_devices, plain_claim
from fixtures.devices import PCI_BUS_ID, claim_device_attributes
from fixtures.kubevirt_config import changed_configuration, with_permitted_pci_host_device
from fixtures.launcher import (
    compute_exec,
    domain_xml,
    dra_hostdev_alias,
    hostdev_sources,
    pci_resource_env_name,
)
from kubevirtci.capabilities import Capability

pytestmark = [
    markers.mixed,
    markers.requires_running_vms,
    markers.requires(Capability.DEVICE_PLUGIN_NVME),
]


def _dp_vm(name, profile, *options):
    return vms.guest_vm(
        name, profile, with_device(HOST_DEVICES, "dp", deviceName=profile.device_plugin_resource),
        *options,
    )


def _dra_vm(name, profile, claim, *options):
    return vms.guest_vm(
        name, profile, with_claim_reference("nvme", claim),
        vms.dra_device(profile, "nvme", "nvme", REQUEST), *options,
    )


def _hostdev_addresses(kube, vm):
    return hostdev_sources(domain_xml(kube, vm.pod, vm.name, vm.namespace))


@markers.dra_launcher
@markers.vm_running
@markers.device_plugin_vm
@markers.requirement("MIXED-001")
def test_device_plugin_vm_and_dra_vm_run_on_same_node(
    kube, objects, namespace, profile, free_device
):
    device = free_device()
    objects.create(_dp_vm("dp-vm", profile, with_node_selector(device.node)))
    objects.create(plain_claim("nvme", profile))
    objects.create(_dra_vm("dra-vm", profile, "nvme", with_node_selector(device.node)))
    dp_vm = vms.running(kube, "dp-vm", namespace)
    dra_vm = vms.running(kube, "dra-vm", namespace)
    assert dp_vm.node == dra_vm.node == device.node
    dp = set(_hostdev_addresses(kube, dp_vm).values())
    dra = set(_hostdev_addresses(kube, dra_vm).values())
    assert dp and dra and not dp & dra, f"device handed out twice: {dp & dra}"


@markers.dra_launcher
@markers.vm_running
@markers.device_plugin_vm
@markers.requirement("MIXED-002")
def test_one_vm_with_device_plugin_and_dra_host_devices(kube, objects, namespace, profile):
    objects.create(plain_claim("nvme", profile))
    objects.create(vms.guest_vm(
        "vm", profile,
        with_device(HOST_DEVICES, "dp", deviceName=profile.device_plugin_resource),
        with_claim_reference("nvme", "nvme"),
        vms.dra_device(profile, "nvme", "nvme", REQUEST),
    ))
    vm = vms.running(kube, "vm", namespace)
    addresses = _hostdev_addresses(kube, vm)
    assert dra_hostdev_alias(profile.device_kind, "nvme") in addresses, addresses
    assert len(set(addresses.values())) == len(addresses) >= 2, addresses


@markers.requirement("MIXED-003")
def test_dra_and_device_plugin_gpus_in_one_vmi_are_rejected(objects, profile):
    vm = vms.guest_vm(
        "vm", profile,
        with_device(GPUS, "dp-gpu", deviceName=profile.device_plugin_resource),
        with_claim_reference("gpu", "gpu-claim"),
        with_device(GPUS, "dra-gpu", claimName="gpu", requestName=REQUEST),
    )
    try:
        objects.create(vm)
    except ApiException as err:
        assert err.status in (400, 422), err
        assert "gpus" in err.body.lower(), err.body
    else:
        pytest.fail("virt-api accepted a VM whose GPUs mix DRA and device-plugin entries, "
                    "which VEP-10 forbids (KubeVirt's admitter rejects it from v1.8.3 on)",
                    pytrace=False)


@markers.dra_launcher
@markers.vm_running
@markers.device_plugin_vm
@markers.requirement("MIXED-004")
def test_no_pci_address_is_assigned_twice_across_running_vms_of_the_run(
    kube, objects, namespace, profile, run_id
):
    objects.create(_dp_vm("dp-vm", profile))
    objects.create(plain_claim("nvme", profile))
    objects.create(_dra_vm("dra-vm", profile, "nvme"))
    vms.running(kube, "dp-vm", namespace)
    vms.running(kube, "dra-vm", namespace)
    holders: dict[tuple[str, str], list[str]] = defaultdict(list)
    for vmi in kube.list("VirtualMachineInstance", label_selector=f"{RUN_ID_LABEL}={run_id}"):
        if (vmi.get("status") or {}).get("phase") != "Running":
            continue
        ns, name = vmi["metadata"]["namespace"], vmi["metadata"]["name"]
        vm = vms.running(kube, name, ns)
        for address in _hostdev_addresses(kube, vm).values():
            holders[(vm.node, address)].append(f"{ns}/{name}")
    twice = {k: v for k, v in holders.items() if len(v) > 1}
    assert holders and not twice, f"PCI addresses assigned twice: {twice}"


def _device_plugin_capacity(kube, node, resource):
    allocatable = kube.get("Node", node)["status"]["allocatable"]
    return int(allocatable.get(resource, "0"))


@markers.dra_launcher
@markers.vm_running
@markers.exclusive_devices
@markers.device_plugin_vm
@markers.requirement("MIXED-005")
def test_exhausting_device_plugin_pool_does_not_block_dra(
    kube, objects, namespace, profile, free_device
):
    device = free_device()
    capacity = _device_plugin_capacity(kube, device.node, profile.device_plugin_resource)
    for i in range(capacity):
        objects.create(_dp_vm(f"dp-{i}", profile, with_node_selector(device.node)))
    for i in range(capacity):
        vms.running(kube, f"dp-{i}", namespace)
    objects.create(plain_claim("nvme", profile))
    objects.create(_dra_vm("dra-vm", profile, "nvme", with_node_selector(device.node)))
    vms.running(kube, "dra-vm", namespace)


@markers.dra_launcher
@markers.vm_running
@markers.exclusive_devices
@markers.device_plugin_vm
@markers.requirement("MIXED-006")
def test_exhausting_dra_pool_does_not_block_device_plugin(
    kube, objects, namespace, profile, free_device
):
    node = free_device().node
    free = [d for d in free_devices(kube, profile) if d.node == node]
    for i, _ in enumerate(free):
        objects.create(plain_claim(f"nvme-{i}", profile))
        objects.create(_dra_vm(f"dra-{i}", profile, f"nvme-{i}", with_node_selector(node)))
    for i, _ in enumerate(free):
        vms.running(kube, f"dra-{i}", namespace)
    objects.create(_dp_vm("dp-vm", profile, with_node_selector(node)))
    dp_vm = vms.running(kube, "dp-vm", namespace)
    env = compute_exec(kube, dp_vm.pod, ["env"])
    assert "PCI_RESOURCE_" in env


# A device-plugin resource no permittedHostDevices entry lists.
UNLISTED_RESOURCE = "devices.kubevirt.io/unlisted"


@markers.dra_launcher
@markers.vm_running
@markers.allow_list
@markers.requirement("MIXED-007")
def test_an_unlisted_device_plugin_resource_is_refused_while_dra_devices_start(
    kube, objects, namespace, profile, cluster
):
    """The allow-list governs device-plugin devices, not DRA ones: with the DRA gates on,
    virt-controller still refuses a ``deviceName`` that permittedHostDevices does not list
    (renderresources.go validatePermittedHostDevices), in the list the DRA device uses."""
    if not cluster.facts.kubevirt_permits_host_devices:
        pytest.skip("the KubeVirt CR configures no permittedHostDevices: no allow-list "
                    "to refuse by")
    group = GPUS if profile.device_kind == "gpu" else HOST_DEVICES
    objects.create(vms.guest_vm("unlisted", profile,
                                with_device(group, "dp", deviceName=UNLISTED_RESOURCE)))
    objects.create(plain_claim("nvme", profile))
    objects.create(_dra_vm("dra-vm", profile, "nvme"))
    vmi = waits.wait_for(
        kube, "VirtualMachineInstance", "unlisted", namespace,
        lambda o: _refused_unlisted(o) or bool(waits.vmi_unschedulable(o)),
        Timeout.VMI_RUNNING, f"virt-controller to refuse {UNLISTED_RESOURCE}")
    if not _refused_unlisted(vmi):
        # a launcher exists to be unschedulable: virt-controller rendered it
        raise KnownBugSeen(f"virt-controller rendered a launcher for {group} resource "
                           f"{UNLISTED_RESOURCE}, which permittedHostDevices does not list")
    vms.running(kube, "dra-vm", namespace)


def _refused_unlisted(vmi) -> bool:
    message = vms.unsynchronized_message(vmi) or ""
    return UNLISTED_RESOURCE in message and "not permitted" in message


@markers.exclusive_devices
@markers.extended_resource
@markers.requires(Capability.GUEST_ACCESS)
@markers.requirement("MIXED-008")
def test_a_device_plugin_name_served_by_dra_reaches_the_vm(
    kube, objects, namespace, profile, run_id, guest, pci_vendor_device
):
    """KEP-5004 (GA in Kubernetes 1.37): a DeviceClass with ``extendedResourceName``
    serves a device-plugin style name through DRA. A VM's host device naming it (listed
    in permittedHostDevices as an external provider's) is scheduled with a claim the
    scheduler makes for the launcher; the device must reach the domain and the guest."""
    resource = f"dra.kubevirt-conformance.io/nvme-{run_id}"
    served = kube.get("DeviceClass", profile.device_class)
    objects.create({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                    "metadata": {"name": f"kdc-extended-{run_id}"},
                    "spec": {**served["spec"], "extendedResourceName": resource}})
    external = {"pciVendorSelector": pci_vendor_device, "resourceName": resource,
                "externalResourceProvider": True}
    with changed_configuration(kube, with_permitted_pci_host_device(external)):
        objects.create(vms.guest_vm("vm", profile,
                                    with_device(HOST_DEVICES, "ext", deviceName=resource)))
        vmi = waits.wait_for(kube, "VirtualMachineInstance", "vm", namespace,
                             _settled_past_the_allow_list, Timeout.VMI_RUNNING,
                             f"the VMI with {resource} to run or be refused")
    pod = next(iter(kube.list("Pod", namespace, label_selector=(
        f"kubevirt.io/created-by={vmi['metadata']['uid']}"))), {})
    claim = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get(
        "resourceClaimName")
    if vmi["status"].get("phase") != "Running":
        why = vms.unsynchronized_message(vmi) or _scheduling_message(vmi)
        failure = (
            f"KubeVirt does not give a VM a device-plugin name served by DRA ({resource}, "
            f"DeviceClass kdc-extended-{run_id}): the scheduler gave its launcher the claim "
            f"{claim or '(none)'}, and virt-launcher, which finds a host device in "
            f"{pci_resource_env_name(resource)} (set by a device plugin only), reports: {why}")
        if claim and "do not match the number of devices" in why:
            raise KnownBugSeen(failure)
        pytest.fail(failure, pytrace=False)
    vm = vms.running(kube, "vm", namespace)
    [attributes] = claim_device_attributes(kube, kube.get("ResourceClaim", claim, namespace))
    sources = hostdev_sources(domain_xml(kube, vm.pod, "vm", namespace))
    assert attributes[PCI_BUS_ID] in sources.values(), (attributes[PCI_BUS_ID], sources)
    if profile.serial_attribute:
        assert str(attributes[profile.serial_attribute]) in vms.guest_nvme_serials(guest, vm)


def _settled_past_the_allow_list(vmi) -> bool:
    """Running, or refused for a reason other than the allow-list (which virt-controller
    may still read from before the change). An unschedulable launcher is waited out: the
    scheduler may not have seen the new DeviceClass yet."""
    if (vmi or {}).get("status", {}).get("phase") == "Running":
        return True
    message = vms.unsynchronized_message(vmi)
    return bool(message) and "not permitted" not in message


def _scheduling_message(vmi) -> str:
    unscheduled = waits.condition(vmi, "PodScheduled", "False")
    return str(unscheduled.get("message")) if unscheduled else f"phase {vmi['status'].get('phase')}"
