"""The conformance requirements: each with a stable ID, one sentence, where it comes
from, and whether a profile may leave it out. Tests name the requirements they prove
with ``@markers.requirement("PERSIST-001")``; a unit test keeps the two in step, and
``python -m reports catalog`` writes the reference document (docs/requirements.md)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class Source(StrEnum):
    VEP_10 = "VEP-10 (KubeVirt DRA devices)"
    VEP_344 = "VEP-344 (KubeVirt VM-owned DRA claims)"
    KEP_4381 = "KEP-4381 (DRA structured parameters)"
    KEP_5304 = "KEP-5304 (DRA device metadata)"
    KEP_5004 = "KEP-5004 (DRA extended resources)"
    PLUGIN_API = "kubelet DRA plugin API (k8s.io/kubelet dra/v1)"
    CDI = "Container Device Interface"
    DEVICE_PLUGIN = "KubeVirt permittedHostDevices device plugin"
    KUBEVIRT = "KubeVirt VM lifecycle"
    KUBERNETES = "Kubernetes networking and node model"
    PROFILE = "the driver profile's promises"
    DRA_NODE_E2E = "Kubernetes DRA node e2e (test/e2e_node/dra_test.go)"
    DRA_E2E = "Kubernetes DRA e2e (test/e2e/dra/dra.go)"


class Level(StrEnum):
    REQUIRED = "required"  # every profile; a skip fails a --certify run
    OPTIONAL = "optional"  # a profile, a release or a provider may lack it (skip allowed)


@dataclass(frozen=True)
class Requirement:
    id: str
    text: str
    source: Source
    level: Level = Level.REQUIRED


_O = Level.OPTIONAL
REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement("PERSIST-001", "A pre-created claim survives VM stop/start and restart and "
                "stays allocated to the VM.", Source.VEP_10),
    Requirement("PERSIST-002", "A pre-created claim survives the deletion of the VM that "
                "used it.", Source.VEP_10),
    Requirement("PERSIST-003", "A claim from a template is created per launcher pod and "
                "deleted with it.", Source.KEP_4381),
    Requirement("PERSIST-004", "A claim pinned to a device's identity gets the same device "
                "back after a restart (PCI address, serial).", Source.VEP_10),
    Requirement("PERSIST-005", "Data the guest writes to its device is read back after a "
                "restart with the same device.", Source.VEP_10),
    Requirement("PERSIST-006", "Whether an unpinned claim's device changed across a restart "
                "is reported against what the profile promises.", Source.PROFILE, _O),
    Requirement("PERSIST-007", "A stopped VM's device can be taken by another VM.",
                Source.KEP_4381),
    Requirement("PERSIST-008", "A VM pinned to a held device waits, and starts once the "
                "device is released.", Source.KEP_4381),
    Requirement("PERSIST-009", "A VM-owned persistent claim survives stop and keeps its "
                "device.", Source.VEP_344, _O),
    Requirement("MIXED-001", "A device-plugin VM and a DRA VM run side by side on one node.",
                Source.DEVICE_PLUGIN),
    Requirement("MIXED-002", "One VM gets a device-plugin and a DRA host device.",
                Source.VEP_10),
    Requirement("MIXED-003", "A VMI mixing DRA and device-plugin GPUs is rejected.",
                Source.VEP_10),
    Requirement("MIXED-004", "No PCI address is handed to two running VMs.", Source.VEP_10),
    Requirement("MIXED-005", "An exhausted device-plugin pool does not block DRA VMs.",
                Source.DEVICE_PLUGIN),
    Requirement("MIXED-006", "An exhausted DRA pool does not block device-plugin VMs.",
                Source.DEVICE_PLUGIN),
    Requirement("MIXED-007", "With the DRA gates on, a device-plugin resource that "
                "permittedHostDevices does not list is still refused, while DRA devices "
                "start.", Source.DEVICE_PLUGIN, _O),
    Requirement("MIXED-008", "A VM host device naming an extended resource that a "
                "DeviceClass serves through DRA (KEP-5004) reaches the domain and the guest.",
                Source.KEP_5004, _O),
    Requirement("INFO-001", "The launcher pod carries the VM's claims and its compute "
                "container requests them.", Source.VEP_10),
    Requirement("INFO-002", "KEP-5304 metadata sits at KubeVirt's path and names the "
                "allocated pciBusID.", Source.KEP_5304),
    Requirement("INFO-003", "The launcher's /dev/vfio nodes, and the device nodes the "
                "profile declares, are the node's devices (type and major:minor).",
                Source.CDI),
    Requirement("INFO-004", "A device-plugin VM's launcher gets PCI_RESOURCE_* naming its "
                "device.", Source.DEVICE_PLUGIN),
    Requirement("INFO-005", "The domain XML hostdev source is the allocated pciBusID.",
                Source.VEP_10),
    Requirement("INFO-006", "The guest lists the device, with the allocated serial.",
                Source.VEP_10),
    Requirement("INFO-007", "status.deviceStatus matches the allocation (KubeVirt 1.6/1.7).",
                Source.VEP_10, _O),
    Requirement("SHAPE-001", "VMs sharing one ResourceClaimTemplate each get a claim and a "
                "device of their own, each reaching its guest.", Source.VEP_10),
    Requirement("SHAPE-002", "VMs each with a pre-created claim each get their own device, "
                "reaching its guest.", Source.VEP_10),
    Requirement("SHAPE-003", "A CEL selector on a driver attribute or on the standard "
                "pciBusID gives the VM the selected device.", Source.KEP_4381),
    Requirement("SHAPE-004", "matchAttribute across two requests of one claim gives one VM "
                "two matching devices.", Source.KEP_4381, _O),
    Requirement("SHAPE-005", "Each request of one claim reaches the VM as a device of its "
                "own; none is dropped.", Source.VEP_10, _O),
    Requirement("SHAPE-006", "Two claims in one VM each reach the VM.", Source.VEP_10, _O),
    Requirement("SHAPE-007", "A firstAvailable request reaches the VM, its metadata entry "
                "named <request>/<subrequest> as the KEP-5304 API says.", Source.KEP_5304, _O),
    Requirement("SHAPE-008", "A request allocated two devices and named by one VMI device "
                "leaves the VMI unsynchronized with KubeVirt's reason, and leaks nothing.",
                Source.VEP_10, _O),
    Requirement("SHAPE-009", "One claim's requests reach one VM through gpus and "
                "hostDevices, each by its own path.", Source.VEP_10, _O),
    Requirement("SHAPE-010", "Two requests aligned on resource.kubernetes.io/numaNode by "
                "matchAttribute give one VM two devices of one NUMA node.", Source.KEP_4381, _O),
    Requirement("ADMIT-001", "Each VEP-10 rule violation is rejected naming the field.",
                Source.VEP_10),
    Requirement("ADMIT-002", "A claim on a missing DeviceClass leaves the VMI pending with "
                "the reason.", Source.KEP_4381),
    Requirement("ADMIT-003", "An unsatisfiable selector leaves the VMI pending with the "
                "reason.", Source.KEP_4381),
    Requirement("ADMIT-004", "Deleting a claim in use does not take the device from a "
                "running VM.", Source.KEP_4381),
    Requirement("ADMIT-005", "DRA host devices are rejected while the HostDevices gate is "
                "off.", Source.VEP_10, _O),
    Requirement("ADMIT-006", "The webhook accepts every valid VM shape with DRA devices.",
                Source.VEP_10),
    Requirement("LIFE-001", "Deleting a VM deallocates its claim; the device is reusable.",
                Source.KEP_4381),
    Requirement("LIFE-002", "Fast stop/start cycles leak no claim or reservation.",
                Source.KEP_4381),
    Requirement("LIFE-003", "A VMI with a DRA device reports LiveMigratable=False with "
                "KubeVirt's reason, and a migration request is refused naming it.",
                Source.KUBEVIRT),
    Requirement("POD-001", "The scheduler allocates a claim from the driver's slices.",
                Source.KEP_4381),
    Requirement("POD-002", "A template claim is owned by its pod and deleted with it.",
                Source.KEP_4381),
    Requirement("POD-003", "A pre-created claim outlives its pod and is deallocated when "
                "unreserved.", Source.KEP_4381),
    Requirement("POD-004", "A claim pinned by CEL gets the same device back.", Source.KEP_4381),
    Requirement("POD-005", "The env, device nodes and KEP-5304 metadata the profile "
                "declares reach the container and name the allocated device; each device "
                "node is the node's (type and major:minor).", Source.CDI, _O),
    Requirement("POD-006", "A prepared device is bound to vfio-pci and given back after the "
                "pod.", Source.PROFILE, _O),
    Requirement("POD-007", "A container given a function sees it in sysfs with its IOMMU "
                "group.", Source.PROFILE, _O),
    Requirement("SANITY-001", "A driver whose plugin runs publishes its devices; its "
                "ResourceSlices list each device once, in consistent pools.",
                Source.KEP_4381),
    Requirement("SANITY-002", "Every device carries the attributes the profile requires.",
                Source.PROFILE, _O),
    Requirement("SANITY-003", "The CDI ids prepare returns, if any, resolve in a parsable "
                "spec.", Source.PLUGIN_API, _O),
    Requirement("SANITY-004", "The metadata file decodes with the upstream decoder, is "
                "valid and lists the allocated device.", Source.KEP_5304, _O),
    Requirement("SANITY-005", "Prepare twice gives the same answer.", Source.PLUGIN_API),
    Requirement("SANITY-006", "Unprepare twice, and of an unknown claim, succeeds.",
                Source.PLUGIN_API),
    Requirement("SANITY-007", "A plugin restart keeps prepared claims.", Source.PLUGIN_API),
    Requirement("SANITY-008", "No device is prepared for two claims under concurrent "
                "requests.", Source.PROFILE, _O),
    Requirement("SANITY-009", "The KubeVirt releases that read KEP-5304 metadata can read "
                "the driver's file (it holds a valid object of a version they decode).",
                Source.KEP_5304, _O),
    Requirement("SANITY-010", "A device allocated for a firstAvailable subrequest is "
                "answered for the base request, and its metadata entry is named "
                "<request>/<subrequest> in a file under the base request's folder.",
                Source.KEP_5304, _O),
    Requirement("SANITY-011", "Prepare of an unallocated claim, or of a claim whose UID does "
                "not match, is an error and prepares nothing.", Source.PLUGIN_API),
    Requirement("SANITY-012", "A claim with results only for another driver gets no devices "
                "and prepares nothing.", Source.PLUGIN_API),
    Requirement("SANITY-013", "A claim allocated to another node's pool is refused.",
                Source.PROFILE, _O),
    Requirement("SANITY-014", "Several claims in one call are answered one by one; a refused "
                "claim among them prepares nothing.", Source.PLUGIN_API),
    Requirement("SANITY-015", "The CDI edits of a prepared device carry the env the "
                "profile declares with the allocated device's values, and device nodes whose "
                "host paths are the node's devices at the declared paths.", Source.CDI, _O),
    Requirement("SANITY-016", "Every attribute the KEP-5304 metadata gives a prepared device "
                "has the value the device's ResourceSlice gives it, where both carry it "
                "(resource.kubernetes.io/pciBusID above all: KubeVirt passes through the "
                "function the metadata names).", Source.KEP_5304, _O),
    Requirement("SANITY-017", "A claim asking for admin access in a namespace labelled for "
                "it is prepared for a device another claim holds and its pod runs, while the "
                "holder keeps the device and its pod runs on (\"DaemonSet with admin "
                "access\"; where the profile promises adminAccess).", Source.DRA_E2E, _O),
    Requirement("CLUSTER-001", "A pod reaches the API server through the kubernetes "
                "Service.", Source.KUBERNETES),
    Requirement("CLUSTER-002", "A ClusterIP Service routes to a pod on another node.",
                Source.KUBERNETES),
    Requirement("CLUSTER-003", "A host-PID pod sees only its own node's processes.",
                Source.KUBERNETES, _O),
    Requirement("VM-001", "A VM boots and answers on its console.", Source.KUBEVIRT),
    Requirement("VM-002", "A restart reboots the guest.", Source.KUBEVIRT),
    Requirement("VM-003", "Stop and start bring the VM back.", Source.KUBEVIRT),
    Requirement("VM-004", "Deleting a VM leaves nothing behind.", Source.KUBEVIRT),
    Requirement("DISRUPT-001", "A DRA VM runs on with its device through a restart of its "
                "node's kubelet; a stop/start afterwards gets the pinned device back and the "
                "device is given back when the VM goes.", Source.KUBERNETES, _O),
    Requirement("DISRUPT-002", "DRA VMs run on through a rolling restart of the driver's "
                "DaemonSet; stop/start afterwards gets the pinned device back, and unprepare "
                "gives every device back.", Source.PLUGIN_API, _O),
    Requirement("DISRUPT-003", "A VM whose launcher pod is lost comes back (runStrategy "
                "Always) with the same pre-created claim and the same pinned device.",
                Source.KUBEVIRT, _O),
    Requirement("DISRUPT-005", "A NoSchedule device taint (KEP-5055) keeps a new VM that pins "
                "the device pending with the scheduler's reason; once the rule is gone the "
                "VM runs with the device.", Source.KUBERNETES, _O),
    Requirement("DISRUPT-006", "A NoExecute device taint on a running VM's device evicts its "
                "launcher; the VM's next VMI stays pending with the reason, and runs with the "
                "device once the rule is gone.", Source.KUBERNETES, _O),
    Requirement("DISRUPT-007", "A running DRA VM's device taken off the bus shows Unhealthy in "
                "the launcher pod's allocatedResourcesStatus (KEP-4680), the VM's fate is "
                "reported, and a bus rescan gives the device back (where the profile "
                "promises healthReporting).", Source.KUBERNETES, _O),
    Requirement("PLUGIN-001", "After a kubelet restart the plugin is registered again: it "
                "publishes the node's devices again (the kubelet deletes the node's slices at "
                "startup), a claim prepared before gets the same answer, and a new pod's "
                "claim is prepared (\"must register after Kubelet restart\").",
                Source.DRA_NODE_E2E, _O),
    Requirement("PLUGIN-002", "A rolling update of the driver's DaemonSet keeps its "
                "slices, serves claims prepared before it, and a pod created during it runs "
                "(\"rolling update\").", Source.DRA_E2E, _O),
    Requirement("PLUGIN-003", "A driver removed (its DaemonSet deleted) takes its "
                "ResourceSlices with it once the kubelet's grace is over; put back, it "
                "publishes them again (\"must be removed after plugin unregistration\").",
                Source.DRA_NODE_E2E, _O),
    Requirement("PLUGIN-004", "A prepare refused while the device is prepared for another "
                "claim succeeds once that claim is unprepared, leaving nothing of the failed "
                "try (\"must run pod if NodePrepareResources fails and then succeeds\"; "
                "where the profile promises exclusivePrepare).", Source.DRA_NODE_E2E, _O),
    Requirement("PLUGIN-005", "A pod's device health follows the device and the plugin: "
                "Healthy, Unhealthy while the device is off the bus, Healthy after a rescan, "
                "Unknown while the plugin is gone (\"should reflect device health changes in "
                "the Pod's status\", \"should update health to Unknown when plugin stops\"; "
                "where the profile promises healthReporting).", Source.DRA_NODE_E2E, _O),
    Requirement("DISRUPT-004", "Evicting a DRA VM's launcher, as a drain does, acts as its "
                "eviction strategy says: refused naming the reason under LiveMigrate (a VM "
                "with a host device cannot migrate), the VM stopped under None and started "
                "again with its pinned device.", Source.KUBEVIRT, _O),
)
BY_ID: dict[str, Requirement] = {r.id: r for r in REQUIREMENTS}


def document(tests: dict[str, list[str]]) -> str:
    """The reference document: every requirement with the tests that prove it."""
    lines = ["# Conformance requirements", "",
             "Generated by `python -m reports catalog` from `reports/catalog.py`; do not edit.",
             "A required requirement may not skip under `--certify`.", "",
             "| ID | requirement | source | level | tests |", "| --- | --- | --- | --- | --- |"]
    for r in REQUIREMENTS:
        proven_by = "<br>".join(f"`{t}`" for t in sorted(tests.get(r.id, [])))
        lines.append(f"| {r.id} | {r.text} | {r.source.value} | {r.level.value} | {proven_by} |")
    return "\n".join(lines) + "\n"


def _suite_tests(suites: Path) -> dict[str, list[str]]:
    """Every conformance test (``file::test``) -> the requirement IDs it names, read from
    the suites' source, so that no cluster and no collection is needed."""
    tests: dict[str, list[str]] = {}
    for path in sorted(suites.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            ids = tests.setdefault(f"{path.name}::{node.name}", [])
            for decorator in node.decorator_list:
                if (isinstance(decorator, ast.Call)
                        and isinstance(decorator.func, ast.Attribute)
                        and decorator.func.attr == "requirement"):
                    for arg in decorator.args:
                        assert isinstance(arg, ast.Constant), f"{path}:{node.name}"
                        ids.append(str(arg.value))
    return tests


def _by_requirement(tests: dict[str, list[str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for test, ids in tests.items():
        for rid in ids:
            found.setdefault(rid, []).append(test)
    return found


def marked_tests(suites: Path) -> dict[str, list[str]]:
    """Requirement ID -> the tests that name it (``file::test``)."""
    return _by_requirement(_suite_tests(suites))


def untested_and_unknown(suites: Path) -> tuple[list[str], list[str], list[str]]:
    """Requirements no test proves, IDs tests name that the catalog lacks, and tests that
    name no requirement."""
    tests = _suite_tests(suites)
    marked = _by_requirement(tests)
    untested = [r.id for r in REQUIREMENTS if r.id not in marked]
    unknown = sorted(set(marked) - set(BY_ID))
    unmarked = [test for test, ids in tests.items() if not ids]
    return untested, unknown, unmarked
