"""Shared fixtures: where the samples and the shared real traces live."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def shared_trace(relative: str) -> Path:
    """A file under ../shared/traces, or skip: a fresh clone has no ../shared."""
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"{path} not present (../shared/traces is only beside the project's own checkout)")
    return path


@pytest.fixture
def samples() -> Path:
    return SAMPLES
