"""The taxonomy: spec §2 vocabulary, precedence of evidence, user rules."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeprof.core.classify import FIELDS, classify_one, classify_table, default_rules, rules_with
from moeprof.core.events import concat, make_table
from moeprof.core.vocabulary import vocabulary
from moeprof.errors import InputError


def one(name: str = "", **evidence: str):
    ev = dict.fromkeys(FIELDS, "")
    ev.update(activity="kernel", name=name)
    ev.update(evidence)
    return classify_one(ev, default_rules())


@pytest.mark.parametrize(
    ("name", "bucket", "kind"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "comm", "all-reduce"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "comm", "all-gather"),
        ("ncclSymkDevKernel_AllReduce_AGxLL_R_bf16(ncclSymkDevWorkArgs4K)", "comm", "all-reduce"),
        (
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "comm",
            "reduce-scatter",
        ),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", "comm", "send-recv"),
        ("ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "comm", "broadcast"),
        ("void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*, float*)", "comm", "ep-dispatch"),
        ("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16>(int4*)", "comm", "ep-combine"),
        ("void dpsk::ep::internode::notify_dispatch<false, 8>(int const*)", "comm", "ep-dispatch"),
        ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*)", "comm", "ep-dispatch"),
        ("nccl_ep_dispatch_kernel", "comm", "ep-dispatch"),
        ("RaggedAllToAllKernelImpl<bf16>", "comm", "all-to-all"),
        ("xla::gpu::AllReduceKernelImpl<float>", "comm", "all-reduce"),
        ("multimem_all_reduce_kernel<c10::BFloat16,16>", "comm", "all-reduce"),
        ("one_shot_all_reduce_kernel", "comm", "all-reduce"),
        ("void vllm::cross_device_reduce_1stage<half, 8>(RankData*)", "comm", "all-reduce"),
        ("allreduce_fusion_kernel_oneshot_lamport", "comm", "all-reduce"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NTN", "compute", ""),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "compute", ""),
        ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(Params)", "compute", ""),
        # a compute kernel whose template arguments say "Collective" is still compute
        ("void cutlass::device_kernel<flash::FlashAttnBwd<flash::CollectiveMainloopBwd<2>>>(Params)", "compute", ""),
        ("void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*)", "compute", ""),
        ("loop_add_fusion", "compute", ""),
        ("xla::gpu::MultiGpuBarrierKernelImpl", "other", ""),
    ],
)
def test_kernel_names(name, bucket, kind):
    c = one(name)
    assert (c.bucket, c.kind) == (bucket, kind), c.rule


def test_copies():
    assert one("Memcpy HtoD (Pageable -> Device)", activity="memcpy", copy_kind="HtoD").bucket == "memcpy"
    peer = one("Memcpy PtoP (Device -> Device)", activity="memcpy", copy_kind="PtoP")
    assert (peer.bucket, peer.kind) == ("comm", "send-recv")
    assert one("MemcpyP2P", activity="memcpy").bucket == "comm"
    assert one("Memset (Device)", activity="memset").bucket == "other"


def test_hlo_opcode_beats_the_kernel_name():
    # XLA runs an all-to-all as NCCL SendRecv kernels; JAX names an all-reduce psum_invariant.7
    c = one("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", opcode="all-to-all")
    assert (c.bucket, c.kind, c.rule) == ("comm", "all-to-all", "hlo:all-to-all")
    assert one("psum_invariant.7", opcode="all-reduce").kind == "all-reduce"
    assert one("all-gather-start", opcode="all-gather-start").kind == "all-gather"


def test_annotation_refines_kind_but_never_makes_compute_comm():
    c = one("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclWorkElem)", annotation="nccl:all_to_all")
    assert (c.kind, c.rule) == ("all-to-all", "nccl:send-recv+annotation:all-to-all")
    assert one("void at::native::vectorized_elementwise_kernel<4>", annotation="nccl:all_to_all").bucket == "compute"
    assert one("ncclDevKernel_SendRecv(x)", collective="all_to_all").kind == "all-to-all"


def test_deepep_names_its_link():
    # normal-mode internode kernels forward inside the node over NVLink and send across it over RDMA: both,
    # split by the RDMA ranks they name (core.topology.internode_fraction); the low-latency ones are all RDMA
    assert one("void dpsk::ep::internode::combine<false>(int4*)").link == "internode"
    assert one("void deep_ep::internode_ll::dispatch<true, false, 7168>(void*)").link == "ib"
    assert one("void deep_ep::intranode::combine<8>(int4*)").link == "nvlink"


def test_deepep_internode_split_by_the_rdma_ranks_it_names():
    """DeepSeek's EP64: 8 RDMA ranks (nodes) of 8 GPUs; for one GPU 7 peers in its node and 56 outside: §3's
    point-to-point rule gives 56 / 63 over RDMA. cached_notify names no node count: the file's other kernels do."""
    from moeprof.core.topology import internode_fraction, link_fractions, rdma_ranks_of

    assert internode_fraction(8, 8) == 56 / 63 and internode_fraction(1, 8) == 0.0
    assert np.isnan(internode_fraction(0, 8))
    names = [
        "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int4*)",
        "void dpsk::ep::internode::cached_notify<false>(int)",
        "void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*)",
    ]
    assert rdma_ranks_of(names) == 8
    raw = make_table(
        {"name": names, "activity": "kernel", "start_ns": 0, "end_ns": 1, "global_id": 0, "gpus_per_domain": 8},
        n=3,
    )
    linked = link_fractions(classify_table(raw))
    assert np.allclose(linked["ib_fraction"], 56 / 63)


def test_table_classification_maps_distinct_names_once():
    names = ["loop_add_fusion", "ncclDevKernel_AllGather_RING_LL(x)", "loop_add_fusion"] * 1000
    raw = make_table({"name": names, "activity": "kernel", "start_ns": 0, "end_ns": 1}, n=len(names))
    table = classify_table(raw)
    assert (raw["bucket"] == "").all()  # a stage returns a new table; its input is left as it was
    assert table["bucket"].tolist()[:3] == ["compute", "comm", "compute"]
    assert (table["kind"] == "all-gather").sum() == 1000


def test_user_rules_come_first(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rule]]\nid = "my-a2a"\nfield = "name"\nmatch = "^my_fused_a2a"\nbucket = "comm"\nkind = "all-to-all"\n'
    )
    ev = dict.fromkeys(FIELDS, "")
    ev.update(activity="kernel", name="my_fused_a2a_kernel")
    assert classify_one(ev, rules_with(rules)).rule == "my-a2a"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nid = "x"\nfield = "nope"\nmatch = "a"\nbucket = "comm"\n')
    with pytest.raises(InputError, match="field must be one of"):
        rules_with(bad)


def test_every_kernel_name_in_the_real_xplanes_is_classified():
    from moeprof.pipeline import load

    from .helpers import shared_trace

    for rel in ("xplane/tf_bert_8xv100_worker.xplane.pb", "xplane/jax_conv_8xmi300.xplane.pb"):
        activity = concat([trace.events for trace in load(shared_trace(rel))])
        assert len(activity) and (activity["rule"] != "unmatched").all()
        assert set(activity["bucket"]) <= {"compute", "memcpy", "other"}  # no collectives in these windows
        assert not pd.isna(activity["start_ns"]).any()


SHARED_INPUTS = [
    "kineto/deepseek_v3_ep64_h800_rank0.json.gz",
    "kineto/dlrm_8rank_v100",
    "kineto/ddp_2rank_a100_rank0.json.gz",
    "kineto/torchrec_128rank_sampled",
    "kineto/vllm_tp8_b200_rank0.json.gz",
    "nsys/torch_a2a_2gpu.sqlite",
    "nsys/h100_2gpu_1s.sqlite",
    "nsys/cloverleaf_a100.sqlite",
    "nsys/saxpy_mpi_old_schema.sqlite",
    "xplane/tf_bert_8xv100_worker.xplane.pb",
    "xplane/jax_conv_8xmi300.xplane.pb",
]
COMM_NAMES = r"nccl|dpsk::ep::internode|deep_ep::|multimem_all_reduce|cross_device_reduce"


@pytest.mark.parametrize("rel", SHARED_INPUTS)
def test_every_distinct_name_in_the_shared_traces_is_classified(rel):
    """No activity left unclassified silently; every communication kernel name lands in comm with a kind."""
    from moeprof.pipeline import load

    from .helpers import shared_trace

    activity = concat([trace.events for trace in load(shared_trace(rel))])
    names = activity.drop_duplicates(["name", "bucket", "kind", "rule"])
    assert len(names) and (names["rule"] != "unmatched").all()
    comm_like = names["name"].astype(str).str.contains(COMM_NAMES)
    assert (names.loc[comm_like, "bucket"] == "comm").all()
    assert (names.loc[names["bucket"] == "comm", "kind"] != "").all()
    # FlashAttention's CollectiveMainloop is a template argument, not communication
    flash = names["name"].astype(str).str.contains("CollectiveMainloop")
    assert (names.loc[flash, "bucket"] == "compute").all()


def test_deepep_cached_notify_takes_the_kind_of_its_op():
    """cached_notify precedes a cached dispatch or a combine: the forward of dispatch and the backward
    of combine dispatch tokens; the forward of combine and the backward of dispatch combine them."""
    name = "void dpsk::ep::internode::cached_notify<false>(int, int)"
    assert one(name, annotation="dispatch(F)").kind == "ep-dispatch"
    assert one(name, annotation="combine(B)").kind == "ep-dispatch"
    assert one(name, annotation="combine(F)").kind == "ep-combine"
    assert one(name, annotation="dispatch(B)").kind == "ep-combine"
    assert one(name).kind == "ep-combine"  # no annotation: counted with combine
    # the annotation alone does not change a dispatch kernel's kind
    assert one("void dpsk::ep::internode::dispatch<false, 8>(int4*)", annotation="combine(F)").kind == "ep-dispatch"


@pytest.mark.parametrize(
    ("name", "bucket"),
    [
        # ROCclr's blit kernels (rocclr/device/blitcl.cpp): hipMemset* runs the fill kernels,
        # hipMemcpy* the copy kernels; XPlane appends the kernel descriptor suffix ".kd"
        ("__amd_rocclr_fillBuffer.kd", "other"),
        ("__amd_rocclr_fillBufferAligned", "other"),
        ("__amd_rocclr_fillBufferAligned2D.kd", "other"),
        ("__amd_rocclr_fillBufferUnAligned", "other"),
        ("__amd_rocclr_fillImage.kd", "other"),
        ("__amd_rocclr_copyBuffer.kd", "memcpy"),
        ("__amd_rocclr_copyBufferAligned", "memcpy"),
        ("__amd_rocclr_copyBufferRect.kd", "memcpy"),
        ("__amd_rocclr_copyBufferRectAligned", "memcpy"),
        ("__amd_rocclr_copyBufferToImage", "memcpy"),
        ("__amd_rocclr_copyImage.kd", "memcpy"),
        ("__amd_rocclr_copyImage1DA", "memcpy"),
        ("__amd_rocclr_copyImageToBuffer", "memcpy"),
        # waits on / writes of a memory value and runtime set-up are bookkeeping, not compute
        ("__amd_rocclr_streamOpsWait.kd", "other"),
        ("__amd_rocclr_streamOpsWrite", "other"),
        ("__amd_rocclr_batchMemOp", "other"),
        ("__amd_rocclr_initHeap", "other"),
        ("__amd_rocclr_gwsInit", "other"),
        # a user kernel that merely mentions the word stays compute
        ("my_copyBuffer_kernel.kd", "compute"),
        ("input_transpose_fusion.kd", "compute"),
    ],
)
def test_rocclr_blit_kernels_are_copies_and_memsets(name, bucket):
    c = one(name)
    assert (c.bucket, c.kind) == (bucket, ""), c.rule


def test_rocclr_copies_in_the_mi300_trace_leave_compute():
    """The 8xMI300 JAX trace: its __amd_rocclr_copyBuffer kernels are memcpy; every other kernel is compute."""
    from moeprof.pipeline import analyze_paths, load

    from .helpers import shared_trace

    path = shared_trace("xplane/jax_conv_8xmi300.xplane.pb")
    total = analyze_paths([path]).to_json()["total"]
    # the expected figures from the raw events, summed here by name without the taxonomy
    events = concat([trace.events for trace in load(path)])
    duration = events["end_ns"] - events["start_ns"]
    blit = events["name"].astype(str).str.startswith("__amd_rocclr_copyBuffer")
    assert blit.sum() > 0
    assert total["memcpy_ns"] == duration[blit].sum()
    assert total["compute_ns"] == duration[~blit].sum()
    assert total["other_ns"] == 0 and total["comm_ns"] == 0


# pools of evidence values per field; a tuple draws one from each (missing values included)
_POOL = {
    "opcode": ["", "all-to-all", "ragged-all-to-all", "all-gather-start", "fusion", "send-done", "send", None],
    "category": ["", "all-reduce fusion", "copy-start", "megacore fusion", "all-gather-done", None],
    "collective": ["", "all_to_all", "allreduce", "broadcast", "p2p", "dcn", None],
    "annotation": ["", "nccl:all_to_all", "dispatch(F)", "combine(B)", "nccl:broadcast", None],
    "activity": ["kernel", "memcpy", "memset", "", None],
    "copy_kind": ["", "PtoP", "HtoD", "DtoH", None],
    "name": [
        "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
        "void deep_ep::internode::cached_notify<8>(int*)",
        "void dpsk::ep::internode::combine<false>(int4*)",
        "nccl_ep_dispatch_kernel",
        "Memcpy PtoP (Device -> Device)",
        "Memset (Device)",
        "loop_add_fusion",
        "my_fused_a2a_kernel",
        "MY_FUSED_A2A_x",
        "xla::gpu::MultiGpuBarrierKernelImpl",
        "",
        None,
    ],
}
_USER_RULES = """
[[rule]]
id = "user-a2a"
field = "name"
match = "(?i)^my_fused_a2a"
bucket = "comm"
kind = "all-to-all"
link = "ib"

[[rule]]
id = "user-annotated"
field = "annotation"
match = "^(dispatch|combine)"
name = "loop_(\\\\w+)_fusion"
bucket = "comm"

[[rule]]
id = "user-kind"
field = "opcode"
match = "(send|recv)-(done)"
requires = "comm"
kind = "send-recv"
"""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(*(st.sampled_from(_POOL[f]) for f in FIELDS)), min_size=1, max_size=80), st.booleans())
def test_table_classification_is_classify_one_per_row(rows, with_user_rules):
    """The vectorized walk over distinct values agrees with the per-activity reference on every row."""
    from moeprof.core.classify import load_rules

    rules = (load_rules(_USER_RULES, "user.toml") if with_user_rules else ()) + default_rules()
    # a None is a missing value (code -1), which a reader may leave in a categorical column
    columns = {f: pd.Categorical([row[i] for row in rows]) for i, f in enumerate(FIELDS)}
    table = classify_table(make_table({**columns, "start_ns": 0, "end_ns": 1}, n=len(rows)), rules)
    for i, row in enumerate(rows):
        want = classify_one({f: str(v or "") for f, v in zip(FIELDS, row)}, rules)
        got = tuple(table[col].iat[i] for col in ("bucket", "kind", "rule", "link_hint"))
        assert got == (want.bucket, want.kind, want.rule, want.link), row


_ODD_TEXT = st.text(
    alphabet=st.sampled_from([*"abcxyzAKSIkis_:<>(),. -/#", "ſ", "K", "İ", "ı", "ß"]), max_size=12
)  # ASCII, and the letters Unicode case folding joins to ASCII ones (the long s, the Kelvin sign, dotted I)
_WORDS = ["nccl", "NCCL", "AllReduce", "all_to_all", "Expert", "shared_expert", "GEMM", "nvjet", "RaggedAllToAll",
          "deep_ep", "DeepEP", "Recv", "MoE", "gmm", "Grouped", "ragged-dot", "::EP::", "dispatch"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_ODD_TEXT, st.sampled_from(_WORDS)), max_size=6).map("".join))
def test_searches_is_the_patterns_own_search(text: str) -> None:
    """Every pattern of the vocabulary and the default rules finds what its own ``search`` finds, the
    case-insensitive ones through their case-sensitive twin on ASCII text."""
    from moeprof.core.vocabulary import searches

    vocab = vocabulary()
    patterns = [getattr(vocab, f) for f in vocab.__dataclass_fields__ if isinstance(getattr(vocab, f), re.Pattern)]
    patterns += [*(r.pattern for r in default_rules()), *(p for r in default_rules() for _, p in r.also)]
    for pattern in patterns:
        assert searches(pattern, [text]) == [pattern.search(text) is not None], pattern.pattern
