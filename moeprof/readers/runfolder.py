"""Reading a moeprof run folder: its ``manifest.json`` (the reproduction record) and ``analysis.json``."""

from __future__ import annotations

import json
from pathlib import Path

MANIFEST = "manifest.json"
ANALYSIS = "analysis.json"
MANIFEST_SCHEMA = "moeprof.manifest/1"
TRACE_DIR = "trace"


def read_manifest(folder: Path) -> dict | None:
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == MANIFEST_SCHEMA else None
