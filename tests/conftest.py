"""Helpers for the unit tier: recorded API responses stand in for a cluster."""

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"


class RecordedApi:
    """ApiReader over a recorded path -> response map; unknown paths are 404 (None)."""

    def __init__(self, name: str) -> None:
        self.responses: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())

    def get(self, path: str) -> dict[str, Any] | None:
        return self.responses.get(path)


@pytest.fixture
def recorded():
    return RecordedApi
