"""One route through the pipeline: the library and the CLI agree, stages are pure, results round-trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli import app
from moeprof.core.analysis import Analysis
from moeprof.core.classify import classify
from moeprof.core.topology import attribute_links
from moeprof.pipeline.merge import JobResults, finish_job
from moeprof.pipeline.per_file import measure_file
from moeprof.readers import read_file

from .helpers import SAMPLES, SHARED_TRACES

SAMPLE_INPUTS = [
    "cpu_moe_8dev",
    "synthetic_1host_8gpu",
    "synthetic_1host_8gpu.trace.json.gz",
    "synthetic_1host_8gpu.nsys.sqlite",
    "synthetic_2host_4gpu",
    "synthetic_2host_4gpu_kineto",
]
runner = CliRunner()


@pytest.mark.slow
@pytest.mark.parametrize("name", SAMPLE_INPUTS)
def test_library_route_equals_cli_route(name: str) -> None:
    """``moeprof.analyze(moeprof.load(p))`` and ``moeprof analyze p --json``: the same object, opportunities too."""
    path = SAMPLES / name
    res = runner.invoke(app, ["analyze", str(path), "--json"])
    assert res.exit_code == 0, res.output
    cli = json.loads(res.stdout)
    library = moeprof.analyze(moeprof.load(path)).to_json()
    assert library == cli


def test_analyze_takes_a_path_as_the_cli_does() -> None:
    """``moeprof.analyze("trace_dir/")`` reads it as ``moeprof analyze trace_dir/`` does (a run folder: its
    manifest too); a list that mixes paths with loaded traces is refused in words."""
    path = SAMPLES / "cpu_moe_8dev"
    res = runner.invoke(app, ["analyze", str(path), "--json"])
    assert res.exit_code == 0, res.output
    assert moeprof.analyze(str(path)).to_json() == json.loads(res.stdout)
    with pytest.raises(TypeError, match="loaded traces or paths, not both"):
        moeprof.analyze([*moeprof.load(path), path])


def test_hlo_travels_with_the_trace() -> None:
    """The dependency bound needs the HLO: it comes with the trace, whichever route reads it."""
    (trace,) = moeprof.load(SAMPLES / "synthetic_2host_4gpu" / "node0.xplane.pb")
    assert trace.hlo and trace.format == "xplane" and trace.framework == "jax"
    hidden = [o for o in moeprof.analyze(trace).opportunities if o.kind == "all-gather"]
    assert hidden and all(o.bound_from == "hlo" for o in hidden)


def test_stages_return_new_values() -> None:
    raw = read_file(SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb")
    before = raw.events.copy()
    classified = classify(raw)
    linked = attribute_links(classified)
    assert (raw.events["bucket"] == "").all() and raw.events.equals(before)
    assert (classified.events["bucket"] != "").all()
    assert classified.events["ib_fraction"].isna().all() and linked.events["ib_fraction"].notna().any()
    assert len(raw.markers) and "activity" not in raw.markers.columns  # markers never travel as events


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cpu_moe_8dev", "synthetic_2host_4gpu"])
def test_saved_analysis_reads_back_as_the_same_value(name: str, tmp_path: Path) -> None:
    fresh = moeprof.analyze_paths([SAMPLES / name])
    saved = tmp_path / "analysis.json"
    saved.write_text(json.dumps(fresh.to_json()))
    back = Analysis.from_json(json.loads(saved.read_text()), str(saved))
    assert back == fresh
    assert back.to_json() == fresh.to_json()


def test_a_bad_saved_analysis_is_named() -> None:
    with pytest.raises(moeprof.InputError, match=r"x\.json: not a moeprof\.analysis/1 object"):
        Analysis.from_json({"schema": "other"}, "x.json")
    with pytest.raises(moeprof.InputError, match="'total' or 'devices' missing"):
        Analysis.from_json({"schema": "moeprof.analysis/1"}, "x.json")


@pytest.mark.parametrize(
    "path",
    [
        SAMPLES / "kineto_alltoall_gloo_w4",
        SAMPLES / "synthetic_2host_4gpu",
        SHARED_TRACES / "kineto" / "dlrm_8rank_v100",
    ],
    ids=lambda p: p.name,
)
def test_results_arriving_in_any_order_give_one_analysis(path: Path) -> None:
    """A pool or a cluster hands the files' results back in any order: the analysis (every float's last bit
    too) must not depend on it. The same results taken in file order and in reverse give one JSON."""
    if not path.exists():
        pytest.skip(f"{path} is not here (../shared is absent in a fresh clone)")
    parts = [measure_file(t) for t in moeprof.load(path)]
    assert len(parts) > 1

    def analysis(order: list[int]) -> str:
        job = JobResults()
        for i in order:
            job.add(i, parts[i])
        return json.dumps(finish_job(job)[0].to_json(), sort_keys=True)

    forward = list(range(len(parts)))
    assert analysis(forward) == analysis(forward[::-1])
