"""The projection's surfaces (spec §9): the terminal's "what would it buy" table and verdict line, the
HTML report's projected timeline with its critical path, ``annotate --what-if``, ``check
--max-balance-saving`` and ``diff``'s explanation of a measured ablation.

Each figure shown is checked against a computation of its own: the engine's ``project`` called
directly with the row's terms, the analysis JSON's projections, ratios worked out by hand on
hand-built analyses, and the written files read back by moeprof's own readers.
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core import intervals as iv
from moeprof.core.analysis import Analysis, Collective, DeviceFigures, Figures, StepFigures
from moeprof.core.summary import choose_first_try, verdict
from moeprof.gate.diff import change_ratios
from moeprof.insight.projection import Projector
from moeprof.insight.projection.plan import comm_kinds
from moeprof.pipeline import Request, analyze_paths, load, run
from moeprof.reports import terminal
from moeprof.reports.text import duration, fabric_words, ms, pct, scale_up_word, verdict_lines

from .helpers import SAMPLES, chromium, needs_chromium

runner = CliRunner()
CPU = SAMPLES / "cpu_moe_8dev"  # 8 devices, a run folder: the ledger matches, balance is projected
ONE_RANK = SAMPLES / "synthetic_2host_4gpu_kineto" / "rank0.pt.trace.json.gz"  # one device: no balance


def invoke(*args: str | Path):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def job() -> tuple[Analysis, Projector]:
    result = run(Request([CPU]))
    assert result.projector is not None
    return result.analysis, result.projector


@pytest.fixture(scope="module")
def result() -> Analysis:
    return analyze_paths([CPU])


def same(a, b) -> bool:
    return (a.measured_step_ns, a.projected_step_ns, a.saving_ns) == (
        b.measured_step_ns,
        b.projected_step_ns,
        b.saving_ns,
    )


# ---------------------------------------------------------------- terminal


@pytest.mark.slow
def test_payoff_rows_are_the_projections_of_their_terms(result, job):
    _, projector = job
    kinds = comm_kinds(result)
    roles = [p.role for p in result.projections]
    expected_terms = [("balance",), ("balance-router",)]
    expected_terms += [(f"scale(opportunity={i})=0",) for i in range(1, min(3, len(result.opportunities)) + 1)]
    expected_terms += [(f"scale(kind={k})=0.5",) for k in kinds]
    assert [p.what_if for p in result.projections] == expected_terms
    assert roles == ["straggler", "router", *["opportunity"] * 3, *["kind"] * len(kinds)]
    assert set(kinds) == {c.kind for c in result.collectives}
    for p in result.projections:
        assert p.saving_ns == p.measured_step_ns - p.projected_step_ns
        assert p.measured_step_ns == result.step_ns  # one job, one step time
        if p.role == "opportunity":  # an opportunity's row is its own projected saving
            n = int(p.what_if[0].split("=")[1].rstrip(")"))
            assert p.saving_ns == result.opportunities[n - 1].projected_saving_ns
        else:  # the same terms projected again, through the projector
            assert same(p, projector.project(list(p.what_if), figures=False)), p.what_if


def test_first_try_is_the_change_that_buys_the_most(result):
    # worked out from the rows: the largest saving of 1% of the step or more, the asked one aside
    rows = [p for p in result.projections if p.role != "asked"]
    best = max(rows, key=lambda p: p.saving_ns)
    assert best.saving_ns >= 0.01 * result.step_ns
    v = verdict(result)
    assert v is not None and v.first_try == best
    line = verdict_lines(v)[1]
    assert line.startswith("First try: ")
    # XLA:CPU devices (this capture): the first try is to capture on GPUs, the largest change said as what it is
    assert v.cpu and line.startswith("First try: capture the same program on GPUs or TPUs before tuning it")
    assert f"the largest projected change here: opportunity 1 ({v.first_try_title}) taken away" in line
    assert f"{duration(best.saving_ns)} ({pct(best.saving_ns / result.step_ns)})" in line


def rendered(result: Analysis, **kwargs) -> str:
    buf = io.StringIO()
    terminal.render(result, Console(file=buf, width=200, color_system=None), **kwargs)
    return buf.getvalue()


def test_terminal_prints_what_it_would_buy_after_the_ledger(result):
    text = rendered(result)
    with fabric_words(scale_up_word(result)):  # as the terminal says them: XLA:CPU devices' host memory
        said = " ".join(terminal.spaced(v) for v in verdict_lines(verdict(result)))
    assert " ".join(text.split()).startswith(" ".join(said.split()))  # the verdict first, however it wraps
    head = text.index("What would it buy")
    assert text.index("Last to arrive") < head < text.index("Top collectives")
    table = text[head : text.index("Top collectives")]
    assert f"the step is {ms(result.step_ns)} ms" in table
    for p in result.projections:
        row = next(ln for ln in table.splitlines() if " ".join(p.what_if) in ln)
        if p.shortens:
            cells = (ms(p.projected_step_ns), ms(p.saving_ns), pct(p.saving_fraction))
            want = r"\s+".join(map(re.escape, cells))
        else:  # no negative or sub-1% saving: "none"
            want = rf"{re.escape(ms(p.projected_step_ns))}\s+-\s+none"
        assert re.search(want, row), row
    # rows by saving, most first: the first row is the first try
    shown = [p for p in result.projections if p.shortens]
    order = [table.index(" ".join(p.what_if)) for p in sorted(shown, key=lambda p: -p.saving_ns)]
    assert order == sorted(order)


def test_terminal_without_projections_has_no_table(result):
    text = rendered(result.with_(projections=()))
    assert "What would it buy" not in text
    # a saved analysis carries its projections: the same table
    saved = Analysis.from_json(json.loads(json.dumps(result.to_json())))
    assert saved.projections == result.projections and "What would it buy" in rendered(saved)


def test_analyze_cli_shows_the_table():
    res = invoke("analyze", CPU)
    assert res.exit_code == 0, res.output
    assert "What would it buy" in res.stdout and "First try: " in res.stdout


# ---------------------------------------------------------------- check --max-balance-saving


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, float]:
    out = tmp_path_factory.mktemp("saved") / "analysis.json"
    res = invoke("analyze", CPU, "--json")
    assert res.exit_code == 0, res.output
    out.write_text(res.stdout)
    doc = json.loads(res.stdout)
    balance = doc["projections"][0]
    assert balance["what_if"] == ["balance"]
    return out, balance["saving_ns"] / balance["step_ns"]["measured"]


@pytest.mark.slow
def test_check_gates_the_balance_saving(saved):
    path, fraction = saved
    assert 0.05 < fraction < 0.5
    for source in (CPU, path):  # the trace, and a saved analysis (its projections are in the JSON)
        res = invoke("check", source, "--max-balance-saving", f"{fraction + 0.01:.4f}", "--json")
        assert res.exit_code == 0, res.output
        (gate,) = json.loads(res.stdout)["gates"]
        assert gate["name"] == "max-balance-saving" and gate["value"] == pytest.approx(fraction)
        res = invoke("check", source, "--max-balance-saving", f"{fraction - 0.01:.4f}")
        assert res.exit_code == 1
        assert "max-balance-saving FAILED" in res.stderr


def test_check_balance_saving_needs_several_devices():
    res = invoke("check", ONE_RANK, "--max-balance-saving", "0.1")
    assert res.exit_code == 2
    assert "needs the balance projection" in res.stderr and len(res.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- diff


def _device(name: str, compute: int) -> DeviceFigures:
    return DeviceFigures(device=name, host=name.split("/")[0], compute_ns=compute, accumulated_ns=compute)


def _collective(kind: str, total: int, transfer: int | None) -> Collective:
    return Collective(
        name=f"{kind}.1", kind=kind, link="nvlink", count=4, devices=2, total_ns=total, exposed_ns=total,
        transfer_ns=transfer, wait_ns=None if transfer is None else total - transfer,
    )  # fmt: skip


def _analysis(devices: int, steps: int, compute: int, collectives: tuple[Collective, ...], ledger: bool) -> Analysis:
    devs = tuple(_device(f"h/GPU:{i}", compute // devices) for i in range(devices))
    step_rows = tuple(StepFigures(step=s, device=d.device) for s in range(steps) for d in devs)
    return Analysis(
        inputs=("x",),
        devices=devs,
        total=Figures(compute_ns=compute, accumulated_ns=compute),
        collectives=collectives,
        steps=step_rows,
        ledger={"instances": 3} if ledger else None,
    )


def test_change_ratios_are_b_over_a_per_device_and_step():
    # A: 2 devices, 2 steps; B: 4 devices, 3 steps; times per device and step worked out by hand
    a = _analysis(2, 2, 8_000, (_collective("all-to-all", 4_000, 1_000), _collective("all-reduce", 2_000, 800)), True)
    b = _analysis(4, 3, 12_000, (_collective("all-to-all", 6_000, 3_600), _collective("all-gather", 500, 100)), True)
    got = {r.what: r for r in change_ratios(a, b)}
    # all-to-all transfer: A 1000/(2*2) = 250 ns, B 3600/(4*3) = 300 ns -> 1.2; all-reduce is only in A,
    # all-gather only in B: no ratio
    assert set(got) == {"all-to-all transfer", "compute"}
    assert got["all-to-all transfer"].ratio == pytest.approx(300 / 250)
    assert got["all-to-all transfer"].term == "scale(kind=all-to-all)=1.2"
    # compute: A 8000/4 = 2000, B 12000/12 = 1000 -> 0.5
    assert got["compute"].ratio == pytest.approx(0.5) and got["compute"].term == "scale(bucket=compute)=0.5"
    # without the ledger in one run, the kind's whole duration: A 4000/4 = 1000, B 6000/12 = 500
    b_single = _analysis(4, 3, 12_000, (_collective("all-to-all", 6_000, None),), False)
    (kind, _) = change_ratios(a, b_single)
    assert kind.what == "all-to-all duration" and kind.ratio == pytest.approx(0.5)


@pytest.mark.slow
def test_diff_of_a_run_with_itself_explains_nothing_and_leaves_no_residual():
    res = invoke("diff", CPU, CPU, "--json")
    assert res.exit_code == 0, res.output
    (e,) = json.loads(res.stdout)["explanations"]
    p = e["projection"]
    assert p["changes"] and all(c["ratio"] == pytest.approx(1.0) for c in p["changes"])
    assert all(c["term"].endswith("=1") for c in p["changes"])
    assert p["projected_step_ms"] == pytest.approx(e["reference_step_ms"])
    assert e["measured_step_ms"] == pytest.approx(e["reference_step_ms"])
    assert p["explained_ms"] == pytest.approx(0) and p["missed_ms"] == pytest.approx(0)
    # part by part: every part the same, nothing left over
    assert e["parts"] and all(x["delta_ms"] == 0 and x["change"] == "same" for x in e["parts"])
    assert e["residual_ms"] == 0 and e["step_change_ms"] == 0


@pytest.mark.slow
def test_diff_explains_a_projected_ablation(tmp_path, job):
    """B is A's projection written as a trace (annotate --what-if): its step is the projection's step, so the
    diff's projection of A with B's compute and all-to-all ratios lands near B's measured step."""
    _, projector = job
    b_path = tmp_path / "b.trace.json.gz"
    res = invoke("annotate", CPU, "--what-if", "scale(bucket=compute)=0.5", "-o", b_path)
    assert res.exit_code == 0, res.output
    res = invoke("diff", CPU, b_path, "--json")
    assert res.exit_code == 0, res.output
    (e,) = json.loads(res.stdout)["explanations"]
    p = e["projection"]
    compute = next(c for c in p["changes"] if c["what"] == "compute")
    assert compute["ratio"] == pytest.approx(0.5, abs=0.01)
    direct = projector.project(p["what_if"], figures=False)
    assert p["projected_step_ms"] == pytest.approx(direct.projected_step_ns / 1e6)
    assert p["missed_ms"] == pytest.approx(e["measured_step_ms"] - p["projected_step_ms"])
    res = invoke("diff", CPU, b_path)
    assert res.exit_code == 0 and "A replayed with B's uniform ratios (scale(" in " ".join(res.stdout.split())


# ---------------------------------------------------------------- annotate --what-if


@pytest.mark.slow
def test_annotate_what_if_writes_the_projected_activities(tmp_path, job):
    _, projector = job
    out = tmp_path / "p.trace.json.gz"
    res = invoke("annotate", CPU, "--what-if", "balance", "-o", out)
    assert res.exit_code == 0, res.output
    assert "projected with balance" in res.stderr
    events = projector.events(["balance"])
    back = load([out])
    got = back[0].events if len(back) == 1 else None
    assert got is not None and len(got) == len(events)
    # the file names its devices GPU:0.. in the order of their names; times are µs floats from a base
    names = sorted(str(d) for d in events["device"].unique())
    shift_want = int(events["start_ns"].min())
    shift_have = int(got["start_ns"].min())
    for i, device in enumerate(names):
        mine = events[events["device"].astype(str) == device]
        theirs = got[got["device"].astype(str).str.endswith(f"/GPU:{i}")]
        want = np.sort(np.stack([mine["start_ns"], mine["end_ns"]], 1).astype(np.int64) - shift_want, axis=0)
        have = np.sort(np.stack([theirs["start_ns"], theirs["end_ns"]], 1).astype(np.int64) - shift_have, axis=0)
        assert np.array_equal(have, want), device
    # the critical path track: per device the union of the critical rows
    import gzip

    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert doc["otherData"]["what_if"] == "balance"
    crit_tids = {
        (e["pid"], e["tid"])
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e["args"].get("name") == "moeprof: critical path"
    }
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X" and (e["pid"], e["tid"]) in crit_tids]
    crit = events[events["critical"]]
    expected = sum(
        iv.union(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))[0].size
        for _, g in crit.groupby("device", observed=True)
    )
    assert expected > 0 and len(slices) == expected


def test_annotate_refuses_a_bad_term(tmp_path):
    res = invoke("annotate", CPU, "--what-if", "scale(bucket=gpu)=2", "-o", tmp_path / "x.json")
    assert res.exit_code == 2 and "scale(bucket=gpu)=2" in res.stderr
    assert not (tmp_path / "x.json").exists()


# ---------------------------------------------------------------- HTML report


def embedded(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="moeprof-data">(.*?)</script>', text, re.S)
    assert m
    return json.loads(m.group(1))


@pytest.mark.slow
def test_report_draws_the_projection_beside_the_measured_timeline(tmp_path, job):
    analysis, projector = job
    out = tmp_path / "r.html"
    res = invoke("report", CPU, "-o", out)
    assert res.exit_code == 0, res.output
    text = out.read_text()
    data = embedded(text)
    measured, projected = data["inputs"]
    assert data["codes"]["critical"] == 8 and data["categories"][8] == "critical path"
    assert all("crit" not in lane for lane in measured["lanes"])
    # the page draws the first try where it moves work between devices (the router or the straggler fix), else
    # balance: here opportunity 1 buys the most
    first = choose_first_try(analysis).projection
    assert first is not None and first.role == "opportunity" and projector.unasked(analysis) == ["balance"]
    drawn = analysis.projection("straggler")
    assert drawn is not None
    events = projector.events(list(drawn.what_if))
    crit = events[events["critical"]]
    unit = projected["unit"]
    for lane in projected["lanes"]:
        d = np.frombuffer(base64.b64decode(lane["crit"]["d"]), "<u4").astype(np.int64)
        mine = crit[crit["device"].astype(str) == lane["label"]]
        s, e = iv.union(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64))
        assert lane["crit"]["n"] == s.size
        assert int(d.sum()) * unit == pytest.approx(int((e - s).sum()), abs=unit * max(s.size, 1))
    assert sum(lane["crit"]["n"] for lane in projected["lanes"]) > 0
    p = projector.project(list(drawn.what_if))
    assert f"{p.projected_step_ns / 1e6:,.3f} ms projected" in text
    assert "Critical path by cause" in text
    # the measured page lists each opportunity's projected saving, in the terminal's words
    assert "Opportunities, ranked by projected saving" in text
    flat = " ".join(text.split())
    for o in analysis.opportunities[:12]:
        if o.projected_saving_ns is not None and o.projected_saving_ns >= 0.01 * analysis.step_ns:
            share = o.projected_saving_ns / analysis.step_ns
            said = f"taken away: the step {duration(o.projected_saving_ns)} ({100 * share:.1f}%) shorter"
            assert " ".join(said.split()) in flat  # split() takes the NBSP between a number and its unit too
    # the measured page is the first; the title is still the measured job's
    assert "<title>moeprof report · cpu_moe_8dev" in text


@pytest.mark.slow
def test_report_what_if_and_no_projection(tmp_path):
    out = tmp_path / "r.html"
    res = invoke("report", CPU, "-o", out, "--what-if", "scale(kind=all-to-all)=0.5")
    assert res.exit_code == 0, res.output
    assert len(embedded(out.read_text())["inputs"]) == 2
    assert "scale(kind=all-to-all)=0.5" in out.read_text()
    res = invoke("report", CPU, "-o", out, "--no-projection")
    assert res.exit_code == 0 and len(embedded(out.read_text())["inputs"]) == 1
    res = invoke("report", CPU, "-o", out, "--what-if", "scale(nope)=1")
    assert res.exit_code == 2 and "scale(nope)=1" in res.stderr


@pytest.fixture(scope="module")
def ablation_pair(tmp_path_factory) -> tuple[Path, Path, dict]:
    """The simulated job (synthetic/counterfactual.py) and the same job run again with its all-to-all
    transfers halved: a measured ablation whose cause is known."""
    from synthetic.counterfactual import write_job

    base = tmp_path_factory.mktemp("ablation")
    write_job(base / "a", ranks=8, steps=3, layers=3, seed=4)
    _, rerun = write_job(base / "b", ranks=8, steps=3, layers=3, seed=4, change="half-all-to-all")
    return base / "a", base / "b", {"step_ns": rerun.step_times()}


@pytest.mark.slow
def test_diff_explains_a_halved_all_to_all(ablation_pair):
    a, b, truth = ablation_pair
    res = invoke("diff", a, b, "--json")
    assert res.exit_code == 0, res.output
    (e,) = json.loads(res.stdout)["explanations"]
    p = e["projection"]
    ratios = {c["what"]: c for c in p["changes"]}
    # the ledger splits both runs: the all-to-all's transfer (end minus last arrival) is what halved
    assert ratios["all-to-all transfer"]["ratio"] == pytest.approx(0.5, abs=0.005)
    assert ratios["compute"]["ratio"] == pytest.approx(1.0, abs=0.005)
    # B's measured step is the simulation's (mean over steps); the projection explains it within 5%
    assert e["measured_step_ms"] == pytest.approx(np.mean(truth["step_ns"]) / 1e6, rel=1e-6)
    assert abs(p["missed_fraction"]) < 0.05
    assert p["explained_ms"] == pytest.approx(e["reference_step_ms"] - p["projected_step_ms"])
    assert p["explained_ms"] > 0.5 * -e["step_change_ms"] > 0


@needs_chromium
def test_browser_draws_the_projected_timeline_and_its_critical_path(tmp_path):
    out = tmp_path / "r.html"
    res = invoke("report", CPU, "-o", out)
    assert res.exit_code == 0, res.output
    res = chromium(tmp_path, "--dump-dom", f"{out.as_uri()}#selftest")
    status = re.search(r'<span id="moeprof-status"([^>]*)>', res.stdout)
    assert status, f"page did not render: {res.stderr[-2000:]}"
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', status.group(1)))
    assert attrs["data-ok"] == "1", res.stdout[-3000:]
    assert attrs["data-timelines"] == "2" and attrs["data-lanes"] == "16"
    # every critical-path activity of the drawn lanes was decoded and painted
    crit = sum(lane["crit"]["n"] for lane in embedded(out.read_text())["inputs"][1]["lanes"])
    assert int(attrs["data-critical"]) == crit > 0
    assert attrs["data-selftest"] == "ok", attrs.get("data-selftest-detail")


def test_opportunities_panel_gives_each_projected_saving(result):
    text = rendered(result)
    assert "Opportunities (ranked by projected saving" in text
    step = result.step_ns
    flat = " ".join(text.replace("│", " ").split())  # the panel wraps lines
    for o in result.opportunities[:8]:
        if o.projected_saving_ns is None or o.projected_saving_ns < 0.01 * step:
            continue
        said = f"taken away: the step {terminal.spaced(duration(o.projected_saving_ns))}"
        assert f"{said} ({pct(o.projected_saving_ns / step)}) shorter (projected)" in flat


def test_the_asked_what_if_leads_the_table(job):
    _, projector = job
    terms = ["scale(kind=all-to-all)=0.25", "scale(bucket=compute)=0.8"]
    asked = analyze_paths([CPU], what_if=terms)
    assert [p.role for p in asked.projections[:2]] == ["straggler", "asked"]  # the JSON's order (spec §9)
    held = asked.projection("asked")
    assert held is not None and held.what_if == tuple(terms)
    assert same(held, projector.project(terms, figures=False))
    text = rendered(asked)
    assert text.splitlines()[0].startswith("Asked: --what-if " + " ".join(terms))  # answered first
    table = text[text.index("What would it buy") :]
    assert table.index(" ".join(terms)) < table.index("balance-router")
