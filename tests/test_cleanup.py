from core.kube import RUN_ID_LABEL, labelled
from fixtures.cleanup import ObjectRef, select_for_cleanup, stale_selector


def obj(kind, name, run_id=None, namespace="ns"):
    labels = {RUN_ID_LABEL: run_id} if run_id else {"other": "x"}
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace, "labels": labels}}


OBJECTS = [
    obj("Namespace", "kdc-r1-a", "r1", None),
    obj("ResourceClaim", "c1", "r1"),
    obj("VirtualMachine", "vm1", "r1"),
    obj("DeviceClass", "dc", "r1", None),
    obj("Pod", "p-old", "r0"),
    obj("ResourceClaim", "c-old", "r0"),
    obj("ResourceClaim", "users-claim"),  # never ours: no run label
    obj("Node", "n", "r1", None),  # a kind the suite never deletes
]


def test_this_runs_objects_in_reverse_dependency_order():
    assert select_for_cleanup(OBJECTS, "r1", stale=False) == [
        ObjectRef("VirtualMachine", "vm1", "ns"),
        ObjectRef("ResourceClaim", "c1", "ns"),
        ObjectRef("DeviceClass", "dc", None),
        ObjectRef("Namespace", "kdc-r1-a", None),
    ]


def test_stale_selects_only_other_runs_and_never_unlabelled_objects():
    assert select_for_cleanup(OBJECTS, "r1", stale=True) == [
        ObjectRef("Pod", "p-old", "ns"),
        ObjectRef("ResourceClaim", "c-old", "ns"),
    ]
    assert stale_selector("r1") == f"{RUN_ID_LABEL},{RUN_ID_LABEL}!=r1"


def test_every_created_object_and_vm_pod_template_carry_the_run_label():
    vm = {"kind": "VirtualMachine", "metadata": {"name": "v"},
          "spec": {"template": {"spec": {}}}}
    out = labelled(vm, "r9")
    assert out["metadata"]["labels"][RUN_ID_LABEL] == "r9"
    assert out["spec"]["template"]["metadata"]["labels"][RUN_ID_LABEL] == "r9"
    assert "labels" not in vm["metadata"], "the caller's manifest is not modified"
