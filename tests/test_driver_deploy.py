"""`kubectl apply -f driver/deploy/` works on a fresh cluster on the first try, as the
documents show it: kubectl applies a folder's manifest files in the order of their names
(and each file's objects in order), so every namespace must come before the objects in it.
The reference profile installs the same files in the same order."""

from pathlib import Path

import yaml

from core.profile import load

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "driver" / "deploy"
BUILT_IN_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}


def kubectl_order(folder: Path) -> list[Path]:
    """The files `kubectl apply -f FOLDER/` reads, in the order it applies them."""
    return sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml", ".json"))


def applied_before_their_namespace(files: list[Path]) -> list[str]:
    """Objects that name a namespace no earlier object created (on a fresh cluster)."""
    created, problems = set(BUILT_IN_NAMESPACES), []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            namespace = doc["metadata"].get("namespace")
            if namespace is not None and namespace not in created:
                problems.append(f"{path.name}: {doc['kind']} {doc['metadata']['name']} "
                                f"before namespace {namespace}")
            if doc["kind"] == "Namespace":
                created.add(doc["metadata"]["name"])
    return problems


def test_kubectl_apply_of_the_folder_creates_each_namespace_before_its_objects():
    files = kubectl_order(DEPLOY)
    assert [p.name for p in files][-1] == "30-daemonset.yaml"
    assert applied_before_their_namespace(files) == []


def test_the_check_sees_a_daemonset_sorted_before_its_namespace(tmp_path):
    """The layout this replaced: daemonset.yaml sorted before rbac.yaml, whose Namespace
    it needs, and the first `kubectl apply` failed."""
    (tmp_path / "daemonset.yaml").write_text(
        "kind: DaemonSet\nmetadata: {name: d, namespace: ns}\n")
    (tmp_path / "rbac.yaml").write_text(
        "kind: Namespace\nmetadata: {name: ns}\n---\n"
        "kind: ServiceAccount\nmetadata: {name: s, namespace: ns}\n")
    assert applied_before_their_namespace(kubectl_order(tmp_path)) == [
        "daemonset.yaml: DaemonSet d before namespace ns"]


def test_the_reference_profile_installs_the_folder_as_kubectl_applies_it():
    profile = load(str(ROOT / "profiles" / "reference-nvme.yaml"))
    assert list(profile.manifests) == [p.resolve() for p in kubectl_order(DEPLOY)]
