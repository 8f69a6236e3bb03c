"""Plain VMs, no devices: what every other suite stands on. A VM boots and answers on its
serial console through virt-api; a restart really reboots the guest (its boot id
changes); stop and start bring it back; deleting it leaves nothing behind."""

from __future__ import annotations

from core import waits
from fixtures import markers, vms

pytestmark = [markers.vm, markers.requires_plain_vms,
              markers.vm_running]

BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


@markers.requirement("VM-001")
def test_a_vm_boots_and_answers_on_its_console(kube, objects, namespace, profile, guest):
    objects.create(vms.guest_vm("vm", profile))
    vm = vms.running(kube, "vm", namespace)
    # The shell computes the answer: an echo of the command line cannot pass for it.
    assert guest.run(vm.name, vm.namespace, "echo kdc-$((40 + 2))").strip() == "kdc-42"


@markers.requirement("VM-002")
def test_a_restart_reboots_the_guest(kube, objects, namespace, profile, guest):
    objects.create(vms.guest_vm("vm", profile))
    vm = vms.running(kube, "vm", namespace)
    before = guest.run(vm.name, vm.namespace, BOOT_ID).strip()
    vms.restart(kube, "vm", namespace)
    vm = vms.running(kube, "vm", namespace)
    after = guest.run(vm.name, vm.namespace, BOOT_ID).strip()
    assert before and after and before != after, (before, after)


@markers.requirement("VM-003")
def test_stop_and_start_bring_the_vm_back(kube, objects, namespace, profile, guest):
    objects.create(vms.guest_vm("vm", profile))
    first = vms.running(kube, "vm", namespace)
    vms.stop(kube, "vm", namespace)
    waits.wait_until_gone(kube, "Pod", first.pod["metadata"]["name"], namespace)
    vms.start(kube, "vm", namespace)
    vm = vms.running(kube, "vm", namespace)
    assert vm.vmi["metadata"]["uid"] != first.vmi["metadata"]["uid"]
    assert guest.run(vm.name, vm.namespace, "echo back").strip() == "back"


@markers.requirement("VM-004")
def test_deleting_a_vm_leaves_nothing_behind(kube, objects, namespace, profile):
    objects.create(vms.guest_vm("vm", profile))
    vm = vms.running(kube, "vm", namespace)
    kube.delete("VirtualMachine", "vm", namespace)
    waits.wait_until_gone(kube, "VirtualMachineInstance", "vm", namespace)
    waits.wait_until_gone(kube, "Pod", vm.pod["metadata"]["name"], namespace)
    left = [p["metadata"]["name"] for p in kube.list("Pod", namespace)]
    assert left == [], f"pods left behind by the deleted VM: {left}"
