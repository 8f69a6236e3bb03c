"""A KubeVirt configuration changed for one test is put back as it was, even when the
change added keys and even when the test fails."""

import copy

import pytest

from fixtures.kubevirt_config import (
    changed_configuration,
    with_permitted_pci_host_device,
    without_feature_gate,
)


class FakeKube:
    """A KubeVirt CR that applies JSON patches of ``add /spec/configuration``."""

    def __init__(self, configuration):
        self.cr = {"metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                   "spec": {"configuration": configuration}}

    def list(self, kind):
        assert kind == "KubeVirt"
        return [copy.deepcopy(self.cr)]

    def patch(self, kind, name, patch, namespace=None):
        [op] = patch
        assert (op["op"], op["path"]) == ("add", "/spec/configuration")
        self.cr["spec"]["configuration"] = copy.deepcopy(op["value"])


def test_a_change_that_adds_keys_is_undone_whole_even_when_the_test_fails():
    before = {"developerConfiguration": {"featureGates": ["HostDevices", "GPUsWithDRA"]}}
    kube = FakeKube(copy.deepcopy(before))
    entry = {"pciVendorSelector": "1b36:0010", "resourceName": "x/y",
             "externalResourceProvider": True}
    with pytest.raises(RuntimeError), changed_configuration(
            kube, with_permitted_pci_host_device(entry)):
        assert kube.cr["spec"]["configuration"]["permittedHostDevices"] == {
            "pciHostDevices": [entry]}
        raise RuntimeError("the test failed")
    assert kube.cr["spec"]["configuration"] == before


def test_a_gate_is_off_only_for_the_duration():
    kube = FakeKube({"developerConfiguration": {"featureGates": ["HostDevices", "Snapshot"]}})
    with changed_configuration(kube, without_feature_gate("HostDevices")):
        gates = kube.cr["spec"]["configuration"]["developerConfiguration"]["featureGates"]
        assert gates == ["Snapshot"]
    assert "HostDevices" in kube.cr["spec"]["configuration"]["developerConfiguration"][
        "featureGates"]
