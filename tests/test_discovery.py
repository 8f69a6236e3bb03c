import itertools

import pytest

from kubevirtci.capabilities import Capability
from kubevirtci.discovery import capabilities_from, discover, effective_gates
from kubevirtci.provider import NodePaths, vfio_cdev_missing
from kubevirtci.releases import release_for

DRIVER = "nvme.dra.kubevirt-conformance.io"
DP = "devices.kubevirt.io/nvme"


def test_kubevirt_1_9_cluster_facts(recorded):
    facts = discover(recorded("cluster_kubevirt_1_9"))
    assert facts.server_version == "v1.36.3"
    assert facts.dra_versions == ["v1", "v1beta2"]
    assert facts.nodes == ["node01", "node02"]
    assert facts.kubevirt_version == "v1.9.0"
    assert facts.drivers == {DRIVER: 3}
    assert facts.devices_per_node[DRIVER] == {"node01": 2, "node02": 1}
    # zero-valued extended resources are not device-plugin capacity
    assert facts.device_plugin_resources == {
        "node01": {DP: "1", "devices.kubevirt.io/kvm": "1k"}
    }


def test_beta_dra_gates_are_on_by_default_from_kubevirt_1_9(recorded):
    facts = discover(recorded("cluster_kubevirt_1_9"))
    assert facts.kubevirt_gates == ["GPUsWithDRA", "HostDevices", "HostDevicesWithDRA"]
    caps = capabilities_from(facts, DRIVER, DP)
    for cap in (Capability.DRA_API, Capability.DRA_DRIVER, Capability.KUBEVIRT,
                Capability.KUBEVIRT_DRA_GATES, Capability.LAUNCHER_METADATA,
                Capability.DEVICE_PLUGIN_NVME, Capability.TWO_DEVICES_PER_NODE):
        assert caps.has(cap), cap
    assert "removed in v1.8.0" in caps.reason_missing(Capability.KUBEVIRT_DEVICE_STATUS)
    assert "lacks VEP 344" in caps.reason_missing(Capability.PERSISTENT_DRA_CLAIMS)


def test_disabled_gates_win_over_defaults():
    cr = {"spec": {"configuration": {"developerConfiguration": {
        "featureGates": ["HostDevices"], "disabledFeatureGates": ["GPUsWithDRA"]}}}}
    assert effective_gates(cr, "v1.9.1") == ["HostDevices", "HostDevicesWithDRA"]
    assert effective_gates(cr, "v1.8.0") == ["HostDevices"]


def test_cluster_without_kubevirt_denies_every_kubevirt_capability_with_one_reason(recorded):
    caps = capabilities_from(discover(recorded("cluster_without_kubevirt")), DRIVER, DP)
    assert caps.has(Capability.DRA_API)
    assert not caps.has(Capability.DRA_DRIVER)
    assert "is not on this cluster" in caps.reason_missing(Capability.DRA_DRIVER)
    unmet = caps.unmet([Capability.KUBEVIRT, Capability.KUBEVIRT_DRA_GATES,
                        Capability.LAUNCHER_METADATA])
    assert unmet == ["kubevirt, kubevirt-dra-gates, launcher-metadata: "
                     "KubeVirt is not installed on this cluster"]


def test_old_cluster_without_resource_v1_and_kubevirt_1_7(recorded):
    caps = capabilities_from(discover(recorded("cluster_1_33_kubevirt_1_7")), DRIVER, DP)
    assert not caps.has(Capability.DRA_API)
    assert "serves v1beta2, v1beta1" in caps.reason_missing(Capability.DRA_API)
    assert "Kubernetes 1.34+" in caps.reason_missing(Capability.DRA_API)
    assert caps.has(Capability.KUBEVIRT_DEVICE_STATUS)
    assert caps.has(Capability.PERSISTENT_DRA_CLAIMS)
    assert "predates KEP-5304" in caps.reason_missing(Capability.LAUNCHER_METADATA)


class Overlay:
    """A recorded cluster with some paths answered differently."""

    def __init__(self, base, **paths):
        self.base, self.paths = base, paths

    def get(self, path):
        return self.paths[path] if path in self.paths else self.base.get(path)


def test_kubevirt_serving_its_api_without_node_agents_runs_admission_but_no_vm(recorded):
    base = recorded("cluster_kubevirt_1_9")
    deploying = {"items": [{
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"featureGates": ["HostDevices"]}}},
        "status": {"phase": "Deploying", "operatorVersion": "v1.9.0"}}]}
    api = Overlay(base, **{
        "/apis/kubevirt.io/v1/kubevirts": deploying,
        "/apis/apps/v1/namespaces/kubevirt/deployments/virt-api":
            {"status": {"availableReplicas": 1}},
    })
    caps = capabilities_from(discover(api), DRIVER, DP)
    assert caps.has(Capability.KUBEVIRT) and caps.has(Capability.KUBEVIRT_DRA_GATES)
    assert "virt-handler" in caps.reason_missing(Capability.RUNNING_VMS)
    api.paths["/apis/apps/v1/namespaces/kubevirt/deployments/virt-api"] = {"status": {}}
    caps = capabilities_from(discover(api), DRIVER, DP)
    assert "is Deploying" in caps.reason_missing(Capability.KUBEVIRT)


def kubevirt_cr(version, gates, **config):
    return {"items": [{
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"featureGates": gates}, **config}},
        "status": {"phase": "Deployed", "observedKubeVirtVersion": version}}]}


ALL_DRA_GATES = ["HostDevices", "HostDevicesWithDRA", "GPUsWithDRA"]


@pytest.mark.parametrize("version, metadata, device_status", [
    ("v1.6.1", False, True), ("v1.7.0", False, True), ("v1.8.4", True, False),
    ("v1.9.0", True, False),
])
def test_release_keyed_capabilities(recorded, version, metadata, device_status):
    api = Overlay(recorded("cluster_kubevirt_1_9"),
                  **{"/apis/kubevirt.io/v1/kubevirts": kubevirt_cr(version, ALL_DRA_GATES)})
    facts = discover(api)
    caps = capabilities_from(facts, DRIVER, DP)
    assert version in facts.kubevirt_release.read
    assert caps.has(Capability.KUBEVIRT_DRA_GATES)
    assert caps.has(Capability.LAUNCHER_METADATA) is metadata
    assert caps.has(Capability.KUBEVIRT_DEVICE_STATUS) is device_status
    assert "lacks VEP 344" in caps.reason_missing(Capability.PERSISTENT_DRA_CLAIMS)


@pytest.mark.parametrize("version, on_by_default", [
    ("v1.6.1", False), ("v1.7.0", False), ("v1.8.4", False), ("v1.9.0", True)])
def test_dra_gates_are_on_by_default_only_where_the_release_made_them_beta(
        recorded, version, on_by_default):
    api = Overlay(recorded("cluster_kubevirt_1_9"),
                  **{"/apis/kubevirt.io/v1/kubevirts": kubevirt_cr(version, ["HostDevices"])})
    caps = capabilities_from(discover(api), DRIVER, DP)
    assert caps.has(Capability.KUBEVIRT_DRA_GATES) is on_by_default
    if not on_by_default:
        reason = caps.reason_missing(Capability.KUBEVIRT_DRA_GATES)
        assert "HostDevicesWithDRA, GPUsWithDRA are off" in reason
        assert "GPUsWithDRA: Alpha in " in reason and version in reason


def test_admission_rules_by_release():
    assert release_for((1, 6)).admission_rules == release_for((1, 7)).admission_rules == set()
    # a later release checks every rule an earlier one does
    ordered = [release_for(v) for v in ((1, 8, 1), (1, 8, 3), (1, 8, 4), (1, 9, 0))]
    for older, newer in itertools.pairwise(ordered):
        assert older.admission_rules <= newer.admission_rules
    # the cross-list pair rule came with 1.8.3, the resourceClaims entry rules with 1.9
    assert "pair-in-gpus-and-host-devices" not in ordered[0].admission_rules
    assert "pair-in-gpus-and-host-devices" in ordered[1].admission_rules
    assert "claim-and-template-both-set" not in ordered[2].admission_rules
    assert "claim-and-template-both-set" in ordered[3].admission_rules


def test_kubevirt_1_6_and_1_7_take_the_pci_address_from_pcie_root():
    for minor in ((1, 6), (1, 7)):
        release = release_for(minor)
        assert release.device_status_pci_attribute == "resource.kubernetes.io/pcieRoot"
        assert "kubernetes/kubernetes#134569" in release.device_status_caveat
    assert release_for((1, 8)).device_status_pci_attribute is None


def test_the_header_summary_names_gates_address_source_and_template_claims():
    summary = release_for((1, 7)).summary()
    assert "GPUsWithDRA Alpha" in summary
    assert "deviceStatus, filled from resource.kubernetes.io/pcieRoot" in summary
    assert "resourceClaimStatuses" in summary
    assert "HostDevicesWithDRA Beta (on by default)" in release_for((1, 9)).summary()


def test_releases_outside_the_table():
    assert release_for((1, 5, 9)) is None and release_for(None) is None
    assert release_for((1, 10, 0)).read == ("v1.9.0",)  # newer reads as the newest


def test_patch_releases_of_one_minor_are_told_apart():
    early, late = release_for((1, 8, 2)), release_for((1, 8, 3))
    assert early.metadata_root == "/var/run/dra-device-attributes"
    assert late.metadata_root == "/var/run/kubernetes.io/dra-device-attributes"
    assert release_for((1, 8, 0)) is early and release_for((1, 8, 4)).metadata_root == \
        late.metadata_root
    assert release_for((1, 8)) is early  # a minor alone is its first patch release


def test_a_bug_is_expected_only_where_the_release_has_it_and_the_cluster_meets_it():
    bug, k8s = "kubevirt/kubevirt#17385", (1, 37, 2)
    for version in ((1, 8, 1), (1, 8, 4)):
        assert [b for b in release_for(version).bugs_on("dra_launcher", True, k8s, "hostDevice")
                if b.upstream == bug]
        assert all(b.upstream != bug
                   for b in release_for(version).bugs_on("dra_launcher", False, k8s, "hostDevice"))
    assert release_for((1, 9, 0)).bugs_on("dra_launcher", True, k8s, "hostDevice") == []
    # The older metadata path breaks 1.8.1/1.8.2 whatever the configuration; 1.8.3 fixed it.
    assert release_for((1, 8, 2)).bugs_on("dra_launcher", False, k8s, "hostDevice")
    assert not release_for((1, 8, 3)).bugs_on("dra_launcher", False, k8s, "hostDevice")
    assert "fixed in v1.9.0" in release_for((1, 8, 4)).bugs_on(
        "dra_launcher", True, k8s, "hostDevice")[0].reason("v1.8.4")


def test_the_int32_checksum_bug_needs_kubernetes_1_36_and_was_fixed_in_1_8_4():
    for version in ((1, 8, 1), (1, 8, 3)):
        release = release_for(version)
        bugs = release.bugs_on("vm_running", False, (1, 37, 2), "hostDevice")
        assert [b.upstream for b in bugs] == ["kubevirt/kubevirt#17858"]
        # Kubernetes before 1.36 checks no formats
        assert release.bugs_on("vm_running", False, (1, 35, 0), "hostDevice") == []
    assert release_for((1, 8, 4)).bugs_on("vm_running", False, (1, 37, 2), "hostDevice") == []


def test_a_bug_found_here_and_fixed_nowhere_says_so_and_stays_expected_on_newer_trees():
    k8s = (1, 37, 2)
    [bug] = release_for((1, 9, 0)).bugs_on("first_available", False, k8s, "hostDevice")
    reason = bug.reason("v1.9.0")
    assert "not reported upstream yet" in reason and "fixed in no release" in reason
    # a tree newer than the table reads as the newest release: still expected, so a
    # tree that fixes it shows as XPASS
    assert release_for((1, 10, 0)).bugs_on("first_available", False, k8s, "hostDevice") == [bug]
    assert release_for((1, 7, 0)).bugs_on("first_available", False, k8s, "hostDevice") == []


def test_the_allow_list_bugs_of_1_8_split_by_device_list():
    """Up to 1.8.4 the allow-list refuses DRA host devices but checks no GPU at all once
    GPUsWithDRA is on: DRA GPUs start, and unlisted device-plugin GPUs are not refused."""
    k8s, release = (1, 37, 2), release_for((1, 8, 4))
    assert release.bugs_on("dra_launcher", True, k8s, "hostDevice")
    assert not release.bugs_on("dra_launcher", True, k8s, "gpu")
    assert release.bugs_on("allow_list", True, k8s, "gpu")
    assert not release.bugs_on("allow_list", True, k8s, "hostDevice")
    assert not release_for((1, 9, 0)).bugs_on("allow_list", True, k8s, "gpu")


def test_device_taints_are_a_capability_where_the_api_serves_device_taint_rules(recorded):
    api = recorded("cluster_kubevirt_1_9")
    without = capabilities_from(discover(api), DRIVER, DP)
    assert not without.has(Capability.DEVICE_TAINTS)
    assert "DeviceTaintRule" in without.reason_missing(Capability.DEVICE_TAINTS)
    api.responses["/apis/resource.k8s.io/v1"] = {"resources": [
        {"name": "resourceclaims"}, {"name": "devicetaintrules"},
        {"name": "devicetaintrules/status"}]}
    assert capabilities_from(discover(api), DRIVER, DP).has(Capability.DEVICE_TAINTS)


def test_the_virt_handler_panic_on_a_kubelet_restart_is_a_racy_bug_of_mixed_nodes():
    k8s, release = (1, 37, 2), release_for((1, 9, 0))
    [bug] = release.bugs_on("kubelet_restart", True, k8s, "hostDevice")
    assert bug.upstream == "kubevirt/kubevirt#18622" and bug.racy and bug.seen_by_signature
    # only where KubeVirt serves host device plugins (permittedHostDevices)
    assert release.bugs_on("kubelet_restart", False, k8s, "hostDevice") == []


class _Slices:
    """An API serving resource.k8s.io/v1 and these ResourceSlices only."""

    def __init__(self, *slices):
        self.slices = slices

    def get(self, path):
        return {"/apis/resource.k8s.io": {"versions": [{"version": "v1"}]},
                "/apis/resource.k8s.io/v1/resourceslices": {"items": list(self.slices)}
                }.get(path)


def _slice(node, *numa_nodes):
    return {"spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node},
                     "devices": [{"name": f"d{i}", "attributes": {
                         "resource.kubernetes.io/numaNode": {"int": n}}}
                                 for i, n in enumerate(numa_nodes)]}}


def test_two_devices_of_a_node_on_one_numa_node_are_a_capability():
    aligned = capabilities_from(discover(_Slices(_slice("node01", 0, 1, 0))), DRIVER, DP)
    assert aligned.has(Capability.TWO_DEVICES_PER_NUMA_NODE)
    # one device per NUMA node on each node, however many nodes share the number
    apart = capabilities_from(discover(_Slices(_slice("node01", 0, 1), _slice("node02", 0))),
                              DRIVER, DP)
    assert not apart.has(Capability.TWO_DEVICES_PER_NUMA_NODE)
    assert "--numa-nodes" in apart.reason_missing(Capability.TWO_DEVICES_PER_NUMA_NODE)


def test_the_vfio_cdev_bug_of_1_9_is_expected_only_on_nodes_whose_kernel_makes_no_cdev():
    release = release_for((1, 9, 0))
    expected = release.bugs_on("device_plugin_vm", False, (1, 37, 2), "hostDevice", True)
    assert [b.upstream for b in expected] == ["kubevirt/kubevirt#18895"]
    assert expected[0].seen_by_signature  # a test fails on anything but its signature
    for kernel in (False, None):  # cdevs made, or not known: nothing expected
        assert release.bugs_on("device_plugin_vm", False, (1, 37, 2), "hostDevice", kernel) == []



class _Node:
    paths = NodePaths()

    def __init__(self, answer):
        self.answer = answer

    def run(self, argv, stdin=None, timeout=None):
        return self.answer


def test_nodes_tell_whether_their_kernel_makes_vfio_cdevs():
    assert vfio_cdev_missing([_Node("cdev\n"), _Node("no-cdev\n")]) is True
    assert vfio_cdev_missing([_Node("cdev\ncdev\n")]) is False
    assert vfio_cdev_missing([_Node("")]) is None  # nothing bound to vfio-pci to tell
