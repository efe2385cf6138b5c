"""The ``tokens`` term (docs/metrics.md, "Projection"): its grammar, the batch and the class of each op read from a
hand-written HLO program (each expected class worked out by hand from the shapes below), and what it does to a
replayed job."""

# ruff: noqa: E501  (HLO lines are long)

from __future__ import annotations

import pytest

from moeprof.core.hlo import parse_hlo_text, shape_dims
from moeprof.errors import InputError
from moeprof.insight.projection import parse_terms
from moeprof.insight.projection.terms.tokens import batch_of, op_classes, token_rows

# T = 64 tokens (x: the batch, not returned); w and m are the state (returned, updated): dims (32, 16)
PROGRAM = """HloModule step, entry_computation_layout={(f32[64,32]{1,0}, f32[32,16]{1,0}, f32[32,16]{1,0})->(f32[32,16]{1,0}, f32[32,16]{1,0})}

%fused_dot (p0: bf16[64,32], p1: bf16[32,16]) -> bf16[64,16] {
  %p0 = bf16[64,32]{1,0} parameter(0)
  %p1 = bf16[32,16]{1,0} parameter(1)
  ROOT %dot.1 = bf16[64,16]{1,0} dot(bf16[64,32]{1,0} %p0, bf16[32,16]{1,0} %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[64,32], w: f32[32,16], m: f32[32,16]) -> (f32[32,16], f32[32,16]) {
  %x = f32[64,32]{1,0} parameter(0), metadata={op_name="x"}
  %w = f32[32,16]{1,0} parameter(1), metadata={op_name="params['w']"}
  %m = f32[32,16]{1,0} parameter(2), metadata={op_name="opt['m']"}
  %cast_w = bf16[16,32]{1,0} transpose(f32[32,16]{1,0} %w), dimensions={1,0}
  %cast_x = bf16[64,32]{1,0} convert(f32[64,32]{1,0} %x)
  %fusion.1 = bf16[64,16]{1,0} fusion(bf16[64,32]{1,0} %cast_x, bf16[16,32]{1,0} %cast_w), kind=kOutput, calls=%fused_dot
  %rows = bf16[128,16]{1,0} concatenate(bf16[64,16]{1,0} %fusion.1, bf16[64,16]{1,0} %fusion.1), dimensions={0}
  %experts = bf16[128,16]{1,0} custom-call(bf16[128,16]{1,0} %rows, bf16[16,32]{1,0} %cast_w), custom_call_target="tpu_custom_call", metadata={op_name="jit(step)/moe/ragged-dot"}
  %split = bf16[16,8,16]{2,1,0} reshape(bf16[128,16]{1,0} %experts)
  %a2a = bf16[64,16]{1,0} all-to-all(bf16[64,16]{1,0} %fusion.1), replica_groups={{0}}, dimensions={0}
  %g = f32[64,16]{1,0} convert(bf16[64,16]{1,0} %a2a)
  %grad = f32[32,16]{1,0} dot(f32[64,32]{1,0} %x, f32[64,16]{1,0} %g), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  %upd = f32[32,16]{1,0} subtract(f32[32,16]{1,0} %w, f32[32,16]{1,0} %grad)
  %m2 = f32[32,16]{1,0} multiply(f32[32,16]{1,0} %m, f32[32,16]{1,0} %m)
  %zero = f32[] constant(0)
  %bias = f32[4,16]{1,0} broadcast(f32[] %zero), dimensions={}
  ROOT %out = (f32[32,16]{1,0}, f32[32,16]{1,0}) tuple(f32[32,16]{1,0} %upd, f32[32,16]{1,0} %m2)
}
"""

# by hand: which arrays of each op carry a multiple of T = 64 (state-shaped arrays, (16, 32) in any order, never)
EXPECTED = {
    "cast_w": "weights",  # the state transposed: no token dimension
    "cast_x": "activations",  # [64, 32]: T rows
    "fusion.1": "matmul",  # a fusion holding a dot; its result [64, 16] carries T
    "rows": "routed activations",  # [128, 16]: 2T, the rows the experts see
    "experts": "routed matmul",  # a ragged dot kernel (a custom call named by its scope) on 2T rows
    "split": "routed activations",  # [16, 8, 16]: 16 x 8 = 128 = 2T rows, split by XLA
    "a2a": "communication",  # a collective on [64, 16]
    "g": "activations",
    "grad": "weight-gradient",  # contracts x [64, 32] with g [64, 16] over T into the state's shape
    "upd": "weights",  # the update of w
    "m2": "weights",  # the optimizer's moment
    "bias": "other",  # [4, 16]: neither tokens nor state
    "nowhere": "",  # no such op in the program
}
EXPERTS = {"experts"}  # the routed experts' op (moe_role = expert): its rows above T are the routed rows


def test_the_batch_is_the_input_the_step_does_not_return() -> None:
    batch = batch_of(parse_hlo_text(PROGRAM))
    assert batch.tokens == 64
    assert batch.inputs == ("x f32[64,32]",)
    assert batch.state == frozenset({(16, 32)})
    assert batch.shared == ()  # 32 and 16 are no multiples of 64
    assert "T = 64" in batch.text and "x f32[64,32]" in batch.text


def test_each_op_is_classified_from_its_shapes() -> None:
    module = parse_hlo_text(PROGRAM)
    ops = list(EXPECTED)
    assert dict(zip(ops, op_classes(module, ops, [op in EXPERTS for op in ops]), strict=True)) == EXPECTED


def test_without_expert_ops_no_rows_are_routed() -> None:
    module = parse_hlo_text(PROGRAM)
    ops = list(EXPECTED)
    plain = {k: v.removeprefix("routed ") for k, v in EXPECTED.items()}
    assert dict(zip(ops, op_classes(module, ops, [False] * len(ops)), strict=True)) == plain


def test_a_program_that_returns_every_input_has_no_batch() -> None:
    # x returned too (an eval step that gives its input back): nothing is the batch, every op held
    text = PROGRAM.replace(
        "ROOT %out = (f32[32,16]{1,0}, f32[32,16]{1,0}) tuple(f32[32,16]{1,0} %upd, f32[32,16]{1,0} %m2)",
        "ROOT %out = (f32[32,16]{1,0}, f32[64,32]{1,0}) tuple(f32[32,16]{1,0} %upd, f32[64,32]{1,0} %x)",
    )
    module = parse_hlo_text(text)
    assert batch_of(module).tokens == 0
    assert set(op_classes(module, ["cast_x", "fusion.1", "nowhere"], [False] * 3)) == {"other", ""}


def test_a_token_count_that_divides_the_state_is_said() -> None:
    # T = 16 divides the state's dimensions 32 and 16: the selection is ambiguous, and the note says so
    text = PROGRAM.replace("f32[64,32]", "f32[16,32]")
    batch = batch_of(parse_hlo_text(text))
    assert batch.tokens == 16 and batch.shared == (16, 32)
    assert "multiples of T too" in batch.text


@pytest.mark.parametrize(
    ("dims", "rows"),
    [
        ((16384, 2048), {16384}),
        ((32768,), {32768}),
        ((16384 * 2048,), {16384 * 2048}),  # a rank-1 array: its one dimension
        ((2048, 16), set()),
        ((4096, 8, 2, 1024), {4096 * 8, 4096 * 8 * 2, 8 * 2 * 1024}),  # the products of consecutive dimensions
        ((16, 1024), set()),  # 16 x 1024 = T only as the whole array: its size is no dimension
    ],
)
def test_token_rows(dims: tuple[int, ...], rows: set[int]) -> None:
    assert token_rows(dims, 16384) == rows


def test_shape_dims_reads_tuples_and_scalars() -> None:
    assert shape_dims("(bf16[8,128]{1,0:T(8,128)}, s32[], pred[4]{0})") == [(8, 128), (), (4,)]


# ---------------------------------------------------------------- the grammar


@pytest.mark.parametrize(
    ("term", "factor", "options", "filters"),
    [
        ("tokens=0.5", 0.5, (), ()),
        ("tokens(routed)=0.5", 0.5, ("routed",), ()),
        ("tokens(scope~moe)=2", 2.0, (), (("scope", "moe"),)),
        (
            "tokens(routed, scope~layer0, bucket=compute)=0",
            0.0,
            ("routed",),
            (("scope", "layer0"), ("bucket", "compute")),
        ),
    ],
)
def test_tokens_terms_parse(term: str, factor: float, options: tuple[str, ...], filters: tuple) -> None:
    (parsed,) = parse_terms([term])
    assert (parsed.action, parsed.factor, parsed.options) == ("tokens", factor, options)
    assert tuple((f.key, f.value) for f in parsed.filters) == filters


@pytest.mark.parametrize(
    ("term", "said"),
    [
        ("tokens", "needs a factor"),
        ("tokens(routed)", "needs a factor"),
        ("tokens=-0.5", ">= 0"),
        ("tokens=half", "not a number"),
        ("tokens(experts)=0.5", "not KEY=VALUE"),
        ("scale(tokens)=0.5", "tokens=F"),  # the batch is its own term: the refusal names it
        ("scale(routed, scope~moe)=0.5", "tokens(routed)=F"),
    ],
)
def test_bad_tokens_terms_are_one_line_errors(term: str, said: str) -> None:
    with pytest.raises(InputError) as info:
        parse_terms([term])
    assert term in str(info.value) and said in str(info.value) and "\n" not in str(info.value)


def test_a_batch_of_one_reads_its_next_dimension() -> None:
    # x: [1, 64, 32], one sequence of 64 tokens: T is 64, not 1 (every dimension is a multiple of 1)
    text = PROGRAM.replace("f32[64,32]", "f32[1,64,32]")
    assert batch_of(parse_hlo_text(text)).tokens == 64
    ones = PROGRAM.replace("f32[64,32]", "f32[1,1]")
    assert batch_of(parse_hlo_text(ones)).tokens == 0
