"""``diff``'s explanation of a measured change: where the step went, per JAX scope, pass and op, and the
residual no part carries (idle − overlap). A hand-made TPU pair whose every part is known here, a brute
force of the identity over random pairs, the fallback on GPU traces without scopes, and (where this machine
has them) the real TPU v5e captures."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli.main import app
from moeprof.core.steps import find_steps
from synthetic.tpu import AsyncOp, Chip, Op, write_xplane

from .helpers import SAMPLES

runner = CliRunner()

AG_START = (
    "%all-gather-start.{n} = (f32[256]{{0}}, f32[512]{{0}}) all-gather-start(f32[256]{{0}} %p.1), channel_id=1, "
    "replica_groups={{{{0,1}}}}, dimensions={{0}}"
)
AG_DONE = "%all-gather-done.{n} = f32[512]{{0}} all-gather-done((f32[256]{{0}}, f32[512]{{0}}) %all-gather-start.{n})"
OPCODE = {"custom-call": "custom-call", "data formatting": "copy"}  # the rest are fusions


@dataclass(frozen=True)
class Item:
    tf_op: str  # the JAX scope path ("" none)
    category: str
    dur: int
    gather: str = ""  # "start" / "done": the async all-gather's -start or -done op


def expression(n: int, category: str) -> str:
    opcode = OPCODE.get(category, "fusion")
    name = "copy" if opcode == "copy" else opcode
    return f"%{name}.{n} = f32[128]{{0}} {opcode}(f32[128]{{0}} %x)"


def lay(recipe: list[Item], steps: int, gap: int, offsets: tuple[int, ...], first_op: int, period: int) -> list[Chip]:
    """Each chip runs ``recipe`` once per step, op after op with ``gap`` ns between, ``offsets[c]`` ns after the
    step's base time; ops are numbered from ``first_op`` (a recompiled program numbers them anew). The
    all-gather's -start and -done ops make one async interval from the -start's start to the -done's end."""
    chips = []
    for c, offset in enumerate(offsets):
        ops: list[Op] = []
        asyncs: list[AsyncOp] = []
        modules = []
        for k in range(steps):
            t = 1_000 + k * period + offset
            first = t
            start_op: Op | None = None
            for i, item in enumerate(recipe):
                n = first_op + k * 100 + i
                if item.gather == "start":
                    start_op = Op(AG_START.format(n=n), t, item.dur, "all-gather-start", tf_op=item.tf_op + ":")
                    ops.append(start_op)
                elif item.gather == "done":
                    assert start_op is not None
                    done = AG_DONE.format(n=start_op.name.split(".")[-1])
                    ops.append(Op(done, t, item.dur, "all-gather-done"))
                    asyncs.append(AsyncOp(start_op, done.split(" = ")[0].lstrip("%"), start_op.start, t + item.dur))
                else:
                    tf_op = item.tf_op + ":" if item.tf_op else ""
                    ops.append(Op(expression(n, item.category), t, item.dur, item.category, tf_op=tf_op))
                t += item.dur + gap
            modules.append((first, t - gap))
        chips.append(Chip(c, ops, asyncs, modules))
    return chips


A_RECIPE = [
    Item("jit(step)/jvp(layer0)/experts/dot_general", "convolution fusion", 3000),
    Item("jit(step)/jvp(layer0)/router/reduce_sum", "loop fusion", 400),
    Item("jit(step)/jvp(layer1)/experts/dot_general", "convolution fusion", 3000),
    Item("jit(step)/jvp(layer1)/router/reduce_sum", "loop fusion", 400),
    Item("jit(step)/transpose(jvp(layer0))/experts/dot_general", "convolution fusion", 5000),
    Item("jit(step)/adam/sub", "loop fusion", 600),
    Item("", "data formatting", 200),  # a copy XLA made outside any scope
]
B_RECIPE = [
    Item("jit(step)/jvp(layer0)/experts/ragged_dot_general/ragged-dot-none", "custom-call", 1500),
    Item("jit(step)/jvp(layer0)/router/reduce_sum", "loop fusion", 300),
    Item("jit(step)/jvp(layer0)/unpermute/scatter-add", "custom fusion", 1200),
    Item("jit(step)/jvp(layer1)/experts/ragged_dot_general/ragged-dot-none", "custom-call", 1500),
    Item("jit(step)/jvp(layer1)/router/reduce_sum", "loop fusion", 300),
    Item("jit(step)/jvp(layer1)/unpermute/scatter-add", "custom fusion", 1200),
    Item("jit(step)/grads/all_gather", "", 10, gather="start"),
    Item("jit(step)/transpose(jvp(layer0))/experts/dot_general", "convolution fusion", 5000),
    Item("", "", 20, gather="done"),
    Item("jit(step)/adam/sub", "loop fusion", 2600),
]
A_GAP, B_GAP, CHIP1_OFFSET, PERIOD = 100, 250, 300, 50_000


@pytest.fixture(scope="module")
def tpu_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A: 2 chips x 2 steps of a padded MoE step; B: 2 chips x 3 steps of a dropless one, recompiled (other op
    numbers), with an async all-gather over the backward expert matmul; chip 1 starts each step 300 ns later."""
    base = tmp_path_factory.mktemp("explain")
    a, b = base / "a" / "tpuhost.xplane.pb", base / "b" / "tpuhost.xplane.pb"
    a.parent.mkdir()
    b.parent.mkdir()
    write_xplane(a, "tpuhost", lay(A_RECIPE, 2, A_GAP, (0, CHIP1_OFFSET), first_op=1, period=PERIOD))
    write_xplane(b, "tpuhost", lay(B_RECIPE, 3, B_GAP, (0, CHIP1_OFFSET), first_op=5_000, period=PERIOD))
    return a.parent, b.parent


def explain(a: Path, b: Path, *args: str) -> dict:
    res = runner.invoke(app, ["diff", str(a), str(b), "--json", *args])
    assert res.exit_code == 0, res.output
    (e,) = json.loads(res.stdout)["explanations"]
    return e


def by_key(e: dict) -> dict[tuple[str, bool, str], dict]:
    return {(p["scope"], p["backward"], p["op"]): p for p in e["parts"]}


# per device and step, by hand from the recipes (every chip and step alike, so per-run sums over devices x
# steps divide back to one recipe); the all-gather is one interval [-start's start, -done's end)
AG_NS = 10 + B_GAP + 5000 + B_GAP + 20
PARTS_NS = {  # (scope, backward, op): (A ns, B ns)
    ("layer*/experts", False, "convolution fusion"): (3000 + 3000, 0),
    ("layer*/experts", False, "custom-call"): (0, 1500 + 1500),
    ("layer*/router", False, "loop fusion"): (400 + 400, 300 + 300),
    ("layer*/unpermute", False, "custom fusion"): (0, 1200 + 1200),
    ("layer*/experts", True, "convolution fusion"): (5000, 5000),
    ("grads", False, "all-gather"): (0, AG_NS),
    ("adam", False, "loop fusion"): (600, 2600),
    ("(no scope)", False, "data formatting"): (200, 0),
}
CHANGES = {
    ("layer*/experts", False, "convolution fusion"): "gone",
    ("layer*/experts", False, "custom-call"): "new",
    ("layer*/router", False, "loop fusion"): "cheaper",
    ("layer*/unpermute", False, "custom fusion"): "new",
    ("layer*/experts", True, "convolution fusion"): "same",
    ("grads", False, "all-gather"): "new",
    ("adam", False, "loop fusion"): "dearer",
    ("(no scope)", False, "data formatting"): "gone",
}
A_ACCUMULATED = sum(a for a, _ in PARTS_NS.values())  # 12,600: one op at a time, busy the same
B_ACCUMULATED = sum(b for _, b in PARTS_NS.values())  # 19,130
B_BUSY = B_ACCUMULATED - 5000  # the backward matmul runs under the all-gather: 5,000 ns overlap
# a step's work: chip 0's first start to chip 1's last end (it starts 300 ns later); the all-gather's -start and
# -done ops are ops of the chip's line, inside the interval, not counted apart
A_WORK = CHIP1_OFFSET + sum(i.dur for i in A_RECIPE) + (len(A_RECIPE) - 1) * A_GAP  # 13,500
B_WORK = CHIP1_OFFSET + sum(i.dur for i in B_RECIPE) + (len(B_RECIPE) - 1) * B_GAP  # 16,180
# the step (spec §5: the chips' Steps line as it is): step 0 from module 0's start, so its work; every later step
# from chip 0's previous module end (its idle between programs included) to chip 1's module end, a period and
# chip 1's lag; the mean over the run's steps, rounded to the ns
A_STEP = round((A_WORK + (PERIOD + CHIP1_OFFSET)) / 2)  # 31,900
B_STEP = round((B_WORK + 2 * (PERIOD + CHIP1_OFFSET)) / 3)  # 38,927


def test_every_part_by_hand(tpu_pair):
    e = explain(*tpu_pair)
    got = by_key(e)
    assert set(got) == set(PARTS_NS)
    for key, (a_ns, b_ns) in PARTS_NS.items():
        part = got[key]
        assert (part["reference_ms"], part["run_ms"]) == (pytest.approx(a_ns / 1e6), pytest.approx(b_ns / 1e6)), key
        assert part["delta_ms"] == pytest.approx((b_ns - a_ns) / 1e6), key
        assert part["change"] == CHANGES[key], key
    # matched across a recompilation: fusion.5xxx in B is fusion.x in A, and the pass is its own part
    assert got[("layer*/experts", True, "convolution fusion")]["delta_ms"] == 0
    # what each part is, in JAX's words
    assert got[("layer*/unpermute", False, "custom fusion")]["primitives"] == ["scatter-add"]
    assert got[("layer*/experts", False, "custom-call")]["primitives"] == ["ragged_dot_general"]
    # ranked by |delta|: the padded expert matmuls' 6,000 ns first
    assert [abs(p["delta_ms"]) for p in e["parts"]] == sorted((abs(p["delta_ms"]) for p in e["parts"]), reverse=True)
    assert (e["parts"][0]["scope"], e["parts"][0]["op"]) == ("layer*/experts", "convolution fusion")
    assert e["scoped"] and e["devices"] == [2, 2] and e["steps"] == [2, 3]


def test_the_identity_by_hand(tpu_pair):
    e = explain(*tpu_pair)
    assert e["step"]["reference_ms"] == pytest.approx(A_STEP / 1e6) and e["step"]["run_ms"] == pytest.approx(
        B_STEP / 1e6
    )
    assert e["parts_delta_ms"] == pytest.approx((B_ACCUMULATED - A_ACCUMULATED) / 1e6)
    # residual: B_STEP - A_STEP - (B_ACCUMULATED - A_ACCUMULATED) = 7,027 - 6,530 = 497 ns
    assert e["residual_ms"] == pytest.approx(((B_STEP - A_STEP) - (B_ACCUMULATED - A_ACCUMULATED)) / 1e6)
    # = Δ idle − Δ overlap: idle 19,300 -> 24,797 per device and step (the step less the busy time: the gaps
    # under the all-gather are busy); overlap 0 -> 5,000 (the backward matmul under the all-gather)
    idle_a, idle_b = A_STEP - A_ACCUMULATED, B_STEP - B_BUSY
    assert e["idle"]["delta_ms"] == pytest.approx((idle_b - idle_a) / 1e6)
    assert e["overlap"]["delta_ms"] == pytest.approx(5000 / 1e6)
    assert e["residual_ms"] == pytest.approx((idle_b - idle_a - 5000) / 1e6)
    # the step the explanation starts from is the one the diff table shows
    doc = json.loads(runner.invoke(app, ["diff", *map(str, tpu_pair), "--json"]).stdout)
    step_row = next(r for r in doc["rows"] if r["name"] == "step time")
    assert step_row["values"] == [pytest.approx(A_STEP / 1e6), pytest.approx(B_STEP / 1e6)]


def test_the_terminal_table_ranks_and_sums_the_rest(tpu_pair):
    res = runner.invoke(app, ["diff", *map(str, tpu_pair), "--top", "3"], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    text = res.stdout
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("Where B's step went against A's"))
    table = lines[head:]
    # the three largest changes, then the other five summed: by hand from PARTS_NS
    deltas = sorted(((b - a) for a, b in PARTS_NS.values()), key=abs, reverse=True)
    rest = next(line for line in table if "5 more parts" in line)
    assert f"{sum(deltas[3:]) / 1e6:+,.3f}" in rest
    assert any("gone" in line and "layer*/experts" in line and "convolution fusion" in line for line in table[:8])
    step = next(line for line in table if line.strip().startswith("step "))
    assert f"{A_STEP / 1e6:,.3f}" in step and f"{(B_STEP - A_STEP) / 1e6:+,.3f}" in step
    # the totals' words on one row each where the room allows (not folded under a narrow scope column)
    assert any("all parts: activity time" in line for line in table)
    assert any("residual: idle − overlap" in line for line in table)
    words = " ".join(text.split())
    assert "residual" in words and "fully" not in words
    assert f"idle {(B_STEP - B_BUSY - (A_STEP - A_ACCUMULATED)) / 1e6:+,.3f} ms less overlap +0.005 ms" in words


# ---------------------------------------------------------------- the identity, by brute force


def brute_force(path: Path) -> dict[str, float]:
    """Per device and step, one activity at a time: the step (mean over steps of the job's window, its devices'
    §5 windows from the earliest start to the latest end, rounded), accumulated time, busy time (a union merged
    interval by interval)."""
    (trace,) = moeprof.load(path)
    events = trace.events
    windows: dict[str, list[tuple[int, int, int]]] = {}
    found = find_steps(trace)
    for dev, step, lo, hi in zip(found["device"].astype(str), found["step"], found["start_ns"], found["end_ns"]):
        windows.setdefault(dev, []).append((int(step), int(lo), int(hi)))
    by_device: dict[str, list[tuple[int, int, int]]] = {}  # device -> (step, start, end)
    for dev, start, end in zip(events["device"].astype(str), events["start_ns"], events["end_ns"]):
        for step, lo, hi in windows.get(dev, []):
            if lo <= start < hi:
                by_device.setdefault(dev, []).append((step, int(start), int(max(end, start))))
    steps = sorted({step for rows in windows.values() for step, _, _ in rows})
    devices = sorted(by_device)
    spans, accumulated, busy = [], 0, 0
    for step in steps:
        bounds = [(lo, hi) for rows in windows.values() for st, lo, hi in rows if st == step]
        spans.append(max(hi for _, hi in bounds) - min(lo for lo, _ in bounds))
        for d in devices:
            mine = sorted((s, e) for st, s, e in by_device[d] if st == step)
            accumulated += sum(e - s for s, e in mine)
            reach = None
            for s, e in mine:
                if reach is None or s >= reach:
                    busy += e - s
                    reach = e
                elif e > reach:
                    busy += e - reach
                    reach = e
    per = len(devices) * len(steps)
    step_ns = round(float(np.mean(spans)))
    return {"step": step_ns, "accumulated": accumulated / per, "busy": busy / per}


def assert_identity(e: dict, a: dict[str, float], b: dict[str, float]) -> None:
    """The explanation against the brute force of both runs: steps, activity and busy time, and the identity
    B step − A step = Σ parts' Δ + residual, residual = Δ idle − Δ overlap, to far below a ns."""
    ns = 1e-6  # ms
    assert e["step"]["reference_ms"] == pytest.approx(a["step"] * ns, abs=1e-9)
    assert e["step"]["run_ms"] == pytest.approx(b["step"] * ns, abs=1e-9)
    assert e["accumulated"]["delta_ms"] == pytest.approx((b["accumulated"] - a["accumulated"]) * ns, abs=1e-9)
    assert e["busy"]["delta_ms"] == pytest.approx((b["busy"] - a["busy"]) * ns, abs=1e-9)
    step_delta = (b["step"] - a["step"]) * ns
    assert sum(p["delta_ms"] for p in e["parts"]) + e["residual_ms"] == pytest.approx(step_delta, abs=1e-9)
    assert sum(p["delta_ms"] for p in e["parts"]) == pytest.approx(e["parts_delta_ms"], abs=1e-9)
    idle = (b["step"] - b["busy"]) - (a["step"] - a["busy"])
    overlap = (b["accumulated"] - b["busy"]) - (a["accumulated"] - a["busy"])
    assert e["residual_ms"] == pytest.approx((idle - overlap) * ns, abs=1e-9)
    assert e["idle"]["delta_ms"] == pytest.approx(idle * ns, abs=1e-9)
    assert e["overlap"]["delta_ms"] == pytest.approx(overlap * ns, abs=1e-9)


def random_recipe(rng: np.random.Generator, async_gather: bool) -> list[Item]:
    scopes = ["jit(step)/jvp(layer0)/experts/dot_general", "jit(step)/jvp(layer1)/experts/dot_general",
              "jit(step)/transpose(jvp(layer0))/attn/dot_general", "jit(step)/adam/mul", ""]  # fmt: skip
    cats = ["convolution fusion", "loop fusion", "custom fusion", "data formatting"]
    items = [Item(str(rng.choice(scopes)), str(rng.choice(cats)), int(rng.integers(1, 4000))) for _ in range(8)]
    if async_gather:
        at = int(rng.integers(0, 5))
        items[at:at] = [Item("jit(step)/grads/all_gather", "", int(rng.integers(1, 50)), gather="start")]
        items.insert(at + 3, Item("", "", int(rng.integers(1, 500)), gather="done"))
    return items


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_identity_holds_to_the_ns_by_brute_force(tmp_path, seed):
    rng = np.random.default_rng(seed)
    paths = []
    for name, steps in (("a", 2), ("b", 3)):
        path = tmp_path / name / "tpuhost.xplane.pb"
        path.parent.mkdir()
        offsets = (0, int(rng.integers(0, 900)))
        chips = lay(random_recipe(rng, name == "b"), steps, int(rng.integers(0, 400)), offsets, 1, period=80_000)
        write_xplane(path, "tpuhost", chips)
        paths.append(path)
    e = explain(paths[0].parent, paths[1].parent)
    assert_identity(e, brute_force(paths[0]), brute_force(paths[1]))


# ---------------------------------------------------------------- GPU traces without scopes


@pytest.fixture(scope="module")
def kineto_pair(tmp_path_factory) -> tuple[Path, Path]:
    """The simulated 8-rank PyTorch job (synthetic/counterfactual.py) and the same job with its all-to-all
    transfers halved: Kineto traces, no JAX scopes, no HLO."""
    from synthetic.counterfactual import write_job

    base = tmp_path_factory.mktemp("kineto")
    write_job(base / "a", ranks=8, steps=3, layers=3, seed=4)
    write_job(base / "b", ranks=8, steps=3, layers=3, seed=4, change="half-all-to-all")
    return base / "a", base / "b"


def kernel_parts(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per kernel name (compute, copies) or collective kind (comm), one activity at a time: ns per device and
    step over the activities of the steps, and their calls."""
    total: dict[str, float] = {}
    calls: dict[str, float] = {}
    devices, steps = set(), set()
    for trace in moeprof.load(sorted(path.glob("*.pt.trace.json.gz"))):
        windows = find_steps(trace)
        steps |= set(windows["step"].astype(int))
        ev = trace.events
        for dev, name, bucket, kind, s, e in zip(ev["device"].astype(str), ev["name"].astype(str),
                                                ev["bucket"].astype(str), ev["kind"].astype(str),
                                                ev["start_ns"], ev["end_ns"]):  # fmt: skip
            mine = windows[windows["device"] == dev]
            if not ((mine["start_ns"] <= s) & (s < mine["end_ns"])).any():
                continue
            devices.add(dev)
            key = kind if bucket == "comm" and kind else name
            total[key] = total.get(key, 0) + (e - s)
            calls[key] = calls.get(key, 0) + 1
    per = len(devices) * len(steps)
    return {k: v / per for k, v in total.items()}, {k: v / per for k, v in calls.items()}


def test_without_scopes_the_parts_are_kernels_and_collective_kinds(kineto_pair):
    e = explain(*kineto_pair)
    assert not e["scoped"] and "kernel name" in e["matched_by"]
    a, a_calls = kernel_parts(kineto_pair[0])
    b, b_calls = kernel_parts(kineto_pair[1])
    got = {p["op"]: p for p in e["parts"]}
    assert set(got) == set(a) | set(b)
    for key in got:
        assert got[key]["scope"] == "(no scope)"
        assert got[key]["reference_ms"] == pytest.approx(a.get(key, 0) / 1e6, abs=1e-9), key
        assert got[key]["run_ms"] == pytest.approx(b.get(key, 0) / 1e6, abs=1e-9), key
        assert got[key]["reference_calls"] == pytest.approx(a_calls.get(key, 0)), key
        assert got[key]["run_calls"] == pytest.approx(b_calls.get(key, 0)), key
    # the change the simulation made: the all-to-all got cheaper, the compute kernels did not move
    assert got["all-to-all"]["change"] == "cheaper" and got["all-to-all"]["delta_ms"] < 0
    assert all(p["delta_ms"] == pytest.approx(0, abs=1e-9) for k, p in got.items() if k != "all-to-all")
    assert e["parts_delta_ms"] + e["residual_ms"] == pytest.approx(e["step_change_ms"], abs=1e-9)
    res = runner.invoke(app, ["diff", *map(str, kineto_pair)], env={"COLUMNS": "160"})
    words = " ".join(res.stdout.split())
    assert "by kernel and collective kind: the traces have no JAX scopes" in words and "fully" not in words


# ---------------------------------------------------------------- real TPU captures

MOE_STEP = SAMPLES / "tpu_v5e_moe_step"


@pytest.fixture(scope="module")
def moe_step_pair(tmp_path_factory) -> tuple[Path, Path]:
    """The real TPU v5e pair (sample_traces/tpu_v5e_moe_step): a, capacity-padded one-hot einsums; b,
    dropless ragged_dot with a scatter-add; decompressed (moeprof reads XPlanes uncompressed)."""
    base = tmp_path_factory.mktemp("moe_step")
    out = []
    for run in ("a", "b"):
        folder = base / run
        folder.mkdir()
        (folder / "runsc.xplane.pb").write_bytes(gzip.decompress((MOE_STEP / run / "runsc.xplane.pb.gz").read_bytes()))
        out.append(folder)
    return out[0], out[1]


def scope_time(path: Path, category: str, pattern: str) -> float:
    """ns per step of the activities of ``category`` whose raw scope path (tf_op) matches ``pattern``, over the
    capture's steps, one activity at a time (one chip: per device and step is per step)."""
    (trace,) = moeprof.load(path)
    windows = find_steps(trace)
    bounds = list(zip(windows["start_ns"].tolist(), windows["end_ns"].tolist()))
    ev = trace.events
    total = 0
    for scope, cat, s, e in zip(ev["scope"].astype(str), ev["category"].astype(str), ev["start_ns"], ev["end_ns"]):
        if cat == category and re.search(pattern, scope) and any(lo <= s < hi for lo, hi in bounds):
            total += int(e) - int(s)
    return total / len(bounds)


def test_a_real_tpu_ablation_by_scope(moe_step_pair):
    """Issue 32's ablation: the padded expert matmuls go, ragged_dot and the permutation's scatter-adds come,
    Adam's update stops fusing; the step moves by 0.3 ms. Each figure is counted here from the raw tf_op paths."""
    a, b = moe_step_pair
    e = explain(a, b)
    assert_identity(e, brute_force(a / "runsc.xplane.pb"), brute_force(b / "runsc.xplane.pb"))
    got = by_key(e)
    cases = [  # (key, category, raw tf_op pattern, change)
        (("layer*/experts", True, "convolution fusion"), "convolution fusion",
         r"^jit\(step\)/transpose\(jvp\(layer\d\)\)/experts/", "gone"),
        (("layer*/experts", False, "convolution fusion"), "convolution fusion", r"^jit\(step\)/jvp\(layer\d\)/experts/",
         "gone"),
        (("layer*/experts", False, "custom-call"), "custom-call", r"^jit\(step\)/jvp\(layer\d\)/experts/", "new"),
        (("layer*/unpermute", False, "custom fusion"), "custom fusion", r"^jit\(step\)/jvp\(layer\d\)/unpermute/",
         "new"),
        (("adam", False, "loop fusion"), "loop fusion", r"^jit\(step\)/adam/", "dearer"),
    ]  # fmt: skip
    for key, category, pattern, change in cases:
        a_ns = scope_time(a / "runsc.xplane.pb", category, pattern)
        b_ns = scope_time(b / "runsc.xplane.pb", category, pattern)
        assert got[key]["reference_ms"] == pytest.approx(a_ns / 1e6, abs=1e-9), key
        assert got[key]["run_ms"] == pytest.approx(b_ns / 1e6, abs=1e-9), key
        assert got[key]["change"] == change, key
    assert got[("adam", False, "loop fusion")]["delta_ms"] > 10  # the optimizer's update, no longer fused
    assert abs(e["step_change_ms"]) < 0.01 * e["step"]["reference_ms"]


def test_collectives_are_named_by_what_they_do():
    """The 2-slice TPU sample: its async collectives carry XLA's category of their -start op (all-gather-start,
    or async-start for the wrapped ones): a part names the collective, never "async"."""
    e = explain(SAMPLES / "synthetic_tpu_2slice", SAMPLES / "synthetic_tpu_2slice")
    comm = {p["op"] for p in e["parts"] if p["bucket"] == "comm"}
    assert comm == {"ragged-all-to-all", "send", "all-to-all", "reduce-scatter", "all-gather"}
    assert all(p["change"] == "same" for p in e["parts"]) and e["residual_ms"] == 0


RUNS = Path("/work/data/runs")  # the device machine's captures of this project's sessions (not in the repository)


def test_real_tpu_demo_padded_to_dropless():
    """moeprof's demo on one TPU v5e chip, capacity-padded then dropless: the ragged all-to-all is new."""
    a, b = RUNS / "tpu-padded", RUNS / "tpu-dropless"
    if not (a.exists() and b.exists()):
        pytest.skip(f"the TPU v5e demo captures are not on this machine ({a}, {b}): not in the repository")
    e = explain(a, b)
    assert by_key(e)[("moe", False, "ragged-all-to-all")]["change"] == "new"
    assert e["parts_delta_ms"] + e["residual_ms"] == pytest.approx(e["step_change_ms"], abs=1e-9)
