"""Named per-operation timeouts, in seconds: one name per operation, so that a message
says which operation ran out. ``KDC_TIMEOUT_SCALE`` stretches them all (slow emulated
clusters, loaded CI hosts)."""

from __future__ import annotations

import os
from enum import Enum


class Timeout(Enum):
    # Values pair a description with seconds, so that equal durations stay distinct names.
    # Pods and claims
    POD_RUNNING = ("a pod runs", 180)
    POD_DELETED = ("a pod is gone", 120)
    CLAIM_ALLOCATED = ("the scheduler allocates a claim", 120)
    CLAIM_DEALLOCATED = ("a claim loses its allocation and reservations", 120)
    CLAIM_DELETED = ("a claim is gone", 120)
    CLAIM_UNPREPARED = ("the kubelet plugin unprepares a claim", 60)
    DEVICE_RELEASED = ("the driver gives a device back to its original driver", 60)
    NODE_CLIENT = ("a node-side client pod runs to its end", 120)
    SERVICE_ROUTED = ("a Service routes to its pods", 60)
    # KubeVirt VMs
    VMI_RUNNING = ("a VMI runs", 300)
    GUEST_REPORTED = ("virt-handler reports a guest running once its launcher is Ready", 60)
    VMI_UNSCHEDULABLE = ("a VMI reports that its launcher cannot be scheduled", 120)
    VMI_DELETED = ("a VMI is gone", 180)
    VM_START = ("a VM becomes ready", 420)
    VM_STOP = ("a VM stops", 240)
    VM_RESTART = ("a restarted VM runs a new VMI", 420)
    VM_DELETED = ("a VM is gone", 240)
    CONSOLE_PROMPT = ("the guest console shows a login or shell prompt", 420)
    GUEST_COMMAND = ("a guest command completes", 60)
    CONSOLE_TAIL = ("reading the console for diagnostics", 5)
    # Installation
    CRD_ESTABLISHED = ("a CustomResourceDefinition is established", 60)
    KUBEVIRT_OPERATOR_READY = ("virt-operator is available", 180)
    KUBEVIRT_COMPONENT = ("virt-api or virt-controller is available", 300)
    KUBEVIRT_AVAILABLE = ("KubeVirt reports Available", 900)
    KUBEVIRT_REMOVED = ("KubeVirt's operator removes what it deployed", 300)
    KUBEVIRT_CONFIG = ("virt-api applies a KubeVirt configuration change", 120)
    DRIVER_READY = ("the driver DaemonSet is ready on every node", 300)
    SLICES_PUBLISHED = ("the driver publishes ResourceSlices", 120)
    PLUGIN_RESTART = ("a deleted driver plugin pod is replaced and ready", 120)
    SONOBUOY_RUN = ("Sonobuoy runs the suite's plugin to its end", 3600)
    # Cleanup and shared state
    OBJECTS_DELETED = ("a test's objects are gone", 180)
    NAMESPACE_DELETED = ("the run's namespaces are gone", 180)
    CLEANUP_RUN = ("this run's labelled objects are gone", 180)
    CLEANUP_STALE = ("earlier runs' labelled objects are gone", 120)
    DEVICE_LEASE = ("the device lease is granted", 1800)
    # The hermetic cluster
    NODE_BOOT = ("a hermetic node's init is ready", 60)
    NODE_SERVICE_READY = ("a node's containerd answers on its socket", 60)
    COMPONENT_READY = ("a cluster component is ready", 180)
    PROCESS_EXIT = ("a process exits after SIGTERM", 10)
    PROCESS_KILLED = ("a process is gone after SIGKILL", 5)

    @property
    def seconds(self) -> float:
        return self.value[1] * float(os.environ.get("KDC_TIMEOUT_SCALE", "1"))


class WaitTimeout(AssertionError):
    """A named wait ran out; the message says what was awaited and the last state seen."""


class WaitFailed(AssertionError):
    """A wait ended early: the object reached a state it will not leave by itself."""
