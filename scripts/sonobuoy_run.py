"""Test-only recipe: the suite as a Sonobuoy plugin on the hermetic cluster, as a vendor
runs it on theirs (docs/profiles.md, Sonobuoy).

Sonobuoy is built from its upstream Go module at a pinned release; its image and the
suite's are imported into the nodes (the hermetic cluster pulls from no registry). The
reference driver is installed from its manifests, as a vendor's driver would already be.
Then ``sonobuoy run`` with the plugin of ``python -m reports sonobuoy-plugin``, ``sonobuoy
retrieve`` and ``sonobuoy results``: the run fails unless the plugin's JUnit passed.

    python scripts/sonobuoy_run.py [--pytest-args "-m driver_sanity"] [--profile NAME]
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.commands import CommandFailed, Runner, check  # noqa: E402
from core.errors import SuiteUsageError  # noqa: E402
from core.log import log_to_stderr  # noqa: E402
from core.profile import load as load_profile  # noqa: E402
from core.timeouts import Timeout  # noqa: E402
from kubevirtci.installers import DriverInstaller  # noqa: E402
from kubevirtci.local import components, images  # noqa: E402
from kubevirtci.local.cluster import LocalCluster  # noqa: E402
from kubevirtci.local.known_images import known_image  # noqa: E402
from kubevirtci.provider import SANITY_CLIENT_IMAGE, SUITE_IMAGE  # noqa: E402
from reports import sonobuoy  # noqa: E402

SONOBUOY = components.SONOBUOY
SONOBUOY_IMAGE = f"localhost/kdc/sonobuoy:{SONOBUOY.version}"
OUTPUT = ROOT / "_output" / "sonobuoy"


log = logging.getLogger("kdc.sonobuoy")


def sonobuoy_cli(cluster: LocalCluster | None, *args: str,
                 timeout: Timeout = Timeout.SONOBUOY_COMMAND) -> str:
    """A Sonobuoy command, against the cluster (None: offline, as ``results`` is)."""
    program = components.build(SONOBUOY) / "sonobuoy"
    argv = [str(program), *args]
    if cluster is not None:
        argv += ["--kubeconfig", str(cluster.layout.admin_kubeconfig)]
    return check(Runner().run(argv, timeout, label="sonobuoy"),
                 "see Sonobuoy's message above").stdout


def load_images(cluster: LocalCluster, profile_images: tuple[str, ...]) -> None:
    archive = cluster.image_archive(f"sonobuoy-{SONOBUOY.version}", lambda: images.ImageSpec(
        SONOBUOY_IMAGE, files={"/sonobuoy": components.build(SONOBUOY) / "sonobuoy"},
        entrypoint=["/sonobuoy"]))
    cluster.load_image_archive(archive)
    for image in (SUITE_IMAGE, SANITY_CLIENT_IMAGE, *profile_images):
        log.info(f"building and importing {image}")
        known_image(image)  # one clear error for an image this project does not build
        cluster.load_known_image(image)


def plugin_status(results: str) -> str:
    """The plugin's status line of ``sonobuoy results`` (passed, failed, ...)."""
    found = re.search(r"^Status:\s*(\S+)", results, re.MULTILINE)
    return found.group(1) if found else "unknown"


def run(profile_name: str, pytest_args: str) -> int:
    profile = load_profile(profile_name)
    cluster = LocalCluster()
    cluster.up()
    load_images(cluster, profile.images)
    log.info(DriverInstaller(cluster.kube(), profile).install())
    OUTPUT.mkdir(parents=True, exist_ok=True)
    plugin = OUTPUT / "plugin.yaml"
    plugin.write_text(sonobuoy.plugin_yaml(profile=profile_name, pytest_args=pytest_args))
    log.info(f"sonobuoy run --plugin {plugin}")
    try:
        sonobuoy_cli(cluster, "run", "--plugin", str(plugin), "--sonobuoy-image",
                     SONOBUOY_IMAGE, "--image-pull-policy", "IfNotPresent",
                     # no cluster DNS here, and the preflight check asks for it
                     "--skip-preflight", f"--wait={Timeout.SONOBUOY_RUN.seconds // 60:.0f}",
                     "--timeout", f"{Timeout.SONOBUOY_RUN.seconds:.0f}",
                     timeout=Timeout.SONOBUOY_RUN_WAITED)
        tarball = sonobuoy_cli(cluster, "retrieve", str(OUTPUT)).strip().splitlines()[-1]
        results = sonobuoy_cli(None, "results", tarball, "--plugin", sonobuoy.PLUGIN_NAME)
    finally:
        sonobuoy_cli(cluster, "delete", f"--wait={Timeout.NAMESPACE_DELETED.seconds // 60:.0f}")
    status = plugin_status(results)
    log.info(f"plugin {sonobuoy.PLUGIN_NAME}: {status}; results in {tarball}")
    return 0 if status == "passed" else 1


def main() -> int:
    log_to_stderr()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="reference-nvme")
    parser.add_argument("--pytest-args", default="-m 'driver_sanity or pod_dra'",
                        help="what the plugin runs (the hermetic cluster has no KubeVirt "
                             "unless a run of the local provider deployed it)")
    args = parser.parse_args()
    try:
        return run(args.profile, args.pytest_args)
    except (SuiteUsageError, CommandFailed) as err:
        print(err, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
