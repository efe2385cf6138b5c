"""moeprof diff: a dropless and a capacity-padded capture of the demo step side by side.

The reference is the shipped dropless capture ``sample_traces/cpu_moe_8dev`` (``capture demo
--steps 2 --warmup 1 --tokens 64 --experts 8 --layers 1``); the test captures the same
configuration once more with ``--capacity-factor 1.0`` (one capture, ~15 s, module-scoped).
Timings on a shared CPU are noisy, so the signs checked are the ones fixed by shapes
and records, not by the clock:

- all-to-all bytes per call. On CPU the dropless step sends a fixed-size buffer padded to
  ``tokens * top_k`` rows to every device (manifest ``dispatch: padded``); the capacity step
  sends ``C = ceil(factor * tokens * top_k / experts)`` rows per expert, i.e. ``C * experts /
  devices`` rows per destination. Row width and dtype are the same, so the bytes per call
  shrink by exactly ``tokens * top_k / (C * experts / devices)`` (8x here): negative delta.
- the ablation's gain is the ratio of the manifests' tokens/s, whatever they are.
- same devices and topology: no warning; a 1-host and a 2-host trace: a warning.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeprof.cli import app

from .helpers import SAMPLES

runner = CliRunner()
DROPLESS = SAMPLES / "cpu_moe_8dev"
DEMO_ARGS = ["--steps", "2", "--warmup", "1", "--tokens", "64", "--experts", "8", "--layers", "1"]
DEMO_ARGS += ["--devices", "8", "--expert-ffn", "128"]  # the shape of the committed capture


def invoke(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def capacity_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("capacity") / "run"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("MOEPROF_DEBUG", None)
    res = subprocess.run(
        [sys.executable, "-m", "moeprof", "capture", "demo", "--out", str(out), *DEMO_ARGS, "--capacity-factor", "1.0"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def doc(capacity_run) -> dict:
    res = invoke("diff", DROPLESS, capacity_run, "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def row(doc: dict, name: str) -> dict:
    return next(r for r in doc["rows"] if r["name"] == name)


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


@pytest.mark.slow
def test_capacity_shrinks_all_to_all_bytes_per_call(doc, capacity_run):
    base, cap = manifest(DROPLESS), manifest(capacity_run)
    assert base["dispatch"] == "padded" and cap["dispatch"] == "capacity"
    m = cap["model"]
    devices = cap["devices"]["count"]
    capacity = math.ceil(m["capacity_factor"] * m["tokens_per_device"] * m["top_k"] / m["experts"])
    rows_dropless = base["model"]["tokens_per_device"] * base["model"]["top_k"]
    rows_capacity = capacity * m["experts"] // devices
    r = row(doc, "all-to-all bytes/call")
    assert r["unit"] == "bytes"
    dropless, capped = r["values"]
    assert dropless / capped == pytest.approx(rows_dropless / rows_capacity)  # 128 rows vs 16
    assert r["delta_first"][0] == 0 and r["delta_first"][1] < 0 and r["change_first"][1] < 0


def test_same_topology_no_warning_and_ablation_from_manifests(doc, capacity_run):
    assert doc["schema"] == "moeprof.diff/1" and doc["warnings"] == []
    assert [r["label"] for r in doc["runs"]] == ["A", "B"] and all(r["kind"] == "run" for r in doc["runs"])
    ab = doc["ablation"]
    assert ab["metric"] == "tokens_per_second"
    t0 = manifest(DROPLESS)["tokens_per_second"]
    t1 = manifest(capacity_run)["tokens_per_second"]
    first, second = ab["runs"]
    assert first["tokens_per_second"] == t0 and second["tokens_per_second"] == t1
    assert first["gain_vs_previous"] is None
    assert second["gain_vs_previous"] == pytest.approx(t1 / t0) == second["gain_vs_first"]
    assert second["tflops_per_device"] > 0


def test_bucket_rows_are_totals_per_device_and_step(doc, capacity_run):
    for i, folder in enumerate([DROPLESS, capacity_run]):
        res = invoke("analyze", folder, "--json")
        assert res.exit_code == 0
        a = json.loads(res.stdout)
        norm = len(a["devices"]) * len({s["step"] for s in a["steps"]})
        for name, key in [("compute", "compute_ns"), ("comm NVLink", "comm_nvlink_ns"), ("idle", "idle_ns")]:
            assert row(doc, name)["values"][i] == pytest.approx(a["total"][key] / norm / 1e6)
        share = a["total"]["comm_ns"] / a["total"]["accumulated_ns"]
        assert row(doc, "comm share")["values"][i] == pytest.approx(share)
    # a bucket present in neither run stays zero with a zero delta
    assert row(doc, "comm IB")["values"] == [0.0, 0.0] and row(doc, "comm IB")["delta_first"] == [0.0, 0.0]


def test_three_runs_deltas_vs_first_and_previous(capacity_run):
    saved = DROPLESS / "analysis.json"
    res = invoke("diff", saved, capacity_run, saved, "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["ablation"] is None  # a saved analysis is not a run folder
    for r in doc["rows"]:
        if r["values"][0] is None:
            continue
        # C is A again: nothing changed vs the first, and it undoes B's change vs the previous
        assert r["delta_first"][2] == pytest.approx(0, abs=1e-9), r["name"]
        assert r["delta_previous"][2] == pytest.approx(-r["delta_first"][1], abs=1e-9), r["name"]


def test_terminal_output_names_runs_and_ablation(capacity_run):
    res = invoke("diff", DROPLESS, capacity_run)
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert f"A = {DROPLESS}" in out and f"B = {capacity_run}" in out
    assert "all-to-all bytes/call" in out and "Ablation" in out and "gain vs first" in out


def test_topology_warning_across_hosts():
    res = invoke("diff", SAMPLES / "synthetic_1host_8gpu", SAMPLES / "synthetic_2host_4gpu", "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(r["hosts"], r["devices_per_host"]) for r in doc["runs"]] == [(1, 8), (2, 4)]
    assert len(doc["warnings"]) == 1 and "vanish across racks" in doc["warnings"][0]
    warning_lines = [line for line in res.stderr.splitlines() if "warning" in line]
    assert len(warning_lines) == 1 and "2 hosts x 4" in warning_lines[0]
    # the 2-host trace sends part of its comm over IB, the 1-host one none
    ib = row(doc, "comm IB")
    assert ib["values"][0] == 0 and ib["values"][1] > 0 and ib["delta_first"][1] > 0


def test_diff_bad_input():
    res = invoke("diff", DROPLESS)
    assert res.exit_code == 2 and "two or more" in res.stderr
    res = invoke("diff", DROPLESS, SAMPLES / "nope")
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1 and "nope" in res.stderr


def test_ablation_caption_is_a_whole_sentence(tmp_path):
    """The ablation table's caption states the noise rule whole (it stopped at "when the step times are")."""
    import shutil

    copy = tmp_path / "again"
    shutil.copytree(DROPLESS, copy)
    res = runner.invoke(app, ["diff", str(DROPLESS), str(copy)], terminal_width=100)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())  # the caption wraps with the table
    assert "Ablation" in text
    assert (
        "a gain is within noise when the two runs' step times are: their per-step values cannot be told apart"
        " (Welch's test, 5%)" in text
    )
