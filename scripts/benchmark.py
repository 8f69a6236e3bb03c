"""Benchmarks of the numbers we hold ourselves to. Prints ratios and writes JSON under
the run output folder; never a timed assertion.

    python scripts/benchmark.py [--runs N] [--skip-parallel] [--skip-conformance]
                                [--skip-kubevirt-switches]
    python scripts/benchmark.py --full-runs 2 0 2 3


Measures: a first VM test's result from warm caches, the cluster down (target <= 120 s)
and the same test on the kept cluster (<= 30 s), each from the command; hermetic cluster
ready from cached binaries; KubeVirt's build (cold or cached), its control plane ready
and KubeVirt Available from cached images (<= 90 s); a plain VM to a console answer
(<= 10 s) and a stop/start cycle; a DRA VM (the reference driver's NVMe through the
EMULATED VFIO hop) to Running and to a console answer; cluster RSS; the full hermetic
conformance run (<= 20 min), its -n 2 speed-up (>= 1.3x) and -n 3's; per-test time;
flakes over N consecutive runs (0); a KubeVirt release switch on the kept cluster with
its build cached (<= 5 min); a KubeVirt tree's one-line edit to its targeted test's
result (the worked example, <= 10 min); SIGTERM mid-run to exit with nothing left behind;
and what teardown leaves behind (nothing)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.commands import QUIET, Runner  # noqa: E402
from core.kube import Kube, load_api_client  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from core.profile import load as load_profile  # noqa: E402
from core.timeouts import Timeout  # noqa: E402
from core.waits import has_condition, wait_for  # noqa: E402
from fixtures import vms  # noqa: E402
from fixtures.builders.vmi import with_claim_reference  # noqa: E402
from fixtures.claims import REQUEST, plain_claim  # noqa: E402
from fixtures.guest import SerialConsoleGuestAccess  # noqa: E402
from fixtures.options import DEFAULT_KUBEVIRT_VERSION  # noqa: E402
from kubevirtci.installers import DriverInstaller  # noqa: E402
from kubevirtci.kubevirt_code import release_code  # noqa: E402
from kubevirtci.kubevirt_install import CR_NAME  # noqa: E402
from kubevirtci.kubevirt_source import BuiltSource  # noqa: E402
from kubevirtci.local import components  # noqa: E402
from kubevirtci.local import kubevirt as local_kubevirt  # noqa: E402
from kubevirtci.local.cluster import LocalCluster  # noqa: E402
from kubevirtci.local.processes import read_proc  # noqa: E402
from kubevirtci.local.provider import LocalProvider  # noqa: E402

OUT = ROOT / "_output" / "benchmarks"
SWITCH_RELEASE = "v1.8.4"  # the newest served release before the default
ONE_VM_TEST = "test_a_vm_boots_and_answers_on_its_console"


def one_test_seconds() -> float:
    """Seconds from the command to the result of one VM test (the default provider, the
    cluster kept): what a developer waits for after an edit."""
    argv = [sys.executable, "-m", "pytest", "suites", "-q", "-k", ONE_VM_TEST,
            "--keep-cluster"]
    start = time.monotonic()
    QUIET.run(argv, Timeout.RUN_ONE_TEST, cwd=ROOT)
    return round(time.monotonic() - start, 1)


def interruption() -> dict[str, object]:
    """scripts/interruption_check.py: SIGTERM once a run's VM exists; its exit and what
    it left behind."""
    status = Runner().run([sys.executable, str(ROOT / "scripts" / "interruption_check.py")],
                          Timeout.RUN_INTERRUPTION_CHECK, cwd=ROOT).returncode
    timings = json.loads((ROOT / "_output" / "interruption" / "timings.json").read_text())
    return {"sigterm_to_exit_seconds": timings["signal_to_exit_seconds"],
            "sigterm_left_behind": timings["left"], "interruption_check_exit": status}


def cluster_rss_bytes(cluster: LocalCluster) -> int:
    total = 0
    for name in cluster.supervisor.names():
        pid = cluster.supervisor.pid(name)
        if not pid:
            continue
        for line in (read_proc(pid, "status") or "").splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) * 1024
    return total


def kubevirt_ready(kube: Kube, provider: LocalProvider, source: BuiltSource
                   ) -> dict[str, float]:
    """Seconds from deploying a built KubeVirt (images cached, then imported) to
    virt-operator, virt-api and virt-controller available, and to KubeVirt Available
    (virt-handler ready on every node)."""
    start = time.monotonic()
    source.deploy(kube, provider, await_node_agents=False)
    control_plane = time.monotonic() - start
    wait_for(kube, "KubeVirt", CR_NAME, local_kubevirt.NAMESPACE,
             lambda o: has_condition(o, "Available"), Timeout.KUBEVIRT_AVAILABLE,
             "KubeVirt Available")
    return {"kubevirt_control_plane_ready_seconds": round(control_plane, 1),
            "kubevirt_available_seconds": round(time.monotonic() - start, 1)}


def release_switch(kube: Kube, provider: LocalProvider, release: str) -> dict[str, object]:
    """Seconds to replace the installed KubeVirt with ``release`` on the kept cluster
    until KubeVirt is Available (its build cached first, untimed: the number is the
    switch, not a cold build), and back to the default release."""
    timings: dict[str, object] = {"release_switch_to": release}
    for tag, version in (("release_switch_seconds", release),
                         ("release_switch_back_seconds", DEFAULT_KUBEVIRT_VERSION)):
        source = BuiltSource(release_code(version))
        source.prepare(provider)
        start = time.monotonic()
        source.deploy(kube, provider, await_node_agents=True)
        timings[tag] = round(time.monotonic() - start, 1)
    return timings


def edit_to_result() -> dict[str, object]:
    """The worked example (a one-line change to a KubeVirt tree, its targeted test run on
    the kept cluster): its own measure of the seconds from the edit to the result."""
    argv = [sys.executable, str(ROOT / "scripts" / "worked_example.py")]
    status = Runner().run(argv, Timeout.RUN_TREE_EXAMPLE, cwd=ROOT).returncode
    timings = json.loads((ROOT / "_output" / "worked-example" / "timings.json").read_text())
    return {"edit_to_result_seconds": timings["edit_to_result_seconds"],
            "worked_example_exit": status}


def vm_timings(kube: Kube, provider: LocalProvider) -> dict[str, float]:
    """VMs of the local guest: a plain VM's seconds from create to a command answered on
    its console and of a stop/start cycle back to one; then, with the reference driver
    installed, a DRA VM's seconds from create to Running and to a console answer."""
    namespace = f"kdc-benchmark-{kube.run_id}"
    guest = provider.guest()
    profile = dataclasses.replace(load_profile("reference-nvme"), guest=guest)
    assert guest.kernel_boot is not None
    provider.load_images([guest.kernel_boot.image])
    console = SerialConsoleGuestAccess(kube.api_client, guest.user, guest.password)

    def create(obj: dict[str, object]) -> None:
        kube.create({**obj, "metadata": {**obj["metadata"], "namespace": namespace}})

    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        start = time.monotonic()
        create(vms.guest_vm("vm", profile))
        vms.running(kube, "vm", namespace)
        console.run("vm", namespace, "true")
        boot = time.monotonic() - start
        start = time.monotonic()
        vms.stop(kube, "vm", namespace)
        vms.start(kube, "vm", namespace)
        vms.running(kube, "vm", namespace)
        console.run("vm", namespace, "true")
        stop_start = time.monotonic() - start
        provider.load_images(list(profile.images))
        DriverInstaller(kube, profile, provider.adapt_manifest).install()
        create(plain_claim("nvme", profile))
        start = time.monotonic()
        create(vms.guest_vm("dra-vm", profile, with_claim_reference("nvme", "nvme"),
                            vms.dra_device(profile, "nvme", "nvme", REQUEST)))
        vms.running(kube, "dra-vm", namespace)
        dra_running = time.monotonic() - start
        console.run("dra-vm", namespace, "true")
        return {"vm_console_seconds": round(boot, 1),
                "vm_stop_start_seconds": round(stop_start, 1),
                "dra_vm_running_seconds": round(dra_running, 1),
                "dra_vm_console_seconds": round(time.monotonic() - start, 1)}
    finally:
        kube.delete("Namespace", namespace)


def host_state() -> dict[str, list[str]]:
    """What a cluster could leave on the host: compared before start-up and after down."""
    def lines(argv: list[str]) -> list[str]:
        out = QUIET.run(argv, Timeout.HOST_STATE).stdout
        return sorted(line for line in out.splitlines() if not line.startswith("#"))

    mounts = Path("/proc/self/mounts").read_text().splitlines()
    return {
        "processes": sorted(p for p in lines(["ps", "-eo", "args"])
                            if "kdc-hermetic" in p or "node_init.py" in p
                            or "port_forward.py" in p),
        "mounts": sorted(m for m in mounts if "kdc" in m or "/run/netns" in m),
        "network namespaces": lines(["ip", "netns", "list"]),
        "interfaces": lines(["ip", "-o", "link", "show"]),
        "routes": lines(["ip", "route", "show", "table", "all"]),
        "iptables rules": lines(["iptables-save"]),
        # v1: kdc in each hierarchy; v2: the nodes' slice
        "cgroups": sorted(str(p) for pattern in ("*/kdc", "kdc.slice")
                          for p in Path("/sys/fs/cgroup").glob(pattern)),
    }


def leftovers(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, list[str]]:
    return {kind: [x for x in after[kind] if x not in before[kind]] for kind in after
            if any(x not in before[kind] for x in after[kind])}


def conformance_run(tag: str, workers: int) -> dict[str, object]:
    junit = OUT / f"junit-{tag}.xml"
    argv = [sys.executable, "-m", "pytest", "suites", "-q", "-p", "no:randomly",
            "--keep-cluster", f"--junitxml={junit}", "-n", str(workers)]
    start = time.monotonic()
    result = QUIET.run(argv, Timeout.RUN_CONFORMANCE, cwd=ROOT)
    elapsed = time.monotonic() - start
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    cases = suite.findall("testcase")
    passed = [c for c in cases if not list(c)]
    return {
        "workers": workers, "seconds": round(elapsed, 1), "exit": result.returncode,
        "passed": len(passed), "failed": int(suite.get("failures", 0)) + int(
            suite.get("errors", 0)),
        "skipped": int(suite.get("skipped", 0)),
        "test_seconds": [float(c.get("time", 0)) for c in passed],
    }


def full_runs(workers: list[int]) -> int:
    """Full runs on one kept cluster, with each worker count in turn, after one test has
    brought the cluster, KubeVirt and the driver up (so that no run pays for set-up): the
    speed-up and flakes of ``-n`` measured like with like. The JSON is written after every
    run, so a long series stopped part-way keeps what it measured."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"full-runs-{time.strftime('%Y%m%d-%H%M%S')}.json"
    results: dict[str, object] = {"set_up_seconds": one_test_seconds(), "runs": []}
    runs: list[dict[str, object]] = results["runs"]  # type: ignore[assignment]
    for index, count in enumerate(workers):
        runs.append(conformance_run(f"full-{index}-n{count}", count))
        serial = [r["seconds"] for r in runs if r["workers"] == 0]
        if serial:
            results["speedups"] = {
                f"-n {r['workers']}": round(statistics.median(serial) / r["seconds"], 2)
                for r in runs if r["workers"]}
        results["flaky_runs"] = sum(1 for r in runs if r["failed"])
        path.write_text(json.dumps(results, indent=1))
        run = runs[-1]
        print(f"-n {count}: {run['seconds']} s, {run['passed']} passed, {run['failed']} "
              f"failed or errors, {run['skipped']} skipped", flush=True)
    print(f"speed-up against the median -n 0 run: {results.get('speedups', 'no -n 0 run')}; "
          f"flaky runs: {results['flaky_runs']} of {len(runs)}; written: {path}")
    return 0


def main() -> int:
    log_to_stderr()
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1, help="consecutive runs for flakes")
    parser.add_argument("--skip-parallel", action="store_true")
    parser.add_argument("--skip-conformance", action="store_true",
                        help="start-up, KubeVirt and VM numbers only (no full runs)")
    parser.add_argument("--skip-kubevirt-switches", action="store_true",
                        help=f"no release switch (to {SWITCH_RELEASE} and back) and no "
                             "edit-to-result of a KubeVirt tree")
    parser.add_argument("--full-runs", type=int, nargs="+", metavar="WORKERS",
                        help="only full runs on the kept cluster, one per worker count "
                             "given (0 for no xdist), with the speed-ups against -n 0")
    args = parser.parse_args()
    if args.full_runs:
        return full_runs(args.full_runs)
    OUT.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster()
    cluster.down(force=True)
    before = host_state()
    cold = not all(c.cached() for c in components.UPSTREAM)
    start = time.monotonic()
    cluster.build()  # warm the cache, so the next number is "from cached binaries"
    build_seconds = round(time.monotonic() - start, 1)
    first_test = one_test_seconds()  # the cluster down, every build cached
    kept_test = one_test_seconds()
    cluster.down()
    start = time.monotonic()
    cluster.up()
    ready = round(time.monotonic() - start, 1)
    kube = Kube(load_api_client(cluster.layout.admin_kubeconfig, None), "benchmark")
    provider = LocalProvider(OUT, cluster=cluster)
    provider.prepare_device_plugin_devices(cluster.config().nodes)
    source = BuiltSource(release_code(DEFAULT_KUBEVIRT_VERSION))
    kubevirt_cold = not components.kubevirt_component(source.build_module()).cached()
    start = time.monotonic()
    local_kubevirt.build(source.build_module(), provider.emulated_vfio_front())
    results: dict[str, object] = {
        "build_seconds": build_seconds,
        "build_was_cold": cold,
        "first_vm_test_from_warm_caches_seconds": first_test,
        "vm_test_on_kept_cluster_seconds": kept_test,
        "kubevirt_build_seconds": round(time.monotonic() - start, 1),
        "kubevirt_build_was_cold": kubevirt_cold,
        "cluster_ready_seconds": ready,
        **kubevirt_ready(kube, provider, source),
        **vm_timings(kube, provider),
        "cluster_rss_bytes": cluster_rss_bytes(cluster),
    }
    runs = [] if args.skip_conformance else [
        conformance_run(f"serial-{i}", 0) for i in range(args.runs)]
    results["serial_runs"] = runs
    results["flaky_runs"] = sum(1 for r in runs if r["failed"])
    durations = [t for r in runs for t in r["test_seconds"]]
    results["median_test_seconds"] = round(statistics.median(durations), 2) if durations else None
    if runs and not args.skip_parallel:
        # Compare like with like: the driver is installed by the first run only, so the
        # parallel runs (last) are set against the median serial run, not the first.
        serial = statistics.median(r["seconds"] for r in runs)
        for workers in (2, 3):
            parallel = conformance_run(f"parallel-{workers}", workers)
            results[f"parallel_run_{workers}"] = parallel
            results[f"parallel_speedup_{workers}"] = round(serial / parallel["seconds"], 2)
    results.update(interruption())
    if not args.skip_kubevirt_switches:
        results.update(release_switch(kube, provider, SWITCH_RELEASE))
        results.update(edit_to_result())
    cluster.down()
    results["teardown_leftovers"] = leftovers(before, host_state())
    path = OUT / f"benchmark-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=1))
    gib = results["cluster_rss_bytes"] / 2**30
    print(f"first VM test from warm caches, cluster down: {first_test} s (target <= 120); "
          f"on the kept cluster: {kept_test} s (target <= 30)")
    print(f"build: {build_seconds} s ({'cold' if cold else 'from cache'})")
    print(f"cluster ready: {results['cluster_ready_seconds']} s (target <= 30)")
    print(f"KubeVirt {DEFAULT_KUBEVIRT_VERSION} build: {results['kubevirt_build_seconds']} s "
          f"({'cold' if kubevirt_cold else 'from cache'})")
    print(f"KubeVirt control plane ready: {results['kubevirt_control_plane_ready_seconds']} s "
          "(virt-operator, virt-api, virt-controller from cached images)")
    print(f"KubeVirt Available: {results['kubevirt_available_seconds']} s "
          "(virt-handler ready on every node; target <= 90)")
    print(f"plain VM to a console answer: {results['vm_console_seconds']} s (target <= 10); "
          f"stop/start cycle: {results['vm_stop_start_seconds']} s")
    print(f"DRA VM (EMULATED VFIO hop) to Running: {results['dra_vm_running_seconds']} s; "
          f"to a console answer: {results['dra_vm_console_seconds']} s")
    print(f"cluster RSS: {gib:.2f} GiB")
    if runs:
        print(f"full conformance run: {runs[0]['seconds']} s (target <= 1200)")
        print(f"median per-test time: {results['median_test_seconds']} s "
              "(fixture overhead included; target <= 2 s overhead)")
    for workers in (2, 3):
        if f"parallel_speedup_{workers}" in results:
            run = results[f"parallel_run_{workers}"]
            print(f"-n {workers}: {run['seconds']} s, speed-up "
                  f"{results[f'parallel_speedup_{workers}']}x (target for -n 2: >= 1.3)")
    print(f"SIGTERM mid-run to exit: {results['sigterm_to_exit_seconds']} s; left behind: "
          f"{results['sigterm_left_behind'] or 'nothing'}")
    if "release_switch_seconds" in results:
        print(f"release switch to {SWITCH_RELEASE} (build cached): "
              f"{results['release_switch_seconds']} s, back to {DEFAULT_KUBEVIRT_VERSION}: "
              f"{results['release_switch_back_seconds']} s (target <= 300)")
        print(f"KubeVirt tree, one-line edit to the targeted test's result: "
              f"{results['edit_to_result_seconds']} s (target <= 600; worked example exit "
              f"{results['worked_example_exit']})")
    print(f"flaky runs: {results['flaky_runs']} of {len(runs)} (target 0)")
    left = results["teardown_leftovers"]
    print("teardown leftovers: " + ("none" if not left else "; ".join(
        f"{kind}: {', '.join(items)}" for kind, items in left.items())))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
