"""What a released device may still hold on its node, judged without a cluster."""

from fixtures.released import leftovers
from kubevirtci.provider import Node


class FakeNode(Node):
    name = "node01"

    def __init__(self, driver: str, cdi_files: list[str]) -> None:
        self.driver, self.cdi_files = driver, cdi_files

    def run(self, argv, stdin=None, timeout=None):
        script = argv[-1]
        if "readlink" in script:
            return f"../../../bus/pci/drivers/{self.driver}\n" if self.driver else ""
        return "\n".join(self.cdi_files) + "\n"


class FakeKube:
    def __init__(self, claim):
        self.claim = claim

    def find(self, kind, name, namespace):
        return self.claim


CLAIM = {"metadata": {"name": "vm-nvme", "namespace": "ns", "uid": "1234-abcd"}}


def test_a_released_device_holds_nothing():
    node = FakeNode("nvme", ["nvme.example.com-nvme_9999-other.json"])
    assert leftovers(FakeKube(CLAIM), node, CLAIM, "0000:00:05.0") == []


def test_each_thing_a_device_still_holds_is_named():
    held = {**CLAIM, "status": {"reservedFor": [{"resource": "pods", "name": "virt-launcher-x"}]}}
    node = FakeNode("vfio-pci", ["nvme.example.com-nvme_1234-abcd.json"])
    left = leftovers(FakeKube(held), node, CLAIM, "0000:00:05.0")
    assert len(left) == 3
    assert "virt-launcher-x" in left[0] and "vfio-pci" in left[1] and "1234-abcd" in left[2]
