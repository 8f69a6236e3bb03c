"""Driver sanity, negative cases (csi-sanity's spirit): claims the kubelet would never
send, or sends together. Every wrong claim must be answered with an error, in the
response or as the call's gRPC status (the kubelet fails the pod on either), never by a
crash, and must leave nothing prepared on the node: no new CDI device. The plugin must
go on serving afterwards.

Exclusive: "nothing new on the node" compares the node's CDI devices before and after,
which another test's claim would change."""

from __future__ import annotations

import uuid

import pytest

from core.profile import Promise
from fixtures import markers
from fixtures.claims import free_devices, plain_claim
from fixtures.devices import Device
from fixtures.sanity import answer_for, result, with_uid
from kubevirtci.capabilities import Capability

pytestmark = [
    markers.driver_sanity,
    markers.exclusive_devices,
    markers.requires(Capability.DRA_API, Capability.DRA_DRIVER, Capability.DRIVER_PLUGIN_SOCKET),
]
OTHER_DRIVER = "other.sanity.kubevirt-conformance.io"


def _refused_and_left_nothing(plugin, before: set[str], *claims, allowed: set[str] = frozenset()):
    """Call prepare; each claim must be refused, nothing new prepared but ``allowed``."""
    response = plugin.call("prepare", *claims)
    for claim in claims:
        answer = answer_for(response, claim)
        assert answer.get("error"), f"{claim['metadata']['name']}: accepted: {answer}"
        assert not answer.get("missing"), f"{claim['metadata']['name']}: {answer['error']}"
    left = plugin.cdi_devices() - before - allowed
    assert not left, f"a refused prepare left CDI devices on node {plugin.node}: {sorted(left)}"


def _still_serving(plugin, allocate, device: Device) -> None:
    claim = allocate(f"after-{uuid.uuid4().hex[:6]}", device)
    answer = plugin.prepare(claim)
    assert not answer.get("error"), f"the plugin stopped serving a valid claim: {answer}"


@markers.requirement("SANITY-011")
def test_prepare_of_an_unallocated_claim_is_an_error(plugin, objects, profile, allocate,
                                                     device):
    before = plugin.cdi_devices()
    unallocated = objects.create(plain_claim("unallocated", profile))
    _refused_and_left_nothing(plugin, before, unallocated)
    _still_serving(plugin, allocate, device)


@markers.requirement("SANITY-011")
def test_prepare_of_a_claim_whose_uid_does_not_match_is_an_error(plugin, allocate, device):
    before = plugin.cdi_devices()
    replaced = with_uid(allocate("replaced", device), str(uuid.uuid4()))
    _refused_and_left_nothing(plugin, before, replaced)
    _still_serving(plugin, allocate, device)


@markers.requirement("SANITY-012")
def test_a_claim_with_results_only_for_another_driver_prepares_nothing(plugin, allocate,
                                                                       device):
    before = plugin.cdi_devices()
    claim = allocate("foreign", device, results=[result(device, OTHER_DRIVER)])
    answer = plugin.prepare(claim)
    # DRA sends a driver only claims with results for it; an answer without devices and
    # an error are both sound, devices of this driver are not.
    assert not answer.get("devices"), f"devices prepared for another driver's results: {answer}"
    left = plugin.cdi_devices() - before
    assert not left, f"CDI devices left for another driver's results: {sorted(left)}"
    _still_serving(plugin, allocate, device)


@markers.requirement("SANITY-013")
def test_a_claim_allocated_on_another_node_is_refused(kube, plugin, allocate, device, profile):
    if profile.refuses_other_pools != Promise.YES:
        pytest.skip(f"profile {profile.name} does not promise to refuse devices of another "
                    f"node's pool (promises.refusesOtherPools: {profile.refuses_other_pools}); "
                    "the kubelet never sends such a claim")
    others = [d for d in free_devices(kube, profile) if d.node not in ("", device.node)]
    if not others:
        pytest.skip(f"no free device of {profile.driver} on a node other than {device.node}")
    before = plugin.cdi_devices()
    claim = allocate("elsewhere", others[0])  # allocated to the other node's pool
    _refused_and_left_nothing(plugin, before, claim)
    _still_serving(plugin, allocate, device)


@markers.requirement("SANITY-014")
def test_several_claims_in_one_call_are_answered_one_by_one(kube, plugin, allocate, device,
                                                            profile, objects):
    # One valid and one unallocated claim in a call: the unallocated one is refused; the
    # valid one may be prepared (an answer per claim) or not (the call fails as a whole).
    before = plugin.cdi_devices()
    valid = allocate("valid", device)
    unallocated = objects.create(plain_claim("unallocated", profile))
    response = plugin.call("prepare", valid, unallocated)
    assert answer_for(response, unallocated).get("error"), response
    valid_answer = answer_for(response, valid)
    allowed = {i for d in valid_answer.get("devices") or [] for i in d.get("cdi_device_ids") or []}
    left = plugin.cdi_devices() - before - allowed
    assert not left, f"the refused claim left CDI devices: {sorted(left)}"
    assert not plugin.unprepare(valid).get("error")
    second = [d for d in free_devices(kube, profile)
              if d.node == device.node and d.name != device.name]
    if not second:  # the refusal above is the part every cluster can check
        return
    claims = [allocate("one", device), allocate("two", second[0])]
    response = plugin.call("prepare", *claims)
    answers = [answer_for(response, c) for c in claims]
    assert not any(a.get("error") for a in answers), answers
    got = [[d["device_name"] for d in a["devices"]] for a in answers]
    assert got == [[device.name], [second[0].name]], f"each claim gets its own device: {got}"


@markers.requirement("PLUGIN-004")
def test_a_prepare_refused_while_the_device_is_held_succeeds_once_it_is_free(
        plugin, allocate, device, profile):
    """Mirrors "must run pod if NodePrepareResources fails and then succeeds"
    (test/e2e_node/dra_test.go): the cause of the refusal (the device prepared for
    another claim) gone, the retry succeeds, and nothing of the failed try is left."""
    if profile.exclusive_prepare != Promise.YES:
        pytest.skip(f"profile {profile.name} does not promise to refuse a device prepared "
                    f"for another claim (promises.exclusivePrepare: "
                    f"{profile.exclusive_prepare}): no refusal to retry")
    held, later = allocate("held", device), allocate("later", device)
    before = plugin.cdi_devices()
    first = plugin.prepare(held)
    assert not first.get("error"), first
    held_ids = {i for d in first["devices"] for i in d.get("cdi_device_ids") or []}
    _refused_and_left_nothing(plugin, before, later, allowed=held_ids)
    assert not plugin.unprepare(held).get("error")
    retried = plugin.prepare(later)
    assert not retried.get("error"), f"the retry once the device is free failed: {retried}"
    later_ids = {i for d in retried["devices"] for i in d.get("cdi_device_ids") or []}
    assert plugin.cdi_devices() - before == later_ids, (
        "after the retry the node holds other CDI devices than the retried claim's: "
        f"{sorted(plugin.cdi_devices() - before)}")
