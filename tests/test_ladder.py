"""``diff A B C`` as an ablation ladder (issue 49): each run explained against the one before it, one row a rung
with what changed (the run folders' settings) and where the rung's change went; and a warning where runs do not
compare (different chips, different programs). The committed TPU v5e ablation (expert FFN 2048 -> 1024 ->
8,192 tokens) is the ladder; the expectations on its settings are written by hand from its PROVENANCE."""

from __future__ import annotations

import gzip
import json
import shutil
from itertools import pairwise
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeprof.cli.main import app
from moeprof.gate.diff import run_settings, setting_changes

from .helpers import SAMPLES

runner = CliRunner()
ABLATION = SAMPLES / "tpu_v5e_ablation"
LADDER = [ABLATION / "ffn2048", ABLATION / "base", ABLATION / "tok8192"]


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def test_what_changed_between_two_runs_is_said_from_their_manifests():
    ffn, base, tok = (run_settings(_manifest(p)) for p in LADDER)
    assert setting_changes(ffn, base) == ["expert FFN 2,048 → 1,024"]
    assert setting_changes(base, tok) == ["tokens per device 16,384 → 8,192"]
    assert setting_changes(base, base) == []
    assert setting_changes(None, base) == []  # a trace has no manifest: nothing said, never guessed
    # the demo's other settings, as /work/tpu's ladders change them
    a = {"dtype": "float32", "capacity_factor": 1.25, "permute_backward": "scatter", "skip_one_device_exchange": False}
    b = {"dtype": "bfloat16", "capacity_factor": None, "permute_backward": "gather", "skip_one_device_exchange": True}
    assert setting_changes(a, b) == [
        "dtype float32 → bfloat16",
        "capacity factor 1.25 → dropless",
        "permutations' backward scatter → gather",
        "skip the one-device exchange off → on",
    ]
    assert setting_changes({"xla_flags": ""}, {"xla_flags": "--xla_x=1"}) == ["XLA flags '(none)' → '--xla_x=1'"]
    # bookkeeping is no change of the step
    assert setting_changes(run_settings({"model": {"steps": 5}}), run_settings({"model": {"steps": 6}})) == []


@pytest.fixture(scope="module")
def ladder_doc() -> dict:
    res = runner.invoke(app, ["diff", *map(str, LADDER), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_each_run_is_explained_against_the_one_before_it(ladder_doc):
    """The explanations were each run against the first; a ladder's rung is a run against the previous one, and
    the rungs add up to the last step minus the first."""
    doc = ladder_doc
    assert [(e["reference"], e["run"]) for e in doc["explanations"]] == [("A", "B"), ("B", "C")]
    steps = next(r for r in doc["rows"] if r["name"] == "step time")["values"]
    ladder = doc["ladder"]
    assert ladder["step_ms"] == [steps[0], steps[-1]]
    rungs = ladder["rungs"]
    assert [(r["from"], r["to"]) for r in rungs] == [("A", "B"), ("B", "C")]
    assert [r["changed"] for r in rungs] == [["expert FFN 2,048 → 1,024"], ["tokens per device 16,384 → 8,192"]]
    for rung, e, (before, after) in zip(rungs, doc["explanations"], pairwise(steps), strict=True):
        assert rung["step_ms"] == pytest.approx([before, after])
        assert rung["delta_ms"] == pytest.approx(after - before) == pytest.approx(e["step_change_ms"])
        assert rung["gain"] == pytest.approx(before / after)
        # where it went: the parts' changes summed by scope and pass, here from the explanation's parts
        sums: dict[tuple[str, bool], float] = {}
        for p in e["parts"]:
            sums[(p["scope"], p["backward"])] = sums.get((p["scope"], p["backward"]), 0.0) + p["delta_ms"]
        top = sorted(sums.items(), key=lambda kv: -abs(kv[1]))[:3]
        assert [(s["scope"], s["backward"], s["delta_ms"]) for s in rung["by_scope"]] == [
            (s, b, pytest.approx(d)) for (s, b), d in top
        ]
        assert rung["residual_ms"] == pytest.approx(e["residual_ms"])
    assert sum(r["delta_ms"] for r in rungs) == pytest.approx(ladder["delta_ms"])
    assert sum(r["share_of_ladder"] for r in rungs) == pytest.approx(1.0)
    # halving the expert FFN: most of the first rung is the experts' work (PROVENANCE: 60.46 ms of the step)
    assert rungs[0]["by_scope"][0]["scope"].endswith("moe_experts") and rungs[0]["delta_ms"] < -50
    assert not doc["warnings"], doc["warnings"]


def test_the_ladder_is_one_table_on_the_terminal():
    res = runner.invoke(app, ["diff", *map(str, LADDER)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "Ablation ladder: the step" in out and "rung by rung" in out
    flat = " ".join(out.split())
    assert "A → B expert FFN 2,048 → 1,024" in flat and "B → C tokens per device 16,384 → 8,192" in flat
    assert "Where C's step went against B's" in out and "Where C's step went against A's" not in out


def _unzipped(tmp_path: Path, folder: Path) -> Path:
    out = tmp_path / folder.name
    out.mkdir()
    with gzip.open(folder / "runsc.xplane.pb.gz") as src, (out / "runsc.xplane.pb").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _warnings(res) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith("moeprof: warning:")]


def test_runs_that_do_not_compare_say_so_in_one_line(tmp_path):
    """A TPU capture against a GPU trace, and the demo against another program, warned of nothing."""
    res = runner.invoke(app, ["diff", str(SAMPLES / "tpu_v5e_demo"), str(SAMPLES / "synthetic_1host_8gpu")])
    assert res.exit_code == 0, res.output
    chips = [w for w in _warnings(res) if "ran on different chips" in w]
    assert len(chips) == 1 and "A: 1 x TPU v5 Lite" in chips[0], _warnings(res)
    # the demo step against tpu_v5e_moe_step's: no scope in common
    other = _unzipped(tmp_path, SAMPLES / "tpu_v5e_moe_step" / "a")
    res = runner.invoke(app, ["diff", str(SAMPLES / "tpu_v5e_demo"), str(other)])
    assert res.exit_code == 0, res.output
    (program,) = [w for w in _warnings(res) if "share little of their work" in w]
    assert "0% of A's time and 0% of B's is in scopes both name" in program
    assert not [w for w in _warnings(res) if "different chips" in w]
    # two variants of one MoE step (padded einsum and ragged_dot experts) are one program: no warning
    b = _unzipped(tmp_path, SAMPLES / "tpu_v5e_moe_step" / "b")
    res = runner.invoke(app, ["diff", str(other), str(b)])
    assert res.exit_code == 0 and not _warnings(res), _warnings(res)
