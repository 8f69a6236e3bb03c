"""DRA and device-plugin devices side by side: never one device handed out twice."""

from __future__ import annotations

from collections import defaultdict

import pytest
from kubernetes.client.rest import ApiException

from core.kube import RUN_ID_LABEL
from fixtures import markers, vms
from fixtures.builders.vmi import (
    GPUS,
    HOST_DEVICES,
    with_claim_reference,
    with_device,
    with_node_selector,
)
from fixtures.claims import REQUEST, free_devices, pick_free_device, plain_claim
from fixtures.launcher import compute_exec, domain_xml, dra_hostdev_alias, hostdev_sources
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
@markers.requirement("MIXED-001")
def test_device_plugin_vm_and_dra_vm_run_on_same_node(kube, objects, namespace, profile):
    device = pick_free_device(kube, profile)
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
@markers.requirement("MIXED-005")
def test_exhausting_device_plugin_pool_does_not_block_dra(kube, objects, namespace, profile):
    device = pick_free_device(kube, profile)
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
@markers.requirement("MIXED-006")
def test_exhausting_dra_pool_does_not_block_device_plugin(kube, objects, namespace, profile):
    node = pick_free_device(kube, profile).node
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
