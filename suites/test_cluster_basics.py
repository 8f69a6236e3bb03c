"""What DRA drivers and KubeVirt take for granted from any cluster they run on, checked
before anything depends on it: pods reach the API server through the ``kubernetes``
Service with their service account, ClusterIP Services route across nodes, and a
``hostPID`` pod sees its own node's processes (KubeVirt's node agent relies on it)."""

from __future__ import annotations

import pytest

from core import waits
from core.timeouts import Timeout
from fixtures import markers
from fixtures.builders.pod import CONTAINER, new_pod, with_command, with_pod_node_selector
from kubevirtci.capabilities import Capability

pytestmark = [markers.cluster]
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
HTTP_GET = "GET / HTTP/1.0\r\n\r\n"


def _exec(kube, pod, namespace, script):
    return kube.exec(pod, namespace, CONTAINER, ["sh", "-c", script])


def _node_names(kube) -> list[str]:
    return sorted(n["metadata"]["name"] for n in kube.list("Node")
                  if not (n["spec"].get("unschedulable")))


@markers.requirement("CLUSTER-001")
def test_a_pod_reaches_the_api_server_through_the_kubernetes_service(
    kube, objects, namespace, profile
):
    objects.create(new_pod("p", profile.test_image))
    waits.wait_until_pod_running(kube, "p", namespace)
    service = kube.get("Service", "kubernetes", "default")
    env = _exec(kube, "p", namespace, "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT")
    assert env.strip() == f"{service['spec']['clusterIP']}:443"
    # The test image has no TLS client: plain HTTP to the Service is answered by the API
    # server's TLS listener itself, which proves the route through kube-proxy's rules.
    out = _exec(kube, "p", namespace, f"printf {HTTP_GET!r} | nc -w 5 "
                "$KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT")
    assert "HTTPS server" in out, f"no API server behind the kubernetes Service: {out!r}"
    # The token the pod holds is its service account's, and the API server accepts it.
    review = kube.raw("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": _exec(kube, "p", namespace, f"cat {TOKEN}").strip()}})
    assert review["status"].get("authenticated"), review["status"]
    assert review["status"]["user"]["username"] == \
        f"system:serviceaccount:{namespace}:default"


@markers.requirement("CLUSTER-002")
def test_a_cluster_ip_service_routes_to_a_pod_on_another_node(kube, objects, namespace,
                                                              profile):
    nodes = _node_names(kube)
    if len(nodes) < 2:
        pytest.skip("the cluster has one schedulable node")
    server, client = nodes[-1], nodes[0]
    serve = ("mkdir -p /www && hostname > /www/index.html && "
             "exec httpd -f -p 8080 -h /www")
    pod = new_pod("server", profile.test_image, with_command("sh", "-c", serve),
                  with_pod_node_selector(server))
    pod["metadata"]["labels"] = {"app": "kdc-server"}
    objects.create(pod)
    objects.create({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "server"},
        "spec": {"selector": {"app": "kdc-server"},
                 "ports": [{"port": 80, "targetPort": 8080}]},
    })
    objects.create(new_pod("client", profile.test_image, with_pod_node_selector(client)))
    waits.wait_until_pod_running(kube, "server", namespace)
    waits.wait_until_pod_running(kube, "client", namespace)
    ip = kube.get("Service", "server", namespace)["spec"]["clusterIP"]

    answers: list[str] = []

    def answered() -> bool:
        # kube-proxy programs the rules shortly after the endpoints appear; until then
        # nc reports its own failure ("nc: timed out"), which is no answer.
        answers.append(_exec(kube, "client", namespace,
                             f"printf {HTTP_GET!r} | nc -w 3 {ip} 80 | tail -n 1").strip())
        return bool(answers[-1]) and not answers[-1].startswith("nc:")

    waits.poll(answered, Timeout.SERVICE_ROUTED, f"Service {ip} to answer on {client}")
    assert answers[-1] == "server", f"the Service answered {answers[-1]!r}, not the server pod"


@markers.requires(Capability.NODE_ACCESS)
@markers.requirement("CLUSTER-003")
def test_a_host_pid_pod_sees_only_its_own_nodes_processes(kube, objects, namespace, profile,
                                                           cluster):
    pod = new_pod("p", profile.test_image)
    pod["spec"]["hostPID"] = True
    objects.create(pod)
    node_name = waits.wait_until_pod_running(kube, "p", namespace)["spec"]["nodeName"]
    node = cluster.provider.node(node_name)
    seen = _exec(kube, "p", namespace, "readlink /proc/self/ns/pid").strip()
    assert seen == node.run(["readlink", "/proc/self/ns/pid"]).strip(), \
        "a hostPID pod must share its node's PID namespace"
    kubelets = _exec(kube, "p", namespace,
                     # a process may end between the glob and the read
                     "for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' 2>/dev/null < $c; echo; done "
                     "| grep -c '^[^ ]*kubelet ' || true")
    assert kubelets.strip() == "1", f"want the node's one kubelet, saw {kubelets.strip()}"
