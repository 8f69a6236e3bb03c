from types import SimpleNamespace

import pytest

from fixtures.plugin import enforce_capabilities
from kubevirtci.capabilities import Capabilities, Capability


class Item:
    def __init__(self, *caps):
        self.marks = [SimpleNamespace(args=[c.value for c in caps])]

    def iter_markers(self, name):
        return iter(self.marks if name == "requires" else [])


def session(certify):
    caps = Capabilities()
    caps.grant(Capability.DRA_API)
    caps.deny(Capability.KUBEVIRT, "KubeVirt is not installed on this cluster")
    return SimpleNamespace(capabilities=caps, options=SimpleNamespace(certify=certify))


def test_missing_capability_skips_with_its_reason():
    with pytest.raises(pytest.skip.Exception, match="kubevirt: KubeVirt is not installed"):
        enforce_capabilities(Item(Capability.DRA_API, Capability.KUBEVIRT), session(False))


def test_certification_mode_turns_the_skip_into_a_failure():
    with pytest.raises(pytest.fail.Exception, match="certification requires: kubevirt"):
        enforce_capabilities(Item(Capability.KUBEVIRT), session(True))


def test_met_requirements_pass():
    enforce_capabilities(Item(Capability.DRA_API), session(True))
