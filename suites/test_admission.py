"""VEP-10 admission rules, each broken once, and claims that cannot be satisfied."""

from __future__ import annotations

import copy

import pytest
from kubernetes.client.rest import ApiException

from core import waits
from core.timeouts import Timeout
from fixtures import markers, vms
from fixtures.builders.resourceclaim import (
    new_resource_claim,
    with_request,
    with_request_cel_selector,
)
from fixtures.builders.virtualmachine import with_run_strategy
from fixtures.builders.vmi import (
    GPUS,
    HOST_DEVICES,
    with_claim_reference,
    with_claim_template,
    with_device,
    with_node_selector,
    with_resource_claim_entry,
)
from fixtures.claims import REQUEST, plain_claim
from fixtures.devices import allocated_devices
from fixtures.kubevirt_config import changed_configuration, without_feature_gate

pytestmark = [markers.admission, markers.requires_kubevirt_dra]

# rule id -> (VM options breaking exactly that rule, texts the rejection must name)
BROKEN_RULES = {
    "claim-name-not-dns-label": (
        (with_claim_reference("Not_A_Label", "c"),
         with_device(HOST_DEVICES, "d", claimName="Not_A_Label", requestName=REQUEST)),
        ("resourceclaims",),
    ),
    "duplicate-claim-names": (
        (with_claim_reference("c", "c"), with_claim_reference("c", "c2"),
         with_device(HOST_DEVICES, "d", claimName="c", requestName=REQUEST)),
        ("resourceclaims",),
    ),
    # KubeVirt names the list that lacks the claim, not the device that uses it:
    # "vmi.spec.resourceClaims must specify all claims used in ..." on <root>.resourceClaims
    # (pkg/dra/admitter/dra_admitter.go, validateCreationDRA).
    "claim-name-not-in-resource-claims": (
        (with_claim_reference("c", "c"),
         with_device(HOST_DEVICES, "d", claimName="missing", requestName=REQUEST)),
        ("resourceclaims",),
    ),
    "request-name-missing": (
        (with_claim_reference("c", "c"),
         with_device(HOST_DEVICES, "d", claimName="c")),
        ("requestname",),
    ),
    "duplicate-claim-request-pair": (
        (with_claim_reference("c", "c"),
         with_device(HOST_DEVICES, "d1", claimName="c", requestName=REQUEST),
         with_device(HOST_DEVICES, "d2", claimName="c", requestName=REQUEST)),
        ("requestname",),
    ),
    "device-name-and-claim-both-set": (
        (with_claim_reference("c", "c"),
         with_device(HOST_DEVICES, "d", deviceName="devices.kubevirt.io/nvme",
                     claimName="c", requestName=REQUEST)),
        ("devicename",),
    ),
    "device-name-and-claim-both-missing": (
        (with_claim_reference("c", "c"), with_device(HOST_DEVICES, "d")),
        ("devicename",),
    ),
    "claim-name-missing": (
        (with_claim_reference("c", "c"), with_device(HOST_DEVICES, "d", requestName=REQUEST)),
        ("claimname",),
    ),
    # One (claim, request) pair in both lists: the message names both lists' entries.
    "pair-in-gpus-and-host-devices": (
        (with_claim_reference("c", "c"),
         with_device(GPUS, "g", claimName="c", requestName=REQUEST),
         with_device(HOST_DEVICES, "d", claimName="c", requestName=REQUEST)),
        ("gpus", "hostdevices"),
    ),
    # Both name the entry's field path; KubeVirt's words tell the two rules apart.
    "claim-and-template-both-set": (
        (with_resource_claim_entry("c", resourceClaimName="c",
                                   resourceClaimTemplateName="t"),
         with_device(HOST_DEVICES, "d", claimName="c", requestName=REQUEST)),
        ("resourceclaims", "at most one of resourceclaimname"),
    ),
    "claim-and-template-both-missing": (
        (with_resource_claim_entry("c"),
         with_device(HOST_DEVICES, "d", claimName="c", requestName=REQUEST)),
        ("resourceclaims", "must specify one of"),
    ),
}


@pytest.mark.parametrize("rule", sorted(BROKEN_RULES))
@markers.requirement("ADMIT-001")
def test_vep10_rule_violation_is_rejected_naming_the_field(objects, profile, cluster, rule):
    release = cluster.facts.kubevirt_release
    if release is not None and rule not in release.admission_rules:
        # Which release checks which rule: kubevirtci/releases.py, from each one's admitters.
        pytest.skip(f"KubeVirt {cluster.facts.kubevirt_version} does not check {rule} on DRA "
                    f"host devices (its {release.name} admitters have no such rule)")
    options, fields = BROKEN_RULES[rule]
    with pytest.raises(ApiException) as err:
        objects.create(vms.guest_vm(f"vm-{rule}"[:50], profile, *options))
    assert err.value.status in (400, 422), err.value
    named = err.value.body.lower().replace(".", "")
    for field in fields:
        assert field in named, f"the rejection does not name {field}: {err.value.body}"


def _scheduling_failure(kube, namespace):
    vmi = waits.wait_for(
        kube, "VirtualMachineInstance", "vm", namespace,
        waits.vmi_unschedulable, Timeout.VMI_UNSCHEDULABLE,
        "VMI to report that its launcher cannot be scheduled",
    )
    assert vmi is not None and vmi["status"].get("phase") != "Running"
    return next(c for c in vmi["status"]["conditions"] if c["type"] == "PodScheduled")


def _assert_nothing_leaks(kube, namespace, claim):
    kube.delete("VirtualMachine", "vm", namespace)
    waits.wait_until_gone(kube, "VirtualMachineInstance", "vm", namespace)
    left = waits.wait_until_claim_deallocated(kube, claim, namespace)
    assert not allocated_devices(left)


@markers.dra_launcher
@markers.requires_launcher
@markers.requirement("ADMIT-002")
def test_claim_on_missing_device_class_leaves_vmi_pending_with_reason(
    kube, objects, namespace, profile
):
    objects.create(new_resource_claim("c", with_request(REQUEST, "no-such-class.example.com")))
    objects.create(vms.guest_vm("vm", profile, with_claim_reference("c", "c"),
                                vms.dra_device(profile, "d", "c", REQUEST)))
    condition = _scheduling_failure(kube, namespace)
    assert "no-such-class.example.com" in condition.get("message", ""), condition
    _assert_nothing_leaks(kube, namespace, "c")


# The scheduler filters a launcher pod by node first: only nodes that virt-handler marked
# kubevirt.io/schedulable are considered, and only on those is the device selector
# evaluated (a missing DeviceClass fails earlier, in PreFilter, on any cluster).
@markers.dra_launcher
@markers.requires_running_vms
@markers.requirement("ADMIT-003")
def test_unsatisfiable_selector_leaves_vmi_pending_with_reason(
    kube, objects, namespace, profile
):
    objects.create(new_resource_claim(
        "c", with_request(REQUEST, profile.device_class),
        with_request_cel_selector(REQUEST, 'device.driver == "nobody.example.com"'),
    ))
    objects.create(vms.guest_vm("vm", profile, with_claim_reference("c", "c"),
                                vms.dra_device(profile, "d", "c", REQUEST)))
    condition = _scheduling_failure(kube, namespace)
    assert "claim" in condition.get("message", "").lower(), condition
    _assert_nothing_leaks(kube, namespace, "c")


@markers.dra_launcher
@markers.vm_running
@markers.requires_running_vms
@markers.requirement("ADMIT-004")
def test_deleting_a_claim_in_use_does_not_take_the_device_from_a_running_vm(
    kube, objects, namespace, profile
):
    objects.create(plain_claim("c", profile))
    objects.create(vms.guest_vm("vm", profile, with_claim_reference("c", "c"),
                                vms.dra_device(profile, "d", "c", REQUEST)))
    vm = vms.running(kube, "vm", namespace)
    kube.delete("ResourceClaim", "c", namespace)
    claim = kube.get("ResourceClaim", "c", namespace)
    assert claim["metadata"].get("deletionTimestamp"), "claim should be held by its consumer"
    assert (claim.get("status") or {}).get("reservedFor"), "reservation dropped while in use"
    again = vms.running(kube, "vm", namespace)
    assert again.vmi["metadata"]["uid"] == vm.vmi["metadata"]["uid"]


@markers.exclusive_devices
@markers.requirement("ADMIT-005")
def test_dra_host_devices_are_rejected_while_the_host_devices_gate_is_off(
    kube, objects, profile, cluster
):
    """The gate rule, broken once: DRA hostDevices also need ``HostDevices`` (alpha, off by
    default). The gate is turned off cluster-wide under the exclusive lease and restored."""
    vm = vms.guest_vm("vm-gate-off", profile, with_claim_reference("c", "c"),
                      with_device(HOST_DEVICES, "d", claimName="c", requestName=REQUEST))
    rejection: list[str] = []

    def rejected() -> bool:
        try:
            objects.create(copy.deepcopy(vm))
        except ApiException as err:
            if err.status in (400, 422):
                rejection.append(err.body)
                return True
            raise
        kube.delete("VirtualMachine", "vm-gate-off", objects.namespace)
        waits.wait_until_gone(kube, "VirtualMachine", "vm-gate-off", objects.namespace)
        return False

    with changed_configuration(kube, without_feature_gate("HostDevices")):
        # virt-api picks up configuration changes asynchronously.
        waits.poll(rejected, Timeout.KUBEVIRT_CONFIG, "admission to see the gate off")
    assert "hostdevices" in rejection[-1].lower(), rejection[-1]


# Every VM shape the other suites build, as they build it: the real webhook accepts each.
BUILDER_SHAPES = {
    "dra-claim-reference": lambda profile: (
        with_claim_reference("nvme", "nvme"), vms.dra_device(profile, "nvme", "nvme", REQUEST)),
    "dra-claim-template": lambda profile: (
        with_claim_template("nvme", "nvme-tpl"),
        vms.dra_device(profile, "nvme", "nvme", REQUEST)),
    "device-plugin": lambda profile: (
        with_device(HOST_DEVICES, "dp", deviceName=profile.device_plugin_resource),),
    "device-plugin-and-dra": lambda profile: (
        with_device(HOST_DEVICES, "dp", deviceName=profile.device_plugin_resource),
        with_claim_reference("nvme", "nvme"), vms.dra_device(profile, "nvme", "nvme", REQUEST)),
    "dra-on-a-node": lambda profile: (
        with_claim_reference("nvme", "nvme"), vms.dra_device(profile, "nvme", "nvme", REQUEST),
        with_node_selector("node01")),
}


@pytest.mark.parametrize("shape", sorted(BUILDER_SHAPES))
@pytest.mark.parametrize("run_strategy", ["Always", "Halted"])
@markers.requirement("ADMIT-006")
def test_the_webhook_accepts_every_vm_shape_the_suites_build(
    kube, namespace, profile, shape, run_strategy
):
    if shape.startswith("device-plugin") and not profile.device_plugin_resource:
        pytest.skip(f"profile {profile.name} names no devicePluginResource")
    vm = vms.guest_vm("vm", profile, *BUILDER_SHAPES[shape](profile),
                      vm_options=(with_run_strategy(run_strategy),))
    vm["metadata"]["namespace"] = namespace
    kube.create(vm, dry_run=True)
