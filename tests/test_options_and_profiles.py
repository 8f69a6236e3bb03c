from pathlib import Path

import pytest

from core.container_edits import UnknownAttribute
from core.errors import SuiteUsageError
from core.profile import PROFILES_DIR, SCHEMA_PATH, Promise, load, parse, schema_text
from fixtures import options
from fixtures.devices import Device
from fixtures.session import ClusterSession, deny_what_the_run_leaves_out
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.kubevirt_code import KubeVirtCode
from kubevirtci.kubevirt_source import BuiltSource
from kubevirtci.local.provider import LocalProvider


class FakeConfig:
    def __init__(self, **given):
        self.given = given

    def getoption(self, dest):
        return self.given.get(dest)


def test_defaults_use_the_local_provider_and_reference_profile():
    opts = options.resolve(FakeConfig(), env={})
    assert opts.provider == "local" and opts.profile == "reference-nvme"
    assert opts.run_id.isalnum() and opts.artifacts_dir == Path("_output") / f"run-{opts.run_id}"
    assert not opts.certify


def test_environment_sets_options_and_the_command_line_wins(tmp_path):
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text("apiVersion: v1\n")
    env = {"KDC_PROVIDER": "existing", "KUBECONFIG": str(kubeconfig), "KDC_CERTIFY": "true",
           "KDC_RUN_ID": "abc123", "KDC_PROFILE": "from-env"}
    opts = options.resolve(FakeConfig(profile="from-cli"), env=env)
    assert (opts.provider, opts.kubeconfig, opts.certify, opts.run_id, opts.profile) == (
        "existing", kubeconfig, True, "abc123", "from-cli")


def test_numa_nodes_are_asked_of_the_hermetic_cluster_only_when_given():
    assert options.resolve(FakeConfig(), env={}).numa_nodes is None  # a kept cluster's
    assert options.resolve(FakeConfig(), env={"KDC_NUMA_NODES": "2"}).numa_nodes == 2


def test_without_vms_skips_what_needs_a_running_vm_with_the_reason_and_keeps_kubevirt():
    caps = Capabilities(present={Capability.KUBEVIRT, Capability.RUNNING_VMS})
    reason = "nodes in a TCG VM"
    deny_what_the_run_leaves_out(caps, options.resolve(FakeConfig(), env={
        "KDC_WITHOUT_VMS": reason}))
    assert caps.has(Capability.KUBEVIRT) and not caps.has(Capability.RUNNING_VMS)
    assert reason in caps.reason_missing(Capability.RUNNING_VMS)
    untouched = Capabilities(present={Capability.RUNNING_VMS})
    deny_what_the_run_leaves_out(untouched, options.resolve(FakeConfig(), env={}))
    assert untouched.has(Capability.RUNNING_VMS)


def test_without_vms_builds_and_loads_no_guest_image_and_still_the_driver(tmp_path):
    provider = LocalProvider(tmp_path)
    kubevirt = BuiltSource(KubeVirtCode("v1.9.0", tmp_path, "c", "d"))
    guest_image = provider.guest().kernel_boot.image

    def loaded(env: dict[str, str]) -> list[str]:
        return ClusterSession(options.resolve(FakeConfig(), env=env), load("reference-nvme"),
                              provider, kubevirt).images_to_load()

    with_vms = loaded({})
    without = loaded({"KDC_WITHOUT_VMS": "nodes in a TCG VM"})
    assert guest_image in with_vms and guest_image not in without
    assert without and set(without) == set(with_vms) - {guest_image}


@pytest.mark.parametrize(("given", "env", "message"), [
    ({"provider": "kind"}, {}, "unknown provider 'kind'"),
    ({"provider": "existing"}, {}, "needs a kubeconfig"),
    ({"kubeconfig": "/nonexistent/kc"}, {}, "does not exist"),
    ({"run_id": "not valid!"}, {}, "not a valid label value"),
    ({"provider": "existing", "in_cluster": True}, {}, "needs a pod's service account"),
    ({"in_cluster": True}, {}, "not provider 'local'"),
    ({"numa_nodes": "two"}, {}, "not a count"),
    ({"numa_nodes": "9"}, {}, "not a count"),
    ({"provider": "kubevirtci", "numa_nodes": "2"}, {}, "nodes are what they are"),
])
def test_bad_options_give_one_error_naming_the_fix(given, env, message):
    with pytest.raises(SuiteUsageError, match=message) as err:
        options.resolve(FakeConfig(**given), env=env)
    assert "Fix:" in str(err.value)


@pytest.mark.parametrize(("text", "context", "message"), [
    ("apiVersion: v1\nclusters: [\n  - a: : b\n", None, "is not valid YAML at line 3"),
    ("- just\n- a list\n", None, "is not a kubeconfig"),
    ("apiVersion: v1\ncontexts:\n- name: kind-kind\n", "kind", "has no context 'kind' "
     r"\(it has: kind-kind\)"),
])
def test_a_broken_kubeconfig_is_one_error_before_any_cluster_work(tmp_path, text, context,
                                                                   message):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text)
    given = {"provider": "existing", "kubeconfig": str(kubeconfig), "context": context}
    with pytest.raises(SuiteUsageError, match=message) as err:
        options.resolve(FakeConfig(**given), env={})
    assert "\n" not in str(err.value) and "Fix:" in str(err.value)


def test_in_cluster_is_the_existing_provider_as_the_pods_service_account(tmp_path,
                                                                        monkeypatch):
    token = tmp_path / "token"
    token.write_text("t")
    monkeypatch.setattr(options, "SERVICE_ACCOUNT_TOKEN", token)
    opts = options.resolve(FakeConfig(provider="existing", in_cluster=True),
                           env={"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert opts.in_cluster and opts.kubeconfig is None


def test_reference_profile_loads():
    p = load("reference-nvme")
    assert p.driver == "nvme.dra.kubevirt-conformance.io"
    assert p.device_kinds == ("hostDevice", "gpu") and p.pci_vendor_device == "1b36:0010"
    assert p.plugin_socket is None  # found through the kubelet's plugin registry
    assert all(m.is_file() for m in p.manifests)
    assert "resource.kubernetes.io/pciBusID" in p.required_attributes


def test_a_test_of_one_kind_sees_that_kind_and_the_first_is_the_default():
    p = load("reference-nvme")
    assert p.device_kind == "hostDevice"
    assert p.with_kind("gpu").device_kind == "gpu"
    assert p.with_kind("gpu").device_kinds == p.device_kinds


def test_device_kind_is_the_shorthand_of_one_kind(tmp_path):
    p = parse({"driver": "d", "deviceClass": "c", "deviceKind": "gpu",
               "identityAttribute": "d/uuid"}, tmp_path / "p.yaml")
    assert (p.device_kinds, p.device_kind) == (("gpu",), "gpu")


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(SuiteUsageError, match=r"reference-nvme"):
        load("no-such-profile")


def test_broken_yaml_profile_names_the_problem(tmp_path):
    path = tmp_path / "vendor.yaml"
    path.write_text("driver: [unclosed\n")
    with pytest.raises(SuiteUsageError, match="not valid YAML"):
        load(str(path))


@pytest.mark.parametrize(("data", "message"), [
    ([], "not a mapping"),
    ({"driver": "d"}, "'deviceClass' is missing"),
    ({"driver": "d", "deviceClass": "c", "deviceKind": "nic", "pciVendorDevice": "1:2",
      "identityAttribute": "d/serial"}, "deviceKinds 'nic' is not one of hostDevice, gpu"),
    ({"driver": "d", "deviceClass": "c", "deviceKinds": ["gpu", "vgpu"],
      "identityAttribute": "d/serial"}, "deviceKinds 'vgpu' is not one of"),
    ({"driver": "d", "deviceClass": "c", "deviceKinds": "gpu",
      "identityAttribute": "d/serial"}, "deviceKinds must be a list of strs"),
    ({"driver": "d", "deviceClass": "c", "deviceKinds": ["gpu", "gpu"],
      "identityAttribute": "d/serial"}, "names a kind twice"),
    ({"driver": "d", "deviceClass": "c", "deviceKinds": [],
      "identityAttribute": "d/serial"}, "'deviceKinds' is missing"),
    ({"driver": "d", "deviceClass": "c", "deviceKinds": ["gpu"], "deviceKind": "gpu",
      "identityAttribute": "d/serial"}, "both deviceKinds and deviceKind"),
    ({"driver": "d", "deviceClass": "c", "deviceKind": "gpu", "pciVendorDevice": "1:2",
      "identityAttribute": "d/serial", "promises": {"sameDeviceAfterRestartUnpinned": "maybe"}},
     "sameDeviceAfterRestartUnpinned"),
])
def test_profile_validation_errors(data, message, tmp_path):
    with pytest.raises(SuiteUsageError, match=message):
        parse(data, tmp_path / "p.yaml")


def test_vendor_profile_minimal_and_defaults(tmp_path):
    p = parse({"driver": "gpu.example.com", "deviceClass": "gpu.example.com",
               "deviceKind": "gpu", "pciVendorDevice": "10de:2236",
               "identityAttribute": "gpu.example.com/uuid",
               "promises": {"sameDeviceAfterRestartUnpinned": True}}, tmp_path / "v.yaml")
    assert p.same_device_unpinned == "yes"
    assert p.plugin_pod_selector == "app.kubernetes.io/name=v-driver"
    assert p.manifests == ()


def test_example_driver_profile_loads_without_pci_and_installs_nothing():
    p = load("dra-example-gpu")
    assert (p.driver, p.device_kind, p.pci_vendor_device) == ("gpu.example.com", "gpu", None)
    assert p.manifests == () and p.images
    assert (p.device_metadata, p.exclusive_prepare) == (False, "no")


@pytest.mark.parametrize(("given", "expected"), [
    (False, "no"), (True, "yes"), ("unknown", "unknown"), (None, "unknown")])
def test_exclusive_prepare_promise_takes_yaml_booleans(given, expected, tmp_path):
    promises = {} if given is None else {"exclusivePrepare": given}
    p = parse({"driver": "d", "deviceClass": "c", "deviceKind": "gpu",
               "identityAttribute": "d/uuid", "promises": promises}, tmp_path / "p.yaml")
    assert p.exclusive_prepare == expected
    assert load("reference-nvme").exclusive_prepare == "yes"


def test_every_bad_field_is_named_in_one_error_before_any_cluster_work(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("driver: 12\ndeviceClass: c\ndeviceKind: gpu\nidentityAttribute: u\n"
                    "requiredAtributes: [a]\npromises: {deviceMetadata: maybe}\n"
                    "install: {manifests: [deploy/ds.yaml]}\n")
    with pytest.raises(SuiteUsageError) as err:
        load(str(path))
    message = str(err.value)
    assert "driver must be a str, not 12" in message
    assert "unknown field 'requiredAtributes' (did you mean requiredAttributes?)" in message
    assert "promises.deviceMetadata must be a bool, not 'maybe'" in message
    assert f"deploy/ds.yaml is not a file (paths are relative to the profile's folder, " \
           f"{tmp_path.resolve()})" in message


def test_promises_read_as_yaml_writes_them_and_a_bad_one_is_named_with_the_rest(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("driver: d\ndeviceClass: c\ndeviceKind: gpu\nidentityAttribute: u\n"
                    "promises: {exclusivePrepare: no, refusesOtherPools: YES}\n")
    p = load(str(path))
    assert (p.exclusive_prepare, p.refuses_other_pools, p.same_device_unpinned) == (
        Promise.NO, Promise.YES, Promise.UNKNOWN)
    assert f"{p.exclusive_prepare}" == "no"  # as the suites' messages print it
    path.write_text("driver:\ndeviceClass: c\ndeviceKind: gpu\nidentityAttribute: u\n"
                    "promises: {exclusivePrepare: Maybe, refusesOtherPools: 1, x: 2}\n")
    with pytest.raises(SuiteUsageError) as err:
        load(str(path))
    message = str(err.value)
    assert "'driver' is missing" in message
    assert "promises.exclusivePrepare is 'maybe' (use one of yes, no, unknown)" in message
    assert "promises.refusesOtherPools must be a str or bool, not 1" in message
    assert "unknown field 'promises.x'" in message


def test_the_published_json_schema_is_the_models():
    assert SCHEMA_PATH.read_text() == schema_text(), (
        "profiles/profile.schema.json differs from core/profile.py's model; regenerate it: "
        "python -m core.profile schema > profiles/profile.schema.json")


@pytest.mark.parametrize("path", sorted(PROFILES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_each_shipped_profile_validates_and_names_the_schema(path):
    assert load(str(path)).name == path.stem
    # editors (yaml-language-server) find the schema from the first line
    assert path.read_text().startswith("# yaml-language-server: $schema=profile.schema.json\n")


def test_the_schema_is_not_taken_for_a_profile():
    with pytest.raises(SuiteUsageError) as err:
        load("no-such-profile")
    assert "dra-example-gpu, reference-nvme]" in str(err.value)
    assert "profile.schema" not in str(err.value)


def _gpu(attributes: dict[str, object]) -> Device:
    return Device("gpu.example.com", "node01", "gpu-3", request="r", attributes=attributes)


def test_container_edits_name_the_allocated_device(tmp_path):
    edits = load("reference-nvme").container_edits
    given = Device("nvme.dra.kubevirt-conformance.io", "node01", "nvme-2", request="nvme-1",
                   attributes={"resource.kubernetes.io/pciBusID": "0000:01:00.0",
                               "nvme.dra.kubevirt-conformance.io/serial": "nvme-2",
                               "nvme.dra.kubevirt-conformance.io/iommuGroup": 12})
    assert edits.env_for(given) == {"DRA_NVME_NVME_1_PCI_ADDRESS": "0000:01:00.0",
                                    "DRA_NVME_NVME_1_SERIAL": "nvme-2"}
    assert edits.device_nodes_for(given) == ["/dev/vfio/vfio", "/dev/vfio/12"]
    gpu = load("dra-example-gpu").container_edits
    assert gpu.env_for(_gpu({"gpu.example.com/index": 3})) == {
        "GPU_DEVICE_3": "gpu-3"}
    assert not gpu.device_nodes
    with pytest.raises(UnknownAttribute, match=r"'gpu.example.com/index'.*gpu-3"):
        gpu.env_for(_gpu({}))


def test_container_edits_templates_that_can_never_be_filled_are_named(tmp_path):
    data = {"driver": "d.example.com", "deviceClass": "c", "deviceKind": "gpu",
            "identityAttribute": "d.example.com/uuid",
            "containerEdits": {"env": {"X_{index}": "{device}", "Y": 3},
                               "deviceNodes": ["/dev/x{d.example.com/minor}", "/tmp/z"]}}
    with pytest.raises(SuiteUsageError) as err:
        parse(data, tmp_path / "p.yaml")
    message = str(err.value)
    assert "containerEdits.env must map env names to strings" in message
    assert "/tmp/z is not under /dev/" in message
    data["containerEdits"]["env"] = {"X_{index}": "{device}"}
    with pytest.raises(SuiteUsageError, match=r"placeholder \{index\} is neither"):
        parse(data, tmp_path / "p.yaml")


def test_an_artifacts_folder_that_cannot_be_made_is_one_error(tmp_path):
    from fixtures.plugin import make_artifacts_dir

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SuiteUsageError, match="cannot be made") as err:
        make_artifacts_dir(blocker / "run")
    assert "--artifacts-dir" in err.value.fix
