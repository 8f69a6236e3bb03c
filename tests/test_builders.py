"""Builders produce exactly the manifests the facts file describes (resource.k8s.io/v1
``requests[].exactly``; VEP-10 VMI fields)."""

from fixtures.builders.pod import (
    new_pod,
    with_container_claim,
    with_pod_claim_reference,
    with_pod_claim_template,
)
from fixtures.builders.resourceclaim import (
    attribute_equals,
    new_resource_claim,
    with_request,
    with_request_cel_selector,
)
from fixtures.builders.resourceclaimtemplate import new_resource_claim_template
from fixtures.builders.virtualmachine import new_vm, with_run_strategy
from fixtures.builders.vmi import (
    GPUS,
    HOST_DEVICES,
    new_vmi,
    with_claim_reference,
    with_claim_template,
    with_device,
    with_memory,
    with_termination_grace_period,
)


def test_resource_claim_uses_the_v1_exactly_shape_and_a_pinning_selector():
    claim = new_resource_claim(
        "nvme",
        with_request("dev", "nvme-passthrough.example.com"),
        with_request_cel_selector("dev", attribute_equals("nvme.example.com/serial", "nvme-1")),
    )
    assert claim == {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "nvme"},
        "spec": {"devices": {"requests": [{
            "name": "dev",
            "exactly": {
                "deviceClassName": "nvme-passthrough.example.com",
                "allocationMode": "ExactCount", "count": 1,
                "selectors": [{"cel": {"expression":
                    'device.attributes["nvme.example.com"].serial == "nvme-1"'}}],
            },
        }]}},
    }


def test_resource_claim_template_nests_the_claim_spec():
    assert new_resource_claim_template("t", with_request("gpu", "gpu.example.com", count=2)) == {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.example.com", "allocationMode": "ExactCount",
            "count": 2}}]}}},
    }


def test_standard_attribute_pinning_expression():
    assert attribute_equals("resource.kubernetes.io/pciBusID", "0000:00:05.0") == \
        'device.attributes["resource.kubernetes.io"].pciBusID == "0000:00:05.0"'


def test_vm_with_dra_and_device_plugin_devices_matches_vep10():
    vm = new_vm(
        new_vmi(
            "vm",
            with_claim_reference("nvme", "nvme-claim"),
            with_claim_template("gpu", "gpu-template"),
            with_device(HOST_DEVICES, "nvme", claimName="nvme", requestName="dev"),
            with_device(GPUS, "gpu1", claimName="gpu", requestName="gpu"),
            with_device(HOST_DEVICES, "dp", deviceName="devices.kubevirt.io/nvme"),
        ),
        with_run_strategy("Halted"),
    )
    spec = vm["spec"]["template"]["spec"]
    assert vm["spec"]["runStrategy"] == "Halted"
    assert vm["metadata"]["name"] == "vm"
    assert vm["spec"]["template"]["metadata"]["labels"] == {"kubevirt.io/vm": "vm"}
    assert spec["resourceClaims"] == [
        {"name": "nvme", "resourceClaimName": "nvme-claim"},
        {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
    ]
    assert spec["domain"]["devices"]["hostDevices"] == [
        {"name": "nvme", "claimName": "nvme", "requestName": "dev"},
        {"name": "dp", "deviceName": "devices.kubevirt.io/nvme"},
    ]
    assert spec["domain"]["devices"]["gpus"] == [
        {"name": "gpu1", "claimName": "gpu", "requestName": "gpu"}]
    assert vm["apiVersion"] == "kubevirt.io/v1" and vm["kind"] == "VirtualMachine"


def test_defaults_are_options_applied_first_so_callers_override_them():
    vmi = new_vmi("vmi")
    assert vmi["kind"] == "VirtualMachineInstance"
    assert vmi["spec"]["domain"]["resources"] == {"requests": {"memory": "1Gi"}}
    assert vmi["spec"]["terminationGracePeriodSeconds"] == 0
    assert new_vm(vmi)["spec"]["runStrategy"] == "Always"
    small = new_vmi("vmi", with_memory("128Mi"), with_termination_grace_period(30))
    assert small["spec"]["domain"]["resources"] == {"requests": {"memory": "128Mi"}}
    assert small["spec"]["terminationGracePeriodSeconds"] == 30


def test_pod_claims_by_reference_and_template():
    pod = new_pod("p", "busybox", with_pod_claim_reference("a", "claim-a"),
                  with_pod_claim_template("b", "tpl-b"), with_container_claim("a", "dev"),
                  with_container_claim("b"))
    assert pod["spec"]["resourceClaims"] == [
        {"name": "a", "resourceClaimName": "claim-a"},
        {"name": "b", "resourceClaimTemplateName": "tpl-b"},
    ]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [
        {"name": "a", "request": "dev"}, {"name": "b"}]


def test_builders_are_independent_instances():
    first, second = new_vm(new_vmi("a")), new_vm(new_vmi("b"))
    with_device(HOST_DEVICES, "x", claimName="c", requestName="r")(first["spec"]["template"])
    assert "hostDevices" not in second["spec"]["template"]["spec"]["domain"]["devices"]
