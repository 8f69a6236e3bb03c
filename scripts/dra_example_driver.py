"""Test-only install recipe: a DRA driver that nobody here wrote, on the hermetic cluster.

kubernetes-sigs/dra-example-driver is built from its upstream Go module at a pinned
release and installed the way its README installs it: Helm, its own chart from that
module, default values. The one difference from a cluster with a registry is that its
image is imported into the nodes (``load-image``) instead of pulled. The suite then runs
against it with ``profiles/dra-example-gpu.yaml``, as a vendor runs it against theirs:

    python scripts/dra_example_driver.py install     # cluster up (or reused), image, chart
    pytest suites -m driver_sanity --profile dra-example-gpu
    python scripts/dra_example_driver.py uninstall
    python scripts/dra_example_driver.py render      # the manifests the chart renders
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.commands import CommandFailed, Runner, check  # noqa: E402
from core.errors import SuiteUsageError  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from core.timeouts import Timeout  # noqa: E402
from kubevirtci.installers import wait_until_slices_published  # noqa: E402
from kubevirtci.local import components, images  # noqa: E402
from kubevirtci.local.cluster import LocalCluster  # noqa: E402

DRIVER = components.DRA_EXAMPLE_DRIVER
MODULE = "sigs.k8s.io/dra-example-driver"
CHART = "deployments/helm/dra-example-driver"
# The chart's default image (repository and appVersion), so no value is overridden.
IMAGE = f"registry.k8s.io/dra-example-driver/dra-example-driver:{DRIVER.version}"
RELEASE = NAMESPACE = "dra-example-driver"  # as the driver's README installs it
DRIVER_NAME = "gpu.example.com"  # the chart's default device profile, "gpu"


log = logging.getLogger("kdc.example-driver")


def helm(cluster: LocalCluster, *args: str, echo: bool = True) -> str:
    helm_home = cluster.layout.root / "helm"
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.layout.admin_kubeconfig),
        "HELM_CACHE_HOME": str(helm_home / "cache"),
        "HELM_CONFIG_HOME": str(helm_home / "config"),
        "HELM_DATA_HOME": str(helm_home / "data"),
    }
    program = components.build(components.HELM) / "helm"
    result = Runner(echo=echo).run([str(program), *args], Timeout.HELM, env=env, label="helm")
    return check(result, "see Helm's message above").stdout


def chart() -> Path:
    return components.module_source(DRIVER, f"{MODULE}@{DRIVER.version}") / CHART


def install(cluster: LocalCluster) -> None:
    cluster.up()
    archive = cluster.image_archive(
        f"dra-example-driver-{DRIVER.version}",
        lambda: images.dra_example_driver_image(IMAGE, components.build(DRIVER)))
    log.info(f"importing {IMAGE} into the nodes")
    cluster.load_image_archive(archive)
    log.info(f"helm upgrade --install {RELEASE} ({MODULE} {DRIVER.version} chart)")
    helm(cluster, "upgrade", "--install", RELEASE, str(chart()), "--namespace", NAMESPACE,
         "--create-namespace", "--wait", "--timeout", f"{Timeout.DRIVER_READY.seconds:.0f}s")
    log.info(f"waiting for ResourceSlices of {DRIVER_NAME}")
    wait_until_slices_published(cluster.kube(), DRIVER_NAME)
    log.info("installed")


def uninstall(cluster: LocalCluster) -> None:
    if not cluster.running():
        log.info("the hermetic cluster is not running: nothing to uninstall")
        return
    releases = helm(cluster, "list", "--namespace", NAMESPACE, "--short", echo=False)
    if RELEASE in releases.split():
        helm(cluster, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
    cluster.kube().delete("Namespace", NAMESPACE)
    log.info("uninstalled")


def render(cluster: LocalCluster) -> None:
    print(helm(cluster, "template", RELEASE, str(chart()), "--namespace", NAMESPACE,
               "--kube-version", components.KUBERNETES_VERSION, echo=False))


def main(argv: list[str] | None = None) -> int:
    log_to_stderr()
    top = argparse.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("command", choices=("install", "uninstall", "render"))
    args = top.parse_args(argv)
    action = {"install": install, "uninstall": uninstall, "render": render}[args.command]
    try:
        action(LocalCluster())
    except (SuiteUsageError, CommandFailed) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
