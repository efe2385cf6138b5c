"""FLOPs of ragged dots from the HLO shapes (issue 39 item 5): a ragged dot of lhs [M,K] and rhs [G,K,N] does
2·M·K·N, its weight gradient (XLA on TPUs: a convolution over the group axis of two group-masked operands)
2·M·K·N too, where XLA's cost model counts G times that. Every number here is computed by hand from the
shapes written in the test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import moeprof
from moeprof.core.hlo import parse_expression, parse_hlo_text, recount_expression, recount_flops
from moeprof.readers.registry import read_file
from synthetic.tpu import Chip, Op, write_xplane

from .helpers import SAMPLES, shared_trace

M, K, N, G = 64, 32, 16, 4  # rows (tokens x top-k), model width, expert width, experts
TRUE = 2 * M * K * N  # 65,536
DENSE = G * TRUE  # 262,144: XLA's count of the weight gradient, dense over every group

DOT = (
    f"%ragged-dot-none.1 = bf16[{M},{N}]{{1,0}} custom-call(s32[{G}]{{0}} %sizes, bf16[{M},{K}]{{1,0}} %x, "
    f'bf16[{G},{K},{N}]{{2,1,0}} %w), custom_call_target="tpu_custom_call", '
    'frontend_attributes={mosaic_fusion_entry_point="true",ragged_dot_tiling="128,32,16"}'
)
GRAD = (
    f"%fusion.7 = bf16[{G},{K},{N}]{{2,1,0}} fusion(bf16[{M},{K}]{{1,0}} %x, bf16[{M},{N}]{{1,0}} %dy, "
    f"pred[{G},{M}]{{1,0}} %mask), kind=kOutput, calls=%convolution_select_fusion"
)
# the weight gradient as XLA's TPU compiler writes it: each operand a select of the [M, .] array on the group mask
HLO = f"""HloModule jit_step, entry_computation_layout={{()->()}}

%activations_select_fusion (x.1: bf16[{M},{K}], mask.1: pred[{G},{M}]) -> bf16[{G},{M},{K}] {{
  %mask.1 = pred[{G},{M}]{{1,0}} parameter(1)
  %broadcast.1 = pred[{G},{M},{K}]{{2,1,0}} broadcast(%mask.1), dimensions={{0,1}}
  %x.1 = bf16[{M},{K}]{{1,0}} parameter(0)
  %broadcast.2 = bf16[{G},{M},{K}]{{2,1,0}} broadcast(%x.1), dimensions={{1,2}}
  %constant.1 = bf16[] constant(0)
  %broadcast.3 = bf16[{G},{M},{K}]{{2,1,0}} broadcast(%constant.1), dimensions={{}}
  ROOT %select.1 = bf16[{G},{M},{K}]{{2,1,0}} select(%broadcast.1, %broadcast.2, %broadcast.3)
}}

%kernel_select_fusion (dy.1: bf16[{M},{N}], mask.2: pred[{G},{M}]) -> bf16[{G},{M},{N}] {{
  %mask.2 = pred[{G},{M}]{{1,0}} parameter(1)
  %broadcast.4 = pred[{G},{M},{N}]{{2,1,0}} broadcast(%mask.2), dimensions={{0,1}}
  %dy.1 = bf16[{M},{N}]{{1,0}} parameter(0)
  %broadcast.5 = bf16[{G},{M},{N}]{{2,1,0}} broadcast(%dy.1), dimensions={{1,2}}
  %constant.2 = bf16[] constant(0)
  %broadcast.6 = bf16[{G},{M},{N}]{{2,1,0}} broadcast(%constant.2), dimensions={{}}
  ROOT %select.2 = bf16[{G},{M},{N}]{{2,1,0}} select(%broadcast.4, %broadcast.5, %broadcast.6)
}}

%convolution_select_fusion (x.2: bf16[{M},{K}], dy.2: bf16[{M},{N}], mask.3: pred[{G},{M}]) -> bf16[{G},{K},{N}] {{
  %x.2 = bf16[{M},{K}]{{1,0}} parameter(0)
  %mask.3 = pred[{G},{M}]{{1,0}} parameter(2)
  %fusion.5 = bf16[{G},{M},{K}]{{2,1,0}} fusion(%x.2, %mask.3), kind=kLoop, calls=%activations_select_fusion
  %dy.2 = bf16[{M},{N}]{{1,0}} parameter(1)
  %fusion.6 = bf16[{G},{M},{N}]{{2,1,0}} fusion(%dy.2, %mask.3), kind=kLoop, calls=%kernel_select_fusion
  ROOT %convolution.1 = bf16[{G},{K},{N}]{{2,1,0}} convolution(%fusion.5, %fusion.6), window={{size={G}}}
}}

ENTRY %main () -> bf16[{G},{K},{N}] {{
  %sizes = s32[{G}]{{0}} parameter(0)
  %x = bf16[{M},{K}]{{1,0}} parameter(1)
  %w = bf16[{G},{K},{N}]{{2,1,0}} parameter(2)
  %dy = bf16[{M},{N}]{{1,0}} parameter(3)
  %mask = pred[{G},{M}]{{1,0}} parameter(4)
  %ragged-dot-none.1 = bf16[{M},{N}]{{1,0}} custom-call(%sizes, %x, %w), frontend_attributes={{ragged_dot_tiling="1"}}
  %add.1 = bf16[{M},{K}]{{1,0}} add(%x, %x)
  ROOT %fusion.7 = bf16[{G},{K},{N}]{{2,1,0}} fusion(%x, %dy, %mask), kind=kOutput, calls=%convolution_select_fusion
}}
"""


def test_a_ragged_dot_and_its_weight_gradient_from_the_programs_hlo():
    module = parse_hlo_text(HLO)
    dot = recount_flops(module, "ragged-dot-none.1")
    assert (dot.flops, dot.counted_dense, dot.ragged_dots) == (TRUE, None, 1)
    grad = recount_flops(module, "fusion.7")
    assert (grad.flops, grad.counted_dense, grad.ragged_dots) == (TRUE, DENSE, 1)
    assert recount_flops(module, "add.1") is None and recount_flops(module, "mask") is None


def test_the_same_from_the_ops_own_text():
    """A capture whose HLO protos were left out (the samples): the operand shapes written in the op's text."""
    dot = recount_expression(parse_expression(DOT))
    assert (dot.flops, dot.counted_dense) == (TRUE, None)
    grad = recount_expression(parse_expression(GRAD))
    assert (grad.flops, grad.counted_dense) == (TRUE, DENSE)
    # the same fusion without its group mask is no ragged dot's gradient
    plain = GRAD.replace(f"pred[{G},{M}]{{1,0}} %mask", f"bf16[{G},{M}]{{1,0}} %mask")
    assert recount_expression(parse_expression(plain)) is None


def test_mfu_from_the_recounted_flops_with_xlas_beside_it(tmp_path: Path):
    """One chip, two steps of 1 ms (one program each), per step: the ragged dot (10 µs, model_flops 2·M·K·N as
    XLA states it), its weight gradient (10 µs, model_flops DENSE + 1,000 for the selects), a plain fusion
    (20 µs, 5,000). Recounted: the gradient does TRUE + 1,000."""
    plain = "%fusion.9 = f32[128]{0} fusion(f32[128]{0} %p), kind=kLoop, calls=%fused.9"
    ops = []
    for k in range(2):
        t = k * 1_000_000
        ops += [
            Op(DOT, t + 1_000, 10_000, "custom-call", flops=TRUE, model_flops=TRUE, tf_op="jit(step)/experts/ragged:"),
            Op(GRAD, t + 11_000, 10_000, "convolution fusion", flops=DENSE + 1_000, model_flops=DENSE + 1_000),
            Op(plain, t + 21_000, 20_000, "loop fusion", flops=5_000, model_flops=5_000, tf_op="jit(step)/adam/mul:"),
        ]
    path = tmp_path / "chip" / "tpuhost.xplane.pb"
    path.parent.mkdir()
    write_xplane(path, "tpuhost", [Chip(0, ops, [], modules=[(0, 1_000_000), (1_000_000, 2_000_000)])])
    events = read_file(path).events
    recounted = dict(zip(events["hlo_op"].astype(str), events["recounted_flops"], strict=True))
    assert recounted["ragged-dot-none.1"] == TRUE and recounted["fusion.7"] == TRUE + 1_000
    assert np.isnan(recounted["fusion.9"])
    u = moeprof.analyze_paths([path]).to_json()["utilization"]
    counted, xla = TRUE + TRUE + 1_000 + 5_000, TRUE + DENSE + 1_000 + 5_000  # per step
    assert u["recounted_ops"] == 2
    assert (u["flops_per_step"], u["flops_per_step_xla"]) == (counted, xla)
    step_ns = 1_000_000
    assert u["mfu"] == pytest.approx(counted / step_ns / 1e3 / 202.7)  # FLOPs per ns -> TFLOP/s
    assert u["mfu_xla"] == pytest.approx(xla / step_ns / 1e3 / 202.7)


RAGGED = 2 * 32_768 * 2_048 * 1_024  # the shared captures' ragged dots: M = 16,384 tokens x top-2, K 2048, N 1024


@pytest.mark.parametrize(
    "capture",
    ["tpu/moe_ragged_dot_v5e_1chip.xplane.pb", "sample:tpu_v5e_moe_step/b/runsc.xplane.pb.gz"],
    ids=["with-hlo", "hlo-left-out"],
)
def test_every_ragged_dot_of_a_real_capture_counts_two_mkn(capture: str):
    """The real dropless capture (16 experts): each ragged dot and each weight gradient is recounted to
    2·M·K·N by hand from its shapes; a gradient fusion keeps what XLA states beyond its dense 2·G·M·K·N."""
    path = SAMPLES / capture.split(":", 1)[1] if capture.startswith("sample:") else shared_trace(capture)
    events = read_file(path).events
    rows = events[events["recounted_flops"].notna()]
    ops = rows.drop_duplicates("hlo_op")
    assert len(ops) == 27  # 3 layers x (3 forward dots, 3 input gradients, 3 weight gradients)
    dots = ops["hlo_op"].astype(str).str.startswith("ragged-dot-none").to_numpy()
    assert (ops.loc[dots, "recounted_flops"] == RAGGED).all() and dots.sum() == 18
    grads = ops[~dots]
    extra = grads["model_flops"] - 16 * RAGGED
    assert (extra >= 0).all() and np.allclose(grads["recounted_flops"], RAGGED + extra, rtol=0, atol=0.5)


def test_no_scope_or_step_above_the_peak_on_the_real_captures():
    """XLA's count puts the dropless capture at 149% of the chip's peak, its "(no scope)" row at 812%: with the
    ragged dots recounted no step and no scope is above the peak."""
    out = moeprof.analyze_paths([shared_trace("tpu/moe_ragged_dot_v5e_1chip.xplane.pb")]).to_json()
    u = out["utilization"]
    assert u["mfu"] < 1 < u["mfu_xla"] and "steps_above_peak" not in u and "ops_above_peak" not in u
    assert all(s.get("peak_fraction", 0) < 1 for s in out["scopes"])
    assert max(s.get("peak_fraction_xla", 0) for s in out["scopes"]) > 8  # XLA's own figure, beside it
