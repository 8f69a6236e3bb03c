"""Sonobuoy plugin mode: the suite as a Sonobuoy plugin (a Job) that runs inside the
cluster against the ``existing`` provider, as its pod's service account.

``python -m reports sonobuoy-plugin`` writes the plugin definition; the suite image
(``localhost/kdc/conformance:dev``, built here) runs ``python3 -m reports.sonobuoy``,
which runs the suites, packs JUnit, HTML and artifacts into one tarball in Sonobuoy's
results folder and names it in the ``done`` file, as Sonobuoy's worker waits for."""

from __future__ import annotations

import logging
import os
import shlex
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from core.commands import Runner
from core.errors import SuiteUsageError
from core.log import log_to_stderr
from core.profile import PROFILES_DIR
from core.profile import load as load_profile
from core.timeouts import Timeout
from kubevirtci.provider import SANITY_CLIENT_IMAGE, SUITE_IMAGE

log = logging.getLogger("kdc.sonobuoy")
PLUGIN_NAME = "kubevirt-dra-conformance"
RESULTS_DIR = "/tmp/sonobuoy/results"  # Sonobuoy's default (SONOBUOY_RESULTS_DIR)
CONFIG_DIR = "/tmp/sonobuoy/config"  # where Sonobuoy mounts the plugin's config-map
# Sonobuoy reads every file of this name in the tarball: a name the bundle's own copy
# (bundle/junit.xml) does not share, so that no test is counted twice.
JUNIT = f"{PLUGIN_NAME}-junit.xml"
TARBALL = f"{PLUGIN_NAME}.tar.gz"
SUITES = Path(__file__).resolve().parent.parent / "suites"
VERDICT_TAIL_LINES = 200  # lines of the run's output the session verdict looks at
OUTPUT_TAIL = 4000  # characters of the run's output kept for a session failure


def suite_argv(results: Path, extra: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", str(SUITES), "--provider", "existing", "--in-cluster",
            f"--junitxml={results / JUNIT}", f"--html={results / 'report.html'}",
            f"--artifacts-dir={results / 'artifacts'}", *extra]


def session_verdict(path: Path, returncode: int, output: str) -> None:
    """Make a run that did not pass say so in its JUnit. Sonobuoy judges the JUnit alone,
    and takes a file without a failed test as passed: a run that wrote none (bad input),
    wrote one with no test (an unreachable API, a cluster refused under --certify, a
    selection of nothing) or failed beyond its tests (a required requirement not passed)
    gets one failed test, ``session``, carrying the tail of the run's output."""
    if returncode == 0:
        return
    try:
        suites = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        suites = ET.Element("testsuites")
    if next(suites.iter("failure"), None) is not None \
            or next(suites.iter("error"), None) is not None:
        return  # the failed tests say it already
    suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
    if suite is None:
        suite = ET.SubElement(suites, "testsuite", name=PLUGIN_NAME)
    case = ET.SubElement(suite, "testcase", classname=PLUGIN_NAME, name="session")
    failure = ET.SubElement(case, "failure", message=f"pytest exited {returncode}: the run "
                                                      "did not pass (see its output)")
    failure.text = output[-OUTPUT_TAIL:]
    suite.set("tests", str(int(suite.get("tests", "0")) + 1))
    suite.set("failures", str(int(suite.get("failures", "0")) + 1))
    ET.ElementTree(suites).write(path, encoding="unicode", xml_declaration=True)


def pack(results: Path) -> Path:
    """Everything the run wrote, in one tarball; its path goes into ``done``."""
    tarball = results / TARBALL
    with tarfile.open(tarball, "w:gz") as tar:
        for entry in sorted(results.iterdir()):
            if entry.name not in (TARBALL, "done"):
                tar.add(entry, arcname=entry.name)
    (results / "done").write_text(str(tarball))
    return tarball


def run(env: Mapping[str, str]) -> int:
    """The plugin's entry point: the suites, then the results handed to Sonobuoy. Its
    exit code is 0 whenever results were handed over: the verdict is in the JUnit."""
    results = Path(env.get("SONOBUOY_RESULTS_DIR", RESULTS_DIR))
    results.mkdir(parents=True, exist_ok=True)
    argv = suite_argv(results, shlex.split(env.get("KDC_PYTEST_ARGS", "")))
    log.info(shlex.join(argv))
    # Echoed live: the container log is the run's console.
    result = Runner().run(argv, Timeout.SONOBUOY_RUN, label="suite")
    tail = (result.stdout + result.stderr).splitlines(keepends=True)[-VERDICT_TAIL_LINES:]
    session_verdict(results / JUNIT, result.returncode, "".join(tail))
    log.info(f"results: {pack(results)}")
    return 0


def plugin_definition(profile: str, image: str = SUITE_IMAGE,
                      sanity_image: str = SANITY_CLIENT_IMAGE, pytest_args: str = "",
                      certify: bool = False) -> dict[str, Any]:
    """The plugin for ``sonobuoy run --plugin``. A profile of the image (profiles/) is
    named; a vendor's profile file travels in the plugin's config-map."""
    config_map: dict[str, str] = {}
    if (PROFILES_DIR / f"{profile}.yaml").is_file():
        profile_ref = profile
    else:
        path = Path(profile)
        loaded = load_profile(profile)  # the same checks as a run, before any cluster work
        if loaded.manifests:
            raise SuiteUsageError(
                f"profile {path} lists install.manifests, which an in-cluster run does not "
                "install (provider 'existing': the driver is already there)",
                "install the driver first and drop install.manifests from the profile")
        # under its own file name: a profile's default name is its file's
        config_map[path.name] = path.read_text()
        profile_ref = f"{CONFIG_DIR}/{path.name}"
    env = [{"name": "KDC_PROFILE", "value": profile_ref},
           {"name": "KDC_SANITY_IMAGE", "value": sanity_image},
           {"name": "KDC_PYTEST_ARGS", "value": pytest_args}]
    if certify:
        env.append({"name": "KDC_CERTIFY", "value": "true"})
    definition: dict[str, Any] = {
        "sonobuoy-config": {
            "driver": "Job", "plugin-name": PLUGIN_NAME, "result-format": "junit",
            "result-files": [JUNIT],
            "description": "KubeVirt DRA conformance: DRA driver sanity, pod-level DRA and "
                           "KubeVirt VMs with DRA host devices"},
        "spec": {
            "name": "plugin", "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-m", "reports.sonobuoy"], "env": env,
            "volumeMounts": [{"mountPath": RESULTS_DIR, "name": "results"}]},
    }
    if config_map:
        definition["config-map"] = config_map
    return definition


def plugin_yaml(**options: Any) -> str:
    return yaml.safe_dump(plugin_definition(**options), sort_keys=False)


if __name__ == "__main__":
    log_to_stderr()
    sys.exit(run(os.environ))
