"""Waits end as soon as the outcome is known: done, or a state that will not change."""

import time

import pytest

from core import waits
from core.timeouts import Timeout, WaitFailed, WaitTimeout
from fixtures.cleanup import CreatedObjects
from kubevirtci.installers import pods_ready_on_every_node


class WatchedObject:
    """A fake API: list returns the first state, the watch streams the rest."""

    def __init__(self, *states):
        self.states = list(states)
        self.lists = 0

    def list_with_version(self, kind, namespace, field_selector):
        self.lists += 1
        first = self.states[0]
        return ([first] if first is not None else []), "1"

    def list(self, kind, namespace=None, label_selector=None):
        return []  # no launcher pods

    def watch_stream(self, kind, namespace, field_selector, version, timeout_seconds):
        for state in self.states[1:]:
            yield ({"type": "DELETED", "object": {}} if state is None
                   else {"type": "MODIFIED", "object": state})


def vmi(phase, **status):
    return {"metadata": {"name": "vm", "uid": "u1"}, "status": {"phase": phase, **status}}


def pod(phase, waiting=None):
    statuses = [{"name": "ctr", "state": {"waiting": {"reason": waiting, "message": "boom"}}}] \
        if waiting else []
    return {"metadata": {"name": "p"}, "spec": {"nodeName": "node01"},
            "status": {"phase": phase, "containerStatuses": statuses}}


def test_a_vmi_that_turns_failed_ends_the_wait_at_once_with_its_reason():
    failed = vmi("Failed", conditions=[{"type": "Ready", "status": "False",
                                        "message": "launcher exited: no such device"}])
    api = WatchedObject(vmi("Scheduling"), vmi("Scheduled"), failed)
    start = time.monotonic()
    with pytest.raises(WaitFailed, match=r"VMI Failed.*launcher exited: no such device"):
        waits.wait_until_vmi_running(api, "vm", "ns")
    assert time.monotonic() - start < 1 and api.lists == 1


@pytest.mark.parametrize(("state", "reason"), [
    (pod("Failed"), "pod Failed"),
    (pod("Succeeded"), "pod Succeeded"),
    (pod("Pending", "CrashLoopBackOff"), "container ctr is in CrashLoopBackOff: boom"),
    (pod("Pending", "ImagePullBackOff"), "ImagePullBackOff"),
])
def test_a_terminal_pod_state_ends_a_pod_wait(state, reason):
    api = WatchedObject(pod("Pending"), state)
    with pytest.raises(WaitFailed, match=reason):
        waits.wait_until_pod_running(api, "p", "ns")


def test_a_wait_that_is_met_returns_the_object_and_one_that_is_not_names_its_timeout(
        monkeypatch):
    assert waits.wait_until_pod_running(WatchedObject(pod("Pending"), pod("Running")), "p", "ns")
    monkeypatch.setenv("KDC_TIMEOUT_SCALE", "0.01")
    with pytest.raises(WaitTimeout, match=r"POD_RUNNING \(2s\).*last state: .*Pending"):
        waits.wait_until_pod_running(WatchedObject(pod("Pending")), "p", "ns")


def test_vm_that_cannot_start_and_a_restart_condition():
    assert isinstance(waits.vm_ready({"status": {"printableStatus": "CrashLoopBackOff"}}),
                      waits.Stop)
    assert waits.vm_ready({"status": {"printableStatus": "Starting"}}) is False
    # virt-controller cannot render the launcher: the VM mirrors it, and no wait helps
    refused = {"status": {"printableStatus": "Starting", "conditions": [
        {"type": "Synchronized", "status": "False", "reason": "FailedCreate",
         "message": "failed to render launch manifest: HostDevice  is not permitted"}]}}
    stop = waits.vm_ready(refused)
    assert isinstance(stop, waits.Stop) and "not permitted" in stop.reason
    restarted = waits.vmi_restarted("u1")
    assert restarted(vmi("Running")) is False  # the old VMI still runs
    assert restarted({**vmi("Running"), "metadata": {"uid": "u2"}}) is True


def test_poll_ends_on_stop_and_names_its_timeout(monkeypatch):
    with pytest.raises(WaitFailed, match="the thing cannot happen: gone"):
        waits.poll(lambda: waits.Stop("gone"), Timeout.POD_RUNNING, "the thing")
    monkeypatch.setenv("KDC_TIMEOUT_SCALE", "0.001")
    with pytest.raises(WaitTimeout, match="POD_RUNNING"):
        waits.poll(lambda: False, Timeout.POD_RUNNING, "the thing")


def test_a_crash_looping_driver_pod_is_not_a_rollout():
    ready = {**pod("Running"), "status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}}
    assert pods_ready_on_every_node([ready], 1) is True
    assert pods_ready_on_every_node([ready], 2) is False
    verdict = pods_ready_on_every_node([ready, pod("Running", "CrashLoopBackOff")], 2)
    assert isinstance(verdict, waits.Stop) and "CrashLoopBackOff" in verdict.reason


class SlowDeletes:
    """Deleted objects stay until their finalizers run; the watch reports when they go."""

    def __init__(self):
        self.deleted = []
        self.gone = []

    def create(self, manifest):
        return {**manifest, "metadata": {**manifest["metadata"], "namespace": "ns"}}

    def delete(self, kind, name, namespace):
        self.deleted.append(kind)
        return True

    def list_with_version(self, kind, namespace, field_selector):
        return [{"kind": kind, "metadata": {"name": field_selector}}], "7"

    def watch_stream(self, kind, namespace, field_selector, version, timeout_seconds):
        yield {"type": "MODIFIED", "object": {"metadata": {"finalizers": ["x"]}}}
        self.gone.append(kind)
        yield {"type": "DELETED", "object": {}}


def test_deletes_wait_until_gone_before_the_lease_can_be_released():
    kube = SlowDeletes()
    objects = CreatedObjects(kube, "ns")
    objects.create({"kind": "ResourceClaim", "metadata": {"name": "c"}})
    objects.create({"kind": "Pod", "metadata": {"name": "p"}})
    assert objects.delete_all() == []
    assert kube.deleted == ["Pod", "ResourceClaim"]  # consumers first
    assert kube.gone == ["Pod", "ResourceClaim"], "returned before the objects were gone"


def test_a_vmi_whose_launcher_cannot_be_rendered_ends_the_wait():
    unrenderable = vmi("Pending", conditions=[{
        "type": "Synchronized", "status": "False", "reason": "FailedCreate",
        "message": "failed to render launch manifest: HostDevice  is not permitted"}])
    verdict = waits.vmi_unschedulable(unrenderable)
    assert isinstance(verdict, waits.Stop) and "HostDevice  is not permitted" in verdict.reason


class LauncherKube:
    """list() answers the VMI's launcher pod, Ready since ``ready_since``."""

    def __init__(self, ready_since: str | None) -> None:
        self.ready_since = ready_since

    def list(self, kind, namespace=None, label_selector=None):
        conditions = [] if self.ready_since is None else [
            {"type": "Ready", "status": "True", "lastTransitionTime": self.ready_since}]
        return [{"metadata": {"name": "virt-launcher-vm-x"}, "status": {"conditions": conditions}}]


def test_a_guest_that_runs_but_is_never_reported_ends_the_wait():
    from datetime import UTC, datetime, timedelta

    def ago(seconds: int) -> str:
        return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

    scheduled = {"metadata": {"namespace": "ns", "uid": "u1"},
                 "status": {"phase": "Scheduled"}}
    stop = waits.unreported_guest(LauncherKube(ago(600)), scheduled)
    assert isinstance(stop, waits.Stop) and "kubevirt/kubevirt#17858" in stop.reason
    assert waits.unreported_guest(LauncherKube(ago(5)), scheduled) is None  # just started
    assert waits.unreported_guest(LauncherKube(None), scheduled) is None  # not Ready yet
    running = {**scheduled, "status": {"phase": "Running"}}
    assert waits.unreported_guest(LauncherKube(ago(600)), running) is None


def test_a_launcher_that_cannot_start_the_domain_ends_the_wait_with_its_reason():
    from datetime import UTC, datetime, timedelta

    long_ago = (datetime.now(UTC) - timedelta(seconds=600)).strftime("%Y-%m-%dT%H:%M:%SZ")
    failing = {"metadata": {"namespace": "ns", "uid": "u1"}, "status": {
        "phase": "Scheduled", "conditions": [{
            "type": "Synchronized", "status": "False",
            "message": 'SyncVMI failed: request "dev" not found in metadata'}]}}
    stop = waits.unreported_guest(LauncherKube(long_ago), failing)
    assert isinstance(stop, waits.Stop)
    assert 'request "dev" not found in metadata' in stop.reason
    assert "#17858" not in stop.reason  # not blamed on the status-update bug


class ContainerKube:
    """A fake API listing one launcher pod whose compute container waits so."""

    def __init__(self, waiting):
        self.waiting = waiting

    def list(self, kind, namespace=None, label_selector=None):
        return [{"metadata": {"name": "virt-launcher-vm-x"}, "status": {"containerStatuses": [
            {"name": "compute", "state": {"waiting": self.waiting}}]}}]


def test_a_launcher_whose_container_cannot_be_created_ends_the_wait_with_the_runtime_word():
    scheduling = {"metadata": {"namespace": "ns", "uid": "u1"}, "status": {"phase": "Scheduling"}}
    refused = {"reason": "CreateContainerError", "message": "failed to generate container "
               '"ab" spec: failed to generate spec: lstat /dev/vfio/devices/vfio0: no such '
               "file or directory"}
    stop = waits.launcher_not_created(ContainerKube(refused), scheduling)
    assert isinstance(stop, waits.Stop) and "lstat /dev/vfio/devices/vfio0" in stop.reason
    # pulling an image, or a runtime error the kubelet may get past, is waited out
    for waiting in ({"reason": "ContainerCreating"},
                    {"reason": "CreateContainerError", "message": "context deadline exceeded"}):
        assert waits.launcher_not_created(ContainerKube(waiting), scheduling) is None
    running = {**scheduling, "status": {"phase": "Running"}}
    assert waits.launcher_not_created(ContainerKube(refused), running) is None


class FailingApi(WatchedObject):
    """A fake API whose lists fail with ``errors`` in turn, then answer ``state``."""

    def __init__(self, errors, state):
        super().__init__(state)
        self.errors = list(errors)

    def list_with_version(self, kind, namespace, field_selector):
        if self.errors:
            raise self.errors.pop(0)
        return super().list_with_version(kind, namespace, field_selector)


def api_error(status, headers=None):
    from kubernetes.client.rest import ApiException

    err = ApiException(status=status, reason={403: "Forbidden", 500: "Internal Server Error",
                                              429: "Too Many Requests"}[status])
    err.headers = headers or {}
    return err


def test_a_403_during_a_wait_fails_at_once_naming_the_403():
    from kubernetes.client.rest import ApiException

    api = FailingApi([api_error(403)], {"metadata": {"name": "x"}})
    start = time.monotonic()
    with pytest.raises(ApiException) as err:
        waits.wait_for(api, "Pod", "x", "ns", lambda o: o is not None,
                       Timeout.POD_RUNNING, "the pod")
    assert err.value.status == 403 and time.monotonic() - start < 1


def test_transient_errors_during_a_wait_are_tried_again_a_429_after_its_retry_after():
    api = FailingApi([api_error(500), api_error(429, {"Retry-After": "0.2"})],
                     {"metadata": {"name": "x"}})
    start = time.monotonic()
    got = waits.wait_for(api, "Pod", "x", "ns", lambda o: o is not None,
                         Timeout.POD_RUNNING, "the pod")
    assert got == {"metadata": {"name": "x"}}
    assert time.monotonic() - start >= 0.2  # the server's Retry-After was honoured


def test_a_wait_that_runs_out_while_the_api_fails_names_the_last_error(monkeypatch):
    monkeypatch.setenv("KDC_TIMEOUT_SCALE", "0.001")
    api = FailingApi([api_error(500)] * 1000, None)
    with pytest.raises(WaitTimeout, match="last error: API error 500 Internal Server Error"):
        waits.wait_for(api, "Pod", "x", "ns", lambda o: o is not None,
                       Timeout.POD_RUNNING, "the pod")


def test_a_poll_tries_a_transient_error_again_and_stops_at_any_other():
    from kubernetes.client.rest import ApiException

    answers = [api_error(500), True]

    def condition():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    waits.poll(condition, Timeout.POD_RUNNING, "the thing")
    with pytest.raises(ApiException, match="Forbidden"):
        waits.poll(lambda: (_ for _ in ()).throw(api_error(403)), Timeout.POD_RUNNING, "x")
