"""The cluster components' logs (kind's "export logs"): the hermetic cluster's logs, the
last part of each, reach a failed test's artifacts and the bundle, redacted."""

from pathlib import Path

from fixtures.artifacts import write_component_logs
from kubevirtci.local.processes import Supervisor
from kubevirtci.local.provider import LocalProvider
from reports import bundle
from tests.test_certification import make_bundle


class FakeCluster:
    def __init__(self, logs: Path) -> None:
        self.supervisor = Supervisor(logs.parent / "pids", logs)


def local_provider(tmp_path: Path, logs: dict[str, str]) -> LocalProvider:
    folder = tmp_path / "logs"
    folder.mkdir()
    for name, text in logs.items():
        (folder / f"{name}.log").write_text(text)
    return LocalProvider(tmp_path / "artifacts", cluster=FakeCluster(folder))


def test_every_component_log_is_exported_redacted(tmp_path):
    provider = local_provider(tmp_path, {
        "kube-apiserver": "started\nAuthorization: Bearer sekrit-token-value\n",
        "node01-kubelet": "kubelet ready\n", "etcd": "leader elected\n"})
    paths = write_component_logs(provider, tmp_path / "out")
    assert sorted(p.name for p in paths) == ["etcd.log", "kube-apiserver.log",
                                             "node01-kubelet.log"]
    apiserver = (tmp_path / "out" / "kube-apiserver.log").read_text()
    assert "started" in apiserver and "sekrit-token-value" not in apiserver


def test_a_long_log_keeps_its_end_from_a_whole_line(tmp_path):
    lines = [f"line {i:06d}" for i in range(200_000)]  # about 2.4 MB
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "kubelet.log").write_text("\n".join(lines) + "\n")
    Supervisor(tmp_path / "pids", tmp_path / "logs").export_logs(tmp_path / "out", 100_000)
    kept = (tmp_path / "out" / "kubelet.log").read_text().splitlines()
    assert kept[0].startswith("(the first ") and "bytes left out" in kept[0]
    assert kept[1] in lines and kept[-1] == lines[-1]
    assert len("\n".join(kept)) <= 100_000 + len(kept[0]) + 1


def test_an_export_that_fails_is_written_down_not_raised(tmp_path):
    class Broken(LocalProvider):
        def collect_logs(self, dest):
            raise PermissionError("no access to the logs")

    paths = write_component_logs(Broken(tmp_path), tmp_path / "out")
    assert "no access to the logs" in paths[0].read_text()


def test_the_bundle_carries_the_component_logs_and_seals_them(tmp_path):
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    (logs / "etcd.log").write_text("leader elected\n")
    path = make_bundle(tmp_path, folders={"cluster-logs": logs})
    assert (path / "cluster-logs" / "etcd.log").read_text() == "leader elected\n"
    problems, _ = bundle.verify(path)
    assert problems == []
    (path / "cluster-logs" / "etcd.log").write_text("edited\n")
    problems, _ = bundle.verify(path)
    assert problems == ["edited after the run: cluster-logs/etcd.log"]
