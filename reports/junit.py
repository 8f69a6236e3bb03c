"""JUnit: run-level properties (provider, versions, driver, profile) on the test suite.

Written into the file pytest's junitxml plugin wrote, once it is closed, so that only
public pytest API is used and the properties come from the controller under xdist."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from reports import RUN_INFO_KEY


def add_properties(xml_path: Path, properties: dict[str, str]) -> None:
    """Add ``properties`` to every testsuite of a JUnit file, sorted by name."""
    tree = ET.parse(xml_path)
    root = tree.getroot()
    for suite in [root] if root.tag == "testsuite" else root.iter("testsuite"):
        existing = suite.find("properties")
        if existing is None:
            existing = ET.Element("properties")
            suite.insert(0, existing)
        for name, value in sorted(properties.items()):
            ET.SubElement(existing, "property", name=name, value=value)
    tree.write(xml_path, encoding="utf-8", xml_declaration=True)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    xml_path = config.getoption("xmlpath", None)
    info = config.stash.get(RUN_INFO_KEY, None)
    if not xml_path or info is None or hasattr(config, "workerinput"):
        return
    if Path(xml_path).is_file():
        add_properties(Path(xml_path), info.run_properties())
