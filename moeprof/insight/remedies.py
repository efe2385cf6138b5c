"""Concrete next steps for exposed communication, by collective kind and by stack.

XLA flag names were checked against the jaxlib this project is tested with
(they are compiled into ``libjax_common.so``); each remedy names the knob to
turn, not a hint.
"""

from __future__ import annotations

_XLA = {
    "all-to-all": (
        "Hide and shrink the expert all-to-all: let XLA schedule it against independent compute "
        "(the shared-expert GEMM, the next micro-batch) with --xla_gpu_enable_latency_hiding_scheduler=true; "
        "send only real tokens with jax.lax.ragged_all_to_all instead of a capacity-padded all_to_all "
        "(MaxText: sparse_matmul=True, capacity_factor=-1); across NVLink domains, dispatch hierarchically "
        "(one InfiniBand transfer per node, then NVLink) or use fused EP dispatch/combine with token "
        "deduplication (DeepEP, NCCL EP)."
    ),
    "ep-dispatch": (
        "Overlap EP dispatch with compute (DeepEP async_finish / hook-based receive, or a second micro-batch "
        "as in DeepSeek-V3's dual-pipe) and deduplicate tokens bound for the same node before the "
        "InfiniBand hop (DeepEP internode kernels, NCCL EP)."
    ),
    "ep-combine": (
        "Overlap EP combine with the next layer's attention/shared expert (DeepEP async_finish, "
        "micro-batch interleaving) and reduce per node before the InfiniBand hop (hierarchical combine)."
    ),
    "all-gather": (
        "Prefetch the FSDP weight all-gather one layer ahead: --xla_gpu_enable_pipelined_all_gather=true with "
        "--xla_gpu_enable_latency_hiding_scheduler=true; batch small gathers with "
        "--xla_gpu_all_gather_combine_threshold_bytes=<bytes of one layer's weights>."
    ),
    "reduce-scatter": (
        "Overlap the gradient reduce-scatter with the backward pass of the previous layer: "
        "--xla_gpu_enable_pipelined_reduce_scatter=true and --xla_gpu_enable_latency_hiding_scheduler=true; "
        "batch small ones with --xla_gpu_reduce_scatter_combine_threshold_bytes."
    ),
    "all-reduce": (
        "Overlap or shrink the all-reduce: --xla_gpu_enable_pipelined_all_reduce=true with "
        "--xla_gpu_enable_latency_hiding_scheduler=true, combine small ones "
        "(--xla_gpu_all_reduce_combine_threshold_bytes); for data-parallel gradients shard them "
        "(reduce-scatter + all-gather, FSDP) instead."
    ),
    "send-recv": (
        "Overlap the collective-permute (pipeline or ring exchange) with compute: "
        "--xla_gpu_enable_latency_hiding_scheduler=true and "
        "--xla_gpu_experimental_parallel_collective_overlap_limit=2 to run collectives on several streams."
    ),
    "broadcast": (
        "Run the broadcast off the critical path: --xla_gpu_enable_latency_hiding_scheduler=true and "
        "--xla_gpu_experimental_parallel_collective_overlap_limit=2."
    ),
    "other": (
        "Give XLA room to overlap it: --xla_gpu_enable_latency_hiding_scheduler=true and "
        "--xla_gpu_experimental_parallel_collective_overlap_limit=2."
    ),
}

_TORCH = {
    "all-to-all": (
        "Overlap the expert all-to-all with compute: issue it on its own stream with async_op=True and wait "
        "only where the tokens are needed (or split the batch in two and interleave, as DeepSeek-V3 does); "
        "replace padded all_to_all_single with fused EP dispatch/combine (DeepEP, NCCL EP) and, across nodes, "
        "a hierarchical exchange."
    ),
    "all-gather": (
        "Prefetch parameters before they are needed: FSDP forward_prefetch=True / backward_prefetch="
        "BACKWARD_PRE (FSDP2: set_modules_to_forward_prefetch), on a separate stream."
    ),
    "reduce-scatter": (
        "Overlap gradient reduce-scatter with backward compute: FSDP backward_prefetch=BACKWARD_PRE, "
        "larger buckets for small tensors."
    ),
    "all-reduce": (
        "Overlap gradient all-reduce with backward: DDP bucket_cap_mb tuned so the first bucket fires early, "
        "gradient_as_bucket_view=True; for tensor-parallel all-reduce, sequence parallelism "
        "(reduce-scatter + all-gather) or symmetric-memory all-reduce."
    ),
    "send-recv": (
        "Overlap point-to-point transfers with compute: batch_isend_irecv on a dedicated stream, "
        "and wait just before use."
    ),
}


SIGNAL_REMEDIES = {
    "launch-gaps": (
        "launch-bound: the GPU idles in short gaps between kernels",
        "Launch fewer, bigger units of work: XLA command buffers (CUDA graphs), e.g. "
        "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,COLLECTIVES; in PyTorch capture the step "
        'with CUDA graphs (torch.compile(mode="reduce-overhead") or torch.cuda.graph); a grouped GEMM instead of '
        "one GEMM per expert.",
    ),
    "d2h-sync": (
        "device-to-host syncs inside the step",
        "Small device-to-host copies inside the step (typically token counts per expert read back to size a "
        "buffer) serialize the stream and break CUDA-graph capture: keep the counts on the device and pass them "
        "to a dropless grouped GEMM (jax.lax.ragged_dot group_sizes; Transformer Engine grouped GEMM with "
        "device-side splits) instead of .item()/.tolist()/jax.device_get.",
    ),
    "host-copies": (
        "exposed host<->device copies (offload traffic)",
        "Overlap offload copies with compute: XLA host offloading through jax.checkpoint offload policies "
        '(e.g. jax.checkpoint_policies.offload_dot_with_no_batch_dims("device", "pinned_host")) with '
        "--xla_gpu_enable_latency_hiding_scheduler=true; in PyTorch pinned memory and non_blocking copies on a side "
        "stream, prefetching one layer ahead.",
    ),
    "expert-exchange": (
        "expert dispatch/combine exchange dominates communication",
        "Move fewer bytes in the expert exchange rather than only hiding it: send only the routed tokens "
        "(jax.lax.ragged_all_to_all, dropless; MaxText sparse_matmul=True, capacity_factor=-1) instead of "
        "capacity-padded buffers; fuse dispatch/combine with token deduplication per node (DeepEP, NCCL EP); "
        "across NVLink domains exchange hierarchically (one InfiniBand transfer per node, then NVLink); FP8 "
        "dispatch halves the bytes. Then overlap what remains with the shared expert or a second micro-batch.",
    ),
    "small-gemms": (
        "many small expert GEMMs instead of one grouped GEMM",
        "One GEMM per expert leaves the GPU underused and launch-bound: use a grouped GEMM over all local experts "
        "(jax.lax.ragged_dot / MaxText megablox with sparse_matmul=True; Transformer Engine GroupedLinear; CUTLASS "
        "grouped GEMM) with dropless routing instead of per-expert, capacity-padded matmuls.",
    ),
}

_BANDWIDTH_ADVICE = {
    "latency-bound": " At this bus bandwidth it is latency-bound (small messages or launch overhead), not limited "
    "by the link: combine small collectives (the *_combine_threshold_bytes flags) or batch them.",
    "under-utilized": " It reaches well under the link's peak: check message sizes, the NCCL algorithm/protocol "
    "(NCCL_ALGO, NCCL_PROTO) and channel count, and that traffic takes the fabric you expect.",
    "bandwidth-bound": " It runs near the link's peak: only fewer bytes help (FP8 dispatch, token deduplication) "
    "or a faster path (keep it on NVLink).",
}


def remedy(kind: str, link: str, xla: bool, bandwidth_verdict: str | None = None) -> str:
    """The concrete next step for exposed communication of this kind on this link."""
    table = _XLA if xla else _TORCH
    text = table.get(kind) or _XLA.get(kind) or _XLA["other"]
    if bandwidth_verdict in _BANDWIDTH_ADVICE:
        text += _BANDWIDTH_ADVICE[bandwidth_verdict]
    if link in ("ib", "mixed") and kind in ("all-to-all", "ep-dispatch", "ep-combine", "all-gather", "reduce-scatter"):
        text += (
            " It crosses InfiniBand: keep this collective inside one NVLink domain where the parallelism "
            "layout allows (put the expert or FSDP axis on the NVLink-connected GPUs)."
        )
    return text
