"""The certification bundle of a run, and its verification.

A bundle is a folder: the JUnit XML and HTML report, the profile, the cluster facts,
results per requirement, the failure artifacts, and ``SHA256SUMS`` over all of it.
``python -m reports verify BUNDLE`` checks it with stable messages."""

from __future__ import annotations

import hashlib
import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from reports.results import certification_failures

SUMS = "SHA256SUMS"
FACTS = "facts.json"
RESULTS = "requirements.json"
JUNIT = "junit.xml"
NOT_FOR_HARDWARE = "not valid for certification of hardware: the run used EMULATED parts"
NOT_A_CERTIFICATION = "a record, not a certification: the run was not in certification mode"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(bundle: Path, files: Mapping[str, Path | None], facts: Mapping[str, object],
          results: Mapping[str, object], failures: Path | None,
          folders: Mapping[str, Path] | None = None) -> Path:
    """Assemble ``bundle`` from the run's outputs (absent ones are left out) and seal it:
    ``files`` and ``folders`` (such as the cluster components' logs) by their name in
    it. Whatever an earlier run left in the folder goes first."""
    shutil.rmtree(bundle, ignore_errors=True)
    bundle.mkdir(parents=True)
    for name, source in files.items():
        if source is not None and source.is_file():
            shutil.copyfile(source, bundle / name)
    if failures is not None and failures.is_dir():
        shutil.copytree(failures, bundle / "failures", dirs_exist_ok=True)
    for name, folder in (folders or {}).items():
        if folder.is_dir():
            shutil.copytree(folder, bundle / name, dirs_exist_ok=True)
    (bundle / FACTS).write_text(json.dumps(facts, indent=1, sort_keys=True))
    (bundle / RESULTS).write_text(json.dumps(results, indent=1, sort_keys=True))
    lines = [f"{_digest(p)}  {p.relative_to(bundle)}" for p in sorted(bundle.rglob("*"))
             if p.is_file() and p.name != SUMS]
    (bundle / SUMS).write_text("\n".join(lines) + "\n")
    return bundle


def _junit_properties(path: Path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    return {p.get("name", ""): p.get("value", "") for p in suite.iter("property")}


def verify(bundle: Path) -> tuple[list[str], list[str]]:
    """Problems (the bundle is not a valid certification) and notes (what it says)."""
    sums = bundle / SUMS
    if not sums.is_file():
        return [f"{SUMS} is missing: not a bundle"], []
    problems: list[str] = []
    listed: dict[str, str] = {}
    for line in sums.read_text().splitlines():
        digest, _, name = line.partition("  ")
        listed[name] = digest
    present = {str(p.relative_to(bundle)) for p in bundle.rglob("*")
               if p.is_file() and p.name != SUMS}
    for name in sorted(set(listed) - present):
        problems.append(f"missing file: {name}")
    for name in sorted(present - set(listed)):
        problems.append(f"file not in {SUMS}: {name}")
    for name in sorted(set(listed) & present):
        if _digest(bundle / name) != listed[name]:
            problems.append(f"edited after the run: {name}")
    for required in (FACTS, RESULTS):
        if required not in listed:
            problems.append(f"missing file: {required}")
    if problems:
        return problems, []
    facts = json.loads((bundle / FACTS).read_text())
    results = json.loads((bundle / RESULTS).read_text())
    if facts.get("interrupted"):
        problems.append(f"the run was interrupted ({facts['interrupted']}): its results are "
                        "partial")
    unpassed = [f"required requirement {failure}" for failure in
                certification_failures(results)]
    # A run outside certification mode is a record, not a certification: what it did not
    # pass is said, and is no fault of the record's (a bundle older than the key, strict).
    certification = str(facts.get("certify", True)).lower() != "false"  # facts are text
    if certification:
        problems += unpassed
    if (bundle / JUNIT).is_file():
        properties = _junit_properties(bundle / JUNIT)
        for key in ("kubernetes_version", "kubevirt_version", "driver", "profile"):
            if key in properties and properties[key] != str(facts.get(key)):
                problems.append(f"versions inconsistent: {key} is {facts.get(key)!r} in "
                                f"{FACTS}, {properties[key]!r} in {JUNIT}")
    else:
        problems.append(f"missing file: {JUNIT}")
    notes = [f"{NOT_FOR_HARDWARE} ({'; '.join(facts['emulated'])})"] if facts.get(
        "emulated") else []
    if not certification:
        notes += [f"{NOT_A_CERTIFICATION}{': ' if unpassed else ''}{'; '.join(unpassed)}"]
    return problems, notes
