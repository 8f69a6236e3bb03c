from types import SimpleNamespace

import pytest

from fixtures.plugin import enforce_capabilities
from kubevirtci.capabilities import Capabilities, Capability


class Item:
    def __init__(self, *caps, requirement="PERSIST-001"):
        self.marks = {"requires": [SimpleNamespace(args=[c.value for c in caps])],
                      "requirement": [SimpleNamespace(args=[requirement])]}
        self.user_properties = []

    def iter_markers(self, name):
        return iter(self.marks.get(name, []))


def session(certify):
    caps = Capabilities()
    caps.grant(Capability.DRA_API)
    caps.deny(Capability.KUBEVIRT, "KubeVirt is not installed on this cluster")
    return SimpleNamespace(capabilities=caps, options=SimpleNamespace(certify=certify))


def test_missing_capability_skips_with_its_reason():
    item = Item(Capability.DRA_API, Capability.KUBEVIRT)
    with pytest.raises(pytest.skip.Exception, match="kubevirt: KubeVirt is not installed"):
        enforce_capabilities(item, session(False))
    assert item.user_properties == [
        ("skip_causes", {"KubeVirt is not installed on this cluster": ["kubevirt"]})]


def test_certification_mode_turns_the_skip_of_a_required_requirement_into_a_failure():
    with pytest.raises(pytest.fail.Exception, match="certification requires: kubevirt"):
        enforce_capabilities(Item(Capability.KUBEVIRT), session(True))


def test_certification_mode_still_skips_an_optional_requirement():
    with pytest.raises(pytest.skip.Exception, match="kubevirt"):
        enforce_capabilities(Item(Capability.KUBEVIRT, requirement="PERSIST-009"), session(True))


def test_met_requirements_pass():
    enforce_capabilities(Item(Capability.DRA_API), session(True))


def test_an_unusable_cluster_stops_the_run_once_with_its_reason():
    from fixtures.plugin import stop_if_unusable

    broken = SimpleNamespace(error="cluster unreachable through /k (ConnectionRefusedError)")
    with pytest.raises(pytest.exit.Exception, match="cannot be used: cluster unreachable"):
        stop_if_unusable(broken)
    stop_if_unusable(SimpleNamespace(error=None))


def faulty_session():
    caps = Capabilities()
    caps.grant(Capability.DRA_API)
    caps.fault(Capability.DRA_DRIVER, "driver d publishes no device, yet its plugin runs")
    caps.deny(Capability.KUBEVIRT, "KubeVirt is not installed on this cluster")
    return SimpleNamespace(capabilities=caps, options=SimpleNamespace(certify=False))


def test_a_faulty_capability_fails_the_test_even_where_another_is_missing():
    item = Item(Capability.DRA_API, Capability.DRA_DRIVER, Capability.KUBEVIRT)
    with pytest.raises(pytest.fail.Exception, match="driver d publishes no device"):
        enforce_capabilities(item, faulty_session())


def test_the_test_that_judges_a_faulty_capability_runs_to_give_its_verdict():
    item = Item(Capability.DRA_API, Capability.DRA_DRIVER, requirement="SANITY-001")
    item.marks["judges"] = [SimpleNamespace(args=[Capability.DRA_DRIVER.value])]
    enforce_capabilities(item, faulty_session())  # neither failed nor skipped at the gate
    assert faulty_session().capabilities.unmet([Capability.DRA_DRIVER]) == []
