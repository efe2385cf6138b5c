"""Spec §10's levers (issue 46): the roof term, the on-chip levers as opportunities, the TPU host gaps
projected, the one first-try chooser, the role gates of ``check``.

The synthetic chip's truth is written here by hand: a chain of ops per step on one TPU chip whose FLOPs and HBM
bytes are chosen against round peaks (200 TFLOP/s, 1,000 GB/s: 1 µs is 2e8 FLOPs or 1e6 bytes), so that each
op's time at its roof, and what every term and lever takes away, is a sum anyone can check.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli import app
from moeprof.core.analysis import Analysis, DeviceFigures, Figures, Opportunity, Projection, StepFigures
from moeprof.core.classify import classify
from moeprof.core.components import attach_components
from moeprof.core.events import make_table
from moeprof.core.roofline import ROLES, activity_counts, activity_roles, activity_roof_ns
from moeprof.core.scopes import attach_scopes
from moeprof.core.summary import choose_first_try, verdict
from moeprof.core.topology import attribute_links
from moeprof.core.trace import Trace, make_markers
from moeprof.reports.text import duration, pct, verdict_lines

from .helpers import SAMPLES

runner = CliRunner()
US = 1_000
PEAKS = {"tflops": 200.0, "hbm_gbps": 1000.0}  # 2e5 FLOPs and 1,000 bytes per ns
STEPS = 3
HOST_GAP = 150 * US  # the chip's idle between two step programs
NAN = float("nan")

# per step, back to back on the chip's one XLA Ops line: (name, scope, µs, FLOPs, HBM bytes), and by hand its role
# and its time at the roof, max(f / 2e5, b / 1e3) ns
CHAIN = [
    ("top_k_fusion", "jit(step)/jvp(layer0)/moe/router/top_k", 100, 0.0, 10e6),  # router, roof 10 µs
    ("gather_fusion", "jit(step)/jvp(layer0)/moe/gather", 300, 0.0, 60e6),  # permute, roof 60 µs
    ("sort.3", "jit(step)/jvp(layer0)/moe/sort", 50, NAN, NAN),  # permute, no counts: no roof
    ("ragged-dot", "jit(step)/jvp(layer0)/moe/moe_experts/ragged_dot_general", 400, 4e10, 1e6),  # experts, 200 µs
    ("convolution_fusion", "jit(step)/jvp(layer0)/shared_expert/dot_general", 300, 6e10, 1e6),  # shared, 300 µs
    ("scatter_custom_fusion", "jit(step)/transpose(jvp(layer0))/moe/scatter-add", 500, 0.0, 50e6),  # permute, 50
    ("gather_fusion.3", "jit(step)/jvp(layer0)/moe/combine/gather", 200, 0.0, 20e6),  # unpermute, roof 20 µs
    ("copy.7", "jit(step)/jvp(layer0)/mlp/copy", 30, 0.0, 40e6),  # other: roof 40 µs above its 30 µs, kept
]
ROLE_OF = ["router", "permute", "permute", "experts", "shared", "permute", "unpermute", "other"]
ROOF_US = [10, 60, None, 200, 300, 50, 20, 40]
STEP_US = sum(op[2] for op in CHAIN)  # 1,880 µs of ops per step, no idle inside a step


def chip_trace(chain: list[tuple[str, str, int, float, float]] = CHAIN, gap: int = HOST_GAP, lead: int = 0) -> Trace:
    """``STEPS`` steps of ``chain`` on one TPU chip: each step one program execution (the XLA Modules line) and
    one Steps window holding exactly its ops; ``gap`` of idle between programs, ``lead`` of it inside each
    program before its first op."""
    step_ns = sum(op[2] for op in chain) * US + lead
    rows = []
    for k in range(STEPS):
        t = k * (step_ns + gap) + lead
        for name, scope, us, f, b in chain:
            rows.append((name, scope, t, t + us * US, f, b))
            t += us * US
    names, scopes, starts, ends, flops, hbm = (list(x) for x in zip(*rows, strict=True))
    events = make_table(
        {
            "host": "vm",
            "device": "vm/TPU:0",
            "global_id": 0,
            "gpus_per_domain": 1,
            "stream": "XLA Ops",
            "name": names,
            "hlo_op": names,
            "scope": scopes,
            "start_ns": starts,
            "end_ns": ends,
            "activity": "kernel",
            "source": "xplane",
            "flops": flops,
            "bytes_accessed": hbm,
        }
    )
    starts_k = [k * (step_ns + gap) for k in range(STEPS)]
    markers = make_markers(
        host="vm",
        device="vm/TPU:0",
        kind=["step"] * STEPS + ["module"] * STEPS,
        name="jit_step",
        start_ns=[s + lead for s in starts_k] + starts_k,
        end_ns=[s + step_ns for s in starts_k] * 2,
        number=[*range(STEPS), *[-1] * STEPS],
    )
    trace = Trace(
        events=events,
        path="chip",
        format="xplane",
        markers=markers,
        framework="jax",
        device_peaks={"vm/TPU:0": PEAKS},
        device_kinds={"vm/TPU:0": "TPU"},
    )
    return attribute_links(attach_components(attach_scopes(classify(trace))))


@pytest.fixture(scope="module")
def chip() -> Analysis:
    return moeprof.analyze(chip_trace())


def asked(terms: list[str], trace: Trace | None = None) -> Projection:
    p = moeprof.analyze(trace or chip_trace(), what_if=terms).projection("asked")
    assert p is not None
    return p


# ---------------------------------------------------------------- per activity: counts, roof, role


def test_roles_roofs_and_counts_per_op() -> None:
    trace = chip_trace()
    events = trace.events.iloc[: len(CHAIN)]
    codes, values = activity_roles(events)
    assert [str(values[c]) for c in codes] == ROLE_OF
    f, b = activity_counts(events)
    roof = activity_roof_ns(f, b, PEAKS["tflops"] * 1e12, PEAKS["hbm_gbps"] * 1e9)
    want = [np.nan if r is None else r * US for r in ROOF_US]
    np.testing.assert_allclose(roof, want, rtol=1e-12)
    # a moeprof recount of a ragged dot comes before XLA's count
    recounted = events.assign(recounted_flops=np.where(np.arange(len(events)) == 3, 2e10, np.nan))
    assert activity_counts(recounted)[0][3] == 2e10 and activity_counts(recounted)[0][4] == 6e10
    # no peak known: no roof at all
    assert np.isnan(activity_roof_ns(f, b, None, None)).all()


@pytest.mark.parametrize(
    "scope, name, opcode, kind, bucket, role",
    [
        ("jit(step)/jvp(layer3)/moe/dispatch/ragged_all_to_all", "ragged_all_to_all.0", "ragged-all-to-all",
         "all-to-all", "memcpy", "dispatch"),  # the exchange itself, one chip's (a copy) as a group's
        ("jit(step)/jvp(layer3)/moe/dispatch/ragged_all_to_all", "broadcast.1", "broadcast", "", "compute",
         "permute"),  # the dispatch's local layout: its output buffer
        ("jit(step)/transpose(jvp(layer3))/moe/combine/ragged_all_to_all", "ragged_all_to_all.6",
         "ragged-all-to-all", "all-to-all", "comm", "combine"),
        ("jit(step)/jvp(layer3)/moe/combine/tk,tkh->th/dot_general", "fusion.2", "fusion", "", "compute",
         "unpermute"),  # the weighting by the router's probabilities
        ("jit(step)/jvp(layer3)/moe/argsort/sort", "sort", "sort", "", "compute", "permute"),
        ("jit(step)/jvp(layer3)/moe/router/dot_general", "fusion", "fusion", "", "compute", "router"),
        ("jit(step)/jvp(layer3)/attention/dot_general", "fusion", "fusion", "", "compute", "attention"),
        ("jit(step)/adam/mul", "fusion", "fusion", "", "compute", "optimizer"),
        ("", "ragged-dot.1", "ragged-dot", "", "compute", "experts"),  # no scope: the op says it
        ("", "moe_unpermute_kernel", "", "", "compute", "unpermute"),
        ("", "deep_ep::combine", "", "ep-combine", "comm", "combine"),
        ("jit(step)/jvp(layer3)/mlp/dot_general", "fusion.9", "fusion", "", "compute", "other"),
    ],
)  # fmt: skip
def test_role_from_the_scope_served_then_the_op(
    scope: str, name: str, opcode: str, kind: str, bucket: str, role: str
) -> None:
    table = pd.DataFrame(
        {"scope": [scope], "component": [""], "name": [name], "opcode": [opcode], "kind": [kind], "bucket": [bucket]}
    )
    codes, values = activity_roles(table)
    assert str(values[codes[0]]) == role
    assert set(ROLES) == set(values.tolist())


def test_a_backward_op_has_the_role_it_serves() -> None:
    """The scope the op serves (core.components) comes before its own: a backward op placed under its forward's
    scope, a weight update under its parameter's."""
    table = pd.DataFrame(
        {"scope": ["jit(step)/reduce_and"], "component": ["layer0/moe/moe_experts"], "name": ["is-finite_fusion"]}
    )
    codes, values = activity_roles(table)
    assert str(values[codes[0]]) == "experts"
    given = table.assign(role=["optimizer"])  # a roles pass that wrote the column first: it is read as it is
    codes, values = activity_roles(given)
    assert str(values[codes[0]]) == "optimizer"


# ---------------------------------------------------------------- the roof term, replayed by hand


def test_roof_term_on_the_chain_by_hand() -> None:
    # the permutation's ops: gather 300 -> 60, scatter-add 500 -> 50 µs, the sort without counts kept: the chain's
    # steps shorten by 690 µs each
    p = asked(["roof(role=permute)"])
    assert p.measured_step_ns == STEP_US * US
    assert p.saving_ns == (240 + 450) * US
    assert "have no FLOP or byte counts: kept" in p.note
    # an op whose roof lies above its time keeps its time (never longer): the copy's 40 µs roof vs its 30 µs
    assert asked(["roof(role=other)"]).saving_ns == 0
    # the whole step at its roof, op by op: the sum of what each op has above its roof
    above = sum(op[2] - r for op, r in zip(CHAIN, ROOF_US, strict=True) if r is not None and r < op[2])
    assert asked(["roof()"]).saving_ns == above * US
    # terms combine: the rest of the permutation taken away after its roof
    assert asked(["roof(role=permute)", "scale(role=permute)=0"]).saving_ns == (300 + 500 + 50) * US
    # filters: the backward pass alone, an op by its primitive, a role by its bound
    assert asked(["roof(role=permute,pass=backward)"]).saving_ns == 450 * US
    assert asked(["roof(op~scatter)"]).saving_ns == 450 * US
    assert asked(["roof(bound=compute)"]).saving_ns == 200 * US  # the ragged dot; the shared matmul is at its roof


@pytest.mark.parametrize(
    "term, said",
    [
        ("roof()=2", "roof takes no factor"),
        ("roof", "roof needs its filters in parentheses"),
        ("roof(role=permutes)", "role 'permutes' is not one of"),
        ("roof(pass=sideways)", "pass 'sideways' is not one of forward, backward"),
        ("roof(bound=latency)", "bound 'latency' is not one of compute, memory"),
        ("roof(op=scatter)", "op takes a pattern: op~REGEX"),
    ],
)
def test_bad_roof_terms_are_one_line_errors(term: str, said: str) -> None:
    res = runner.invoke(app, ["analyze", str(SAMPLES / "tpu_v5e_demo"), "--what-if", term])
    assert res.exit_code == 2 and said in res.output and len(res.output.strip().splitlines()) == 1, res.output


# ---------------------------------------------------------------- the levers, as opportunities


def test_levers_are_opportunities_with_their_replay_as_saving(chip: Analysis) -> None:
    by_name = {o.name: o for o in chip.opportunities if o.kind == "on-chip"}
    # the token movement: router 100 -> 10, gather 300 -> 60, scatter-add 500 -> 50, the unpermute 200 -> 20 µs
    glue = by_name["glue"]
    assert glue.evidence["terms"] == ["roof(role=router|permute|unpermute)"]
    assert glue.projected_saving_ns == (90 + 240 + 450 + 180) * US
    assert glue.saving_bound_ns == STEPS * glue.projected_saving_ns  # one chain: the bound is the replay's saving
    assert glue.evidence["time_per_step_ns"] == (100 + 300 + 50 + 500 + 200) * US
    assert glue.evidence["roof_per_step_ns"] == (10 + 60 + 50 + 20) * US  # of the ops with counts
    assert glue.evidence["bound"] == "memory"
    # the backward scatter-adds alone, and the ragged dot (compute-bound: 400 µs at 50% of the peak)
    assert by_name["scatter-backward"].projected_saving_ns == 450 * US
    experts = by_name["experts"]
    assert experts.projected_saving_ns == 200 * US and experts.evidence["flop_util"] == pytest.approx(0.5)
    # the shared expert's matmul runs at its roof: no lever; none under 5% of the step either
    assert set(by_name) == {"glue", "scatter-backward", "experts"}
    # ranked with the rest by projected saving, the host's idle between programs among them
    savings = [o.projected_saving_ns or 0 for o in chip.opportunities]
    assert savings == sorted(savings, reverse=True)
    kinds = [o.kind if o.kind != "on-chip" else o.name for o in chip.opportunities]
    assert kinds == ["glue", "scatter-backward", "experts", "host-gaps"]


def test_the_lever_is_its_own_what_if(chip: Analysis) -> None:
    """``roof(opportunity=N)`` of a lever is the lever's terms; each "what would it buy" row says so."""
    for n, o in enumerate(chip.opportunities[:3], 1):
        row = next(p for p in chip.projections if p.what_if == (f"roof(opportunity={n})",))
        assert row.saving_ns == o.projected_saving_ns
        assert row.label == f"opportunity {n} at its roof (below)"
        assert asked(list(o.evidence["terms"])).saving_ns == o.projected_saving_ns


def test_the_first_try_is_the_largest_lever_as_a_bound(chip: Analysis) -> None:
    v = verdict(chip)
    assert v is not None and v.first_try_of is chip.opportunities[0] and v.first_opportunity == 1
    line = verdict_lines(v)[1]
    saving = chip.opportunities[0].projected_saving_ns
    assert line.startswith("First try: bring the token movement around the experts nearer HBM bandwidth — ")
    assert f"projected to save up to {duration(saving)} of the {duration(STEP_US * US)} step" in line
    assert f"({pct(saving / (STEP_US * US))}) at its roof" in line


def test_a_lever_remedy_names_what_the_trace_shows(chip: Analysis) -> None:
    scatter = next(o for o in chip.opportunities if o.name == "scatter-backward")
    assert scatter.remedy_id == "tpu-onchip-scatter-backward" and "jax.custom_vjp" in scatter.remedy
    # the trace's evidence after the text: the scatter-add, its time and its share of HBM bandwidth
    assert "Seen in the trace: the backward of the permutations runs as scatter-adds (scatter_custom_fusion)" in (
        scatter.remedy
    )
    assert f"{500 / 1000:.1f} ms per step at {50e6 / (500e-6 * 1e12):.1%} of HBM bandwidth" in scatter.remedy
    glue = chip.opportunities[0]
    assert glue.remedy_id == "tpu-onchip-glue-scatter"  # no one-chip exchange here: not the skip-exchange remedy
    assert "--skip-one-device-exchange" not in glue.remedy
    # the ragged dot at 100 TFLOP/s (4e10 in 400 µs), the shared expert's matmul at 200 (6e10 in 300 µs): the
    # grouped matmul is held against the same chip's dense one
    experts = next(o for o in chip.opportunities if o.name == "experts")
    assert experts.remedy_id == "tpu-onchip-experts-below-dense"
    assert (
        "compute-bound ops run at 100.0 TFLOP/s, the program's other compute-bound ops (its dense matmuls) at 200.0"
        in (experts.remedy)
    )
    assert experts.title == "the routed experts' GEMMs below the chip's roof and below its dense matmuls"


# ---------------------------------------------------------------- the host's gaps, projected


def test_host_gaps_are_projected_by_closing_the_idle_between_programs(chip: Analysis) -> None:
    host = next(o for o in chip.opportunities if o.kind == "host-gaps")
    # 2 gaps of 150 µs between 3 programs: the steps' end moves by 300 µs, 100 µs per step
    assert host.projected_saving_ns == round((STEPS - 1) * HOST_GAP / STEPS)


def test_only_the_idle_between_programs_is_closed() -> None:
    """A program whose first op starts 20 µs after the program does: that start-up stays, only the 150 µs the
    chip waited between programs goes."""
    a = moeprof.analyze(chip_trace(lead=20 * US))
    host = next(o for o in a.opportunities if o.kind == "host-gaps")
    assert host.projected_saving_ns == round((STEPS - 1) * HOST_GAP / STEPS)


def test_host_bound_is_the_first_try_only_where_its_saving_is_the_largest() -> None:
    """An idle chip (gaps of 3 ms between 1.88 ms programs) is host-bound first; the busy one is not."""
    idle = moeprof.analyze(chip_trace(gap=3_000 * US))
    v = verdict(idle)
    assert v is not None and v.first_try_of is not None and v.first_try_of.kind == "host-gaps"
    assert verdict_lines(v)[1].startswith("First try: let the host dispatch the next step ahead of the device")


# ---------------------------------------------------------------- one chooser


def _analysis(opportunities: list[Opportunity], rows: list[Projection], steps: int = 2) -> Analysis:
    """A job of ``steps`` steps of 5 ms on one chip, with these opportunities and projections."""
    device = DeviceFigures(device="vm/TPU:0", host="vm", kind="TPU", span_ns=10_000_000, busy_ns=9_000_000)
    each = tuple(
        StepFigures(step=k, device="vm/TPU:0", host="vm", start_ns=k * 5_000_000, end_ns=(k + 1) * 5_000_000)
        for k in range(steps)
    )
    return Analysis(
        inputs=("x",),
        devices=(device,),
        total=Figures(span_ns=10_000_000, busy_ns=9_000_000),
        opportunities=tuple(opportunities),
        projections=tuple(rows),
        step_ns=5_000_000,
        steps=each,
    )


def _opportunity(kind: str, bound: int, projected: int | None) -> Opportunity:
    return Opportunity(kind, kind, kind, None, bound, bound, "exposed", {}, "", projected_saving_ns=projected)


def _row(n: int, saving: int, role: str = "opportunity") -> Projection:
    term = {"opportunity": f"scale(opportunity={n})=0", "router": "balance-router"}.get(role, "balance")
    return Projection((term,), 5_000_000, 5_000_000 - saving, saving, role=role)


def test_one_chooser_ranks_by_projected_saving() -> None:
    host, lever = _opportunity("host-gaps", 4_000_000, 300_000), _opportunity("on-chip", 2_000_000, 900_000)
    a = _analysis([lever, host], [_row(1, 900_000), _row(2, 300_000)])
    first = choose_first_try(a)
    assert first.number == 1 and first.projection is not None and first.projection.saving_ns == 900_000
    # the straggler fix above both: it is the first try
    a = _analysis([lever, host], [_row(1, 900_000), _row(2, 300_000), _row(0, 1_200_000, "straggler")])
    assert choose_first_try(a).projection is not None and choose_first_try(a).projection.role == "straggler"
    # an opportunity no replay measured (a job too large to project) counts by its §6 bound per step (2 ms of
    # its 4 ms over 2 steps) where it beats every projected saving; not where one beats it
    unprojected = _opportunity("host-gaps", 4_000_000, None)
    a = _analysis([lever, unprojected], [_row(1, 900_000)])
    assert choose_first_try(a).bounded is unprojected and choose_first_try(a).number == 2
    a = _analysis([lever, unprojected], [_row(1, 2_100_000)])
    assert choose_first_try(a).bounded is None and choose_first_try(a).number == 1


def test_the_report_draws_what_the_verdict_chose() -> None:
    """The projector's unasked change and the verdict's first try come from one chooser."""
    from moeprof.insight.projection.projector import Projector

    class Job:
        size = 10

    projector = Projector(Job())  # type: ignore[arg-type]
    two = (DeviceFigures(device="vm/TPU:0", host="vm", kind="TPU"), DeviceFigures(device="vm/TPU:1", host="vm"))
    # the router balanced buys the most: the page draws it
    a = _analysis([], [_row(0, 1_200_000, "router"), _row(0, 600_000, "straggler")]).with_(devices=two)
    v = verdict(a)
    assert v is not None and v.first_try is not None and v.first_try.role == "router"
    assert projector.unasked(a) == ["balance-router"]
    # an opportunity buys more: the verdict names it, and the page draws the straggler fix (balance)
    lever = _opportunity("on-chip", 2_000_000, 1_500_000)
    a = _analysis([lever], [_row(0, 1_200_000, "router"), _row(1, 1_500_000)]).with_(devices=two)
    assert choose_first_try(a).number == 1 and projector.unasked(a) == ["balance"]


# ---------------------------------------------------------------- check: a role's share and roof fraction


def _check(tmp_path: Path, *args: str) -> tuple[int, dict]:
    saved = tmp_path / "chip.json"
    if not saved.exists():
        saved.write_text(json.dumps(moeprof.analyze(chip_trace()).to_json()))
    res = runner.invoke(app, ["check", str(saved), *args, "--json"])
    return res.exit_code, json.loads(res.stdout) if res.exit_code in (0, 1) else {"error": res.output}


def test_role_gates(tmp_path: Path) -> None:
    permute_share = (300 + 50 + 500) / STEP_US  # the permutation's ops over the step, per step
    experts_roof = 200 / 400  # the ragged dot's time at its roof over its time
    code, doc = _check(
        tmp_path,
        "--max-role-share",
        f"permute={permute_share + 0.001:.4f}",
        "--min-roof-fraction",
        f"experts={experts_roof - 0.001:.4f}",
    )
    assert code == 0, doc
    share, roof = doc["gates"]
    assert share["name"] == "max-role-share[permute]" and share["value"] == pytest.approx(permute_share)
    assert roof["name"] == "min-roof-fraction[experts]" and roof["value"] == pytest.approx(experts_roof)
    code, doc = _check(tmp_path, "--max-role-share", f"permute={permute_share - 0.001:.4f}")
    assert code == 1 and not doc["passed"]
    code, doc = _check(tmp_path, "--min-roof-fraction", f"experts={experts_roof + 0.001:.4f}")
    assert code == 1 and doc["gates"][0]["sense"] == "min"
    # the permutation's roof fraction: its ops with counts (gather, scatter-add) at 110 of their 800 µs
    code, doc = _check(tmp_path, "--min-roof-fraction", "permute=0.1")
    assert code == 0 and doc["gates"][0]["value"] == pytest.approx(110 / 800)


def test_role_gates_from_a_config_file(tmp_path: Path) -> None:
    config = tmp_path / "gates.toml"
    config.write_text('max-role-share = {permute = "40%", router = 0.1}\nmin-roof-fraction = {experts = 0.4}\n')
    code, doc = _check(tmp_path, "--config", str(config))
    assert code == 1, doc  # the permutation's 45.2% of the step is over 40%
    by_name = {g["name"]: g["passed"] for g in doc["gates"]}
    assert by_name == {
        "max-role-share[permute]": False,
        "max-role-share[router]": True,
        "min-roof-fraction[experts]": True,
    }


@pytest.mark.parametrize(
    "args, said",
    [
        (["--max-role-share", "permutes=0.3"], "--max-role-share permutes: not a role; the roles are router"),
        (["--max-role-share", "permute"], "expected ROLE=FRACTION"),
        (["--max-role-share", "permute=30"], "a fraction is at most 1; write 0.3 or 30%"),
        (["--min-roof-fraction", "attention=0.5"], "the attention role has no time with FLOP or byte counts"),
    ],
)
def test_bad_role_gates_are_one_line_errors(tmp_path: Path, args: list[str], said: str) -> None:
    code, doc = _check(tmp_path, *args)
    assert code == 2 and said in doc["error"], doc


def test_a_role_gate_needs_the_roles(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    doc = moeprof.analyze(chip_trace()).to_json()
    del doc["roles"]
    old.write_text(json.dumps(doc))
    res = runner.invoke(app, ["check", str(old), "--max-role-share", "permute=0.5"])
    assert res.exit_code == 2 and "needs the time per MoE role" in res.output


# ---------------------------------------------------------------- real captures


def test_the_demo_captures_first_try_is_the_token_movement_as_a_bound() -> None:
    """The TPU v5e demo (dropless, one chip): its first try is the token movement at its roof, a bound; its
    remedy points at the two levers the demo measured where the trace shows their evidence."""
    a = moeprof.analyze_paths([SAMPLES / "tpu_v5e_ablation" / "base"])
    v = verdict(a)
    assert v is not None and v.first_try_of is not None and v.first_try_of.name == "glue"
    glue = v.first_try_of
    assert glue.remedy_id == "tpu-onchip-glue-one-chip"
    assert "--skip-one-device-exchange" in glue.remedy and "--permute-backward gather" in glue.remedy
    assert "Seen in the trace: " in glue.remedy and "over a group of one chip" in glue.remedy
    assert "projected to save up to" in verdict_lines(v)[1]
    # host-bound is no first try on a chip this busy: its saving is the replay's, a few ms of 137
    host = next(o for o in a.opportunities if o.kind == "host-gaps")
    assert host.projected_saving_ns is not None and host.projected_saving_ns < 0.02 * (a.step_ns or 0)


LEVERS = SAMPLES / "tpu_v5e_levers"


@pytest.mark.parametrize("lever", ["gather", "skipx", "lever"])
def test_the_token_movement_bound_holds_what_the_demos_levers_measured(lever: str) -> None:
    """The demo's two levers, captured on the TPU (sample_traces/tpu_v5e_levers): the step each saved against the
    base capture is at most the bound moeprof gives the token movement on that base; and the evidence a lever
    removes is gone from its capture (the remedies that named it no longer apply)."""
    base = moeprof.analyze_paths([SAMPLES / "tpu_v5e_ablation" / "base"])
    after = moeprof.analyze_paths([LEVERS / lever])
    glue = next(o for o in base.opportunities if o.name == "glue")
    assert base.step_ns is not None and after.step_ns is not None and glue.projected_saving_ns is not None
    measured = base.step_ns - after.step_ns
    assert measured > 0 and glue.projected_saving_ns >= measured
    names = {o.name for o in after.opportunities}
    kinds = {o.kind for o in after.opportunities}
    if lever in ("gather", "lever"):  # no scatter-add in the permutations' backward any more
        assert "scatter-backward" not in names
    if lever in ("skipx", "lever"):  # no exchange over one chip any more
        assert "local-collectives" not in kinds
        assert "--skip-one-device-exchange" not in next(o for o in after.opportunities if o.name == "glue").remedy


def test_diff_keeps_each_lever_apart() -> None:
    """``diff`` sums opportunities' bounds by kind, an on-chip lever by lever (they overlap: the token movement
    holds its backward scatter-adds): base against both levers, each row its lever's bound per step."""
    base = moeprof.analyze_paths([SAMPLES / "tpu_v5e_ablation" / "base"])
    res = runner.invoke(app, ["diff", str(SAMPLES / "tpu_v5e_ablation" / "base"), str(LEVERS / "lever"), "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r["values"] for r in json.loads(res.stdout)["rows"] if r["section"] == "opportunities"}
    steps = len({s.step for s in base.steps})
    for o in base.opportunities:
        if o.kind == "on-chip":
            assert rows[f"on-chip {o.name} saving bound"][0] == pytest.approx(o.saving_bound_ns / steps / 1e6)
    assert rows["on-chip scatter-backward saving bound"][1] == 0  # gone with the lever
