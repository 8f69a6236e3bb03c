"""The worked example for KubeVirt developers (docs/releases.md, "Your own KubeVirt tree"), run as
a check: a KubeVirt v1.9.0 tree made from the module cache, one line of its DRA code
changed so that it does something wrong, the test that proves that behaviour run
against the tree, and that test must fail saying what went wrong.

    python scripts/worked_example.py            # on the hermetic cluster (kept)

The edit: virt-launcher names a DRA PCI host device with the GPU alias prefix, a
copy-paste slip in pkg/virt-launcher/virtwrap/device/hostdevice/dra/generic_hostdev.go.
The VM still runs; INFO-005 (the domain hostdev of a DRA host device, by KubeVirt's
alias, passes the allocated PCI address) fails naming the alias it could not find.
Prints the seconds from the edit to the test's result, and writes them as JSON."""

from __future__ import annotations

import json
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.commands import Runner  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from core.timeouts import Timeout  # noqa: E402
from scripts.kubevirt_tree import make_tree  # noqa: E402

OUTPUT = ROOT / "_output" / "worked-example"
TREE = OUTPUT / "kubevirt"
EDITED = Path("pkg/virt-launcher/virtwrap/device/hostdevice/dra/generic_hostdev.go")
# The PCI branch's alias (the second of the file's two): DRA host devices get the
# GPU prefix, "dra-gpu-", instead of "dra-hostdevice-".
RIGHT = "Alias:   api.NewUserDefinedAlias(DRAHostDeviceAliasPrefix + hd.Name),"
WRONG = "Alias:   api.NewUserDefinedAlias(AliasPrefix + hd.Name),"
TEST = "test_domain_xml_hostdev_source_matches_allocated_pci_bus_id"
# The test runs once per device list; the edit breaks hostDevices only.
CASE = f"{TEST}[hostDevice]"
EXPECTED = "the domain has no hostdev with alias ua-dra-hostdevice-nvme"


def edit_one_line(tree: Path) -> None:
    path = tree / EDITED
    text = path.read_text()
    if text.count(RIGHT) != 1:
        raise SystemExit(f"error: {EDITED} does not hold the line to change once; the "
                         "example is written for KubeVirt v1.9.0")
    path.write_text(text.replace(RIGHT, WRONG))


def failure_message(junit: Path) -> str | None:
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.get("name") == CASE:
            failure = case.find("failure")
            return None if failure is None else (failure.get("message") or "")
    raise SystemExit(f"error: {junit} has no result for {CASE}")


def main() -> int:
    log_to_stderr()
    shutil.rmtree(OUTPUT, ignore_errors=True)
    OUTPUT.mkdir(parents=True)
    make_tree(TREE, "v1.9.0")
    edited = time.monotonic()
    edit_one_line(TREE)
    junit = OUTPUT / "junit.xml"
    argv = [sys.executable, "-m", "pytest", "suites", "-k", f"{TEST} and hostDevice",
            "--kubevirt-source", str(TREE), "--keep-cluster",
            "--artifacts-dir", str(OUTPUT / "run"), f"--junitxml={junit}", *sys.argv[1:]]
    print(f"== {' '.join(argv[2:])}", flush=True)
    status = Runner().run(argv, Timeout.RUN_TREE_EXAMPLE, cwd=ROOT, label="pytest").returncode
    seconds = round(time.monotonic() - edited, 1)
    message = failure_message(junit)
    (OUTPUT / "timings.json").write_text(json.dumps(
        {"edit_to_result_seconds": seconds, "pytest_exit": status}, indent=1))
    print(f"== edit to result: {seconds} s (pytest exit {status})")
    if message is None or EXPECTED not in message:
        print(f"FAILED: {CASE} should have failed with {EXPECTED!r}; it gave: {message!r}",
              file=sys.stderr)
        return 1
    print(f"as expected, {CASE} failed: {message.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
