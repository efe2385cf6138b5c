"""The TPU host-gaps remedy, held on the chip: our demo on a TPU v5e with the host waiting on every step, then
every 5 (sample_traces/tpu_v5e_host_ahead/PROVENANCE.md). The projection and the first try come from one capture;
what the chip did comes from the other, and from the capture script's own wall clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import moeprof
from moeprof.core.analysis import Analysis

from .helpers import SAMPLES, moeprof_here

HERE = SAMPLES / "tpu_v5e_host_ahead"


@pytest.fixture(scope="module")
def runs() -> dict[str, Analysis]:
    return {name: moeprof.analyze(HERE / name) for name in ("every", "ahead")}


def _wall_ms(run: Path) -> float:
    """The capture script's mean wall clock per profiled step (perf_counter around each step's call)."""
    records = json.loads((run / "manifest.json").read_text())["demo"]["records"]
    return 1e3 * sum(r["wall_seconds"] for r in records) / len(records)


def _host_gaps(a: Analysis):
    return next(o for o in a.opportunities if o.kind == "host-gaps")


def test_a_host_bound_chip_is_told_to_let_the_host_run_ahead(runs):
    every = runs["every"]
    top = every.opportunities[0]
    assert top.kind == "host-gaps" and top.remedy_id == "tpu-host-gaps"
    assert "every N steps instead of every step" in top.remedy and "--sync-every 5" in top.remedy
    screen = moeprof_here(["analyze", str(HERE / "every")], env={"COLUMNS": "200"})
    assert screen.returncode == 0, screen.stderr
    first = next(line for line in screen.stdout.splitlines() if line.startswith("First try:"))
    assert "let the host dispatch the next step ahead of the device" in first


def test_the_host_gaps_projection_is_what_the_chip_did(runs):
    every, ahead = runs["every"], runs["ahead"]
    steps = len(every.steps)
    # the same program: the chip's work per step within 1% in both captures
    busy = [a.total.accumulated_ns / len(a.steps) for a in (every, ahead)]
    assert busy[1] == pytest.approx(busy[0], rel=0.01)
    projected = _host_gaps(every).projected_saving_ns
    measured = every.step_ns - ahead.step_ns
    assert steps == len(ahead.steps) == 5 and measured > 0.6 * every.step_ns
    # the projection takes every host gap away; the host that runs ahead still leaves some (it needs about as
    # long to dispatch a step as the chip to run it): what it leaves is what the projection over-promised
    left = _host_gaps(ahead).projected_saving_ns
    assert measured <= projected and measured + left == pytest.approx(projected, rel=0.02)
    # the script's own clock agrees on the direction and the size: over twice the steps per second
    assert _wall_ms(HERE / "every") / _wall_ms(HERE / "ahead") > 2.0
    assert every.step_ns / ahead.step_ns > 2.0


def test_diff_says_the_change_is_beyond_noise_and_what_changed():
    res = moeprof_here(["diff", str(HERE / "every"), str(HERE / "ahead"), "--json"])
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    step = next(r for r in doc["rows"] if r["name"] == "step time")
    assert step["within_noise_first"] == [None, False]
    idle = next(r for r in doc["rows"] if r["name"] == "idle")
    assert idle["delta_first"][1] == pytest.approx(step["delta_first"][1], rel=0.01)  # all of it was idle
