"""One way of saying a kernel's name on every screen (issue 49, core/names.py): in prose (the verdict, evidence,
titles) and in a table's column. Expectations written by hand for names as the real shared traces spell them:
DeepSeek-V3's DeepEP and cutlass kernels (Kineto), PyTorch's elementwise kernels in an unnamed namespace (vLLM
Kineto, an Nsight export), MI300 code objects (``.kd``) of an XLA program, a TPU op's HLO instruction (xprof's
long name), NCCL's kernels."""

from __future__ import annotations

import gzip
import json

import pytest

import moeprof
from moeprof.core.names import PROSE_WIDTH, cut, namespace_of, qualified, said
from moeprof.core.summary import verdict
from moeprof.reports.text import verdict_lines

from .helpers import SAMPLES, shared_trace

COMBINE = "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*, float*, int const*)"
GEMM = "void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(Params)"


@pytest.mark.parametrize(
    ("name", "in_prose", "namespace"),
    [
        (COMBINE, "internode::combine", "dpsk::ep::internode"),
        (GEMM, "m_grouped_fp8_ptp128c::GemmKernel", "dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c"),
        ("void cutlass::device_kernel<flash::FlashAttnBwd<flash::Mainloop<2>, 1> >(flash::FlashAttnBwd<2>::Params)",
         "flash::FlashAttnBwd", "flash"),
        # the old evidence said "void" of these (the first "(" taken for the parameter list)
        ("void (anonymous namespace)::elementwise_kernel<128, 4, float>(int, float*)", "elementwise_kernel", ""),
        ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)",
         "multimem_all_reduce_kernel", ""),
        ("void at::native::<unnamed>::vectorized_kernel<4>(int, T1)", "native::vectorized_kernel", "at::native"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_SendRecv", ""),
        ("%multiply_reduce_fusion.10 = f32[16384]{0:T(1024)S(1)} fusion(f32[16384,2048]{1,0:T(8,128)} %x.1), "
         "kind=kLoop, calls=%fused_computation.173", "multiply_reduce_fusion.10", ""),
        ("input_transpose_fusion_1.kd", "input_transpose_fusion_1.kd", ""),
        ("all-to-all.3", "all-to-all.3", ""),
    ],
)  # fmt: skip
def test_a_name_in_prose_is_its_function_with_one_namespace(name, in_prose, namespace):
    assert said(name) == in_prose
    assert namespace_of(name) == namespace


def test_a_tensile_name_is_cut_in_its_middle_in_prose_and_in_a_column():
    """A Tensile GEMM names itself by its 600-character parameter list: in prose its head (the problem's layout
    and macro tile) and its end, PROSE_WIDTH characters at most; in a column the same kind of cut."""
    name = "Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB0_" + "APM1_ABV0_" * 55 + "WG64_4_1_WGM1.kd"
    prose = said(name)
    assert len(prose) == PROSE_WIDTH and prose.startswith("Cijk_Ailk_Bljk_BBS_BH_MT256x") and prose.endswith("_WGM1.kd")
    assert "…" in prose
    column = cut(name, 30)
    assert len(column) == 30 and column.startswith("Cijk_Ailk_B") and column.endswith("WGM1.kd")


def test_a_column_keeps_template_arguments_and_opens_the_cutlass_wrapper():
    assert cut(COMBINE, 60) == "internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>"
    assert cut(GEMM, 40) == "cuda::m_grouped_fp8_ptp128c::GemmKernel"  # the leading namespaces go first
    assert qualified(GEMM) == "dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel"
    assert qualified("%copy-start.69 = (f32[16384]{0}, u32[]) copy-start(f32[16384]{0} %a)") == "copy-start.69"


def _names(events: list[dict]) -> set[str]:
    return {str(e.get("name", "")) for e in events if e.get("cat") == "kernel"}


def test_every_kernel_of_the_shared_kineto_traces_is_said_short_and_whole():
    """Every kernel name of DeepSeek-V3's and vLLM's Kineto traces: in prose at most PROSE_WIDTH characters, no
    return type, no parameter list, never an empty word nor "void"; the function's own name in it wherever
    it fits."""
    names: set[str] = set()
    for relative in ("kineto/deepseek_v3_ep64_h800_rank0.json.gz", "kineto/vllm_tp8_b200_rank0.json.gz"):
        with gzip.open(shared_trace(relative), "rt") as f:
            names |= _names(json.load(f)["traceEvents"])
    assert len(names) > 40
    for name in names:
        text = said(name)
        assert 0 < len(text) <= PROSE_WIDTH, (name, text)
        assert text != "void" and not text.startswith("void ") and "(" not in text, (name, text)
        function = qualified(name).split("<", 1)[0].split("::")[-1]
        assert function in text or "…" in text, (name, text)
    # DeepEP's namespace, as the evidence of its kernels in use quotes it
    assert {namespace_of(n) for n in names if "internode::combine" in n} == {"dpsk::ep::internode"}


def test_the_mi300_verdict_line_names_the_tensile_gemm_in_a_few_words():
    """jax_conv_8xmi300's first try named its Tensile GEMM whole: 600 characters in one sentence."""
    result = moeprof.analyze_paths([shared_trace("xplane/jax_conv_8xmi300.xplane.pb")])
    lines = verdict_lines(verdict(result))
    assert all(len(line) < 400 for line in lines), [len(line) for line in lines]
    first = lines[1]
    assert "Cijk_Ailk_Bljk_BBS_BH_MT256x" in first and "input_transpose_fusion.kd" in first, first


def test_tpu_op_names_stay_whole():
    """A TPU capture's ops are XLA's instruction names: said as they are."""
    result = moeprof.analyze_paths([SAMPLES / "tpu_v5e_demo"])
    bound = result.step_bound
    assert bound is not None and bound.ops
    assert all(said(op.name) == op.name for op in bound.ops)
