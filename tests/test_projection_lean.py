"""Issue 41: a projection's lean JSON (the critical path's figures and longest segments, the whole path in a
parquet file on request), projections computed for what the output shows, and ``--no-projection``.

Each figure of the lean JSON is checked against the whole path read back from the parquet file by plain
Python (the chain of segments, their sum, the devices in path order, the five longest by a sort of their own),
and the terminal's screen computed without the projected timelines' figures against the one computed with
every figure."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from rich.console import Console
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core.analysis import Analysis, CriticalPath, PathSegment
from moeprof.pipeline import Request, run
from moeprof.reports import terminal

from .helpers import SAMPLES

runner = CliRunner()
CPU = SAMPLES / "cpu_moe_8dev"  # 8 devices: balance, the kinds' projections, the router
TWO_HOST = SAMPLES / "synthetic_2host_4gpu_kineto"


def invoke(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("sample", [CPU, TWO_HOST], ids=["cpu_moe_8dev", "2host_kineto"])
def test_json_carries_each_paths_figures_and_the_parquet_the_whole_path(tmp_path: Path, sample: Path) -> None:
    out = tmp_path / "paths.parquet"
    res = invoke("analyze", sample, "--json", "--critical-path", out)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = pq.read_table(out).to_pylist()
    with_path = [i for i, p in enumerate(doc["projections"]) if p["role"] != "opportunity"]
    assert with_path and {r["projection"] for r in rows} == set(with_path)
    for i in with_path:
        p = doc["projections"][i]
        mine = sorted((r for r in rows if r["projection"] == i), key=lambda r: r["segment"])
        summary = p["critical_path"]
        assert set(summary) == {"segments", "ns", "devices", "longest"}
        assert summary["segments"] == len(mine) > 0
        assert all(r["role"] == p["role"] and r["what_if"] == " ".join(p["what_if"]) for r in mine)
        assert all(r["step"] == p["critical_step"] for r in mine)
        # a chain forward in time, each segment's ns its length
        assert all(r["ns"] == r["end_ns"] - r["start_ns"] > 0 for r in mine)
        assert all(a["end_ns"] <= b["start_ns"] for a, b in itertools.pairwise(mine))
        assert summary["ns"] == sum(r["ns"] for r in mine) == sum(p["path_by_cause"].values())
        for cause, ns in p["path_by_cause"].items():
            assert ns == sum(r["ns"] for r in mine if r["cause"] == cause)
        crossed: list[str] = []
        for r in mine:
            if r["device"] and r["device"] not in crossed:
                crossed.append(r["device"])
        assert summary["devices"] == crossed
        # the five longest (ties: the earlier), in path order, as the JSON writes a segment
        top = sorted(sorted(range(len(mine)), key=lambda k: (-mine[k]["ns"], k))[:5])
        fields = ("device", "bucket", "kind", "cause", "name", "start_ns", "end_ns", "ns")
        assert summary["longest"] == [{f: mine[k][f] for f in fields} for k in top]
        # what sets the step's end: the cause with the most time on the path
        by_cause = {c: sum(r["ns"] for r in mine if r["cause"] == c) for c in {r["cause"] for r in mine}}
        assert p["bound"]["cause"] == max(by_cause, key=lambda c: (by_cause[c], c))


def test_a_lean_json_reads_back_as_the_same_projections() -> None:
    fresh = run(Request([CPU])).analysis
    saved = Analysis.from_json(json.loads(json.dumps(fresh.to_json())))
    assert saved.projections == fresh.projections
    for old, new in zip(fresh.projections, saved.projections):
        assert new.critical_path.segments == old.critical_path.segments
        assert not new.critical_path or not new.critical_path.complete  # the longest five held, not the path
    assert saved.to_json() == fresh.to_json()


def test_a_saved_analysis_with_the_whole_path_still_reads() -> None:
    """A saved analysis from before the lean form lists every segment: read, it is the path it lists."""
    segs = [
        PathSegment("h/GPU:0", "compute", "", "compute", "gemm", 0, 40),
        PathSegment("h/GPU:1", "", "", "launch", "launch/host gap", 40, 45),
        PathSegment("h/GPU:1", "comm", "all-to-all", "transfer", "a2a", 45, 105),
        PathSegment("h/GPU:0", "compute", "", "compute", "gemm", 105, 125),
    ]
    path = CriticalPath.from_json([s.to_json() for s in segs])
    assert list(path) == segs and path.complete
    assert path.to_json() == {
        "segments": 4,
        "ns": 125,
        "devices": ["h/GPU:0", "h/GPU:1"],
        "longest": [s.to_json() for s in segs],
    }
    assert path.by_cause() == {"compute": 60, "transfer": 60, "wait": 0, "launch": 5, "copy": 0, "other": 0}
    assert path.by_cause_device() == {
        "compute": {"h/GPU:0": 60},
        "launch": {"h/GPU:1": 5},
        "transfer": {"h/GPU:1": 60},
    }
    # the longest two: the first GEMM (40) and the transfer (60), in path order
    assert [s.end_ns - s.start_ns for s in path.longest(2)] == [40, 60]


def _screen(analysis: Analysis) -> str:
    buf = io.StringIO()
    terminal.render(analysis, Console(file=buf, width=200, color_system=None))
    return buf.getvalue()


@pytest.mark.parametrize("sample", [CPU, TWO_HOST], ids=["cpu_moe_8dev", "2host_kineto"])
def test_the_screen_needs_no_projected_figures(sample: Path) -> None:
    """The terminal's analysis skips the projected timelines' figures and critical paths: what it prints is
    what the full analysis prints, and its projections' step times, savings and bounds are the full ones."""
    full = run(Request([sample], what_if=["scale(kind=all-to-all)=0.5"])).analysis
    screen = run(Request([sample], what_if=["scale(kind=all-to-all)=0.5"], projections="screen")).analysis
    assert _screen(screen) == _screen(full)
    assert len(screen.projections) == len(full.projections)
    for s, f in zip(screen.projections, full.projections):
        assert (s.what_if, s.steps, s.saving_ns, s.bound, s.path_by_cause, s.selected, s.note) == (
            f.what_if, f.steps, f.saving_ns, f.bound, f.path_by_cause, f.selected, f.note,
        )  # fmt: skip
        assert not s.devices and not s.critical_path
    assert any(f.devices for f in full.projections) and any(f.critical_path for f in full.projections)


def test_no_projection(tmp_path: Path) -> None:
    full = json.loads(invoke("analyze", CPU, "--json").stdout)
    res = invoke("analyze", CPU, "--json", "--no-projection")
    assert res.exit_code == 0, res.output
    lean = json.loads(res.stdout)
    assert "projections" not in lean and "step_bound" not in lean
    assert lean["step_ns"] == full["step_ns"]  # the measured step: no replay needed
    assert all("projected_saving_ns" not in o for o in lean["opportunities"])
    for key in ("devices", "total", "collectives", "steps", "ledger", "spread"):
        assert lean[key] == full[key]
    text = invoke("analyze", CPU, "--no-projection").stdout
    assert "What would it buy" not in text
    for extra in (("--what-if", "balance"), ("--critical-path", tmp_path / "p.parquet")):
        refused = invoke("analyze", CPU, "--no-projection", *extra)
        assert refused.exit_code == 2 and "--no-projection" in refused.output
