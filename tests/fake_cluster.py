"""A cluster faked from recorded API responses (tests/data) under the suite's real
session, for a pytest run of real suite tests in the unit tier: discovery, the
capability gate and the run's stops are the suite's own; only the API answers and the
nodes' sysfs are the test's."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from core.commands import Stdin, output
from core.kube import KINDS
from core.profile import load
from core.timeouts import Timeout
from fixtures.options import SuiteOptions
from fixtures.session import ClusterSession
from kubevirtci.capabilities import Capabilities, Capability
from kubevirtci.discovery import plugin_pods_path
from kubevirtci.existing import ExistingProvider
from kubevirtci.kubevirt_source import NoKubeVirt
from kubevirtci.provider import Node, NodePaths

ROOT = Path(__file__).resolve().parent.parent
RESPONSES = "cluster.json"  # the fake cluster's API answers, in the run's folder
SYSFS = "sys"  # the nodes' sysfs, in the run's folder


class FakeKube:
    """Reads answered from recorded responses (path -> JSON); nothing is written."""

    def __init__(self, responses: dict[str, Any]) -> None:
        self.responses = responses
        self.api_client = SimpleNamespace(configuration=SimpleNamespace(verify_ssl=True))

    def get_raw(self, path: str) -> Any:
        return self.responses.get(path)

    def list(self, kind: str, namespace: str | None = None,
             label_selector: str | None = None) -> list[dict[str, Any]]:
        k = KINDS[kind]
        path = plugin_pods_path(label_selector) if kind == "Pod" and label_selector else \
            f"{'/apis/' + k.api_version if k.group else '/api/v1'}/{k.plural}"
        return (self.responses.get(path) or {}).get("items", [])


class LocalNode(Node):
    """A node whose commands run here, over the test's sysfs tree."""

    def __init__(self, name: str, sysfs: Path) -> None:
        self.name = name
        self.paths = NodePaths(sysfs=str(sysfs))

    def run(self, argv: list[str], stdin: Stdin = None,
            timeout: Timeout = Timeout.NODE_COMMAND) -> str:
        return output(argv, timeout, stdin=stdin)


class ReachableNodes(ExistingProvider):
    """An existing cluster whose nodes the suite reaches (as kubevirtci's and local's)."""

    def __init__(self, sysfs: Path) -> None:
        super().__init__(Path("kubeconfig"))
        self.sysfs = sysfs

    def declared_capabilities(self) -> Capabilities:
        caps = super().declared_capabilities()
        caps.grant(Capability.NODE_ACCESS)
        return caps

    def node(self, name: str) -> Node:
        return LocalNode(name, self.sysfs)


def fake_session(folder: Path, certify: bool) -> ClusterSession:
    """The session of a run against the cluster recorded in ``folder``, connected and
    its facts discovered (as the controller's are by the time its report header shows)."""
    options = SuiteOptions(
        provider="existing", kubeconfig=None, context=None, profile="reference-nvme",
        kubevirt_version="v1.9.0", kubevirt_source=None, run_id="fake", artifacts_dir=folder,
        kubevirtci_path=None, sanity_image="dra-sanity", keep_on_failure=False,
        keep_cluster=False, cleanup_stale=False, without_kubevirt=True, certify=certify)
    profile = load(str(ROOT / "profiles" / "reference-nvme.yaml"))
    session = ClusterSession(options, profile, ReachableNodes(folder / SYSFS), NoKubeVirt())
    session.kube = FakeKube(json.loads((folder / RESPONSES).read_text()))  # type: ignore[assignment]
    session.rediscover()
    return session
