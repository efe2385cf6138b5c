"""Scopes on PyTorch Kineto traces (readers/kineto_scopes.py, docs/metrics.md "Scopes on GPU traces"): the
record_function stack around each launch, backward kernels launched by autograd's engine placed by the
annotations around their launch on the thread that called backward, and serving the scope of their forward op
(Sequence number). A hand-made trace whose answers are written below, and DeepSeek's real trace against a
brute force over its JSON."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

from moeprof.core.components import attach_components
from moeprof.core.scopes import NO_SCOPE, fold_layers, scope_key
from moeprof.options import LoadOptions
from moeprof.readers.base import ReadContext
from moeprof.readers.kineto import read_kineto, us_pair_to_ns

from .helpers import SHARED_TRACES

MAIN, AUTOGRAD = 11, 22
ENGINE = "autograd::engine::evaluate_function: "


def ev(cat: str, name: str, ts: float, dur: float, tid: int = MAIN, **args: object) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launch(ts: float, corr: int, tid: int = MAIN) -> dict:
    return ev("cuda_runtime", "cudaLaunchKernel", ts, 2.0, tid=tid, correlation=corr)


def kernel(name: str, ts: float, corr: int) -> dict:
    args = {"device": 0, "stream": 7, "correlation": corr}
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": 5.0, "args": args}


def seq(number: int, fwd: int) -> dict:
    return {"Sequence number": number, "Fwd thread id": fwd}


DOC = {
    "schemaVersion": 1,
    "traceEvents": [
        ev("user_annotation", "ProfilerStep#3", 0.0, 1000.0),  # a step: no scope
        ev("user_annotation", "fwd", 10.0, 400.0),
        ev("user_annotation", "attn/qk", 15.0, 100.0),  # a "/" in a name stays in its component
        ev("cpu_op", "aten::mm", 20.0, 40.0, **seq(5, 0)),  # the forward op of sequence 5
        launch(30.0, 1),
        ev("cpu_op", "aten::add", 200.0, 20.0, **seq(6, 0)),
        launch(205.0, 2),  # in fwd, outside attn/qk
        ev("user_annotation", "bwd", 500.0, 400.0),  # the main thread waits in backward() inside it
        # autograd's thread: the backward of sequence 5 (its forward op is in the trace), of 99 (it is not)
        ev("cpu_op", ENGINE + "MmBackward0", 520.0, 80.0, tid=AUTOGRAD, **seq(5, 1)),
        ev("cpu_op", "MmBackward0", 525.0, 65.0, tid=AUTOGRAD, **seq(5, 1)),
        ev("cpu_op", "aten::mm", 530.0, 50.0, tid=AUTOGRAD),
        launch(540.0, 3, tid=AUTOGRAD),
        ev("cpu_op", ENGINE + "AddBackward0", 605.0, 45.0, tid=AUTOGRAD, **seq(99, 1)),
        launch(610.0, 4, tid=AUTOGRAD),
        launch(950.0, 5),  # inside the step only
        kernel("gemm_fwd", 31.0, 1),
        kernel("add_fwd", 206.0, 2),
        kernel("gemm_bwd", 541.0, 3),
        kernel("add_bwd", 611.0, 4),
        kernel("lonely", 951.0, 5),
    ],
}

# kernel -> (scope, component, backward), by hand
EXPECTED = {
    "gemm_fwd": ("fwd/attn:qk/aten::mm", "fwd/attn:qk", False),
    "add_fwd": ("fwd/aten::add", "fwd", False),
    # its launch thread has no annotation: bwd encloses the launch on the main thread; it is the backward of
    # the forward aten::mm (sequence 5), under fwd/attn:qk
    "gemm_bwd": ("bwd/aten::mm", "fwd/attn:qk", True),
    # no forward op of sequence 99 in the trace: its own scope
    "add_bwd": (f"bwd/{ENGINE}AddBackward0", "bwd", True),
    "lonely": ("", NO_SCOPE, False),
}


def test_scopes_components_and_passes() -> None:
    trace = attach_components(read_kineto(DOC, Path("t.json"), ReadContext(LoadOptions())))
    events = trace.events.set_index("name")
    for name, (scope, component, backward) in EXPECTED.items():
        row = events.loc[name]
        assert (str(row["scope"]), str(row["component"]), bool(row["backward"])) == (scope, component, backward), name


def test_without_sequence_numbers_a_backward_kernel_serves_its_own_scope() -> None:
    """An older trace (no Sequence number): the engine's op still says backward; the component is its scope."""
    events = [
        {**e, "args": {k: v for k, v in e["args"].items() if k not in ("Sequence number", "Fwd thread id")}}
        for e in DOC["traceEvents"]
    ]
    trace = attach_components(read_kineto({**DOC, "traceEvents": events}, Path("t.json"), ReadContext(LoadOptions())))
    row = trace.events.set_index("name").loc["gemm_bwd"]
    assert (str(row["component"]), bool(row["backward"])) == ("bwd", True)


# ---- DeepSeek's trace, against a brute force over its JSON -------------------------------------------------


def _brute_force(doc: dict) -> Counter:
    """Per device activity (name, start ns, the scope key: the user annotations around its launch, outermost
    first, less the step; on a thread without one, those of another thread; whether launched in the autograd
    engine), counted."""
    events = doc["traceEvents"]
    runtime = {
        e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e
    }
    ranges: dict[int, list[dict]] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op"):
            ranges.setdefault(e["tid"], []).append(e)

    def around(tid: int, t: float, cat: str) -> list[dict]:
        inside = [r for r in ranges.get(tid, []) if r["cat"] == cat and r["ts"] <= t <= r["ts"] + r["dur"]]
        return sorted(inside, key=lambda r: (r["ts"], -r["dur"]))

    out: Counter = Counter()
    for k in events:
        if k.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        call = runtime.get(k["args"].get("correlation"))
        start = int(us_pair_to_ns(np.array([k["ts"]]))[0][0])
        if call is None:
            out[(k["name"], start, NO_SCOPE, False)] += 1
            continue
        t, tid = call["ts"], call["tid"]
        backward = any(r["name"].startswith(ENGINE) for r in around(tid, t, "cpu_op"))
        names = [r["name"] for r in around(tid, t, "user_annotation") if not r["name"].startswith("ProfilerStep#")]
        if not names and backward:
            others = [around(o, t, "user_annotation") for o in ranges if o != tid]
            names = [r["name"] for r in max(others, key=len, default=[]) if not r["name"].startswith("ProfilerStep#")]
        out[(k["name"], start, "/".join(names) or NO_SCOPE, backward)] += 1
    return out


def test_deepseek_scopes_match_a_brute_force() -> None:
    path = SHARED_TRACES / "kineto" / "deepseek_v3_ep64_h800_rank0.json.gz"
    if not path.exists():
        pytest.skip(f"real trace {path} not present (set MOEPROF_SHARED_TRACES to the shared real traces)")
    doc = orjson.loads(gzip.open(path).read())
    want = _brute_force(doc)
    trace = attach_components(read_kineto(doc, path, ReadContext(LoadOptions())))
    events = trace.events
    got = Counter(
        zip(
            events["name"],
            events["start_ns"].tolist(),
            events["component"].astype(str),
            events["backward"].astype(bool).tolist(),
            strict=True,
        )
    )
    assert got == want
    # DeepSeek's own ranges are the rows: dispatch and combine each way, attention, the experts' GEMMs
    keys = {k for _, _, k, _ in got}
    assert {"1F1B/dispatch(F)", "1F1B/combine(B)", "1F1B/attn(F)", "1F1B/attn(B)", "1F1B/mlp(W)"} <= keys
    # the backward of attention runs on autograd's thread, inside attn(B) on the main thread
    assert {b for _, _, k, b in got if k == "1F1B/attn(B)"} == {True}


def test_module_ranges_and_their_numbering_fold() -> None:
    """PyTorch's module ranges are scopes (``nn.Module: MLP_1`` is ``MLP_1``); it numbers a module class over the
    whole model, so a module repeated once per layer folds under the folded layer, leaf or not, where two
    modules of one parent (``Linear_0``, ``Linear_1`` in one MLP) stay apart."""
    events = [
        ev("user_annotation", "ProfilerStep#1", 0.0, 1000.0),
        ev("python_function", "nn.Module: Model_0", 1.0, 900.0),
    ]
    for layer in range(2):
        t = 10.0 + 400.0 * layer
        events += [
            ev("python_function", f"nn.Module: Block_{layer}", t, 300.0),
            ev("python_function", f"nn.Module: MLP_{layer}", t + 10, 200.0),
            ev("python_function", f"nn.Module: Linear_{2 * layer}", t + 20, 50.0),
            launch(t + 30, 10 * layer + 1),
            ev("python_function", f"nn.Module: Linear_{2 * layer + 1}", t + 100, 50.0),
            launch(t + 110, 10 * layer + 2),
            kernel(f"up{layer}", t + 31, 10 * layer + 1),
            kernel(f"down{layer}", t + 111, 10 * layer + 2),
        ]
    trace = attach_components(read_kineto({"schemaVersion": 1, "traceEvents": events}, Path("m.json"),
                                          ReadContext(LoadOptions())))  # fmt: skip
    scope = dict(zip(trace.events["name"], trace.events["scope"].astype(str), strict=True))
    assert scope["up1"] == "Model_0/Block_1/MLP_1/Linear_2/kernel"
    folded = fold_layers(scope_key(s)[0] for s in scope.values())
    # the blocks and their MLPs fold; the two linears of one MLP are two scopes of one parent (fc1 and fc2):
    # they stay apart, numbered as PyTorch numbered them
    assert [folded[scope_key(scope[k])[0]] for k in ("up0", "down0", "up1", "down1")] == [
        f"Model_0/Block_*/MLP_*/Linear_{n}" for n in range(4)
    ]
    # a module once per layer folds, a leaf too (the MLP's own kernels under MLP_0, MLP_1)
    once = fold_layers(["Model_0/Block_0/MLP_0", "Model_0/Block_1/MLP_1"])
    assert set(once.values()) == {"Model_0/Block_*/MLP_*"}
