"""What each op serves (core/components.py, docs/metrics.md "Components"): the rules on a hand-written HLO
program whose answers are worked out by hand below, the columns they fill, and where they show (the per-scope
table, scope~ what-ifs, diff's parts)."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from moeprof.core.components import Served, attach_components, common_scope, serve_module
from moeprof.core.events import make_table
from moeprof.core.hlo import parse_hlo_text
from moeprof.core.metrics import DeviceTimeline
from moeprof.core.scopes import NO_SCOPE, TOP_LEVEL, _split, device_scopes, scope_rows, served_rows
from moeprof.core.trace import Trace

# A training step of two layers: layer0's experts (weight w, cast at the layer's level), layer0's router
# (weight r), layer1's mlp (weight v); Adam written in a scope of its own; a loss at the top level; a
# backward custom call without a name stack (ragged-dot-none), weight gradients without one, a global
# gradient norm, a control token and an op fed by nothing placed but its operand.
PROGRAM = """\
HloModule jit_step, entry_computation_layout={()->()}

%cast_body (p.0: f32[4,4]) -> bf16[4,4] {
  %p.0 = f32[4,4] parameter(0)
  ROOT %c.0 = bf16[4,4] convert(%p.0)
}

%grad_body (a.0: bf16[8,4], b.0: bf16[8,4]) -> bf16[4,4] {
  %a.0 = bf16[8,4] parameter(0)
  %b.0 = bf16[8,4] parameter(1)
  ROOT %d.0 = bf16[4,4] dot(%a.0, %b.0)
}

ENTRY %main (w: f32[4,4], r: f32[4,2], v: f32[4,4], mu: f32[4,4], x: f32[8,4]) -> (f32[4,4]) {
  %w = f32[4,4] parameter(0), metadata={op_name="params[0]['w']"}
  %r = f32[4,2] parameter(1), metadata={op_name="params[0]['r']"}
  %v = f32[4,4] parameter(2), metadata={op_name="params[1]['v']"}
  %mu = f32[4,4] parameter(3), metadata={op_name="opt['mu']"}
  %x = f32[8,4] parameter(4), metadata={op_name="x"}
  %xb = bf16[8,4] convert(%x), metadata={op_name="x"}
  %wc = bf16[4,4] fusion(%w), kind=kLoop, calls=%cast_body, metadata={op_name="jit(s)/jvp(layer0)/convert_element_type"}
  %fwd = bf16[8,4] dot(%xb, %wc), metadata={op_name="jit(s)/jvp(layer0)/experts/dot_general"}
  %rb = bf16[4,2] convert(%r), metadata={op_name="jit(s)/jvp(layer0)/router/convert_element_type"}
  %route = bf16[8,2] dot(%xb, %rb), metadata={op_name="jit(s)/jvp(layer0)/router/dot_general"}
  %vc = bf16[4,4] convert(%v), metadata={op_name="jit(s)/jvp(layer1)/mlp/convert_element_type"}
  %fwd1 = bf16[8,4] dot(%fwd, %vc), metadata={op_name="jit(s)/jvp(layer1)/mlp/dot_general"}
  %loss = bf16[8,4] multiply(%fwd1, %fwd1), metadata={op_name="jit(s)/jvp()/mul"}
  %seed = bf16[8,4] multiply(%loss, %xb), metadata={op_name="jit(s)/transpose(jvp())/mul"}
  %dact1 = bf16[8,4] negate(%seed), metadata={op_name="jit(s)/transpose(jvp(layer1))/mlp/neg"}
  %vgrad = bf16[4,4] fusion(%fwd, %dact1), kind=kOutput, calls=%grad_body
  %dact = bf16[8,4] negate(%dact1), metadata={op_name="jit(s)/transpose(jvp(layer0))/experts/neg"}
  %bwd = bf16[8,4] custom-call(%dact, %wc), custom_call_target="k", metadata={op_name="ragged-dot-none"}
  %wgrad = bf16[4,4] fusion(%xb, %dact), kind=kOutput, calls=%grad_body
  %rgrad = bf16[4,4] fusion(%xb, %bwd), kind=kOutput, calls=%grad_body
  %gn = bf16[4,4] add(%wgrad, %vgrad), metadata={op_name="jit(s)/add"}
  %upd = f32[4,4] subtract(%w, %wgrad, %mu, %gn), metadata={op_name="jit(s)/adam/sub"}
  %updv = f32[4,4] subtract(%v, %vgrad, %gn), metadata={op_name="jit(s)/adam/sub"}
  %updr = f32[4,2] subtract(%r, %rgrad), metadata={op_name="jit(s)/adam/sub"}
  %tok = token[] after-all(%wgrad)
  %dep = bf16[8,2] add-dependency(%route, %tok)
  %odd = bf16[8,2] negate(%dep)
  ROOT %t = (f32[4,4], f32[4,4], f32[4,2], bf16[8,2]) tuple(%upd, %updv, %updr, %odd)
}
"""

# worked out by hand from the rules (docs/metrics.md, "Components"): w, r and v are weights (read by the model,
# under jvp, and by Adam, outside it); mu is Adam's state (read by Adam only), x the batch (read by the model
# only); w's scope is layer0/experts (its one differentiated reader past the cast: fwd), r's layer0/router,
# v's layer1/mlp
EXPECTED = {
    "wc": Served("layer0/experts", False, "parameter"),  # a layer-level cast of w: refined into w's scope
    "fwd": Served("layer0/experts", False, "own"),
    "rb": Served("layer0/router", False, "own"),  # a cast in r's own scope stays own
    "route": Served("layer0/router", False, "own"),
    "vc": Served("layer1/mlp", False, "own"),
    "fwd1": Served("layer1/mlp", False, "own"),
    "dact1": Served("layer1/mlp", True, "own"),
    "vgrad": Served("layer1/mlp", True, "consumer"),  # feeds updv (v's update) and gn (top level: not counted)
    "dact": Served("layer0/experts", True, "own"),
    "bwd": Served("layer0/experts", True, "parameter"),  # reads w through its cast; reads dact: backward
    "wgrad": Served("layer0/experts", True, "consumer"),  # feeds upd (and a token: no data)
    "rgrad": Served("layer0/router", True, "consumer"),
    "upd": Served("layer0/experts", True, "parameter"),  # Adam's update of w: w's scope; reads a gradient
    "updv": Served("layer1/mlp", True, "parameter"),
    "updr": Served("layer0/router", True, "parameter"),
    # xb (the batch's cast) feeds fwd, route (own), wgrad, rgrad: their common scope, layer0
    "xb": Served("layer0", False, "consumer"),
    "x": Served("layer0", False, "consumer"),
    "dep": Served("layer0/router", False, "producer"),  # feeds odd, which is fed by nothing else placed
    "odd": Served("layer0/router", False, "producer"),
}
# gn feeds the updates of two layers (common scope: none), the loss and the seed feed the model's backward
# (dact1: own): they stay top level; the parameters w, r, v, mu are placed by what reads them
UNPLACED = ("gn", "loss", "seed", "tok", "t")


@pytest.fixture(scope="module")
def module():
    return parse_hlo_text(PROGRAM)


def test_rules_place_each_op(module) -> None:
    served = serve_module(module)
    for name, want in EXPECTED.items():
        assert served.get(name) == want, name
    for name in UNPLACED:
        assert name not in served, (name, served.get(name))
    # ops of fused computations do not run: never placed
    assert not {"p.0", "c.0", "a.0", "b.0", "d.0"} & set(served)


def test_common_scope() -> None:
    assert common_scope(["layer0/moe/experts", "layer0/moe"]) == "layer0/moe"
    assert common_scope(["layer0/moe/experts", "layer0/moe/router"]) == "layer0/moe"
    assert common_scope(["layer0", "layer1"]) == TOP_LEVEL
    assert common_scope(["a/b"]) == "a/b"
    assert common_scope([]) == TOP_LEVEL


INFERENCE = """\
HloModule jit_serve, entry_computation_layout={()->()}

ENTRY %main (w: f32[4,4], x: f32[8,4]) -> (bf16[8,4]) {
  %w = f32[4,4] parameter(0), metadata={op_name="params['w']"}
  %x = f32[8,4] parameter(1), metadata={op_name="x"}
  %wc = bf16[4,4] convert(%w), metadata={op_name="jit(serve)/layer0/convert_element_type"}
  %xb = bf16[8,4] convert(%x), metadata={op_name="jit(serve)/layer0/convert_element_type"}
  %y = bf16[8,4] dot(%xb, %wc), metadata={op_name="jit(serve)/layer0/experts/dot_general"}
  %z = bf16[8,4] custom-call(%y, %wc), custom_call_target="k", metadata={op_name="ragged-dot-none"}
  ROOT %t = (bf16[8,4]) tuple(%z)
}
"""


def test_without_differentiation_every_parameter_counts() -> None:
    """A program without jvp or transpose (inference): every parameter is placed by every op that reads it."""
    served = serve_module(parse_hlo_text(INFERENCE))
    # w and x are both read by the experts' dot alone past their casts: layer0/experts
    assert served["wc"] == Served("layer0/experts", False, "parameter")
    assert served["xb"] == Served("layer0/experts", False, "parameter")
    assert served["z"] == Served("layer0/experts", False, "parameter")
    assert served["y"] == Served("layer0/experts", False, "own")


def _trace(module, rows: list[tuple[str, str, int, int]], **columns: object) -> Trace:
    """A one-device trace of the program's ops: (HLO op, scope, start, end) per row."""
    ops, scopes, starts, ends = (list(c) for c in zip(*rows, strict=True))
    n = len(rows)
    table = make_table(
        {
            "host": "h",
            "device": "h/TPU:0",
            "stream": "XLA Ops",
            "name": ops,
            "start_ns": np.array(starts, dtype=np.int64),
            "end_ns": np.array(ends, dtype=np.int64),
            "activity": "kernel",
            "hlo_module": "jit_step",
            "hlo_op": ops,
            "program_id": np.full(n, 7, dtype=np.int64),
            "scope": scopes,
            "bucket": "compute",
            **columns,
        }
    )
    return Trace(events=table, path="t", format="xplane", hlo={("jit_step", 7): module})


ROWS = [
    ("fwd", "jit(step)/jvp(layer0)/experts/dot_general", 0, 100),
    ("bwd", "ragged-dot-none", 100, 400),  # no name stack: the experts' backward
    ("upd", "jit(step)/adam/sub", 400, 450),  # Adam's: the experts' update
    ("gn", "jit(step)/add", 450, 470),  # top level
    ("route", "jit(step)/jvp(layer0)/router/dot_general", 470, 480),
    ("fusion.9", "", 480, 490),  # not in the HLO: its own scope (none)
]


def test_columns_follow_the_hlo(module) -> None:
    trace = attach_components(_trace(module, ROWS))
    got = list(zip(trace.events["component"].astype(str), trace.events["backward"].astype(bool), strict=True))
    assert got == [
        ("layer0/experts", False),
        ("layer0/experts", True),
        ("layer0/experts", True),
        (TOP_LEVEL, False),
        ("layer0/router", False),
        (NO_SCOPE, False),
    ]


def test_reader_component_and_no_hlo(module) -> None:
    """A component a reader gave is kept; without HLO every row serves its own scope key and pass."""
    given = _trace(module, ROWS, component=["", "mine", "", "", "", ""], backward=[False, False, True] + [False] * 3)
    got = attach_components(given).events
    assert str(got["component"].iloc[1]) == "mine" and not bool(got["backward"].iloc[1])
    bare = attach_components(_trace(module, ROWS).replace(hlo={}))
    assert list(bare.events["component"].astype(str)) == [
        "layer0/experts", TOP_LEVEL, "adam", TOP_LEVEL, "layer0/router", NO_SCOPE
    ]  # fmt: skip


def test_served_rows_falls_back_to_the_own_scope() -> None:
    scope = (np.array([0, 1, -1, 0]), np.array(["jit(s)/transpose(jvp(a))/b/dot", "x/y/z"], dtype=object))
    component = (np.array([1, 0, 0, -1]), np.array(["", "k"], dtype=object))
    codes, pairs = served_rows(scope, component, np.array([True, True, False, False]))
    # row 0: the component and its pass; row 1: a "" component, the own path's key; row 2: no scope either
    assert [pairs[c] for c in codes] == [("k", True), ("x/y", False), (NO_SCOPE, False), ("a/b", True)]


def test_scope_table_own_and_attributed(module) -> None:
    """Own time by the scope path, attributed time by the component, both summed by brute force."""
    trace = attach_components(_trace(module, ROWS))
    rows = DeviceTimeline(trace.events)
    frame = device_scopes("h/TPU:0", rows, (rows.end - rows.start).astype(np.int64))
    events = trace.events.assign(d=trace.events["end_ns"] - trace.events["start_ns"])
    for scope in ("layer0/experts", "adam", TOP_LEVEL, "layer0/router", NO_SCOPE):
        mine = frame[frame["scope"] == scope]
        served = events[events["component"].astype(str) == scope]
        assert int(mine["attributed_ns"].sum()) == int(served["d"].sum()), scope
    assert int(frame["attributed_ns"].sum()) == int(frame["total_ns"].sum()) == 490
    table = {r.scope: r for r in scope_rows(frame, 490)}
    assert (table["layer0/experts"].total_ns, table["layer0/experts"].attributed_ns) == (100, 450)
    assert table["layer0/experts"].attributed_backward_ns == 350
    assert (table["adam"].total_ns, table["adam"].attributed_ns) == (50, 0)
    assert (table[TOP_LEVEL].total_ns, table[TOP_LEVEL].attributed_ns) == (320, 20)
    assert next(iter(table)) == "layer0/experts"  # ranked by attributed time


def test_frame_columns_are_integers(module) -> None:
    trace = attach_components(_trace(module, ROWS))
    rows = DeviceTimeline(trace.events)
    frame = device_scopes("h/TPU:0", rows, (rows.end - rows.start).astype(np.int64))
    assert pd.api.types.is_integer_dtype(frame["attributed_ns"]) and pd.api.types.is_integer_dtype(frame["count"])


def test_split_keeps_a_slash_inside_parentheses() -> None:
    """scopes._split against a character-by-character reading of random paths."""

    def by_char(path: str) -> list[str]:
        parts, cur, depth = [], [], 0
        for ch in path:
            depth = depth + 1 if ch == "(" else max(depth - 1, 0) if ch == ")" else depth
            if ch == "/" and depth == 0:
                parts.append("".join(cur))
                cur = []
            else:
                cur.append(ch)
        parts.append("".join(cur))
        return [p for p in parts if p]

    rng = random.Random(40)
    for _ in range(20_000):
        path = "".join(rng.choice("ab/()") for _ in range(rng.randint(0, 12)))
        assert _split(path) == by_char(path), path
    assert _split("jit(step)/transpose(jvp(a/b))/c") == ["jit(step)", "transpose(jvp(a/b))", "c"]
