"""Every builder option's output accepted by the API server as a server-side dry run
(``dryRun=All``, ``fieldValidation=Strict``): the schemas, CEL compilation and admission
of the cluster (KubeVirt's webhooks for VMs and VMIs) judge the manifests the suites
send, instead of a unit test comparing a builder with its own literals. Two refusals
show that the judge has teeth: a misspelled field and a selector that does not compile."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from core.kube import Kube
from core.profile import DriverProfile
from fixtures import markers, vms
from fixtures.builders import Option
from fixtures.builders.devicetaintrule import new_device_taint_rule, selecting_device
from fixtures.builders.pod import (
    new_pod,
    on_node,
    with_command,
    with_container_claim,
    with_least_privilege_as_root,
    with_pod_claim_reference,
    with_pod_claim_template,
    with_pod_node_selector,
    with_read_only_host_path,
)
from fixtures.builders.resourceclaim import (
    ADMIN_ACCESS_LABEL,
    attribute_equals,
    new_resource_claim,
    with_admin_access,
    with_first_available,
    with_match_attribute,
    with_request,
    with_request_cel_selector,
)
from fixtures.builders.resourceclaimtemplate import new_resource_claim_template
from fixtures.builders.virtualmachine import new_vm, with_run_strategy, with_vm_claim_template
from fixtures.builders.vmi import (
    GPUS,
    HOST_DEVICES,
    new_vmi,
    with_claim_reference,
    with_claim_template,
    with_cloud_init_password,
    with_container_disk,
    with_device,
    with_eviction_strategy,
    with_kernel_boot,
    with_memory,
    with_node_selector,
    with_resource_claim_entry,
    with_termination_grace_period,
    without_pod_network,
)
from kubevirtci.capabilities import Capability

CLASS = "gpu.example.com"  # a class need not exist for a claim to be valid


def _dry_run(kube: Kube, obj: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    if namespace is not None:
        obj["metadata"]["namespace"] = namespace
    return kube.create(obj, dry_run=True)


def _claim(*requests: str) -> dict[str, Any]:
    return new_resource_claim(
        "claim",
        with_request("dev", CLASS, count=2),
        with_request_cel_selector("dev", attribute_equals("resource.kubernetes.io/pciBusID",
                                                          "0000:00:05.0")),
        with_first_available("any", ("one", CLASS), ("other", "nvme.example.com")),
        with_match_attribute("resource.kubernetes.io/pcieRoot", *requests),
    )


@markers.requires(Capability.DRA_API)
def test_resource_claims_and_templates_are_accepted(kube, namespace):
    _dry_run(kube, _claim(), namespace)
    _dry_run(kube, _claim("dev", "any"), namespace)
    _dry_run(kube, new_resource_claim_template("template", with_request("dev", CLASS)),
             namespace)


@markers.requires(Capability.DRA_API)
def test_an_admin_access_claim_is_accepted_in_a_namespace_labelled_for_it(kube, namespace):
    claim = new_resource_claim("admin", with_request("dev", CLASS), with_admin_access("dev"))
    with pytest.raises(ApiException) as refused:
        _dry_run(kube, copy.deepcopy(claim), namespace)
    assert refused.value.status in (403, 422), refused.value.body
    kube.patch("Namespace", namespace, {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}})
    _dry_run(kube, claim, namespace)


@markers.requires(Capability.DRA_API)
def test_a_misspelled_field_is_refused(kube, namespace):
    claim = _claim()
    claim["spec"]["devices"]["requests"][0]["exactlyy"] = {}
    with pytest.raises(ApiException) as refused:
        _dry_run(kube, claim, namespace)
    assert "exactlyy" in str(refused.value.body)


@markers.requires(Capability.DRA_API)
def test_a_selector_that_does_not_compile_is_refused(kube, namespace):
    claim = new_resource_claim("claim", with_request("dev", CLASS),
                               with_request_cel_selector("dev", 'device.attributes["x"'))
    with pytest.raises(ApiException) as refused:
        _dry_run(kube, claim, namespace)
    assert refused.value.status == 422


@markers.requires(Capability.DRA_API)
def test_pods_with_claims_are_accepted(kube, namespace):
    _dry_run(kube, new_pod(
        "pod", "busybox", with_command("sleep", "1"),
        with_pod_claim_reference("a", "claim-a"), with_pod_claim_template("b", "template-b"),
        with_container_claim("a", "dev"), with_container_claim("b"),
        with_pod_node_selector("node01"),
        with_read_only_host_path("cdi", "/var/run/cdi", mount_path="/cdi"),
        with_least_privilege_as_root()), namespace)
    _dry_run(kube, new_pod("pinned", "busybox", on_node("node01")), namespace)


@markers.requires(Capability.DEVICE_TAINTS)
def test_device_taint_rules_are_accepted(kube):
    for effect in ("NoSchedule", "NoExecute"):
        _dry_run(kube, new_device_taint_rule(
            "rule", effect, selecting_device(CLASS, "node01", "gpu-0")), None)


def _vmi_options(profile: DriverProfile) -> tuple[Option, ...]:
    return (
        with_claim_reference("nvme", "nvme-claim"),
        with_claim_template("gpu", "gpu-template"),
        with_resource_claim_entry("other", resourceClaimName="other-claim"),
        vms.dra_device(profile, "nvme", "nvme", "dev"),
        with_device(GPUS, "gpu1", claimName="gpu", requestName="gpu"),
        with_device(HOST_DEVICES, "other", claimName="other", requestName="dev"),
        with_memory("128Mi"), with_termination_grace_period(30),
        with_node_selector("node01"), with_eviction_strategy("None"),
    )


@markers.requires_kubevirt_dra
def test_vms_and_vmis_with_dra_devices_are_accepted(kube, namespace, profile):
    vmi = vms.guest_vmi("vm", profile, *_vmi_options(profile))
    _dry_run(kube, copy.deepcopy(vmi), namespace)
    for strategy in ("Always", "Halted"):
        _dry_run(kube, new_vm(copy.deepcopy(vmi), with_run_strategy(strategy)), namespace)


@markers.requires_kubevirt_dra
def test_vms_booting_either_way_are_accepted(kube, namespace):
    disk = new_vmi("disk", without_pod_network(), with_container_disk("registry.test/disk:1"),
                   with_cloud_init_password("user", "password"))
    kernel = new_vmi("kernel", with_kernel_boot("registry.test/kernel:1", "/boot/vmlinuz",
                                                "/boot/initrd", "console=ttyS0"))
    for vmi in (disk, kernel):
        _dry_run(kube, new_vm(vmi), namespace)


@markers.requires(Capability.PERSISTENT_DRA_CLAIMS)
def test_vm_owned_claim_templates_are_accepted(kube, namespace, profile):
    vm = vms.guest_vm("vm", profile, vms.dra_device(profile, "nvme", "nvme", "dev"),
                      vm_options=(with_vm_claim_template("nvme", "template", True),))
    _dry_run(kube, vm, namespace)


@markers.requires_kubevirt_dra
def test_a_misspelled_vm_field_is_refused(kube, namespace):
    vm = new_vm(new_vmi("vm"))
    vm["spec"]["template"]["spec"]["evictionStrategyy"] = "None"
    with pytest.raises(ApiException) as refused:
        _dry_run(kube, vm, namespace)
    assert "evictionStrategyy" in str(refused.value.body)
