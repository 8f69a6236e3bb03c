"""Driver sanity, in the spirit of csi-sanity: any DRA driver, checked through its
ResourceSlices and, as the kubelet would call it, its plugin socket (fixtures/sanity.py).
Each check cites the contract it checks; a driver's own rules are checked only where its
profile promises them. The negative cases are in test_driver_sanity_negative.py."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

import pytest

from core import waits
from core.container_edits import parse_env
from core.profile import Promise
from core.timeouts import Timeout
from fixtures import markers
from fixtures.builders.pod import (
    new_pod,
    with_container_claim,
    with_pod_claim_reference,
    with_pod_node_selector,
)
from fixtures.builders.resourceclaim import (
    ADMIN_ACCESS_LABEL,
    new_resource_claim,
    with_admin_access,
    with_first_available,
)
from fixtures.claims import REQUEST, pinned_claim
from fixtures.device_nodes import assert_the_nodes_devices, node_device_numbers
from fixtures.devices import allocated_devices, qualified
from fixtures.sanity import (
    answer_for,
    claim_ref,
    host_path_entries,
    metadata_disagreements,
    metadata_readers,
    result,
    unknown_claim,
)
from fixtures.unpublished import what_the_driver_left_out
from kubevirtci.capabilities import Capability
from kubevirtci.releases import RELEASES

pytestmark = [
    markers.driver_sanity,
    markers.requires(Capability.DRA_API, Capability.DRA_DRIVER),
]
needs_socket = markers.requires(Capability.DRIVER_PLUGIN_SOCKET)


def _driver_slices(kube, profile):
    return [s for s in kube.list("ResourceSlice") if s["spec"]["driver"] == profile.driver]


@markers.judges(Capability.DRA_DRIVER)
@markers.requirement("SANITY-001")
def test_resource_slices_have_unique_devices_and_consistent_pools(kube, profile, cluster):
    """The driver under test publishes its devices; one whose plugin runs and publishes
    none fails here, naming what its nodes have (every other test that needs a device
    fails at the gate, pointing here)."""
    pools = defaultdict(list)
    for s in _driver_slices(kube, profile):
        pools[s["spec"]["pool"]["name"]].append(s)
    assert any(s["spec"].get("devices") for slices in pools.values() for s in slices), \
        what_the_driver_left_out(cluster, kube, profile)
    for name, slices in pools.items():
        generations = {s["spec"]["pool"]["generation"] for s in slices}
        assert len(generations) == 1, f"pool {name} mixes generations {generations}"
        counts = {s["spec"]["pool"]["resourceSliceCount"] for s in slices}
        assert counts == {len(slices)}, f"pool {name}: resourceSliceCount {counts}, " \
                                        f"{len(slices)} slices"
        names = Counter(d["name"] for s in slices for d in s["spec"].get("devices") or [])
        assert all(n == 1 for n in names.values()), f"pool {name} repeats {names}"


@markers.requirement("SANITY-002")
def test_resource_slices_carry_the_profile_required_attributes(kube, profile):
    if not profile.required_attributes:
        pytest.skip(f"profile {profile.name} requires no attributes: nothing to check")
    for s in _driver_slices(kube, profile):
        for device in s["spec"].get("devices") or []:
            names = {qualified(k, profile.driver) for k in (device.get("attributes") or {})}
            missing = set(profile.required_attributes) - names
            assert not missing, f"device {device['name']} lacks {sorted(missing)}"


@needs_socket
@markers.requirement("SANITY-003")
def test_prepare_returns_cdi_ids_that_resolve_in_a_parsable_spec(plugin, prepared, device):
    _, answer = prepared
    assert not answer.get("error"), answer
    assert [d["device_name"] for d in answer["devices"]] == [device.name]
    ids = [i for d in answer["devices"] for i in d.get("cdi_device_ids") or []]
    if not ids:  # the kubelet plugin API allows a device without CDI edits
        pytest.skip("the driver returns no CDI device ids for the device: nothing to resolve")
    resolved = plugin.resolve(ids)
    assert not any(resolved["specErrors"].values()), resolved["specErrors"]
    assert all(resolved["devices"][i]["found"] for i in ids), resolved


@needs_socket
@markers.requirement("SANITY-015")
def test_cdi_edits_name_the_allocated_device_and_the_nodes_own_device_nodes(
    plugin, prepared, profile, device, record_property
):
    """What the runtime will inject for the claim: the env the profile declares, with this
    device's values, and each declared device node taken from a host path that is the
    node's device at that path (same type and major:minor)."""
    edits = profile.container_edits
    if not edits:
        pytest.skip(f"profile {profile.name} declares no containerEdits: nothing to check")
    _, answer = prepared
    assert not answer.get("error"), answer
    ids = [i for d in answer["devices"] for i in d.get("cdi_device_ids") or []]
    assert ids, f"profile {profile.name} declares containerEdits, but prepare returned no CDI ids"
    resolved = plugin.resolve(ids)["devices"]
    env = parse_env(e for i in ids for e in resolved[i].get("env") or [])
    host_paths = {n["path"]: n["hostPath"] for i in ids
                  for n in host_path_entries(resolved[i])}
    given = dataclasses.replace(device, request=REQUEST)
    expected_env = edits.env_for(given)
    assert {name: env.get(name) for name in expected_env} == expected_env
    paths = edits.device_nodes_for(given)
    missing = [p for p in paths if p not in host_paths]
    assert not missing, f"the CDI edits lack device nodes {missing}: {host_paths}"
    if paths:
        numbers = node_device_numbers(plugin.client,
                                      sorted({*paths, *(host_paths[p] for p in paths)}))
        taken = {p: numbers[host_paths[p]] for p in paths}
        assert_the_nodes_devices(taken, {p: numbers[p] for p in paths},
                                 "the CDI spec's host path", record_property)


def _decoded_metadata(plugin, claim, profile, request=REQUEST):
    """The claim's KEP-5304 file as the upstream decoder reads it, valid, or a failure."""
    if not profile.device_metadata:
        pytest.skip(f"profile {profile.name} declares no KEP-5304 device metadata "
                    "(promises.deviceMetadata)")
    report = plugin.metadata(claim, request)
    assert "readError" not in report, f"{plugin.metadata_path(claim, request)}: {report}"
    assert not report.get("decodeError"), report
    assert not report.get("validationError"), report
    return report


@needs_socket
@markers.requirement("SANITY-004")
def test_metadata_file_decodes_validates_and_lists_the_allocated_device(
    plugin, prepared, profile, device
):
    claim, _ = prepared
    metadata = _decoded_metadata(plugin, claim, profile)["metadata"]
    devices = [d for r in metadata["requests"] if r["name"] == REQUEST for d in r["devices"]]
    assert [(d["driver"], d["pool"], d["name"]) for d in devices] == [
        (profile.driver, device.pool, device.name)]


@needs_socket
@markers.requirement("SANITY-016")
def test_the_metadata_gives_the_devices_own_attribute_values(
    record_property, plugin, prepared, profile, device
):
    """KEP-5304: the metadata carries the allocated device's attributes as its driver
    publishes them; a wrong pciBusID there hands a VM another function."""
    claim, _ = prepared
    metadata = _decoded_metadata(plugin, claim, profile)["metadata"]
    compared, differing = metadata_disagreements(metadata, device)
    record_property("metadata_attributes_compared", compared)
    assert not differing, (f"the metadata of {claim_ref(claim)} disagrees with the "
                           f"ResourceSlice of {device.pool}/{device.name}: "
                           + "; ".join(differing))


@needs_socket
@markers.requirement("SANITY-009")
def test_kubevirt_releases_that_read_metadata_can_read_the_drivers_file(
    record_property, cluster, plugin, prepared, profile
):
    claim, _ = prepared
    report = _decoded_metadata(plugin, claim, profile)
    readers = metadata_readers(report)
    written = [o["apiVersion"] for o in report["objects"]]
    record_property("metadata_versions", ",".join(written))
    record_property("metadata_readers", ",".join(f"{r}={'yes' if ok else 'no'}"
                                                 for r, ok in readers.items()))
    release = cluster.facts.kubevirt_release
    judged = {release.name: readers[release.name]} if release and release.name in readers \
        else readers
    unreadable = [name for name, ok in judged.items() if not ok]
    assert not unreadable, (
        f"KubeVirt {', '.join(unreadable)} cannot read the driver's metadata: it decodes "
        f"only {', '.join(sorted({v for r in RELEASES for v in r.metadata_versions}))}"
        f", the file holds {', '.join(written)}; KubeVirt would then miss the device's PCI "
        "address silently. Fix: write that version too (EnableDeviceMetadata versions)")


@needs_socket
@markers.requirement("SANITY-010")
def test_a_subrequest_is_answered_and_filed_under_its_base_request(
    plugin, allocate, device, profile
):
    """The KEP-5304 metadata API (k8s.io/dynamic-resource-allocation api/metadata,
    DeviceMetadataRequest.Name): a subrequest's entry is named "<request>/<subrequest>",
    as in the allocation result, in a file under the base request's folder; the kubelet
    matches a container's claim by the base request."""
    manifest = new_resource_claim("first-available", with_first_available(
        REQUEST, ("first", profile.device_class)))
    claim = allocate("first-available", device, manifest=manifest,
                     results=[result(device, profile.driver, f"{REQUEST}/first")])
    answer = plugin.prepare(claim)
    assert not answer.get("error"), answer
    names = {n for d in answer["devices"] for n in d.get("request_names") or []}
    assert names <= {REQUEST}, f"request names {sorted(names)}: the kubelet matches a " \
                               f"container's claim by the base request {REQUEST!r}"
    metadata = _decoded_metadata(plugin, claim, profile)["metadata"]
    assert [r["name"] for r in metadata["requests"]] == [f"{REQUEST}/first"], (
        f"the metadata names the request {[r['name'] for r in metadata['requests']]}; the "
        f"API names a subrequest's entry <request>/<subrequest>, {REQUEST}/first")


@needs_socket
@markers.requirement("SANITY-005")
def test_prepare_twice_gives_the_same_answer(plugin, prepared):
    claim, first = prepared
    assert plugin.prepare(claim) == first


@needs_socket
@markers.requirement("SANITY-006")
def test_unprepare_twice_and_unprepare_of_an_unknown_claim_are_fine(
    plugin, allocate, device, namespace
):
    claim = allocate("twice", device)
    assert not plugin.prepare(claim).get("error")
    for _ in range(2):
        assert not plugin.unprepare(claim).get("error")
    unknown = plugin.unprepare(unknown_claim(namespace))
    assert not unknown.get("error"), unknown


@needs_socket
@markers.exclusive_devices
@markers.requirement("SANITY-007")
def test_plugin_restart_keeps_prepared_claims(kube, plugin, prepared, profile, device):
    claim, first = prepared
    pods = [p for p in kube.list("Pod", label_selector=profile.plugin_pod_selector)
            if p["spec"].get("nodeName") == device.node]
    assert pods, f"no plugin pod of {profile.plugin_pod_selector} on {device.node}"
    old = pods[0]
    kube.delete("Pod", old["metadata"]["name"], old["metadata"]["namespace"])

    def restarted_and_ready() -> bool:
        return any(
            p["metadata"]["uid"] != old["metadata"]["uid"]
            and waits.has_condition(p, "Ready")
            for p in kube.list("Pod", label_selector=profile.plugin_pod_selector)
            if p["spec"].get("nodeName") == device.node
        )

    waits.poll(restarted_and_ready, Timeout.PLUGIN_RESTART, "a new, ready plugin pod")
    answers: list[dict] = []

    def answered() -> bool:
        """A driver without a readiness probe is Ready before its socket serves; one
        with sockets named per pod registers anew."""
        answer = plugin.serving_answer("prepare", claim)
        if answer is not None:
            answers.append(answer)
        return answer is not None

    waits.poll(answered, Timeout.PLUGIN_RESTART, "the restarted plugin to serve its socket")
    # The kubelet plugin API asks prepare to be idempotent across restarts; whether the
    # driver keeps a checkpoint or works the answer out again is its own business.
    assert answers[-1] == first, "a restarted plugin must give the same answer"


@needs_socket
@markers.requirement("SANITY-008")
def test_no_device_is_prepared_for_two_claims_under_concurrent_requests(
    plugin, allocate, device, profile
):
    if profile.exclusive_prepare != Promise.YES:
        pytest.skip(f"profile {profile.name} does not promise to refuse a device prepared "
                    f"for another claim (promises.exclusivePrepare: "
                    f"{profile.exclusive_prepare}); DRA leaves exclusivity to the scheduler")
    claims = [allocate(f"race-{i}", device) for i in range(2)]
    response = plugin.call("prepare", *claims, parallel=True)
    answers = [answer_for(r, c) for r, c in zip(response["responses"], claims, strict=True)]
    succeeded = [a for a in answers if not a.get("error")]
    assert len(succeeded) == 1, f"one device prepared for {len(succeeded)} claims: {answers}"


def _pod_with_claim(objects, profile, claim: dict, node: str) -> str:
    name = f"{claim['metadata']['name']}-pod"
    objects.create(claim)
    objects.create(new_pod(name, profile.test_image,
                           with_pod_claim_reference("dev", claim["metadata"]["name"]),
                           with_container_claim("dev", REQUEST), with_pod_node_selector(node)))
    return name


@markers.requirement("SANITY-017")
def test_an_admin_access_claim_is_prepared_for_a_held_device_without_taking_it(
    kube, objects, namespace, profile, free_device
):
    """Mirrors "DaemonSet with admin access" (test/e2e/dra/dra.go): a claim asking for
    admin access (KEP-5018) in a namespace labelled for it gets a device another claim
    holds, and its pod runs, while the holder keeps the device and its pod runs on."""
    if profile.admin_access != Promise.YES:
        pytest.skip(f"profile {profile.name} does not promise admin access "
                    f"(promises.adminAccess: {profile.admin_access})")
    device = free_device()
    holder = _pod_with_claim(objects, profile, pinned_claim("holder", profile, device),
                             device.node)
    held = waits.wait_until_pod_running(kube, holder, namespace)
    kube.patch("Namespace", namespace, {"metadata": {"labels": {ADMIN_ACCESS_LABEL: "true"}}})
    observer = pinned_claim("observer", profile, device)
    with_admin_access(REQUEST)(observer)
    waits.wait_until_pod_running(
        kube, _pod_with_claim(objects, profile, observer, device.node), namespace)
    results = kube.get("ResourceClaim", "observer", namespace)["status"]["allocation"][
        "devices"]["results"]
    assert [(r["pool"], r["device"], r.get("adminAccess")) for r in results] == [
        (device.pool, device.name, True)], results
    assert [d.key for d in allocated_devices(kube.get("ResourceClaim", "holder", namespace))] \
        == [device.key], "the holder lost its device to the admin-access claim"
    still = kube.get("Pod", holder, namespace)
    assert still["status"].get("phase") == "Running" and still["metadata"]["uid"] == \
        held["metadata"]["uid"], "the holder's pod did not run on"
