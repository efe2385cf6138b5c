"""The HLO text reader: opcodes, groups (explicit and iota), bytes, async wrappers."""

# ruff: noqa: E501  (HLO lines are long)
from __future__ import annotations

from moeprof.core.hlo import parse_groups, parse_hlo_text, shape_bytes

HLO = """HloModule jit_step, is_scheduled=true, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.0 = f32[] add(%x, %y)
}

%async_computation (p: bf16[64,32]) -> bf16[64,32] {
  %p = bf16[64,32]{1,0} parameter(0)
  ROOT %ragged = bf16[64,32]{1,0} all-to-all(%p), channel_id=9, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}
}

ENTRY %main (a: bf16[64,32]) -> bf16[64,32] {
  %a = bf16[64,32]{1,0} parameter(0)
  %all-to-all-start = ((bf16[64,32]{1,0}), bf16[64,32]{1,0}) async-start(%a), calls=%async_computation
  %all-to-all-done = bf16[64,32]{1,0} async-done(%all-to-all-start)
  %all-gather-start.1 = (bf16[64,32]{1,0}, bf16[512,32]{1,0}) all-gather-start(%all-to-all-done), channel_id=2, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  %cp = bf16[64,32]{1,0} collective-permute(%a), channel_id=3, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
  ROOT %psum_invariant.7 = bf16[64,32]{1,0} all-reduce(%cp), channel_id=4, replica_groups={}, to_apply=%add
}
"""


def test_opcodes_and_async_resolution():
    m = parse_hlo_text(HLO)
    assert m.num_partitions == 8 and m.entry == "main"
    assert m.instructions["all-to-all-start"].opcode == "all-to-all"  # async wrapper resolved
    assert m.instructions["psum_invariant.7"].opcode == "all-reduce"
    assert m.instructions["all-gather-start.1"].opcode == "all-gather-start"
    assert not m.instructions["a"].is_collective


def test_groups():
    m = parse_hlo_text(HLO)
    a2a = m.instructions["all-to-all-start"]
    # [2,4]<=[4,2]T(1,0): iota(8).reshape(4,2).T.reshape(2,4)
    assert a2a.replica_groups == ((0, 2, 4, 6), (1, 3, 5, 7))
    assert m.group_of(a2a, 3) == (1, 3, 5, 7)
    assert m.group_of(m.instructions["cp"], 1) == (0, 1, 2)
    assert m.group_of(m.instructions["psum_invariant.7"], 5) == tuple(range(8))  # {} = every device


def test_bytes_are_the_larger_side():
    m = parse_hlo_text(HLO)
    assert m.instructions["all-gather-start.1"].bytes == 512 * 32 * 2  # the gathered output
    assert m.instructions["psum_invariant.7"].bytes == 64 * 32 * 2
    assert shape_bytes("(f32[2,3]{1,0}, s8[4])") == 2 * 3 * 4 + 4


def test_parse_groups_forms():
    assert parse_groups("{{0,1},{2,3}}") == ((0, 1), (2, 3))
    assert parse_groups("[2,2]<=[4]") == ((0, 1), (2, 3))
    assert parse_groups("{}") == ()
    assert parse_groups(None) is None
