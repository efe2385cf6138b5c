"""The routing terms (``top_k``, ``capacity``, ``experts``; docs/metrics.md, "Projection"): their grammar, what a
hand-written MoE program says of its dimensions and each op's arrays (each expected value worked out by hand
from the shapes below), and the cost model's arithmetic on facts built by hand."""

# ruff: noqa: E501  (HLO lines are long)

from __future__ import annotations

import pytest

from moeprof.core.hlo import parse_hlo_text
from moeprof.errors import InputError
from moeprof.insight.projection import parse_terms
from moeprof.insight.projection.terms import EXPECTED
from moeprof.insight.projection.terms.capacity import capacity_rows
from moeprof.insight.projection.terms.program import OpArray, OpFacts, Program, describe, program_of
from moeprof.insight.projection.terms.resize import Resize, op_change, tiles

# T = 64 tokens (x, not returned), top-2: 128 routed rows; E = 4 experts (w: [4, 32, 16], returned: the state);
# the experts' kernel takes a tile schedule of 128/16 + 4 - 1 = 11 tiles (tm = 16 rows)
PROGRAM = """HloModule step, entry_computation_layout={(f32[64,32]{1,0}, f32[4,32,16]{2,1,0}, f32[32,4]{1,0})->(f32[4,32,16]{2,1,0}, f32[32,4]{1,0})}

%fused_gather (p0: bf16[64,32], p1: s32[128]) -> bf16[128,32] {
  %p0 = bf16[64,32]{1,0} parameter(0)
  %p1 = s32[128]{0} parameter(1)
  %ix = s32[128,1]{1,0} reshape(s32[128]{0} %p1)
  ROOT %g = bf16[128,32]{1,0} gather(bf16[64,32]{1,0} %p0, s32[128,1]{1,0} %ix), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,32}
}

%add (lhs: f32[], rhs: f32[]) -> f32[] {
  %lhs = f32[] parameter(0)
  %rhs = f32[] parameter(1)
  ROOT %plus = f32[] add(f32[] %lhs, f32[] %rhs)
}

%fused_sum (p0: f32[64,2,16], p1: f32[64,2]) -> f32[64,16] {
  %q0 = f32[64,2,16]{2,1,0} parameter(0)
  %q1 = f32[64,2]{1,0} parameter(1)
  %wk = f32[64,2,16]{2,1,0} broadcast(f32[64,2]{1,0} %q1), dimensions={0,1}
  %mk = f32[64,2,16]{2,1,0} multiply(f32[64,2,16]{2,1,0} %q0, f32[64,2,16]{2,1,0} %wk)
  %zero = f32[] constant(0)
  ROOT %ksum = f32[64,16]{1,0} reduce(f32[64,2,16]{2,1,0} %mk, f32[] %zero), dimensions={1}, to_apply=%add
}

ENTRY %main (x: f32[64,32], w: f32[4,32,16], r: f32[32,4]) -> (f32[4,32,16], f32[32,4]) {
  %x = f32[64,32]{1,0} parameter(0), metadata={op_name="x"}
  %w = f32[4,32,16]{2,1,0} parameter(1), metadata={op_name="params['w']"}
  %r = f32[32,4]{1,0} parameter(2), metadata={op_name="params['router']"}
  %h = bf16[64,32]{1,0:T(8,128)S(1)} convert(f32[64,32]{1,0} %x), metadata={op_name="jit(step)/layer0/convert"}
  %logits = f32[64,4]{1,0} dot(f32[64,32]{1,0} %x, f32[32,4]{1,0} %r), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(step)/layer0/moe/router/dot_general"}
  %order = s32[128]{0} iota(), iota_dimension=0, metadata={op_name="jit(step)/layer0/moe/argsort"}
  %rows = bf16[128,32]{1,0} fusion(bf16[64,32]{1,0:T(8,128)S(1)} %h, s32[128]{0} %order), kind=kLoop, calls=%fused_gather, metadata={op_name="jit(step)/layer0/moe/gather"}
  %counts = s32[4]{0} reduce-window(s32[128]{0} %order), metadata={op_name="jit(step)/layer0/moe/bincount"}
  %meta = (s32[5]{0}, s32[11]{0}) custom-call(s32[4]{0} %counts), custom_call_target="tpu_custom_call"
  %offsets = s32[5]{0} get-tuple-element((s32[5]{0}, s32[11]{0}) %meta), index=0
  %schedule = s32[11]{0} get-tuple-element((s32[5]{0}, s32[11]{0}) %meta), index=1
  %wb = bf16[4,32,16]{2,1,0} convert(f32[4,32,16]{2,1,0} %w), metadata={op_name="jit(step)/layer0/convert_element_type"}
  %experts = bf16[128,16]{1,0} custom-call(s32[5]{0} %offsets, s32[11]{0} %schedule, bf16[128,32]{1,0} %rows, bf16[4,32,16]{2,1,0} %wb), custom_call_target="tpu_custom_call", frontend_attributes={ragged_dot_tiling="16,32,16"}, metadata={op_name="jit(step)/layer0/moe/moe_experts/ragged-dot"}
  %copies = bf16[64,2,16]{2,1,0} reshape(bf16[128,16]{1,0} %experts), metadata={op_name="jit(step)/layer0/moe/combine/reshape"}
  %wide = f32[64,2,16]{2,1,0} convert(bf16[64,2,16]{2,1,0} %copies), metadata={op_name="jit(step)/layer0/moe/combine/convert"}
  %weights = f32[64,2]{1,0} slice(f32[64,4]{1,0} %logits), slice={[0:64], [0:2]}, metadata={op_name="jit(step)/layer0/moe/router/top_k"}
  %sum = f32[64,16]{1,0} fusion(f32[64,2,16]{2,1,0} %wide, f32[64,2]{1,0} %weights), kind=kLoop, calls=%fused_sum, metadata={op_name="jit(step)/layer0/moe/combine/tk,tkh->th"}
  %flip = f32[64,16]{0,1} copy(f32[64,16]{1,0} %sum)
  %shared = f32[64,16]{1,0} copy(f32[64,16]{1,0} %sum), metadata={op_name="jit(step)/layer0/shared_expert/copy"}
  %grad = f32[4,32,16]{2,1,0} add(f32[4,32,16]{2,1,0} %w, f32[4,32,16]{2,1,0} %w), metadata={op_name="jit(step)/optimizer/add"}
  %r2 = f32[32,4]{1,0} add(f32[32,4]{1,0} %r, f32[32,4]{1,0} %r), metadata={op_name="jit(step)/optimizer/add"}
  ROOT %out = (f32[4,32,16]{2,1,0}, f32[32,4]{1,0}) tuple(f32[4,32,16]{2,1,0} %grad, f32[32,4]{1,0} %r2)
}
"""
# the same program padded to capacity: the experts' groups a broadcast of one value, 40 rows each (E·C = 160)
PADDED = (
    PROGRAM.replace(
        "%meta = (s32[5]{0}, s32[11]{0}) custom-call(s32[4]{0} %counts)",
        "%fill = s32[4]{0} broadcast(s32[] %forty), dimensions={}\n  %meta = (s32[5]{0}, s32[13]{0}) custom-call(s32[4]{0} %fill)",
    )
    .replace("%order = s32[128]{0} iota()", "%forty = s32[] constant(40)\n  %order = s32[128]{0} iota()")
    .replace("s32[11]", "s32[13]")
    .replace(
        "%experts = bf16[128,16]{1,0} custom-call(s32[5]{0} %offsets, s32[13]{0} %schedule, bf16[128,32]{1,0} %rows",
        "%buffer = bf16[160,32]{1,0} pad(bf16[128,32]{1,0} %rows), padding=0_32x0_0\n  %experts = bf16[160,16]{1,0} custom-call(s32[5]{0} %offsets, s32[13]{0} %schedule, bf16[160,32]{1,0} %buffer",
    )
    .replace(
        "%copies = bf16[64,2,16]{2,1,0} reshape(bf16[128,16]{1,0} %experts)",
        "%back = bf16[128,16]{1,0} slice(bf16[160,16]{1,0} %experts), slice={[0:128], [0:16]}\n  %copies = bf16[64,2,16]{2,1,0} reshape(bf16[128,16]{1,0} %back)",
    )
)


def _facts(text: str = PROGRAM) -> tuple[Program, dict[str, OpFacts | None]]:
    module = parse_hlo_text(text)
    ops = list(module.computations[module.entry])
    program, facts = describe(module, ops, 1e9)
    return Program.from_json(program), {op: OpFacts.from_json(f) for op, f in zip(ops, facts, strict=True)}


def test_the_program_says_its_moe_dimensions() -> None:
    program = program_of(parse_hlo_text(PROGRAM), 1e9)
    # T = 64 (x's leading dimension), the experts' 128 rows over 4 groups, 11 tiles of 128/(11 - 4 + 1) = 16 rows
    assert (program.tokens, program.rows, program.experts, program.tiles, program.tile_rows) == (64, 128, 4, 11, 16.0)
    assert program.top_k == 2  # 128 rows / 64 tokens, one device
    assert program.capacity == 0  # the groups come from the routing (the counts): dropless
    assert program.hbm_bytes_per_s == 1e9


def test_a_padded_program_says_its_capacity() -> None:
    program = program_of(parse_hlo_text(PADDED))
    # the groups are a broadcast of one value: 160 rows over 4 experts, C = 40; the assignments are s32[128]: k = 2
    assert (program.rows, program.experts, program.capacity, program.top_k) == (160, 4, 40, 2)
    assert program.capacity_factor == pytest.approx(40 * 4 / (2 * 64))  # 1.25
    assert capacity_rows(program, 2.0) == 64  # ceil(2 * 2 * 64 / 4)


def test_each_op_has_its_kind_and_its_arrays_their_roles() -> None:
    _, facts = _facts()
    kinds = {op: f.kind for op, f in facts.items() if f is not None}
    assert kinds["experts"] == "grouped"  # the ragged dot
    assert kinds["logits"] == "matmul"
    assert kinds["rows"] == "gather"  # a fusion of a gather and a reshape: data movement only
    assert kinds["weights"] == "move"  # a slice
    assert kinds["sum"] == kinds["wide"] == kinds["grad"] == "other"
    rows = facts["rows"]
    assert rows is not None
    # result [128, 32]: 2T rows (tokens and routed); the table h [64, 32]: T rows, on chip (S(1)); its index s32[128]
    assert [(a.roles, a.on_chip, a.result) for a in rows.arrays] == [
        ("tr", False, True),
        ("t", True, False),
        ("tr", False, False),
    ]
    assert rows.table == 1 and rows.row_bytes == 32 * 2  # a row of the table: 32 bf16
    wb = facts["wb"]
    assert wb is not None and [a.roles for a in wb.arrays] == ["se", "se"]  # the state's cast is shaped as the state
    logits = facts["logits"]
    assert logits is not None and [a.roles for a in logits.arrays] == ["te", "t", "se"]  # [T, E], x, the router [32, 4]
    wide = facts["wide"]
    assert wide is not None and wide.arrays[0].roles == "trk"  # [64, 2, 16]: T, the routed 2T rows, the k copies


def test_at_one_copy_per_token_the_k_copies_relayouts_and_sums_go() -> None:
    _, facts = _facts()
    gone = {op for op, f in facts.items() if f is not None and f.single_copy == "gone"}
    # the reshape and the convert between [128, 16] and [64, 2, 16]; the sum over k; the layout flip of the [T, 16]
    # sum ({1,0} -> {0,1}); not the copy that keeps its layout, not the experts, not the gather
    assert gone == {"copies", "wide", "sum", "flip"}


def test_in_a_padded_program_the_buffers_carry_the_capacity() -> None:
    _, facts = _facts(PADDED)
    buffer, experts, back = facts["buffer"], facts["experts"], facts["back"]
    assert buffer is not None and experts is not None and back is not None
    assert "c" in buffer.arrays[0].roles and "c" not in buffer.arrays[1].roles  # pad: [160, 32] from the [128, 32] rows
    assert "c" in back.arrays[1].roles and "c" not in back.arrays[0].roles  # slice: [128, 16] from [160, 16]
    rows = facts["rows"]
    assert rows is not None and not any("c" in a.roles for a in rows.arrays)


# ---------------------------------------------------------------- the cost model, by hand


def _program(**changes: object) -> Program:
    out = Program(tokens=64, rows=128, experts=4, tile_rows=16, tiles=11, top_k=2, hbm_bytes_per_s=1e9)
    for key, value in changes.items():
        setattr(out, key, value)
    return out


def test_a_grouped_gemm_runs_its_tiles() -> None:
    op = OpFacts("grouped", (OpArray(128 * 16 * 2, "tr", False, True),))
    # top-1: ceil(64/16) + 4 - 1 = 7 tiles of 11; 8 experts: 8 + 7 = 15 of 11
    assert op_change(_program(), op, Resize(routed=0.5)).q == pytest.approx(7 / 11)
    assert op_change(_program(), op, Resize(experts=2.0)).q == pytest.approx(15 / 11)
    assert tiles(40960, 16, 128) == 335  # the demo's capacity 1.25 program: s32[335]


def test_a_matmul_takes_the_factor_of_the_dimension_it_carries() -> None:
    op = OpFacts(
        "matmul",
        (
            OpArray(64 * 4 * 4, "te", False, True),
            OpArray(64 * 32 * 4, "t", False, False),
            OpArray(128, "se", False, False),
        ),
    )
    assert op_change(_program(), op, Resize(experts=2.0)).q == 2.0  # the router's width: FLOPs x2
    assert op_change(_program(), op, Resize(tokens=0.5)).q == 0.5


def test_other_ops_weigh_each_array_by_its_bytes() -> None:
    # 300 bytes of routed rows, 100 of tokens: routed x2 -> (600 + 100) / 400
    op = OpFacts("other", (OpArray(300, "tr", False, True), OpArray(100, "t", False, False)))
    assert op_change(_program(), op, Resize(routed=2.0)).q == pytest.approx(700 / 400)


def test_data_movement_follows_its_hbm_bytes() -> None:
    big = 64 * 2**20
    # a copy of 64 MiB, HBM to HBM; halved, its 32 MiB arrays sit on chip with the program's share of 32 MiB arrays
    op = OpFacts("move", (OpArray(big, "tr", False, True), OpArray(big, "tr", False, False)))
    program = _program(on_chip={"5": [3, 4], "6": [1, 4]}, largest_on_chip=big)
    change = op_change(program, op, Resize(routed=0.5))
    assert change.q == pytest.approx(2 * (big / 2) * (1 - 3 / 4) / (2 * big)) and change.placed
    # doubled past the largest array the program held on chip: its HBM bytes double
    assert op_change(program, op, Resize(routed=2.0)).q == pytest.approx(2.0)


def test_data_movement_measured_on_chip_pays_what_leaves_it_at_the_hbm_bandwidth() -> None:
    mib = 2**20
    # result on chip, operand on chip: no HBM bytes measured; doubled past the largest on chip (64 MiB), both go to HBM
    op = OpFacts("move", (OpArray(64 * mib, "t", True, True), OpArray(64 * mib, "t", True, False)))
    change = op_change(_program(largest_on_chip=64 * mib, on_chip={"6": [1, 1]}), op, Resize(tokens=2.0))
    assert change.q == 2.0  # its bytes, at the rate it measured
    assert change.c == pytest.approx(2 * 128 * mib / 1e9 * 1e9)  # + 256 MiB at 1 GB/s (ns)


def test_a_row_gather_reads_its_table_and_writes_its_result() -> None:
    mib = 2**20
    # result 128 MiB in HBM (written at 1 GB/s: 134.2 ms), table 128 MiB in HBM, index 0.125 MiB; measured d = 1 s
    op = OpFacts(
        "gather",
        (
            OpArray(128 * mib, "tr", False, True, (32768, 2048)),
            OpArray(128 * mib, "tr", False, False, (32768, 2048)),
            OpArray(mib // 8, "tr", False, False, (32768,)),
        ),
        table=1,
        row_bytes=4096,
    )
    program = _program(
        tokens=16384, rows=32768, largest_on_chip=64 * mib, gather_table_on_chip=64 * mib, on_chip={"6": [1, 2]}
    )
    write = 128 * mib  # ns at 1 byte/ns
    change = op_change(program, op, Resize(routed=0.5))
    # halved: the table (64 MiB) is no larger than one the program held on chip: its reads cost none; the result's
    # 64 MiB sit on chip with the program's share of 64 MiB arrays (1 of 2): 32 MiB written
    assert change.q == 0.0
    assert change.c == pytest.approx(0.5 * 64 * mib) and change.floor == pytest.approx(0.5 * 64 * mib)
    d = 1e9
    # doubled (table stays in HBM): the reads follow the rows, the writes the bytes (256 MiB past the on-chip largest)
    double = op_change(program, op, Resize(routed=2.0))
    assert double.q * d + double.c == pytest.approx(2 * (d - write) + 2 * write)


def test_a_gather_table_leaving_chip_memory_reads_at_the_scatters_random_row_cost() -> None:
    mib = 2**20
    op = OpFacts(
        "gather",
        (OpArray(64 * mib, "tr", False, True, (16384, 2048)), OpArray(64 * mib, "tr", True, False, (16384, 2048))),
        table=1,
        row_bytes=4096,
    )
    program = _program(
        tokens=8192, rows=16384, largest_on_chip=64 * mib, gather_table_on_chip=64 * mib, on_chip={"6": [1, 1]}
    )
    d, row_ns = 100_000.0, 30.0
    change = op_change(program, op, Resize(routed=2.0), {4096: row_ns})
    # the table doubles past chip memory: 32,768 rows read at 30 ns each; the result's 128 MiB written at 1 GB/s
    assert change.q * d + change.c == pytest.approx(32768 * row_ns + 128 * mib)


def test_the_memory_space_assignments_copies_go_with_what_no_longer_fits() -> None:
    op = OpFacts("async", (OpArray(64 * 2**20, "tr", True, True), OpArray(64 * 2**20, "tr", False, False)))
    program = _program(largest_on_chip=64 * 2**20)
    assert op_change(program, op, Resize(routed=2.0)).q == 0.0
    assert op_change(program, op, Resize(routed=0.5)).q == 0.5


def test_unchanged_arrays_leave_an_op_alone_and_gone_ops_take_no_time() -> None:
    op = OpFacts("other", (OpArray(100, "s", False, True),), single_copy="gone")
    assert op_change(_program(), op, Resize(routed=2.0)).q == 1.0  # the state: top-k does not touch it
    assert op_change(_program(), op, Resize(routed=0.5, single_copy=True)).q == 0.0


# ---------------------------------------------------------------- the grammar


@pytest.mark.parametrize(
    ("term", "action", "factor"),
    [
        ("top_k=1", "top_k", 1.0),
        ("top_k(scope~layer0)=4", "top_k", 4.0),
        ("capacity=1.25", "capacity", 1.25),
        ("experts=2", "experts", 2.0),
        ("experts=0.5", "experts", 0.5),
    ],
)
def test_routing_terms_parse(term: str, action: str, factor: float) -> None:
    (parsed,) = parse_terms([term])
    assert (parsed.action, parsed.factor) == (action, factor)


@pytest.mark.parametrize(
    ("term", "said"),
    [
        ("top_k", "top_k needs the new top-k"),
        ("top_k=1.5", "whole number of experts"),
        ("top_k=0", "whole number of experts"),
        ("capacity=0", "must be above 0"),
        ("capacity=x", "is not a number"),
        ("experts=-2", "must be a finite number >= 0"),
        ("experts=0", "must be above 0"),
    ],
)
def test_bad_routing_terms_are_one_line_errors(term: str, said: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_terms([term])
    assert said in str(raised.value) and "\n" not in str(raised.value) and repr(term) in str(raised.value)


def test_every_term_is_listed_with_its_forms() -> None:
    assert all(form in EXPECTED for form in ("top_k=K", "capacity=F", "experts=F", "tokens(routed)=F"))
