"""The sanity tier's hand-written allocations carry the opaque configuration the
scheduler copies (k8s.io/dynamic-resource-allocation/structured): the DeviceClass's
first (FromClass, for the requests it served), then the claim's (FromClaim)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.profile import load
from fixtures.builders.resourceclaim import new_resource_claim, with_first_available, with_request
from fixtures.devices import Device
from fixtures.sanity import allocation, allocator

ROOT = Path(__file__).resolve().parent.parent
DRIVER = "nvme.example.com"
VFIO = "vfio.example.com"
DEVICE = Device(DRIVER, "node01", "nvme-0", "node01")


def opaque(mode: str) -> dict[str, Any]:
    return {"opaque": {"driver": DRIVER, "parameters": {"mode": mode}}}


CLASSES = {VFIO: {"spec": {"config": [opaque("vfio")]}}, "plain.example.com": {"spec": {}}}


def results(*requests: str) -> list[dict[str, str]]:
    return [{"request": r, "driver": DRIVER, "pool": "node01", "device": f"nvme-{i}"}
            for i, r in enumerate(requests)]


def config_of(claim: dict[str, Any], *requests: str) -> list[dict[str, Any]]:
    body = allocation(claim, results(*requests), "node01", CLASSES.__getitem__)
    assert body["nodeSelector"]  # the node the devices are on, as before
    return body["devices"].get("config") or []


def modes(config: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(c["source"], c["opaque"]["parameters"]["mode"]) for c in config]


def test_class_config_comes_first_then_the_claims_own():
    claim = new_resource_claim("c", with_request("a", VFIO), with_request("b", "plain.example.com"))
    claim["spec"]["devices"]["config"] = [{"requests": ["b"], **opaque("claim-b")},
                                          opaque("claim-all")]
    config = config_of(claim, "a", "b")
    assert modes(config) == [("FromClass", "vfio"), ("FromClaim", "claim-b"),
                             ("FromClaim", "claim-all")]
    # The class's config applies to the request that used the class, the claim's to the
    # requests it names (none named: all of them).
    assert [c.get("requests") for c in config] == [["a"], ["b"], None]


def test_a_config_that_covers_every_request_names_none():
    claim = new_resource_claim("c", with_request("a", VFIO), with_request("b", VFIO))
    claim["spec"]["devices"]["config"] = [{"requests": ["a"], **opaque("only-a")}]
    config = config_of(claim, "a", "b")
    assert modes(config) == [("FromClass", "vfio"), ("FromClaim", "only-a")]
    assert "requests" not in config[0]  # the class served both: "empty means all"
    assert config[1]["requests"] == ["a"]


def test_a_subrequest_gets_the_config_of_the_class_that_served_it():
    claim = new_resource_claim("c", with_first_available(
        "dev", ("plain", "plain.example.com"), ("fast", VFIO)))
    assert modes(config_of(claim, "dev/fast")) == [("FromClass", "vfio")]
    assert config_of(claim, "dev/plain") == []


def test_no_config_anywhere_writes_none():
    claim = new_resource_claim("c", with_request("dev", "plain.example.com"))
    body = allocation(claim, results("dev"), "node01", CLASSES.__getitem__)
    assert "config" not in body["devices"]


class FakeKube:
    """The cluster's DeviceClasses, and the status patch the allocator writes."""

    def __init__(self) -> None:
        self.read: list[str] = []
        self.patched: dict[str, Any] = {}

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        self.read.append(f"{kind}/{name}")
        return {"spec": {"config": [opaque(f"class {name}")]}}

    def raw(self, method: str, path: str, body: Any, content_type: str) -> dict[str, Any]:
        self.patched = body
        return body


class FakeObjects:
    def create(self, manifest: dict[str, Any]) -> dict[str, Any]:
        return {**manifest, "metadata": {**manifest["metadata"], "namespace": "ns"}}


def test_the_allocation_written_carries_the_config_of_the_class_on_the_cluster():
    profile = load(str(ROOT / "profiles" / "reference-nvme.yaml"))
    kube = FakeKube()
    allocate = allocator(kube, FakeObjects(), profile)  # type: ignore[arg-type]
    allocate("sane", DEVICE)
    assert kube.read == [f"DeviceClass/{profile.device_class}"]
    config = kube.patched["status"]["allocation"]["devices"]["config"]
    assert modes(config) == [("FromClass", f"class {profile.device_class}")]
