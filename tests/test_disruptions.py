"""The disruption helpers' own judgement, without a cluster: when a DaemonSet's rollout
is complete, and what a released device may still hold on its node."""

from fixtures.disruptions import rollout_complete
from fixtures.released import leftovers
from kubevirtci.provider import Node


def daemonset(observed, desired, updated, available):
    return {"status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": updated, "numberAvailable": available}}


def test_a_rollout_is_complete_only_when_every_pod_is_new_and_available():
    assert not rollout_complete(daemonset(1, 2, 2, 2), generation=2)  # not seen yet
    assert not rollout_complete(daemonset(2, 2, 1, 2), generation=2)  # one old pod
    assert not rollout_complete(daemonset(2, 2, 2, 1), generation=2)  # one not available
    assert rollout_complete(daemonset(2, 2, 2, 2), generation=2)


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
