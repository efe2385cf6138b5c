"""A real batch ablation on one TPU v5e chip, held against what the chip measured (sample_traces/tpu_v5e_ablation:
the demo at 16,384 tokens per step, then at 8,192). The ``tokens`` term decides from the first capture's HLO
shapes which ops scale with the tokens; XLA's own program for half the tokens (the second capture's HLO) says
which ops' shapes did change: the two must agree, and the projection from the first capture must land within
5% of the second's measured step (issue 48; each op timed by its shapes and where its arrays sit, .terms.resize)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import moeprof
from moeprof.core.hlo import HloModule, shape_dims
from moeprof.core.timeline import TimelineOptions
from moeprof.pipeline import Request, run

from .helpers import SAMPLES

ABLATION = SAMPLES / "tpu_v5e_ablation"
BASE, HALF = ABLATION / "base", ABLATION / "tok8192"
TOLERANCE = 0.05  # issue 48: within 5% of the measured step (issue 40's 10% before the ops were resized)


@pytest.fixture(scope="module")
def base():  # the first capture, its analysis asked for half the tokens, its replay table and its HLO
    result = run(Request([BASE], what_if=["tokens=0.5"], timeline=TimelineOptions(), traces=True))
    assert result.projector is not None
    (trace,) = result.traces
    return result.analysis, result.projector.job, trace


@pytest.fixture(scope="module")
def half():
    result = run(Request([HALF], timeline=TimelineOptions(), traces=True))
    return result.analysis, result.traces[0]


def _program(trace: moeprof.Trace) -> HloModule:
    (module,) = {id(m): m for m in trace.hlo.values()}.values()  # the demo's one program, jit_step
    return module


def _dims(module: HloModule, op: str) -> list[list[tuple[int, ...]]]:
    inst = module.instructions[op]
    return [shape_dims(inst.shape), *(shape_dims(module.instructions[o].shape) for o in inst.operands)]


def test_the_projection_of_half_the_tokens_lands_on_the_measured_step(base, half) -> None:
    analysis, _, _ = base
    (asked,) = [p for p in analysis.projections if p.role == "asked"]
    measured = half[0].step_ns
    assert measured is not None
    assert abs(asked.projected_step_ns - measured) <= TOLERANCE * measured, (asked.projected_step_ns, measured)
    # not everything scaled: the weights' updates, the optimizer and the casts of the parameters held
    (found,) = asked.selection
    assert found["batch"] == ["T = 16,384 (the leading dimension of x.1 f32[16384,2048], y.1 f32[16384,2048])"]
    assert found["fixed_ns"]["weights"] > 0.08 * asked.measured_step_ns
    # one TPU core runs one op at a time: the step loses what the scaled ops lost, which is more than half their
    # time (arrays of half the size sit on chip: row gathers from a table there, copies that write there)
    scaled = sum(found["scaled_ns"].values())
    assert asked.projected_step_ns == pytest.approx(asked.measured_step_ns - scaled + found["projected_ns"], rel=1e-3)
    assert found["projected_ns"] < 0.5 * scaled and found["on_chip_ns"] > 0.1 * scaled
    # the JSON says the same, and a saved analysis reads it back
    (saved,) = [p for p in analysis.to_json()["projections"] if p.get("role") == "asked"]
    held = sum(found["fixed_ns"].values()) / 1e6
    assert saved["selection"] == [found] and f"held {held:.3g} ms (weights" in saved["note"]
    back = moeprof.Analysis.from_json(json.loads(json.dumps(analysis.to_json())))
    assert [p.selection for p in back.projections if p.role == "asked"] == [(found,)]


def test_the_ops_it_scales_are_those_whose_shapes_xla_changed(base, half) -> None:
    """Independent truth: the same op in XLA's program for 8,192 tokens (same name, same opcode) has other
    dimensions exactly where it carries the tokens; the ops both programs hold account for 99.7% of the time."""
    _, job, trace = base
    program, halved = _program(trace), _program(half[1])
    names = job.table["name"].astype(str).to_numpy()
    scaled_class = job.table["tokens"].astype(str).to_numpy()
    duration = job.graph.duration.astype(np.float64)
    agree = disagree = 0.0
    wrong = []
    for op in np.unique(names).tolist():
        rows = names == op
        inst, other = program.instructions.get(op), halved.instructions.get(op)
        if inst is None or other is None or inst.opcode != other.opcode:
            continue
        changed = _dims(program, op) != _dims(halved, op)
        (cls,) = set(scaled_class[rows].tolist())
        scaled = cls not in ("weights", "other")
        time = float(duration[rows].sum())
        if changed == scaled:
            agree += time
        else:
            disagree += time
            wrong.append((op, cls, time))
    assert agree + disagree >= 0.99 * float(duration.sum())  # the ops both programs hold: nearly all the time
    # the ops it gets wrong are the weights' async copies, whose tuple carries a context that differs: < 1%
    assert disagree <= 0.01 * float(duration.sum()), sorted(wrong, key=lambda w: -w[2])[:5]


def test_the_routed_rows_are_the_experts_and_their_exchanges(base) -> None:
    """Known from the model (the demo's scopes): the routed experts' ragged dots, the dispatch and combine
    exchanges carry the routed rows (2 x 16,384, top-2); the shared expert does not."""
    _, job, _ = base
    classes = job.table["tokens"].astype(str).to_numpy()
    scope = job.table["scope"].astype(str).to_numpy()
    names = job.table["name"].astype(str).to_numpy()
    experts = np.array([bool(re.search(r"moe_experts/ragged_dot", s)) for s in scope])
    exchanges = np.array([n.startswith("ragged_all_to_all") for n in names])
    shared = np.array([bool(re.search(r"shared_expert/dot_general$", s)) for s in scope])
    assert experts.any() and exchanges.any() and shared.any()
    assert set(classes[experts].tolist()) == {"routed matmul"}
    assert set(classes[exchanges].tolist()) == {"routed communication"}
    assert not any(c.startswith("routed") for c in classes[shared].tolist())
    projected = moeprof.analyze_paths([BASE], jobs=1, what_if=["tokens(routed)=0.5"])
    (asked,) = [p for p in projected.projections if p.role == "asked"]
    (found,) = asked.selection
    assert found["rows"] == "routed" and found["routed_ns"] == sum(found["scaled_ns"].values()) > 0
    assert any(k.endswith("(not routed)") for k in found["fixed_ns"])


def test_a_filter_that_selects_nothing_is_named_not_blamed_on_the_hlo(base) -> None:
    """Issue 49: `tokens(scope~nomatch)=0.5` on this capture, whose HLO the term reads, said "no op of an XLA
    program whose HLO the capture holds": the filters chose nothing, and the note says which."""
    from moeprof.insight.projection import Projector

    analysis, job, _ = base
    projector = Projector(job, analysis.opportunities)
    one = projector.project(["tokens(scope~nomatch)=0.5"], figures=False, path=False)
    assert one.selected == 0 and one.projected_step_ns == one.measured_step_ns
    assert one.note == "tokens' filter scope~nomatch selects no activity: nothing scaled"
    two = projector.project(["tokens(routed,name~^nomatch$,bucket=compute)=0.5"], figures=False, path=False)
    assert two.note == "tokens' filters name~^nomatch$, bucket=compute select no activity together: nothing scaled"
    # a filter that selects the ops is read from their HLO, as before
    some = projector.project(["tokens(scope~layer0)=0.5"], figures=False, path=False)
    assert some.selected > 0 and some.note.startswith("tokens x0.5, T = 16,384")
