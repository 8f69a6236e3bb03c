"""SIGTERM in the middle of a run leaves nothing of it on the cluster: a real pytest
process runs a DRA VM test on the hermetic cluster (kept), gets SIGTERM once the test's
VM exists, as a CI system's cancel sends it, and must end as interrupted with every
object of its run gone and its bundle marked interrupted.

    python scripts/interruption_check.py            # tox -e interruption; in .ci/run

Prints the seconds from the signal to the process's exit and writes them as JSON."""

from __future__ import annotations

import json
import secrets
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes.client.rest import ApiException  # noqa: E402
from urllib3.exceptions import HTTPError  # noqa: E402

from core.commands import start  # noqa: E402
from core.kube import RUN_ID_LABEL, Kube, load_api_client  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from core.retry import is_transient  # noqa: E402
from fixtures.cleanup import objects_of_run  # noqa: E402
from kubevirtci.local.cluster import LocalCluster  # noqa: E402
from reports.bundle import FACTS  # noqa: E402

OUTPUT = ROOT / "_output" / "interruption"
TEST = "test_guest_lists_device_with_allocated_serial and hostDevice"
VM_APPEARS_TIMEOUT = 30 * 60  # seconds: the first run may build and deploy KubeVirt
EXIT_TIMEOUT = 180  # seconds from SIGTERM to the process's exit, cleanup included
NOT_FOUND = 404


def first_vmi(kube: Kube, run_id: str) -> str | None:
    """The run's first VMI; None while there is none, KubeVirt is not yet deployed (its
    kinds are not served) or the cluster is still coming up."""
    try:
        vmis = kube.list("VirtualMachineInstance", label_selector=f"{RUN_ID_LABEL}={run_id}")
    except ApiException as err:
        if err.status == NOT_FOUND or is_transient(err):
            return None
        raise
    except HTTPError:
        return None
    for vmi in vmis:
        return f"{vmi['metadata']['namespace']}/{vmi['metadata']['name']}"
    return None


def main() -> int:
    log_to_stderr()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    run_id = "sigterm" + secrets.token_hex(3)
    argv = [sys.executable, "-m", "pytest", "suites", "-k", TEST, "--keep-cluster",
            "--run-id", run_id, "--artifacts-dir", str(OUTPUT / "run"), *sys.argv[1:]]
    print(f"== {' '.join(argv[2:])}", flush=True)
    run = start(argv, cwd=ROOT)
    deadline = time.monotonic() + VM_APPEARS_TIMEOUT
    kube: Kube | None = None
    vmi = None
    while vmi is None:
        if run.poll() is not None:
            print(f"FAILED: the run ended (exit {run.returncode}) before its VM existed",
                  file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            run.kill()
            print(f"FAILED: no VM of run {run_id} after {VM_APPEARS_TIMEOUT} s", file=sys.stderr)
            return 1
        kubeconfig = LocalCluster().layout.admin_kubeconfig
        if kube is None and kubeconfig.is_file():
            kube = Kube(load_api_client(kubeconfig, None), run_id)
        vmi = first_vmi(kube, run_id) if kube is not None else None
        time.sleep(1)
    print(f"== VMI {vmi} exists: SIGTERM to pytest (pid {run.pid})", flush=True)
    signalled = time.monotonic()
    run.send_signal(signal.SIGTERM)
    status = run.wait(timeout=EXIT_TIMEOUT)
    seconds = round(time.monotonic() - signalled, 1)
    assert kube is not None
    left = [f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}"
            for o in objects_of_run(kube, run_id)]
    facts = json.loads((OUTPUT / "run" / "bundle" / FACTS).read_text())
    (OUTPUT / "timings.json").write_text(json.dumps(
        {"signal_to_exit_seconds": seconds, "pytest_exit": status, "left": left}, indent=1))
    print(f"== SIGTERM to exit: {seconds} s (pytest exit {status}); left on the cluster: "
          f"{left or 'nothing'}; bundle says interrupted: {facts.get('interrupted')}")
    problems = [*(["pytest did not end as interrupted (exit 2)"] if status != 2 else []),
                *([f"left behind: {', '.join(left)}"] if left else []),
                *(["the bundle does not say the run was interrupted by SIGTERM"]
                  if facts.get("interrupted") != "SIGTERM" else [])]
    for problem in problems:
        print(f"FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
