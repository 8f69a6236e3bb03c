from kubevirtci.installers import daemonset_rolled_out
from kubevirtci.kubevirt_install import kubevirt_cr_patch


def test_patch_adds_dra_gates_and_the_nvme_device_plugin_path_keeping_existing_config():
    cr = {"spec": {"configuration": {
        "developerConfiguration": {"featureGates": ["Snapshot"]},
        "permittedHostDevices": {"pciHostDevices": [
            {"pciVendorSelector": "10de:1eb8", "resourceName": "nvidia.com/T4"}]},
    }}}
    patch = kubevirt_cr_patch(cr)
    config = patch["spec"]["configuration"]
    assert config["developerConfiguration"]["featureGates"] == [
        "Snapshot", "HostDevices", "HostDevicesWithDRA", "GPUsWithDRA"]
    assert config["permittedHostDevices"]["pciHostDevices"] == [
        {"pciVendorSelector": "10de:1eb8", "resourceName": "nvidia.com/T4"},
        {"pciVendorSelector": "1b36:0010", "resourceName": "devices.kubevirt.io/nvme"},
    ]
    assert cr["spec"]["configuration"]["developerConfiguration"]["featureGates"] == ["Snapshot"]


def test_patch_is_idempotent():
    cr = {"spec": {}}
    first = kubevirt_cr_patch(cr)
    assert kubevirt_cr_patch({"spec": first["spec"]}) is None


def test_daemonset_rollout_needs_every_pod_updated_and_ready():
    ds = {"metadata": {"generation": 2}, "status": {
        "observedGeneration": 2, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2,
        "numberReady": 2}}
    assert daemonset_rolled_out(ds)
    ds["status"]["numberReady"] = 1
    assert not daemonset_rolled_out(ds)
    assert not daemonset_rolled_out(None)
    assert not daemonset_rolled_out({"metadata": {"generation": 3}, "status": {
        "observedGeneration": 2, "desiredNumberScheduled": 1, "updatedNumberScheduled": 1,
        "numberReady": 1}})


def test_a_500_while_an_install_applies_a_manifest_is_tried_again(monkeypatch):
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    from core.kube import Kube

    kube = Kube(client.ApiClient(), "run1")
    answers = [ApiException(status=500, reason="Internal Server Error"), {"kind": "Namespace"}]

    def raw(method, path, body=None, content_type="application/json"):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(kube, "raw", raw)
    doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kdc-x"}}
    assert kube.apply(doc) == {"kind": "Namespace"} and answers == []


def test_a_startup_window_holds_off_the_operators_liveness_probe_and_keeps_it():
    from kubevirtci.kubevirt_install import with_operator_startup_window

    liveness = {"httpGet": {"path": "/metrics", "port": 8443, "scheme": "HTTPS"},
                "initialDelaySeconds": 5, "timeoutSeconds": 10}
    operator = {"kind": "Deployment", "metadata": {"name": "virt-operator"},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "virt-operator", "livenessProbe": liveness}]}}}}
    service_account = {"kind": "ServiceAccount", "metadata": {"name": "kubevirt-operator"}}
    docs = [service_account, operator]

    changed = with_operator_startup_window(docs, 540)

    container = changed[1]["spec"]["template"]["spec"]["containers"][0]
    startup = container["startupProbe"]
    assert startup["httpGet"] == liveness["httpGet"]  # the same question
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 540
    assert container["livenessProbe"] == liveness  # KubeVirt's own once started
    assert changed[0] == service_account
    assert "startupProbe" not in operator["spec"]["template"]["spec"]["containers"][0]
