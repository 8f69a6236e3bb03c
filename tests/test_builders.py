"""Builders as plain option functions: options applied after the defaults so callers
override them, and every manifest its own. Whether the API server accepts what they
build is judged by the server itself (``selfcheck/test_builders_accepted.py``, a
server-side dry run), which must exercise every builder."""

import ast
from pathlib import Path

from fixtures.builders.virtualmachine import new_vm, with_run_strategy
from fixtures.builders.vmi import (
    HOST_DEVICES,
    new_vmi,
    with_device,
    with_memory,
    with_termination_grace_period,
)

ROOT = Path(__file__).resolve().parent.parent


def test_options_override_the_defaults_and_the_last_option_wins():
    default = new_vmi("vmi")
    small = new_vmi("vmi", with_memory("2Gi"), with_memory("128Mi"),
                    with_termination_grace_period(30))
    assert small["spec"]["domain"]["resources"]["requests"]["memory"] == "128Mi"
    assert small["spec"]["terminationGracePeriodSeconds"] == 30
    assert default["spec"]["terminationGracePeriodSeconds"] != 30
    assert new_vm(default, with_run_strategy("Halted"))["spec"]["runStrategy"] == "Halted"


def test_a_vm_carries_its_vmi_spec_as_the_template():
    vmi = new_vmi("a", with_memory("128Mi"))
    assert new_vm(vmi)["spec"]["template"]["spec"] == vmi["spec"]


def test_builders_are_independent_instances():
    first, second = new_vm(new_vmi("a")), new_vm(new_vmi("b"))
    with_device(HOST_DEVICES, "x", claimName="c", requestName="r")(first["spec"]["template"])
    assert "hostDevices" not in second["spec"]["template"]["spec"]["domain"]["devices"]


def _public_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def test_the_server_dry_run_exercises_every_builder():
    builders = set().union(*(_public_functions(p) for p in
                             (ROOT / "fixtures" / "builders").glob("*.py")
                             if p.name != "__init__.py"))
    check = ast.parse((ROOT / "selfcheck" / "test_builders_accepted.py").read_text())
    used = {node.id for node in ast.walk(check) if isinstance(node, ast.Name)}
    assert builders - used == set(), "builders no server dry run checks"
