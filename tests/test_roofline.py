"""Spec §10: the MoE role of every activity, its FLOPs and HBM bytes, and the roofline per op, scope and role.

Held against xprof's op_profile on every real TPU capture at hand (time, HBM bytes, HBM bandwidth utilization and
FLOPs of every op it lists), against counts made by hand from the shapes PyTorch recorded (the three TraceLens
H100 traces), and against what the demo's own run counted (the tokens a capacity run dropped).
"""

from __future__ import annotations

import gzip
import json
import shutil
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import moeprof
from moeprof.core.analysis import Analysis
from moeprof.core.expert_load import RoutedLoad, manifest_load
from moeprof.core.padding import useful_work
from moeprof.core.roles import ROLES, role_codes
from moeprof.core.roofline import activity_counts, activity_roof_ns, shape_counts
from moeprof.readers import read_file
from moeprof.readers.tpu_ops import hbm_bytes_of

from .helpers import SAMPLES, shared_trace

ABLATION = SAMPLES / "tpu_v5e_ablation"
# every TPU capture at hand: (shared trace or sample, relative path)
CAPTURES = [
    ("shared", "tpu/demo_v5e_1chip.xplane.pb"),
    ("shared", "tpu/moe_ragged_dot_v5e_1chip.xplane.pb"),
    ("sample", "tpu_v5e_demo/runsc.xplane.pb"),
    ("sample", "tpu_v5e_moe_step/a/runsc.xplane.pb.gz"),
    # moe_step/b is a's step dropless (b's ragged dots: the levers' captures hold them)
    ("sample", "tpu_v5e_ablation/base/runsc.xplane.pb.gz"),
    # ablation/ffn2048 and tok8192 are base's program at other sizes: tests/test_tpu_tokens.py reads them
    ("sample", "tpu_v5e_ablation/cap2/runsc.xplane.pb.gz"),
    ("sample", "tpu_v5e_ablation/f32/runsc.xplane.pb.gz"),
    # the levers' base is ablation/base's program again; lever is gather's and skipx's changes together
    *(("sample", f"tpu_v5e_levers/{run}/runsc.xplane.pb.gz") for run in ("gather", "skipx")),
]
LEVERS = SAMPLES / "tpu_v5e_levers"


@cache
def base_analysis() -> Analysis:
    """The ablation's base run analyzed once per module run: three tests read it (none changes it)."""
    return moeprof.analyze_paths([ABLATION / "base"])


DUPLICATES = " and its duplicate(s)"


def _capture(where: str, rel: str, tmp: Path) -> Path:
    """The capture as a plain ``.xplane.pb`` in ``tmp`` (xprof reads neither gzip nor a file it may not cache
    beside)."""
    src = shared_trace(rel) if where == "shared" else SAMPLES / rel
    out = tmp / "x" / "runsc.xplane.pb"
    out.parent.mkdir(parents=True, exist_ok=True)
    if src.suffix == ".gz":
        out.write_bytes(gzip.decompress(src.read_bytes()))
    else:
        shutil.copy(src, out)
    return out


def xprof_ops(path: Path) -> dict[str, dict]:
    """xprof's op_profile, per op it lists (``byProgramExcludeIdle``): each op node's metrics, by name. An op is a
    node with XLA details that is no deduplication group ("… and its duplicate(s)": its children are the ops) and
    lies in no other op (a fusion's children are its fused instructions). op_profile lists at most 100 ops under a
    category: the rest are not compared."""
    from xprof.convert import raw_to_tool_data

    profile = json.loads(raw_to_tool_data.xspace_to_tool_data([str(path)], "op_profile", {})[0])
    out: dict[str, dict] = {}

    def walk(node: dict, inside_op: bool) -> None:
        is_op = "xla" in node and not node["name"].endswith(DUPLICATES) and not inside_op
        if is_op:
            assert node["name"] not in out, node["name"]  # one program: an op name is one op
            out[node["name"]] = node["metrics"]
        for child in node.get("children", []):
            walk(child, inside_op or is_op)

    for program in profile["byProgramExcludeIdle"]["children"]:
        walk(program, False)
    return out


# the committed demo capture in the edit loop; every capture in the full suite (seconds each: xprof runs too)
QUICK = "tpu_v5e_demo/runsc.xplane.pb"


@pytest.mark.parametrize(
    ("where", "rel"),
    [pytest.param(w, r, id=r, marks=() if r == QUICK else pytest.mark.slow) for w, r in CAPTURES],
)
def test_every_op_matches_xprofs_op_profile(where: str, rel: str, tmp_path: Path) -> None:
    """Per op xprof lists, over the capture: time (``rawTime``), HBM bytes (``rawBytesAccessedArray[0]``), HBM
    bandwidth utilization (``bandwidthUtils[0]``, which xprof caps at 1: moeprof's is not capped) and FLOPs
    (``rawFlops``, XLA's model_flops) equal moeprof's; FLOPs differ only on the ops whose ragged dots moeprof
    recounts. xprof sums picoseconds, moeprof each op's rounded ns: n executions may differ by n ns. The same ops
    in the analysis' ``roofline.ops`` (those with 0.2% of the busy time) carry the same figures."""
    path = _capture(where, rel, tmp_path)
    want = xprof_ops(path)
    trace = read_file(path)
    events = trace.events
    flops, hbm = activity_counts(events)
    peak_bw = float(next(iter(trace.device_peaks.values()))["hbm_gbps"]) * 1e9
    frame = events.assign(f=flops, b=hbm, d=events["end_ns"] - events["start_ns"], name=events["name"].astype(str))
    frame = frame.assign(recounted=events["recounted_flops"].notna())
    ours = frame.groupby("name").agg(n=("d", "size"), d=("d", "sum"), f=("f", "sum"), b=("b", "sum"),
                                     recounted=("recounted", "any"))  # fmt: skip
    assert want and set(want) <= set(ours.index)
    compared = 0
    for name, m in want.items():
        o = ours.loc[name]
        time_ns = m["rawTime"] / 1e3
        hbm_bytes = (m.get("rawBytesAccessedArray") or [0.0])[0]
        assert abs(o["d"] - time_ns) <= o["n"], name
        assert o["b"] == pytest.approx(hbm_bytes, rel=1e-9, abs=1e-3), name
        util = o["b"] / (o["d"] * 1e-9 * peak_bw) if o["d"] else 0.0
        assert min(util, 1.0) == pytest.approx(
            (m.get("bandwidthUtils") or [0.0])[0], rel=o["n"] / max(o["d"], 1) + 1e-9
        )
        if not o["recounted"]:
            assert o["f"] == pytest.approx(m.get("rawFlops", 0.0), rel=1e-9, abs=1e-3), name
        compared += 1
    assert compared == len(want)
    rows = moeprof.analyze_paths([path]).roofline["ops"]
    assert rows
    for row in rows:
        m = want.get(row["op"])
        if m is None:  # beyond the 100 ops xprof lists under a category
            continue
        assert abs(row["time_ns"] - m["rawTime"] / 1e3) <= row["count"]
        assert row["hbm_bytes"] == pytest.approx((m.get("rawBytesAccessedArray") or [0.0])[0], rel=1e-9, abs=1e-3)
        assert min(row["hbm_util"], 1.0) == pytest.approx(
            m["bandwidthUtils"][0], rel=row["count"] / row["time_ns"] + 1e-9
        )


def test_the_hbm_bytes_of_a_breakdown_by_hand() -> None:
    """A MemoryAccessBreakdown written by hand: HBM (memory space 1) reads and writes count, on-chip (space 3) and
    an unknown operation type do not; no entry, or bytes that are not one, is unknown."""

    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
            v >>= 7
            if not v:
                return bytes(out)

    def entry(op: int, space: int, n: int) -> bytes:
        body = b"\x08" + varint(op) + b"\x10" + varint(space) + b"\x18" + varint(n)
        return b"\x0a" + varint(len(body)) + body

    data = entry(1, 1, 2) + entry(2, 1, 134217728) + entry(1, 3, 1 << 20) + entry(0, 1, 999) + entry(2, 1, 5)
    assert hbm_bytes_of(data) == 2 + 134217728 + 5
    assert np.isnan(hbm_bytes_of(b""))
    assert np.isnan(hbm_bytes_of(b"<opaque bytes>"))
    assert hbm_bytes_of(entry(1, 3, 64)) == 0.0  # on-chip only: no HBM byte, a known zero


def test_both_xplane_routes_read_the_same_hbm_bytes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from moeprof.readers.xplane_wire import DECODER_ENV, installed_routes

    path = _capture("sample", "tpu_v5e_ablation/base/runsc.xplane.pb.gz", tmp_path)
    seen = []
    for route in installed_routes():
        monkeypatch.setenv(DECODER_ENV, route)
        seen.append(read_file(path).events["hbm_bytes"].to_numpy())
    monkeypatch.setenv("MOEPROF_XPLANE_READER", "jaxlib")
    seen.append(read_file(path).events["hbm_bytes"].to_numpy())
    assert not np.isnan(seen[0]).all()
    for other in seen[1:]:
        assert np.array_equal(seen[0], other, equal_nan=True)


def test_the_roof_of_an_activity_by_hand() -> None:
    """roof = max(f/P, b/B) in ns; a count without its peak, or no count, is no roof."""
    f = np.array([2e12, 1e9, np.nan, np.nan, 4e9])
    b = np.array([1e9, 8e9, 8e8, np.nan, np.nan])
    roof = activity_roof_ns(f, b, 200e12, 800e9)
    assert roof[:3].tolist() == [10e6, 10e6, 1e6]  # 2e12/200e12 s = 10 ms; 8e9/800e9 s = 10 ms; 8e8/800e9 = 1 ms
    assert np.isnan(roof[3]) and roof[4] == 4e9 / 200e12 * 1e9
    assert np.isnan(activity_roof_ns(np.array([1.0]), np.array([np.nan]), None, 1e9)[0])


# ---------------------------------------------------------------- roles


def test_roles_partition_the_activities_of_a_tpu_capture() -> None:
    """Every activity has exactly one role: the roles' time per step adds up to the accumulated time per step,
    their shares to 1; the token movement is router, permute, unpermute and the one-chip exchanges."""
    analysis = base_analysis()
    steps = len(analysis.spread.steps)
    roles = {r["role"]: r for r in analysis.roles}
    assert set(roles) <= set(ROLES)
    total = sum(r["time_ns"] for r in analysis.roles)
    assert abs(total - analysis.total.accumulated_ns / steps) <= len(roles)
    assert sum(r["share"] for r in analysis.roles) == pytest.approx(1.0)
    glue = analysis.roofline["glue"]
    moving = [r for r in analysis.roles if r["role"] in ("router", "permute", "unpermute", "dispatch", "combine")]
    assert all(r["glue"] for r in moving)  # one chip: its exchanges are copies inside it
    assert glue["time_ns"] == pytest.approx(sum(r["time_ns"] for r in moving), abs=len(moving))
    assert 0.45 < glue["share"] < 0.55  # about half the step moves tokens on this run


def test_the_demo_captures_ops_have_their_roles() -> None:
    """By hand, from the demo's scopes (moeprof/demo/model.py): the unpermute's scatter-add in the combine scope,
    the permutation's gathers and their backward scatter-adds directly under the MoE scope, the ragged all-to-all
    in the dispatch and combine scopes, the experts' ragged dots (forward and their backward custom calls without a
    name stack), the shared expert, the router, and the optimizer's top-level update fusions (the experts' where
    they update the experts' weights)."""
    events = moeprof.load(ABLATION / "base")[0].events
    scope = events["scope"].astype(str)
    role = events["role"].astype(str)

    def roles_where(mask: np.ndarray) -> set[str]:
        assert mask.any()
        return set(role[mask])

    assert roles_where(scope.str.endswith("moe/combine/scatter-add").to_numpy()) == {"unpermute"}
    assert roles_where(scope.str.contains(r"layer\d/moe/(?:gather|scatter-add)$").to_numpy()) == {"permute"}
    a2a = events["opcode"].astype(str).str.startswith("ragged-all-to-all").to_numpy()
    assert roles_where(a2a & scope.str.contains("/dispatch/").to_numpy()) == {"dispatch"}
    assert roles_where(a2a & scope.str.contains("/combine/").to_numpy()) == {"combine"}
    assert roles_where(events["name"].astype(str).str.startswith("ragged-dot-none").to_numpy()) == {"experts"}
    assert roles_where(scope.str.contains("shared_expert").to_numpy()) == {"shared"}
    assert roles_where(scope.str.contains("/router/").to_numpy()) == {"router"}
    # the optimizer's top-level fusions (Adam fused with the non-finite check): an update of a role's weights has
    # that role (spec §10: its component, the experts whose weights it updates), one of no role's is the optimizer's
    update = (scope == "jit(step)/reduce_and").to_numpy()
    served = events["component"].astype(str).to_numpy()
    assert roles_where(update & (served == "layer0/moe/moe_experts")) == {"experts"}
    assert roles_where(update & (served == "layer1")) == {"optimizer"}  # a layer's own weights: no role's


def test_deepseeks_kernels_have_their_roles() -> None:
    """DeepSeek-V3's DualPipe ranges (attn, dispatch, mlp, combine, each forward, backward, weight gradient): the
    grouped GEMMs and the MLP's weight-gradient GEMMs are the experts'; DeepEP's kernels are the exchange of the
    range they run in (the dispatch's backward is a combine kernel in dispatch(B)); FlashAttention is attention;
    the top-k DualPipe launches inside its attention range is the router's. The roles partition the kernels."""
    events = moeprof.load(shared_trace("kineto/deepseek_v3_ep64_h800_rank0.json.gz"))[0].events
    name, scope, role = (events[c].astype(str) for c in ("name", "scope", "role"))

    def only(mask: object, want: str) -> None:
        picked = np.asarray(mask, dtype=bool)
        assert picked.any() and set(role[picked]) == {want}

    only(name.str.contains("m_grouped_fp8"), "experts")
    only(name.str.contains("fp8_dptp128c_acc") & scope.str.contains("mlp\\(W\\)"), "experts")
    only(name.str.contains("fp8_dptp128c_acc") & scope.str.contains("attn\\(W\\)"), "attention")
    only(name.str.contains("internode::combine") & scope.str.contains("dispatch\\(B\\)"), "dispatch")
    only(name.str.contains("internode::combine") & scope.str.contains("combine\\(F\\)"), "combine")
    only(name.str.contains("internode::dispatch") & scope.str.contains("dispatch\\(F\\)"), "dispatch")
    only(name.str.contains("FlashAttn"), "attention")
    only(name.str.contains("gatherTopK"), "router")
    analysis = moeprof.analyze_paths([shared_trace("kineto/deepseek_v3_ep64_h800_rank0.json.gz")])
    steps = max(len(analysis.spread.steps), 1)
    assert abs(sum(r["time_ns"] for r in analysis.roles) - analysis.total.accumulated_ns / steps) <= len(ROLES)


@pytest.mark.slow  # four captures analyzed
def test_the_roles_say_where_the_levers_time_went() -> None:
    """The demo's token-movement levers (sample_traces/tpu_v5e_levers): skipping the one-chip exchange takes the
    dispatch and combine away and most of the permutation (the received rows' re-sort and its backward); the
    permutations' backward by gathers shortens the permute and unpermute roles. Each step's change is in the token
    movement: the experts with the optimizer, and the shared expert, move by under 3 ms, and the roles' change is
    the step's within 10% (the chip is busy 98-99% of each step; its idle time between steps moves too)."""
    runs = {run: moeprof.analyze_paths([LEVERS / run]) for run in ("base", "gather", "skipx", "lever")}
    time = {run: {r["role"]: r["time_ns"] for r in a.roles} for run, a in runs.items()}
    base = time["base"]
    for run in ("gather", "skipx", "lever"):
        moved = {role: base.get(role, 0) - time[run].get(role, 0) for role in set(base) | set(time[run])}
        step = runs["base"].step_ns - runs[run].step_ns
        assert sum(moved.values()) == pytest.approx(step, rel=0.1)  # the rest: the chip's idle time moved too
        glue = sum(v for role, v in moved.items() if role in ("router", "permute", "unpermute", "dispatch", "combine"))
        assert glue > 0.85 * sum(moved.values())
        # the optimizer's fusions update the experts' weights (their role) or none's: XLA fuses them per program
        assert abs(moved.get("experts", 0) + moved.get("optimizer", 0)) < 3e6
        assert abs(moved.get("shared", 0)) < 3e6
    assert "dispatch" not in time["skipx"] and "combine" not in time["skipx"]
    assert time["skipx"]["permute"] < 0.5 * base["permute"]
    assert time["gather"]["permute"] < base["permute"] and time["gather"]["unpermute"] < base["unpermute"]


def test_roles_are_decided_per_distinct_evidence() -> None:
    """The rule that decided each role is named, and a table of two rows per tuple gives each row its tuple's."""
    events = moeprof.load(ABLATION / "base")[0].events
    doubled = events.iloc[np.repeat(np.arange(len(events)), 2)].reset_index(drop=True)
    a, _, _ = role_codes(events)
    b, rule, ids = role_codes(doubled)
    assert np.array_equal(np.repeat(a, 2), b)
    assert set(ids[rule]) >= {"scope", "experts:ragged-dot-call", "exchange:opcode", "optimizer:update"}


# ---------------------------------------------------------------- counts from Kineto's shapes

TRACELENS = "kineto/tracelens_h100/"
BF16 = 2


def _hand_counts(path: Path) -> tuple[float, float]:
    """FLOPs and HBM bytes of the GEMM and attention ops that launched kernels, counted here from the trace's own
    JSON (no moeprof code): mm [M,K]x[K,N] and addmm(bias, [M,K], [K,N]) 2·M·N·K, bmm [B,M,K]x[B,K,N] 2·B·M·N·K,
    FlashAttention forward q [B,Sq,H,D], k [B,Sk,H,D]: 4·B·H·Sq·Sk·D, half where causal (Concrete Inputs[8]);
    bytes: every tensor input and the output once."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"]
    launched = {e["args"].get("External id") for e in events if e.get("cat") == "kernel"}
    size = {"c10::BFloat16": 2, "float": 4}
    flops = nbytes = 0.0
    for e in events:
        if e.get("cat") != "cpu_op" or e["args"].get("External id") not in launched:
            continue
        a, name = e["args"], e["name"]
        dims, types = a.get("Input Dims"), a.get("Input type")
        tensors = [(d, size[t]) for d, t in zip(dims or [], types or []) if t in size and d]
        moved = sum(float(np.prod(d)) * s for d, s in tensors)
        if name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            flops += 2.0 * m * n * k
            nbytes += moved + m * n * size[types[0]]
        elif name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            flops += 2.0 * m * n * k
            nbytes += moved + m * n * size[types[1]]
        elif name == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            flops += 2.0 * b * m * n * k
            nbytes += moved + b * m * n * size[types[0]]
        elif name == "aten::_flash_attention_forward":
            (b, sq, h, d), sk = dims[0], dims[1][1]
            causal = a["Concrete Inputs"][8] == "True"
            flops += 4.0 * b * h * sq * sk * d / (2 if causal else 1)
            nbytes += moved + float(np.prod(dims[0])) * size[types[0]]
    return flops, nbytes


@pytest.mark.parametrize(
    "name",
    ["Falconsai_nsfw_image_detection__1016002", "Qwen_Qwen1.5-0.5B-Chat__1016005",
     "facebook_timesformer-base-finetuned-k400__1016002"],
)  # fmt: skip
def test_tracelens_gemm_and_attention_counts_are_the_hand_counts(name: str) -> None:
    """Over each TraceLens H100 trace, the FLOPs and HBM bytes moeprof gives its kernels equal the hand count of
    the ops that launched them (every such op launched one kernel)."""
    path = shared_trace(f"{TRACELENS}{name}.json.gz")
    want_f, want_b = _hand_counts(path)
    events = moeprof.load(path)[0].events
    f, b = activity_counts(events)
    assert want_f > 0
    assert np.nansum(f) == pytest.approx(want_f, rel=1e-12)
    assert np.nansum(b) == pytest.approx(want_b, rel=1e-12)


def test_named_ops_counted_by_hand() -> None:
    """Qwen1.5-0.5B on an H100: an MLP projection aten::mm [8944,1024] x [1024,1024] (bf16) does 2·8944·1024·1024
    FLOPs and moves its two inputs and its [8944,1024] output; the causal FlashAttention forward of q, k, v
    [16,559,16,64] does 4·16·16·559·559·64 / 2 and moves q, k, v and the output; Qwen's bmm [1,32,1]x[1,1,559] in
    f32 2·32·559."""
    mm = shape_counts("aten::mm", [[8944, 1024], [1024, 1024]], ["c10::BFloat16"] * 2, ["", ""])
    assert mm == (2.0 * 8944 * 1024 * 1024, (8944 * 1024 + 1024 * 1024 + 8944 * 1024) * 2.0)
    q = [16, 559, 16, 64]
    attention = shape_counts(
        "aten::_flash_attention_forward", [q, q, q, [], [], [], [], [], [], [], [], [], [], [], []],
        ["c10::BFloat16"] * 3 + [""] * 2 + ["Scalar"] * 6 + [""] * 4,
        ["", "", "", "", "", "559", "559", "0.", "True", "False", "0.125", "", "", "", ""],
    )  # fmt: skip
    assert attention == (4.0 * 16 * 16 * 559 * 559 * 64 / 2, 4 * 16 * 559 * 16 * 64 * 2.0)
    assert shape_counts("aten::bmm", [[1, 32, 1], [1, 1, 559]], ["float", "float"], ["", ""]) == (
        2.0 * 32 * 559,
        (32 + 559 + 32 * 559) * 4.0,
    )
    backward = shape_counts(
        "aten::_flash_attention_backward", [q, q, q, q, q, [16, 16, 559]] + [[]] * 9,
        ["c10::BFloat16"] * 5 + ["float"] + [""] * 9, [""] * 11 + ["False", "", "", ""],
    )  # fmt: skip
    assert backward[0] == 2.5 * 4.0 * 16 * 16 * 559 * 559 * 64
    qwen = moeprof.load(shared_trace(f"{TRACELENS}Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"))[0].events
    f, _ = activity_counts(qwen)
    assert (f == 2.0 * 8944 * 1024 * 1024).sum() >= 1  # the MLP projections' kernels carry it


# ---------------------------------------------------------------- useful work, precision, one peak


def _hand_load(per_step: list[list[list[int]]], capacity_factor: float | None) -> RoutedLoad:
    rows = [(s, layer, e, -1, float(n)) for s, layers in enumerate(per_step) for layer, experts in enumerate(layers)
            for e, n in enumerate(experts)]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["step", "layer", "expert", "device", "tokens"])
    return RoutedLoad(frame, "manifest", "hand", len(per_step[0][0]), capacity_factor=capacity_factor)


def test_useful_work_of_a_capacity_buffer_by_hand() -> None:
    """Two experts, capacity 3 (a ragged dot of E·C = 6 rows per layer), one layer, two steps: loads (5, 1) and
    (2, 2): kept min(n, 3) = 3 + 1 + 2 + 2 = 8 of 12 rows computed; dropped (5 - 3) = 2 of 10 assignments."""
    work = useful_work(_hand_load([[[5, 1]], [[2, 2]]], 1.0), {6: 2})
    assert work is not None and work.capacity == 3
    assert work.useful_fraction == pytest.approx(8 / 12) and work.padding_waste == pytest.approx(4 / 12)
    assert work.dropped == pytest.approx(2 / 10)
    dropless = useful_work(_hand_load([[[3, 1]]], None), {4: 1})
    assert dropless is not None and dropless.padding_waste == 0 and dropless.dropped == 0


def test_a_capacity_runs_mfu_counts_useful_rows_only() -> None:
    """The capacity-factor 2.0 run: its drops are the ones the demo counted itself (manifest tokens_dropped), its
    padding is the buffers' E·C rows less the rows kept, and its MFU on useful rows is below the dropless run's
    (which is faster: more tokens per second), where counting padded rows put it above."""
    cap = moeprof.analyze_paths([ABLATION / "cap2"])
    base = base_analysis()
    manifest = json.loads((ABLATION / "cap2" / "manifest.json").read_text())
    load = manifest_load(manifest)
    assert load is not None and load.capacity_factor == 2.0
    useful = cap.utilization["useful"]
    assert useful["capacity"] == 4096  # 2.0 x 16,384 tokens x top-2 / 16 experts
    assigned = sum(sum(map(sum, r["expert_load"])) for r in manifest["demo"]["records"])
    dropped = sum(r["tokens_dropped"] for r in manifest["demo"]["records"])  # the demo's own count
    assert useful["dropped"] == pytest.approx(dropped / assigned, rel=1e-12)
    assert cap.utilization["mfu_counted"] > base.utilization["mfu"] > cap.utilization["mfu"]
    assert base.utilization["useful"]["padding_waste"] == 0


def test_one_peak_and_an_f32_run_called_f32() -> None:
    """The device plane states the chip's peaks: every figure is against them (202.7 TFLOP/s, 819.16 GB/s), the
    hardware line says them once; an f32 run is called f32 and told that bf16 is the only peak its chip states."""
    from moeprof.reports.text import hardware_line, utilization_line

    f32 = moeprof.analyze_paths([ABLATION / "f32"])
    rf = f32.roofline
    assert rf["peak_flops"] == pytest.approx(202.7e12) and rf["peak_hbm_bytes_per_s"] == pytest.approx(819.1576375296e9)
    assert rf["precision"] == "f32" and "f32" in rf["note"]
    line = hardware_line(f32)
    assert "202.7 TFLOP/s" in line and "197" not in line and "an f32 job" in line
    assert "202.7 TFLOP/s" in (utilization_line(f32) or "")
    assert f32.utilization["peak_tflops"] == pytest.approx(rf["peak_flops"] / 1e12)


def test_the_roles_and_roofline_round_trip_through_json() -> None:
    analysis = base_analysis()
    doc = analysis.to_json()
    assert doc["roles"] and doc["roofline"]["ops"] and doc["roofline"]["from"]
    again = Analysis.from_json(json.loads(json.dumps(doc)))
    assert again.roles == analysis.roles and again.roofline == json.loads(json.dumps(doc))["roofline"]
    assert again.to_json()["roles"] == doc["roles"] and again.to_json()["roofline"] == doc["roofline"]


def test_a_roles_exposed_time_is_the_union_less_every_other_roles() -> None:
    """The one-sweep exposed time per role against its definition, by interval unions, on random overlapping
    activities of four roles."""
    from moeprof.core import intervals as iv
    from moeprof.core.roofline import _alone

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        start = np.sort(rng.integers(0, 1000, n))
        end = start + rng.integers(0, 200, n)
        role = rng.integers(0, 4, n)
        got = _alone(start, end, role)
        whole = iv.union_length(start, end, presorted=True)
        for r in range(4):
            mine = role == r
            assert got[r] == whole - iv.union_length(start[~mine], end[~mine], presorted=True)
