"""Waits with named timeouts that end as soon as the outcome is known.

A condition answers ``True`` (done), ``False`` (not yet) or ``Stop(reason)``: a state
the object will not leave by itself (a VMI that went ``Failed``, a container in
``CrashLoopBackOff``), which ends the wait at once with the reason and the last state,
as KubeVirt's libwait and the Kubernetes e2e framework do.

``wait_for`` follows one object: it lists it once, tests the condition, then watches from
that resource version, reopening a dropped watch until the timeout runs out. ``poll`` is
the one helper for the rare things no watch can follow (node files, logs, sockets).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from core import retry
from core.kube import Kube
from core.timeouts import Timeout, WaitFailed, WaitTimeout

# How often a wait whose condition depends on time lists its object again.
GUEST_RECHECK_SECONDS = 15.0


@dataclass(frozen=True)
class Stop:
    """A terminal state: waiting longer cannot help."""

    reason: str


Verdict = bool | Stop
Obj = dict[str, Any] | None
Condition = Callable[[Obj], Verdict]


class _NotYet(Exception):
    """An attempt that saw the condition not hold (yet): tried again until the deadline."""


class _WatchEnded(_NotYet):
    """A watch window closed with the condition still unmet: list again at once."""


def _retry_waiting(err: BaseException) -> bool:
    return isinstance(err, _NotYet) or retry.is_transient(err)


def _ran_out(timeout: Timeout, what: str, err: BaseException, detail: str) -> WaitTimeout:
    """The timeout, with the last real error when the last attempt met one."""
    error = "" if isinstance(err, _NotYet) else f"; last error: {retry.describe(err)}"
    return WaitTimeout(f"{timeout.name} ({timeout.seconds:.0f}s) ran out waiting for "
                       f"{what}{detail}{error}")


def wait_for(kube: Kube, kind: str, name: str, namespace: str | None, condition: Condition,
             timeout: Timeout, what: str, recheck: float | None = None,
             deadline: float | None = None) -> Obj:
    """Wait until ``condition(obj)`` holds (``obj`` is None while the object is absent).
    ``recheck``: the longest a watch stays open before the object is listed and tested
    again, for a condition that also depends on time or on other objects. ``deadline``
    (``time.monotonic()``): one end shared by several waits, instead of ``timeout`` from
    now. A dropped watch or a transient API error lists again; any other error (a 403,
    an unserved kind) ends the wait at once with that error."""
    deadline = deadline if deadline is not None else time.monotonic() + timeout.seconds
    field_selector = f"metadata.name={name}"
    ref = f"{kind} {namespace + '/' if namespace else ''}{name}"
    last: list[Obj] = [None]

    def settled(obj: Obj) -> bool:
        last[0] = obj
        verdict = condition(obj)
        if isinstance(verdict, Stop):
            raise WaitFailed(f"{what} cannot happen: {verdict.reason} ({ref}); last state: "
                             f"{summary(obj)}")
        return verdict

    def attempt() -> Obj:
        items, version = kube.list_with_version(kind, namespace, field_selector)
        if settled(items[0] if items else None):
            return last[0]
        remaining = deadline - time.monotonic()
        window = min(remaining, recheck) if recheck else remaining
        for event in kube.watch_stream(kind, namespace, field_selector, version,
                                       max(1, int(window))):
            if settled(None if event["type"] == "DELETED" else event["object"]):
                return last[0]
        raise _WatchEnded()

    try:
        return retry.until(deadline, _retry_waiting,
                           at_once=lambda err: isinstance(err, _WatchEnded))(attempt)
    except Exception as err:
        if _retry_waiting(err):  # still not there, or still failing, at the deadline
            raise _ran_out(timeout, what, err, f" ({ref}); last state: {summary(last[0])}") \
                from None
        raise


def poll(condition: Callable[[], Verdict], timeout: Timeout, what: str) -> None:
    """Test ``condition`` with backoff (0.1 s doubling to 3 s) until it holds; a
    transient API error is tried again, any other error ends the poll with it."""
    def attempt() -> None:
        verdict = condition()
        if isinstance(verdict, Stop):
            raise WaitFailed(f"{what} cannot happen: {verdict.reason}")
        if not verdict:
            raise _NotYet()

    try:
        retry.until(time.monotonic() + timeout.seconds, _retry_waiting)(attempt)
    except Exception as err:
        if _retry_waiting(err):
            raise _ran_out(timeout, what, err, "") from None
        raise


def summary(obj: Obj) -> str:
    if obj is None:
        return "absent"
    status = obj.get("status") or {}
    keep = {k: status[k] for k in ("phase", "reason", "message", "conditions",
                                   "printableStatus", "containerStatuses") if k in status}
    return str(keep or status)[:1200]


# --- conditions ---------------------------------------------------------------------

# Container states a pod does not leave by itself: the kubelet only retries with backoff.
FATAL_WAITING_REASONS = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
    "ErrImageNeverPull",
})
# KubeVirt's printableStatus values for a VM whose launcher cannot run.
FATAL_VM_STATUSES = frozenset({
    "CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "ErrorPvcNotFound",
    "DataVolumeError",
})


def is_absent(obj: Obj) -> bool:
    return obj is None


def condition(obj: Obj, cond_type: str, status: str | None = None) -> dict[str, Any] | None:
    """The object's condition of that type (and status, when given), or None."""
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or []
                 if c.get("type") == cond_type and status in (None, c.get("status"))), None)


def has_condition(obj: Obj, cond_type: str, status: str = "True") -> bool:
    return condition(obj, cond_type, status) is not None


def container_failure(pod: dict[str, Any]) -> str | None:
    """Why a pod's container cannot run, when the kubelet says so; None otherwise."""
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING_REASONS:
            return (f"container {cs['name']} is in {waiting['reason']}: "
                    f"{waiting.get('message', '')}".rstrip(": "))
    return None


def pod_running(obj: Obj) -> Verdict:
    if obj is None:
        return False
    status = obj.get("status") or {}
    phase = status.get("phase")
    if phase == "Running":
        return True
    if phase in ("Failed", "Succeeded"):
        return Stop(f"pod {phase} ({status.get('reason', '')} {status.get('message', '')})")
    failure = container_failure(obj)
    return Stop(failure) if failure else False


def pod_finished(obj: Obj) -> Verdict:
    """A pod of run-once containers (restartPolicy Never) has ended, either way."""
    if obj is None:
        return False
    if (obj.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        return True
    failure = container_failure(obj)
    return Stop(failure) if failure else False


def claim_allocated(obj: Obj) -> bool:
    return obj is not None and bool((obj.get("status") or {}).get("allocation"))


def claim_deallocated(obj: Obj) -> bool:
    status = (obj or {}).get("status") or {}
    return obj is not None and not status.get("allocation") and not status.get("reservedFor")


def launcher_render_failure(obj: Obj) -> Stop | None:
    """A VMI (or its VM, which mirrors the VMI's conditions) whose launcher
    virt-controller cannot render: final, since the spec will not change."""
    c = condition(obj, "Synchronized", "False")
    if c and str(c.get("message", "")).startswith("failed to render launch manifest"):
        return Stop(f"virt-controller cannot create the launcher: {c['message']}")
    return None


def vmi_failure(obj: Obj) -> Stop | None:
    """A VMI that ended: ``Failed`` (or ``Succeeded`` while it should run) is final, and
    so is one whose launcher virt-controller cannot render."""
    status = (obj or {}).get("status") or {}
    if render := launcher_render_failure(obj):
        return render
    phase = status.get("phase")
    if phase not in ("Failed", "Succeeded"):
        return None
    messages = "; ".join(f"{c.get('type')}: {c.get('message') or c.get('reason')}"
                         for c in status.get("conditions") or [] if c.get("status") == "False")
    return Stop(f"VMI {phase}" + (f" ({messages})" if messages else ""))


def launcher_pods(kube: Kube, vmi: dict[str, Any]) -> list[dict[str, Any]]:
    """The VMI's launcher pods (virt-controller labels them with the VMI's uid)."""
    return kube.list("Pod", vmi["metadata"].get("namespace"),
                     label_selector=f"kubevirt.io/created-by={vmi['metadata']['uid']}")


def unreported_guest(kube: Kube, vmi: Obj) -> Stop | None:
    """A VMI still ``Scheduled`` whose launcher pod has been Ready for longer than
    GUEST_REPORTED: either virt-launcher cannot start the domain (the VMI says why in
    ``Synchronized=False``), or the guest runs and virt-handler cannot report it (its
    status updates are being refused). Waiting longer helps neither."""
    status = (vmi or {}).get("status") or {}
    if vmi is None or status.get("phase") != "Scheduled":
        return None
    for pod in launcher_pods(kube, vmi):
        ready = condition(pod, "Ready", "True")
        if ready is None or not ready.get("lastTransitionTime"):
            continue
        since = datetime.fromisoformat(ready["lastTransitionTime"])
        if (datetime.now(UTC) - since).total_seconds() <= Timeout.GUEST_REPORTED.seconds:
            continue
        unsynchronized = condition(vmi, "Synchronized", "False")
        if unsynchronized is not None:  # the guest never started: virt-launcher says why
            return Stop(f"its launcher {pod['metadata']['name']} has been Ready since "
                        f"{ready['lastTransitionTime']}, and virt-launcher cannot start the "
                        f"domain: {unsynchronized.get('message') or unsynchronized.get('reason')}")
        return Stop(
            f"its launcher {pod['metadata']['name']} has been Ready since "
            f"{ready['lastTransitionTime']}, yet virt-handler has not reported the guest "
            f"running for {Timeout.GUEST_REPORTED.seconds:.0f} s: virt-handler's log "
            "names the refused status update (KubeVirt v1.8.0-v1.8.3 on Kubernetes "
            "1.36+: kubevirt/kubevirt#17858)")
    return None


def launcher_not_created(kube: Kube, vmi: Obj) -> Stop | None:
    """A VMI whose launcher's container the runtime cannot create: its spec fails to
    generate (a device node, a mount that is not there). The kubelet retries it forever
    with the same spec; waiting longer cannot help."""
    phase = ((vmi or {}).get("status") or {}).get("phase")
    if vmi is None or phase not in (None, "Pending", "Scheduling"):
        return None
    for pod in launcher_pods(kube, vmi):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            message = waiting.get("message") or ""
            if waiting.get("reason") == "CreateContainerError" and "failed to generate" in message:
                return Stop(f"its launcher {pod['metadata']['name']}'s container "
                            f"{status['name']} cannot be created: {message}")
    return None


def vmi_running(obj: Obj) -> Verdict:
    if obj is not None and (obj.get("status") or {}).get("phase") == "Running":
        return True
    return vmi_failure(obj) or False


def vmi_restarted(old_uid: str) -> Condition:
    """A VMI other than ``old_uid`` that runs."""
    return lambda obj: (obj is not None and obj["metadata"]["uid"] != old_uid
                        and vmi_running(obj))


def vmi_unschedulable(obj: Obj) -> Verdict:
    """The VMI reports that its launcher pod cannot be scheduled."""
    return has_condition(obj, "PodScheduled", "False") or vmi_failure(obj) or False


def vm_ready(obj: Obj) -> Verdict:
    status = (obj or {}).get("status") or {}
    if status.get("ready"):
        return True
    printable = status.get("printableStatus")
    if printable in FATAL_VM_STATUSES:
        return Stop(f"VM is {printable}")
    return launcher_render_failure(obj) or False


def vm_stopped(obj: Obj) -> bool:
    return obj is not None and (obj.get("status") or {}).get("printableStatus") == "Stopped"


# --- shorthands used by the suites -----------------------------------------------------


def wait_present(kube: Kube, kind: str, name: str, namespace: str, condition: Condition,
                 timeout: Timeout, what: str) -> dict[str, Any]:
    """``wait_for`` a condition only an existing object can meet; returns the object."""
    obj = wait_for(kube, kind, name, namespace, condition, timeout, what)
    assert obj is not None
    return obj


def wait_until_pod_running(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    return wait_present(kube, "Pod", name, namespace, pod_running, Timeout.POD_RUNNING,
                        "pod Running")


def wait_until_claim_allocated(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    return wait_present(kube, "ResourceClaim", name, namespace, claim_allocated,
                        Timeout.CLAIM_ALLOCATED, "claim allocation")


def wait_until_claim_deallocated(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    return wait_present(kube, "ResourceClaim", name, namespace, claim_deallocated,
                        Timeout.CLAIM_DEALLOCATED,
                        "claim deallocation (no allocation, no reservation)")


def wait_until_vm_ready(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    return wait_present(kube, "VirtualMachine", name, namespace, vm_ready, Timeout.VM_START,
                        "VM ready")


def wait_until_vm_stopped(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    return wait_present(kube, "VirtualMachine", name, namespace, vm_stopped,
                        Timeout.VM_STOP, "VM Stopped")


def wait_until_vmi_running(kube: Kube, name: str, namespace: str) -> dict[str, Any]:
    """The VMI Running; one whose guest runs but is never reported, or whose launcher's
    container cannot be created, stops the wait."""
    def reported_running(vmi: Obj) -> Verdict:
        return (vmi_running(vmi) or unreported_guest(kube, vmi)
                or launcher_not_created(kube, vmi) or False)

    obj = wait_for(kube, "VirtualMachineInstance", name, namespace, reported_running,
                   Timeout.VMI_RUNNING, "VMI Running", recheck=GUEST_RECHECK_SECONDS)
    assert obj is not None
    return obj


# How long each kind may take to go once deleted (finalizers, graceful pod shutdown).
DELETION_TIMEOUTS = {
    "Pod": Timeout.POD_DELETED,
    "ResourceClaim": Timeout.CLAIM_DELETED,
    "VirtualMachine": Timeout.VM_DELETED,
    "VirtualMachineInstance": Timeout.VMI_DELETED,
}


def wait_until_gone(kube: Kube, kind: str, name: str, namespace: str) -> None:
    """Wait until a deleted object is gone, with its kind's named timeout."""
    wait_for(kube, kind, name, namespace, is_absent, DELETION_TIMEOUTS[kind], f"{kind} deletion")
