"""What a failed KubeVirt install reports about a component's pods."""

from typing import Any

from kubevirtci.kubevirt_install import component_report


class FakeKube:
    """One Deployment with one pod; logs differ between the current and last instance."""

    def __init__(self, restart_count: int) -> None:
        self.pod = {"metadata": {"name": "virt-operator-1"},
                    "status": {"phase": "Running", "containerStatuses": [
                        {"name": "virt-operator", "restartCount": restart_count}]}}

    def find(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": {"matchLabels": {"kubevirt.io": name}}}}

    def list(self, kind: str, namespace: str, label_selector: str = "") -> list[dict]:
        return [self.pod] if kind == "Pod" else []

    def logs(self, pod: str, namespace: str, container: str | None = None,
             tail: int | None = 500, previous: bool = False) -> str:
        return "panic: the reason it crashed\n" if previous else ""


def test_a_crash_looping_pod_is_reported_with_its_last_runs_log():
    report = component_report(FakeKube(restart_count=3), "virt-operator", "kubevirt")
    assert "previous log panic: the reason it crashed" in report


def test_a_pod_that_never_restarted_shows_its_current_log_only():
    report = component_report(FakeKube(restart_count=0), "virt-operator", "kubevirt")
    assert "panic" not in report and "pod virt-operator-1: Running" in report
