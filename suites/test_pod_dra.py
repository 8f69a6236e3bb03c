"""Pod-level DRA on the cluster under test, without KubeVirt: the real scheduler
allocates from the driver's slices, the real controller manager owns the claim
lifecycle, the real kubelet prepares through the driver and the runtime applies CDI."""

from __future__ import annotations

import pytest

from core import waits
from core.container_edits import parse_env
from core.timeouts import Timeout
from fixtures import markers
from fixtures.builders.pod import (
    CONTAINER,
    EXIT_ON_TERM,
    new_pod,
    with_command,
    with_container_claim,
    with_pod_claim_reference,
    with_pod_claim_template,
    with_pod_node_selector,
)
from fixtures.builders.resourceclaim import with_request
from fixtures.builders.resourceclaimtemplate import new_resource_claim_template
from fixtures.claims import REQUEST, pinned_claim, plain_claim
from fixtures.device_nodes import check_container_device_nodes
from fixtures.devices import (
    PCI_BUS_ID,
    allocated_devices,
    claim_device_attributes,
    claim_devices,
)
from fixtures.launcher import DECODED_BY_1_37, metadata_object
from fixtures.released import VFIO_PCI, bound_driver
from kubevirtci.capabilities import Capability
from kubevirtci.releases import KEP_5304_ROOT

pytestmark = [markers.pod_dra, markers.requires_pod_dra]


def _pod(name, profile, claim, *options):
    return new_pod(
        name, profile.test_image, with_pod_claim_reference("dev", claim),
        with_container_claim("dev", REQUEST), *options,
    )


def _reserved_by(claim):
    return [r.get("name") for r in (claim.get("status") or {}).get("reservedFor") or []]


@markers.requirement("POD-001")
def test_scheduler_allocates_a_claim_from_the_driver_slices(kube, objects, namespace, profile):
    objects.create(plain_claim("c", profile))
    objects.create(_pod("p", profile, "c"))
    waits.wait_until_pod_running(kube, "p", namespace)
    claim = waits.wait_until_claim_allocated(kube, "c", namespace)
    devices = allocated_devices(claim)
    assert [d.driver for d in devices] == [profile.driver]
    attrs = claim_device_attributes(kube, claim)
    assert attrs and all(a.get(PCI_BUS_ID) for a in attrs), "allocated device not in any slice"
    assert _reserved_by(claim) == ["p"]


@markers.requirement("POD-002")
def test_template_claim_is_owned_by_its_pod_and_deleted_with_it(kube, objects, namespace,
                                                                profile):
    objects.create(new_resource_claim_template("t", with_request(REQUEST, profile.device_class)))
    objects.create(new_pod("p", profile.test_image, with_pod_claim_template("dev", "t"),
                           with_container_claim("dev", REQUEST)))
    pod = waits.wait_until_pod_running(kube, "p", namespace)
    statuses = pod["status"].get("resourceClaimStatuses") or []
    generated = next(s["resourceClaimName"] for s in statuses if s["name"] == "dev")
    claim = waits.wait_until_claim_allocated(kube, generated, namespace)
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "dev"
    assert claim["metadata"]["ownerReferences"][0]["name"] == "p"
    kube.delete("Pod", "p", namespace)
    waits.wait_until_gone(kube, "Pod", "p", namespace)
    waits.wait_until_gone(kube, "ResourceClaim", generated, namespace)


@markers.requirement("POD-003")
def test_precreated_claim_outlives_its_pod_and_is_deallocated_when_unreserved(
    kube, objects, namespace, profile
):
    created = objects.create(plain_claim("c", profile))
    objects.create(_pod("p", profile, "c"))
    waits.wait_until_pod_running(kube, "p", namespace)
    waits.wait_until_claim_allocated(kube, "c", namespace)
    kube.delete("Pod", "p", namespace)
    waits.wait_until_gone(kube, "Pod", "p", namespace)
    after = waits.wait_until_claim_deallocated(kube, "c", namespace)
    assert after["metadata"]["uid"] == created["metadata"]["uid"], "the claim was re-created"


@markers.requirement("POD-004")
def test_pinned_claim_gets_the_same_device_back(kube, objects, namespace, profile, free_device):
    device = free_device()
    objects.create(pinned_claim("c", profile, device))
    for attempt in ("first", "second"):
        objects.create(_pod(attempt, profile, "c", with_pod_node_selector(device.node)))
        waits.wait_until_pod_running(kube, attempt, namespace)
        got = allocated_devices(waits.wait_until_claim_allocated(kube, "c", namespace))
        assert [(d.pool, d.name) for d in got] == [(device.pool, device.name)], attempt
        kube.delete("Pod", attempt, namespace)
        waits.wait_until_gone(kube, "Pod", attempt, namespace)
        waits.wait_until_claim_deallocated(kube, "c", namespace)


@markers.requirement("POD-005")
def test_cdi_edits_and_metadata_reach_the_container_and_name_the_allocated_device(
    kube, objects, namespace, profile, node_client_on, record_property
):
    """Identity, not presence: env and metadata name the allocated device, and each device
    node is the node's own (type and major:minor), not just a node at the right path."""
    edits = profile.container_edits
    if not edits and not profile.device_metadata:
        pytest.skip(f"profile {profile.name} declares no containerEdits and no KEP-5304 "
                    "metadata: nothing a container is promised to see")
    objects.create(plain_claim("c", profile))
    objects.create(_pod("p", profile, "c", with_command(
        "sh", "-c", f"{EXIT_ON_TERM}; sleep 3600 & wait")))
    pod = waits.wait_until_pod_running(kube, "p", namespace)
    claim = waits.wait_until_claim_allocated(kube, "c", namespace)
    [given] = claim_devices(kube, claim)

    def run(script: str) -> str:
        return kube.exec("p", namespace, CONTAINER, ["sh", "-c", script])

    expected_env = edits.env_for(given)
    env = parse_env(run("env").splitlines())
    assert {name: env.get(name) for name in expected_env} == expected_env
    if edits.device_nodes:
        check_container_device_nodes(run, node_client_on(pod["spec"]["nodeName"]),
                                     edits.device_nodes_for(given), "the container",
                                     record_property)
    if profile.device_metadata:
        stream = run(f"cat {KEP_5304_ROOT}/resourceclaims/c/{REQUEST}/*-metadata.json")
        metadata = metadata_object(stream, DECODED_BY_1_37)
        devices = [d for r in metadata["requests"] if r["name"] == REQUEST
                   for d in r["devices"]]
        assert [(d["driver"], d["pool"], d["name"]) for d in devices] == [
            (profile.driver, *allocated_devices(claim)[0].key[1:])]
        bus_id = given.attributes.get(PCI_BUS_ID)
        if bus_id:
            assert [d["attributes"][PCI_BUS_ID]["string"] for d in devices] == [bus_id]


@markers.requires(Capability.NODE_ACCESS)
@markers.requirement("POD-006")
def test_prepared_device_is_bound_to_vfio_and_given_back_after_the_pod(
    kube, objects, namespace, profile, cluster
):
    objects.create(plain_claim("c", profile))
    objects.create(_pod("p", profile, "c"))
    pod = waits.wait_until_pod_running(kube, "p", namespace)
    node = cluster.provider.node(pod["spec"]["nodeName"])
    bdf = claim_device_attributes(kube, waits.wait_until_claim_allocated(kube, "c", namespace))[0][
        PCI_BUS_ID]
    assert bound_driver(node, bdf) == VFIO_PCI
    kube.delete("Pod", "p", namespace)
    waits.wait_until_gone(kube, "Pod", "p", namespace)
    waits.poll(lambda: bound_driver(node, bdf) != VFIO_PCI, Timeout.DEVICE_RELEASED,
               f"{bdf} to leave vfio-pci after its pod")
    assert bound_driver(node, bdf) == "nvme", "the device must go back to its original driver"


@markers.requirement("POD-007")
def test_a_container_given_a_function_sees_it_in_sysfs_with_its_iommu_group(
    kube, objects, namespace, profile, pci_vendor_device
):
    """libvirt in virt-launcher reads the function's sysfs entries: a container given the
    function must see them where the kernel shows them."""
    objects.create(plain_claim("c", profile))
    objects.create(_pod("p", profile, "c"))
    waits.wait_until_pod_running(kube, "p", namespace)
    bdf = claim_device_attributes(kube, waits.wait_until_claim_allocated(kube, "c", namespace))[0][
        PCI_BUS_ID]
    entry = f"/sys/bus/pci/devices/{bdf}"
    out = kube.exec("p", namespace, CONTAINER, ["sh", "-c",
                    f"cat {entry}/vendor {entry}/device; basename $(readlink {entry}/iommu_group);"
                    " ls /dev/vfio"])
    vendor, device, group, *vfio = out.split()
    assert f"{vendor.removeprefix('0x')}:{device.removeprefix('0x')}" == \
        pci_vendor_device, f"{entry} in the container is not the allocated function"
    assert group in vfio, f"the container was given {vfio}, not the function's group {group}"
