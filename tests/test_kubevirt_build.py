"""KubeVirt on the hermetic cluster: images as KubeVirt defines them, the CR it gets."""

import pytest

from core.errors import SuiteUsageError
from kubevirtci.discovery import DRA_GATES
from kubevirtci.kubevirt_install import kubevirt_cr
from kubevirtci.local import components
from kubevirtci.local.kubevirt import REGISTRY, build_notes, control_plane_images
from kubevirtci.local.provider import LocalProvider


def test_control_plane_images_carry_what_kubevirts_image_definitions_do(tmp_path):
    specs = {s.name: s for s in control_plane_images("v1.9.0", tmp_path)}
    assert sorted(specs) == [f"{REGISTRY}/{p}:v1.9.0"
                             for p in ("virt-api", "virt-controller", "virt-exportproxy",
                                       "virt-operator")]
    operator = specs[f"{REGISTRY}/virt-operator:v1.9.0"]
    assert set(operator.files) == {"/usr/bin/virt-operator", "/usr/bin/csv-generator"}
    assert operator.user == "1001" and operator.entrypoint == ["/usr/bin/virt-operator"]
    assert operator.contents["/etc/passwd"].startswith(b"nonroot-user:x:1001:1001:")
    assert operator.contents["/.version"] == b"v1.9.0\n"


def test_the_operator_derives_component_images_from_its_own_path():
    # pkg/virt-operator/util/config.go: ^(.*)/(.*)virt-operator([@:].*)?$ needs a path.
    assert "/" in REGISTRY and not REGISTRY.endswith("/")


def test_an_unknown_kubevirt_release_names_the_known_ones():
    with pytest.raises(SuiteUsageError, match=r"v1\.9\.0"):
        components.kubevirt_component("v9.9.9")


def test_the_cr_has_the_dra_gates_the_nvme_path_and_the_providers_configuration(tmp_path):
    config = LocalProvider(tmp_path, kubevirt_version="v1.9.0").kubevirt_configuration("v1.9.0")
    cr = kubevirt_cr("kubevirt", config)
    spec = cr["spec"]["configuration"]
    assert spec["developerConfiguration"]["featureGates"] == list(DRA_GATES)
    assert spec["developerConfiguration"]["useEmulation"] is True
    assert spec["permittedHostDevices"]["pciHostDevices"][0]["resourceName"] == \
        "devices.kubevirt.io/nvme"
    assert spec["virtTemplateDeployment"] == {"enabled": False}
    older = LocalProvider(tmp_path, kubevirt_version="v1.8.4").kubevirt_configuration("v1.8.4")
    assert "virtTemplateDeployment" not in older  # the field arrived in v1.9
    assert not any("STAND-IN" in n for n in build_notes("v1.8.4"))
    assert any("STAND-IN" in n for n in build_notes("v1.9.0"))


def test_node_programs_build_from_the_same_module_with_cgo():
    node = components.kubevirt_node_component("v1.9.0")
    assert node.cgo and node.module_dir == components.kubevirt_component("v1.9.0").module_dir
    assert "virt-handler" in node.programs() and "virt-launcher" not in node.programs()
    assert "gitVersion=v1.9.0" in node.ldflags
