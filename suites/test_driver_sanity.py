"""Driver sanity, in the spirit of csi-sanity: any DRA driver, checked through its
ResourceSlices and, as the kubelet would call it, its plugin socket.

Claims are allocated here by writing ``status.allocation`` as the scheduler does, so the
plugin can be driven without a pod, including into states a scheduler never creates
(one device allocated to two claims)."""

from __future__ import annotations

import json
import uuid
from collections import Counter, defaultdict

import pytest

from core import waits
from core.timeouts import Timeout
from fixtures import markers
from fixtures.claims import REQUEST, FreeDevice, pick_free_device, plain_claim
from fixtures.devices import qualified
from fixtures.launcher import first_metadata_object
from kubevirtci.capabilities import Capability

pytestmark = [
    markers.driver_sanity,
    markers.requires(Capability.DRA_API, Capability.DRA_DRIVER),
]
needs_socket = markers.requires(Capability.DRIVER_PLUGIN_SOCKET, Capability.NODE_ACCESS)


def _driver_slices(kube, profile):
    return [s for s in kube.list("ResourceSlice") if s["spec"]["driver"] == profile.driver]


@markers.requirement("SANITY-001")
def test_resource_slices_have_unique_devices_and_consistent_pools(kube, profile):
    pools = defaultdict(list)
    for s in _driver_slices(kube, profile):
        pools[s["spec"]["pool"]["name"]].append(s)
    assert pools, "the driver publishes no ResourceSlice"
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


class Plugin:
    """The driver's kubelet plugin on one node, driven by the dra-sanity client."""

    def __init__(self, cluster, profile, node):
        self.profile = profile
        self.node = cluster.provider.node(node)
        kubelet = self.node.paths.kubelet
        if profile.plugin_socket:
            socket = profile.plugin_socket.replace("/var/lib/kubelet", kubelet, 1)
            self.socket_flags = ["--socket", socket]
            self.data_dir = socket.rsplit("/", 1)[0]
        else:  # as the kubelet finds it: by the plugin's registration
            self.socket_flags = ["--driver", profile.driver,
                                 "--registry", f"{kubelet}/plugins_registry"]
            self.data_dir = f"{kubelet}/plugins/{profile.driver}"  # the helper's default

    def _client(self, *args):
        return json.loads(self.node.run(["dra-sanity", *args]))

    def call(self, verb, *claims, parallel=False):
        refs = [f"{c['metadata']['namespace']}/{c['metadata']['name']}/{c['metadata']['uid']}"
                for c in claims]
        flags = self.socket_flags + (["--parallel"] if parallel else [])
        return self._client(*flags, verb, *refs)

    def try_unprepare(self, claim) -> bool:
        """Unprepare; False while the plugin is unreachable (restarting)."""
        try:
            response = self.call("unprepare", claim)
        except (AssertionError, RuntimeError):  # node command failed: socket not there yet
            return False
        return not response["claims"][claim["metadata"]["uid"]].get("error")

    def resolve(self, ids):
        return self._client("resolve", "--cdi-dir", ",".join(self.node.paths.cdi),
                            *ids)

    def metadata(self, claim):
        meta = claim["metadata"]
        path = (f"{self.data_dir}/dra-device-metadata/{meta['namespace']}_{meta['name']}/"
                f"{REQUEST}/metadata.json")
        return first_metadata_object(self.node.run(["cat", path]))


@pytest.fixture
def device(kube, profile) -> FreeDevice:
    return pick_free_device(kube, profile)


@pytest.fixture
def plugin(cluster, profile, device) -> Plugin:
    return Plugin(cluster, profile, device.node)


@pytest.fixture
def allocate(kube, objects, profile, plugin):
    """Create a claim and write its allocation to ``device`` as the scheduler would.

    Every such claim is unprepared at teardown, whatever the test did: nobody else (no
    kubelet) would ever release a device prepared through the socket."""
    allocated: list[dict] = []

    def create(name: str, device: FreeDevice) -> dict:
        claim = objects.create(plain_claim(name, profile))
        meta = claim["metadata"]
        allocation = {"devices": {"results": [{
            "request": REQUEST, "driver": profile.driver, "pool": device.pool,
            "device": device.name,
        }]}, "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{
            "key": "metadata.name", "operator": "In", "values": [device.node]}]}]}}
        kube.raw(
            "PATCH",
            f"/apis/resource.k8s.io/v1/namespaces/{meta['namespace']}/resourceclaims/"
            f"{meta['name']}/status",
            {"status": {"allocation": allocation}}, "application/merge-patch+json",
        )
        allocated.append(kube.get("ResourceClaim", name, meta["namespace"]))
        return allocated[-1]

    yield create
    for claim in allocated:
        waits.poll(lambda c=claim: plugin.try_unprepare(c), Timeout.CLAIM_UNPREPARED,
                    f"the plugin to unprepare {claim['metadata']['name']}")


@pytest.fixture
def prepared(plugin, allocate, device):
    """A claim prepared through the socket (unprepared by ``allocate``)."""
    claim = allocate("sane", device)
    response = plugin.call("prepare", claim)
    return claim, response["claims"][claim["metadata"]["uid"]]


@needs_socket
@markers.requirement("SANITY-003")
def test_prepare_returns_cdi_ids_that_resolve_in_a_parsable_spec(plugin, prepared, device):
    _, result = prepared
    assert not result.get("error"), result
    assert [d["device_name"] for d in result["devices"]] == [device.name]
    ids = [i for d in result["devices"] for i in d.get("cdi_device_ids") or []]
    if not ids:  # the kubelet plugin API allows a device without CDI edits
        pytest.skip("the driver returns no CDI device ids for the device: nothing to resolve")
    resolved = plugin.resolve(ids)
    assert not any(resolved["specErrors"].values()), resolved["specErrors"]
    assert all(resolved["devices"][i]["found"] for i in ids), resolved


@needs_socket
@markers.requirement("SANITY-004")
def test_metadata_file_lists_the_allocated_device(plugin, prepared, profile, device):
    if not profile.device_metadata:
        pytest.skip(f"profile {profile.name} declares no KEP-5304 device metadata")
    claim, _ = prepared
    metadata = plugin.metadata(claim)
    devices = [d for r in metadata["requests"] if r["name"] == REQUEST for d in r["devices"]]
    assert [(d["driver"], d["pool"], d["name"]) for d in devices] == [
        (profile.driver, device.pool, device.name)]


@needs_socket
@markers.requirement("SANITY-005")
def test_prepare_twice_gives_the_same_answer(plugin, prepared):
    claim, first = prepared
    again = plugin.call("prepare", claim)["claims"][claim["metadata"]["uid"]]
    assert again == first


@needs_socket
@markers.requirement("SANITY-006")
def test_unprepare_twice_and_unprepare_of_an_unknown_claim_are_fine(plugin, allocate, device):
    claim = allocate("twice", device)
    plugin.call("prepare", claim)
    uid = claim["metadata"]["uid"]
    for _ in range(2):
        assert not plugin.call("unprepare", claim)["claims"][uid].get("error")
    unknown = {"metadata": {"namespace": claim["metadata"]["namespace"], "name": "never",
                            "uid": str(uuid.uuid4())}}
    response = plugin.call("unprepare", unknown)
    assert not response["claims"][unknown["metadata"]["uid"]].get("error"), response


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
        """A driver without a readiness probe is Ready before its socket serves."""
        try:
            answers.append(plugin.call("prepare", claim)["claims"][claim["metadata"]["uid"]])
        except (AssertionError, RuntimeError):  # the node command failed: not serving yet
            return False
        return True

    waits.poll(answered, Timeout.PLUGIN_RESTART, "the restarted plugin to serve its socket")
    # The kubelet plugin API asks prepare to be idempotent across restarts; whether the
    # driver keeps a checkpoint or works the answer out again is its own business.
    assert answers[-1] == first, "a restarted plugin must give the same answer"


@needs_socket
@markers.requirement("SANITY-008")
def test_no_device_is_prepared_for_two_claims_under_concurrent_requests(
    plugin, allocate, device, profile
):
    if profile.exclusive_prepare != "yes":
        pytest.skip(f"profile {profile.name} does not promise to refuse a device prepared "
                    f"for another claim (promises.exclusivePrepare: "
                    f"{profile.exclusive_prepare}); DRA leaves exclusivity to the scheduler")
    claims = [allocate(f"race-{i}", device) for i in range(2)]
    response = plugin.call("prepare", *claims, parallel=True)
    results = [r["claims"][c["metadata"]["uid"]] for r, c in zip(
        response["responses"], claims, strict=True)]
    succeeded = [r for r in results if not r.get("error")]
    assert len(succeeded) == 1, f"one device prepared for {len(succeeded)} claims: {results}"
