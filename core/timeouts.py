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
    DEVICE_HEALTH = ("the kubelet reports a device's health in its pod's status", 120)
    DEVICE_PLUGINS_SETTLE = ("node agents' device plugins re-register after a kubelet "
                             "restart", 30)
    SLICES_REMOVED = ("the kubelet removes a gone plugin's ResourceSlices", 180)
    KUBELET_BACK = ("a restarted kubelet renews its node's lease and the node is Ready", 120)
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
    # Host commands (core/commands.py: each call names one)
    GIT = ("a git command on a checkout", 300)
    GO_MODULES = ("go fetches or lists modules over the module proxy", 600)
    GO_BUILD = ("a Go build of a cluster component", 3600)
    DEBIAN_ROOT = ("mmdebstrap makes a Debian root, or a build runs inside one", 3600)
    APT = ("apt-get installs Debian packages", 1800)
    KUBEVIRT_RENDER = ("KubeVirt's own generator renders its manifests", 300)
    HOST_SETUP = ("an ip, sysctl, mount or nsenter call setting up the hermetic cluster", 60)
    NODE_COMMAND = ("a command on a node", 300)
    IMAGE_IMPORT = ("a node's containerd imports an image archive", 900)
    CONTAINER_RUNTIME_PROBE = ("docker ps, or kubevirtci's port query, answers", 30)
    KUBEVIRTCI_SCRIPT = ("a kubevirtci script (check, up, down, ssh, kubeconfig)", 3600)
    CLUSTER_SYNC = ("make cluster-sync builds and deploys a KubeVirt tree", 5400)
    IMAGE_PUSH = ("an image is pushed to the cluster's registry", 900)
    HELM = ("helm installs or removes a chart", 600)
    SONOBUOY_COMMAND = ("a sonobuoy command (retrieve, results, delete)", 600)
    SONOBUOY_RUN_WAITED = ("sonobuoy run --wait, which ends at Sonobuoy's own timeout", 3900)
    PIP_INSTALL = ("pip installs the suite's dependencies for its image", 900)
    HOST_STATE = ("ps, ip or iptables-save lists the host's state", 30)
    LOCAL_COMMAND = ("a short local command: a shell script, git, the suite's own CLI", 120)
    # Runs of the suites that scripts start (benchmark, release matrix, worked example)
    RUN_ONE_TEST = ("one VM test from the command, KubeVirt deployed from cached images", 1800)
    RUN_INTERRUPTION_CHECK = ("scripts/interruption_check.py from start to verdict", 2400)
    RUN_TREE_EXAMPLE = ("a KubeVirt tree's build (cold Go cache), redeploy and its test", 4200)
    RUN_RELEASE_SUITES = ("one release's build (cold) and the KubeVirt suites", 5400)
    RUN_CONFORMANCE = ("the conformance suites on a kept cluster", 5400)
    # measured under TCG on 2 cores: set-up about 40 min, a test with a pod 2-3 min
    # measured under TCG on 2 cores: boot to the first snapshot about a minute
    KERNEL_REFERENCE = ("the kernel reference VM: boot, record every step, power off", 1800)
    CGROUP2_LANE = ("the cgroup2 lane's VM: boot, cluster up, its suites, power off", 14400)

    @property
    def seconds(self) -> float:
        return self.value[1] * timeout_scale()


def timeout_scale() -> float:
    """How many times slower than a typical cluster this one is declared to be
    (``KDC_TIMEOUT_SCALE``)."""
    return float(os.environ.get("KDC_TIMEOUT_SCALE", "1"))


class WaitTimeout(AssertionError):
    """A named wait ran out; the message says what was awaited and the last state seen."""


class WaitFailed(AssertionError):
    """A wait ended early: the object reached a state it will not leave by itself."""
