"""The golden remedy table (issue 25 §4): every sample and shared trace, each opportunity's title ->
the family of the remedy it gets (``family`` in moeprof/insight/remedies.toml).

Each row was reviewed by hand against the trace's own evidence; the comment says why that family
fits. A row is (the start of the title, the family); a job's list must match its rows exactly, in
any order (ranking may change: issue 26 ranks by projected saving). Shared traces skip where
../shared is absent.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import pytest

import moeprof

from .helpers import SAMPLES, SHARED_TRACES, shared_trace

Rows = list[tuple[str, str]]

GOLDEN: dict[str, Rows] = {
    # moeprof capture demo on 8 CPU devices (XLA:CPU, an MoE layer in a "moe" scope, 2 steps)
    "sample:cpu_moe_8dev": [
        # the all-to-alls are 41% of comm, 70% of their matched time waiting; the four op-level all-to-all
        # findings count the same time and are merged into it. XLA:CPU threads on shared cores: who waits is
        # mostly the host's scheduling (the routing is balanced), not uneven token loads (issue 49)
        ("expert dispatch/combine exchange dominates communication, mostly waiting", "cpu-scheduling"),
        # gradient reduce-scatters / all-gathers / all-reduces moving bytes between CPU threads: no fabric,
        # no GPU flag applies (this was "FP8 dispatch, per-node token deduplication")
        ("exposed reduce-scatter reduce_scatter.35 (moving bytes)", "cpu-collective"),
        ("exposed reduce-scatter reduce_scatter.36 (moving bytes)", "cpu-collective"),
        ("exposed reduce-scatter reduce_scatter.37 (moving bytes)", "cpu-collective"),
        ("exposed reduce-scatter reduce_scatter.38 (moving bytes)", "cpu-collective"),
        ("exposed reduce-scatter reduce_scatter.39 (moving bytes)", "cpu-collective"),
        ("exposed all-gather all_gather.21 (moving bytes)", "cpu-collective"),
        ("exposed all-gather all_gather.24 (moving bytes)", "cpu-collective"),
        ("exposed all-gather all_gather.25 (moving bytes)", "cpu-collective"),
        ("exposed all-gather all_gather.26 (moving bytes)", "cpu-collective"),
        ("exposed all-gather all_gather.27 (moving bytes)", "cpu-collective"),
        ("exposed all-reduce psum_invariant.14 (moving bytes)", "cpu-collective"),
        ("exposed all-reduce all-reduce.16 (moving bytes)", "cpu-collective"),
        # mostly waiting, on CPU threads: the host's scheduling, not "balance the experts" nor uneven work
        ("exposed all-gather all_gather.22 (waiting for the last rank)", "cpu-scheduling"),
        ("exposed all-reduce psum_invariant.15 (waiting for the last rank)", "cpu-scheduling"),
    ],
    # the generator's XLA job on one host of 8 GPUs: each collective is mostly waiting (its skewed compute)
    "sample:synthetic_1host_8gpu": [
        ("launch-bound", "cuda-graphs"),  # many gaps under 20 µs between kernels
        ("exposed host<->device copies", "async-host-copies"),  # exposed HtoD/DtoH copies
        # wait share 66-75% each: the devices arrive unevenly; no MoE evidence, so balance the work
        ("exposed all-gather all-gather.2 (waiting", "balance-work"),
        ("exposed all-reduce psum_invariant.4 (waiting", "balance-work"),
        ("exposed all-to-all all-to-all.1 (waiting", "balance-work"),
        ("exposed reduce-scatter reduce_scatter.3 (waiting", "balance-work"),
    ],
    # the same capture as Nsight SQLite (NCCL kernel names, NVTX from PyTorch): same findings
    "sample:synthetic_1host_8gpu.nsys.sqlite": [
        ("launch-bound", "cuda-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
        ("many small GEMMs instead of one grouped GEMM", "grouped-gemm"),  # 32+ GEMMs per step, median < 15 µs
        ("exposed all-to-all ncclDevKernel_SendRecv", "balance-work"),  # wait share 66%
        ("exposed all-gather ncclDevKernel_AllGather", "balance-work"),  # 74%
        ("exposed all-reduce ncclDevKernel_AllReduce", "balance-work"),  # 75%
        ("exposed reduce-scatter ncclDevKernel_ReduceScatter", "balance-work"),  # 75%
    ],
    # the same capture as xprof JSON: the all-to-all reads as a send-recv there; still mostly waiting
    "sample:synthetic_1host_8gpu.trace.json.gz": [
        ("launch-bound", "cuda-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
        ("many small GEMMs instead of one grouped GEMM", "grouped-gemm"),
        ("exposed send-recv all-to-all.1 (waiting", "balance-work"),
        ("exposed all-gather all-gather.2 (waiting", "balance-work"),
        ("exposed all-reduce psum_invariant.4 (waiting", "balance-work"),
        ("exposed reduce-scatter reduce_scatter.3 (waiting", "balance-work"),
    ],
    # two hosts of 4 GPUs (XLA): the collectives wait 60-82% of their matched time
    "sample:synthetic_2host_4gpu": [
        ("launch-bound", "cuda-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
        ("exposed all-gather all-gather.2 (waiting", "balance-work"),
        ("exposed all-reduce psum_invariant.4 (waiting", "balance-work"),
        ("exposed all-to-all all-to-all.1 (waiting", "balance-work"),
        ("exposed reduce-scatter reduce_scatter.3 (waiting", "balance-work"),
    ],
    # the same job as Kineto rank files
    "sample:synthetic_2host_4gpu_kineto": [
        ("launch-bound", "cuda-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
        ("exposed all-gather ncclDevKernel_AllGather", "balance-work"),
        ("exposed all-reduce ncclDevKernel_AllReduce", "balance-work"),
        ("exposed reduce-scatter ncclDevKernel_ReduceScatter", "balance-work"),
        ("exposed all-to-all ncclDevKernel_SendRecv", "balance-work"),
    ],
    # rocprofv3 CSV, 8 processes on one MI300X node: RCCL's generic kernels named by the RCCL/HIP API traces,
    # peer copies are send-recv, the loss comes back by a DtoH copy each step (no byte count in CSV copies)
    "sample:synthetic_rocprof_mi300x": [
        ("exposed all-reduce ncclDevKernel_Generic_1", "overlap-all-reduce"),
        ("all-to-all exchange dominates communication", "shrink-exchange"),
        ("launch-bound", "hip-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
        ("device-to-host syncs inside the step", "values-stay-on-device"),
        ("exposed send-recv Memcpy PtoP", "overlap-point-to-point"),
    ],
    # the same job as rocprofv3 JSON: the RCCL API records name the generic kernels' collectives
    "sample:synthetic_rocprof_mi300x_json": [
        ("exposed all-reduce ncclDevKernel_Generic_1", "overlap-all-reduce"),
        ("all-to-all exchange dominates communication", "shrink-exchange"),
        ("launch-bound", "hip-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
        ("exposed send-recv Memcpy PtoP", "overlap-point-to-point"),
    ],
    # the same job as rocpd databases: the RCCL calls name the generic kernels' collectives; ROCTx ranges give
    # 3 steps, so the per-step DtoH copy is a sync inside the step
    "sample:synthetic_rocpd_mi300x": [
        ("exposed all-reduce ncclDevKernel_Generic_1", "overlap-all-reduce"),
        ("all-to-all exchange dominates communication", "shrink-exchange"),
        ("launch-bound", "hip-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
        ("device-to-host syncs inside the step", "values-stay-on-device"),
        ("exposed send-recv Memcpy PtoP", "overlap-point-to-point"),
    ],
    # NCCL Inspector logs of 8 ranks: no timeline, so no exposed time and no opportunity to remedy (the logs'
    # own view names the rank the others wait for instead)
    "sample:nccl_inspector_8rank": [],
    # DDP on A100, one rank: a training step (autograd ranges), no ledger split (one rank)
    "shared:kineto/ddp_2rank_a100_rank0.json.gz": [
        ("exposed all-reduce ncclKernel_AllReduce", "overlap-all-reduce"),  # DDP gradient buckets: bucket_cap_mb
        ("launch-bound", "cuda-graphs"),
        ("exposed broadcast ncclKernel_Broadcast", "broadcast-off-the-path"),  # DDP's broadcast_buffers
    ],
    # DeepSeek-V3 EP64 on H800, rank 0: DeepEP internode kernels, 96% of the exchange hidden under compute
    "shared:kineto/deepseek_v3_ep64_h800_rank0.json.gz": [
        # already overlapped (dual micro-batch): shorten the exposed tail, not "overlap it"; the six
        # op-level EP dispatch/combine findings count the same time and are merged into it
        ("expert dispatch/combine exchange dominates communication", "shorten-exposed-tail"),
        # DeepEP's normal mode makes the CPU wait for the received-token counts: no whole-step CUDA graph
        ("launch-bound", "graph-between-host-waits"),
    ],
    # DLRM, 8 V100 ranks as one job: the embedding all-to-all waits 99% for rank 7
    "shared:kineto/dlrm_8rank_v100": [
        # no MoE evidence: balance the work before it; the op-level all-to-all and rank 7's straggler
        # finding are the same 9.39 ms and are merged into it
        ("all-to-all exchange dominates communication, mostly waiting", "balance-work"),
        ("exposed all-reduce ncclKernel_AllReduce", "balance-work"),  # wait share 87%
        ("launch-bound", "cuda-graphs"),
        ("many small GEMMs instead of one grouped GEMM", "grouped-gemm"),  # 39 GEMMs per step, median 6 µs
        ("exposed host<->device copies", "async-host-copies"),
        ("device-to-host syncs inside the step", "values-stay-on-device"),
    ],
    # TorchRec, 2 of 128 ranks sampled: FBGEMM table-batched embeddings, DDP for the dense part, no FSDP
    "shared:kineto/torchrec_128rank_sampled": [
        # the embedding all-to-all: qcomms, the planner, TrainPipelineSparseDist (op-level finding merged)
        ("all-to-all exchange dominates communication", "shrink-embedding-exchange"),
        # an all-gather with embeddings and no FSDP: embedding output distribution, not a parameter prefetch
        ("exposed all-gather ncclKernel_SendRecv", "pipeline-sparse-dist"),
        ("exposed all-reduce ncclKernel_SendRecv", "overlap-all-reduce"),  # DDP's dense gradients
        ("exposed host<->device copies", "async-host-copies"),
        ("launch-bound", "cuda-graphs"),
        ("device-to-host syncs inside the step", "values-stay-on-device"),
    ],
    # vLLM TP8 on B200, rank 0: inference, the all-reduce on symmetric memory (multimem)
    "shared:kineto/vllm_tp8_b200_rank0.json.gz": [
        ("exposed all-reduce multimem_all_reduce_kernel", "fuse-tp-all-reduce"),  # fuse with RMSNorm
        ("launch-bound", "cuda-graphs"),  # vLLM's CUDA graph capture sizes
        ("many small expert GEMMs instead of one grouped GEMM", "grouped-gemm"),  # fused_moe
        ("exposed all-gather ncclDevKernel_AllGather", "async-tensor-parallel"),  # a TP gather in the forward
        ("exposed host<->device copies", "async-host-copies"),
    ],
    # CloverLeaf (MPI + CUDA, no collectives on the GPU): device signals only
    "shared:nsys/cloverleaf_a100.sqlite": [
        ("launch-bound", "cuda-graphs"),
        ("exposed host<->device copies", "async-host-copies"),  # halo copies through the host
        ("device-to-host syncs inside the step", "values-stay-on-device"),
    ],
    # two H100s, 1 s of copies and kernels, no NCCL
    "shared:nsys/h100_2gpu_1s.sqlite": [
        # 921 ms of exposed copies against 22.4 ms of compute beside them: overlap hides at most that compute, so
        # the remedy is fewer bytes between host and device (issue 49)
        ("exposed host<->device copies", "fewer-host-copies"),
        ("launch-bound", "cuda-graphs"),
        ("device-to-host syncs inside the step", "values-stay-on-device"),
    ],
    # moeprof capture demo on one TPU v5e chip (a real capture, its HLO plane left out): the ragged
    # all-to-all of a one-chip group is all the communication, none of it hidden: it already sends only routed
    # tokens, so the TPU remedy hides it (async all-to-all); the chip idles between its step programs (host)
    "sample:tpu_v5e_demo": [
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
        # the ragged all-to-all on one chip: a copy inside it, not ICI communication
        ("collectives over a group of one chip", "skip-local-collective"),
        # spec §10's levers (issue 46): the router and permutations at 12.7% of HBM bandwidth with a one-chip
        # exchange beside them; their backward scatter-adds at 3.5% of it (scatter_fusion, scatter_custom_fusion);
        # the ragged dots slower than the program's other matmuls
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
    ],
    # the synthetic 2-slice TPU v5e job: a DCN all-reduce between slices near the DCN peak (keep only data
    # parallelism on DCN), ragged expert exchanges on ICI, FSDP reduce-scatter and all-gather, host gaps; its
    # experts' dot (named by the trace's scope) slower than its other matmuls
    "sample:synthetic_tpu_2slice": [
        ("exposed all-reduce send.47 (moving bytes)", "keep-off-dcn"),
        ("expert dispatch/combine exchange dominates communication", "hide-expert-exchange"),
        ("exposed reduce-scatter reduce-scatter-start.44 (moving bytes)", "overlap-reduce-scatter"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
        ("exposed all-gather all-gather-start.41 (moving bytes)", "prefetch-all-gather"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
    ],
    # tpu/moe_step.py on one TPU v5e chip (gzipped XPlanes without their HLO plane): a padded one-hot einsum (a)
    # and dropless ragged_dot (b); no collective on one chip, the chip idles between its step programs
    "sample:tpu_v5e_moe_step/a": [
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
        # spec §10's levers: the padded expert einsum at 69% of the FLOP/s peak where the shared matmuls of the
        # program run faster; a dense einsum, not a grouped GEMM: the experts' roof remedy, not grouped tiling. The
        # one-hot dispatch/combine einsums are matmuls of the MoE block that no scope names: the experts' role
        # (without the HLO's op names nothing tells them apart)
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "experts-roof"),
    ],
    "sample:tpu_v5e_moe_step/b": [
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
        # the dropless run: its permutations memory-bound at 28% of HBM bandwidth, their backward scatter-adds at
        # 3.9%; the ragged dots below the program's other matmuls
        ("token movement below its roof (router, permutations)", "faster-token-movement"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
    ],
    # moeprof's demo on one TPU v5e chip (gzipped XPlanes with their HLO): its expert FFN at 2048, the default run,
    # 8,192 tokens; the ragged all-to-all of a one-chip group (a copy inside the chip, not ICI) and the gaps
    # between step programs
    "sample:tpu_v5e_ablation/ffn2048": [
        ("collectives over a group of one chip", "skip-local-collective"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
        # spec §10's levers (issue 46): the token movement at 44% of HBM bandwidth beside a one-chip exchange, its
        # backward scatter-adds at 8.4% of it, the ragged dots slower than the shared expert's dense matmuls
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
    ],
    "sample:tpu_v5e_ablation/base": [
        ("collectives over a group of one chip", "skip-local-collective"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
        # spec §10's levers (issue 46): the token movement at 44% of HBM bandwidth beside a one-chip exchange, its
        # backward scatter-adds at 8.4% of it, the ragged dots slower than the shared expert's dense matmuls
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
    ],
    "sample:tpu_v5e_ablation/tok8192": [
        ("collectives over a group of one chip", "skip-local-collective"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
        # spec §10's levers (issue 46): the token movement at 44% of HBM bandwidth beside a one-chip exchange, its
        # backward scatter-adds at 8.4% of it, the ragged dots slower than the shared expert's dense matmuls
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
    ],
    # the demo in float32 on the v5e (its matrix units bf16): the experts' GEMMs below the dense matmuls, and the
    # remedy that names the precision, measured (192.4 -> 137.1 ms in bf16)
    "sample:tpu_v5e_ablation/f32": [
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "bf16-compute"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("collectives over a group of one chip", "skip-local-collective"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
    ],
    # the demo's token-movement levers on the TPU (sample_traces/tpu_v5e_levers): each lever's evidence is gone
    # from its capture, and so is the remedy that named it. gather: the backward scatter-adds are gathers now, the
    # one-chip exchange is still there
    "sample:tpu_v5e_levers/base": [
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
        ("collectives over a group of one chip", "skip-local-collective"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
    ],
    "sample:tpu_v5e_levers/gather": [
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
        ("collectives over a group of one chip", "skip-local-collective"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
    ],
    # skipx: no exchange over one chip; the backward scatter-adds still there (8.9% of HBM bandwidth)
    "sample:tpu_v5e_levers/skipx": [
        ("token movement below its roof (router, permutations)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
    ],
    # both: what is left of the token movement is its gathers (52% of HBM bandwidth)
    "sample:tpu_v5e_levers/lever": [
        ("token movement below its roof (router, permutations)", "faster-token-movement"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
    ],
    # the host running ahead (sample_traces/tpu_v5e_host_ahead): the demo at its CPU sizes, float32, on the v5e.
    # every: the host waits on each step and the chip idles 76% of its span, so the dispatch leads; ahead: it waits
    # every 5 steps, and the host gaps that remain (a host that needs ~0.3 ms a dispatch) fall behind the token
    # movement
    **{
        f"sample:tpu_v5e_host_ahead/{run}": [
            ("host-bound: the chip idles between its step programs", "step-dispatch"),
            (
                "token movement below its roof (router, permutations, the exchange over one chip)",
                "faster-token-movement",
            ),
            ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "bf16-compute"),
            ("collectives over a group of one chip", "skip-local-collective"),
        ]
        for run in ("every", "ahead")
    },
    # the routing ablations (issue 48): dropless runs exchange over their one-chip group as the default does; the
    # runs padded to capacity have no collective at all (XLA drops an all-to-all over one device); every one shows
    # the token movement and its backward scatter-adds below HBM bandwidth, and the ragged dots below the shared
    # expert's dense matmuls (the program's matmul fusions, as XLA names their category)
    **{
        f"sample:tpu_v5e_ablation/{run}": [
            (
                "token movement below its roof (router, permutations, the exchange over one chip)",
                "faster-token-movement",
            ),
            ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
            ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
            ("collectives over a group of one chip", "skip-local-collective"),
            ("host-bound: the chip idles between its step programs", "step-dispatch"),
        ]
        for run in ("topk1", "exp32", "tok4096")
    },
    "sample:tpu_v5e_ablation/topk4": [
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
        ("collectives over a group of one chip", "skip-local-collective"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
    ],
    **{
        f"sample:tpu_v5e_ablation/{run}": [
            ("token movement below its roof (router, permutations)", "faster-token-movement"),
            ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
            ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
            ("host-bound: the chip idles between its step programs", "step-dispatch"),
        ]
        for run in ("cap125", "cap2")
    },
    # gloo all_to_all_single on 4 and 33 CPU processes (torch.profiler, shapes recorded): no device timeline, so
    # no opportunity; what they carry is their per-pair traffic (spec §11)
    "sample:kineto_alltoall_gloo_w4": [],
    "sample:kineto_alltoall_gloo_w33": [],
    # the demo's router skewed (8) and padded to capacity 2.0 on one TPU v5e (HLO plane left out): the token
    # movement and its backward scatter-adds below HBM bandwidth; the skewed run still exchanges over its one-chip
    # group; without the HLO the skewed run's ragged dots are not recounted (no experts' lever)
    "sample:tpu_v5e_load/skew8": [
        ("token movement below its roof (router, permutations, the exchange over one chip)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("collectives over a group of one chip", "skip-local-collective"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
    ],
    "sample:tpu_v5e_load/cap2": [
        ("token movement below its roof (router, permutations)", "faster-token-movement"),
        ("the permutations' backward scatter-adds below HBM bandwidth", "inverse-gather-backward"),
        ("the routed experts' GEMMs below the chip's roof and below its dense matmuls", "larger-expert-groups"),
        ("host-bound: the chip idles between its step programs", "step-dispatch"),
    ],
    # saxpy over MPI (old schema): a large exposed copy and launch gaps
    "shared:nsys/saxpy_mpi_old_schema.sqlite": [
        ("exposed host<->device copies", "fewer-host-copies"),  # 194 ms of copies, 88.6 ms of compute to hide them
        ("launch-bound", "cuda-graphs"),
    ],
    # torch all_to_all_single on 2 GPUs of one host: waits 53% for GPU 1
    "shared:nsys/torch_a2a_2gpu.sqlite": [
        # a plain all-to-all (no MoE evidence) mostly waiting; the op-level finding and GPU 1's straggler
        # finding count the same time and are merged into it
        ("all-to-all exchange dominates communication, mostly waiting", "balance-work"),
        ("launch-bound", "cuda-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
    ],
    # JAX convolution on 8 MI300X: no exposed communication, only launch gaps (XLA command buffers: hipGraphs)
    "shared:xplane/jax_conv_8xmi300.xplane.pb": [
        ("launch-bound", "hip-graphs"),
    ],
    # rocprofv3 CSV of one MI350X (FlyDSL MoE GEMM test): no RCCL, launch gaps between short kernels (HIP graphs)
    "shared:rocprof": [
        ("launch-bound", "hip-graphs"),
    ],
    # TraceLens' H100 test traces (Hugging Face models run with shapes recorded; one GPU each, no collective):
    # short gaps between kernels, the host reading values back, the video model's inputs copied in
    "shared:kineto/tracelens_h100/Falconsai_nsfw_image_detection__1016002.json.gz": [("launch-bound", "cuda-graphs")],
    "shared:kineto/tracelens_h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": [
        ("launch-bound", "cuda-graphs"),
        ("device-to-host syncs inside the step", "values-stay-on-device"),
    ],
    "shared:kineto/tracelens_h100/facebook_timesformer-base-finetuned-k400__1016002.json.gz": [
        ("exposed host<->device copies", "async-host-copies"),
        ("launch-bound", "cuda-graphs"),
        ("device-to-host syncs inside the step", "values-stay-on-device"),
    ],
    # TF BERT on 8 V100 (one worker): no exposed collective
    "shared:xplane/tf_bert_8xv100_worker.xplane.pb": [
        ("launch-bound", "cuda-graphs"),
        ("exposed host<->device copies", "async-host-copies"),
        ("device-to-host syncs inside the step", "values-stay-on-device"),
    ],
}


# shared folders of several unrelated captures (a folder is otherwise one job: its rank files)
SEPARATE_CAPTURES = frozenset({"tracelens_h100"})


def trace_path(key: str) -> Path:
    where, rel = key.split(":", 1)
    return SAMPLES / rel if where == "sample" else shared_trace(rel)


@cache
def opportunities(path: Path) -> tuple[tuple[str, str], ...]:
    doc = moeprof.analyze_paths([path]).to_json()
    return tuple((o["title"], o.get("remedy_family", "")) for o in doc["opportunities"])


def matched(found: tuple[tuple[str, str], ...], rows: Rows) -> tuple[Counter, Counter]:
    """(each opportunity as the row its title starts with, the rows expected); unmatched titles stay whole."""
    got: Counter = Counter()
    for title, family in found:
        prefix = next((p for p, _ in rows if title.startswith(p)), title)
        got[(prefix, family)] += 1
    return got, Counter(rows)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(GOLDEN), ids=lambda k: k.split(":", 1)[1])
def test_golden_remedy_families(key: str) -> None:
    got, want = matched(opportunities(trace_path(key)), GOLDEN[key])
    assert got == want, {"missing": want - got, "unexpected": got - want}


def test_every_sample_and_shared_trace_has_a_row() -> None:
    """The table covers every sample (a folder or a file of a trace) and every shared trace moeprof reads."""
    samples = {f"sample:{p.name}" for p in SAMPLES.iterdir() if p.is_dir() or p.name.endswith((".sqlite", ".json.gz"))}
    # a sample of several runs (an ablation's a/ and b/) has a row per run
    runs = {k.rsplit("/", 1)[0] for k in GOLDEN if k.startswith("sample:") and "/" in k}
    assert samples <= set(GOLDEN) | runs
    shared = SHARED_TRACES
    if not shared.exists():
        pytest.skip(f"{shared} not present")
    found = {
        f"shared:{p.relative_to(shared)}"
        for folder in ("kineto", "nsys", "xplane")
        for p in (shared / folder).iterdir()
        for p in (sorted(p.iterdir()) if p.name in SEPARATE_CAPTURES else [p])
        if p.is_dir() or p.name.endswith((".json.gz", ".sqlite", ".xplane.pb"))
    } | ({"shared:rocprof"} if (shared / "rocprof").is_dir() else set())  # one capture: the folder
    assert found <= set(GOLDEN)
