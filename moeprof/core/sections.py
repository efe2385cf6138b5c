"""The JSON sections of an :class:`~moeprof.core.analysis.Analysis` that stay JSON-shaped objects, typed: the
hardware the job ran on, the §8 ledger's totals, throughput, FLOP utilization, exposure at the capture's edges,
the host's launches, and an NCCL Inspector result.

Each is a ``TypedDict``: the object the JSON carries, key for key (so ``--json`` and a saved analysis read
back are the same object), with every key and its type named for the type checker. Keys are optional where a
producer writes them only when known (``total=False``); nested rows the renderers print as they are stay
plain ``dict``\\ s.
"""

from __future__ import annotations

from typing import Any, TypedDict


class Hardware(TypedDict, total=False):
    """``hardware``: the GPUs/chips the traces name, the preset whose peaks the figures compare against, and
    the job's fabrics (``insight.bandwidth.job_hardware``)."""

    models: dict[str, Any]  # per model name the traces give: its devices
    vendor: str
    preset: str
    preset_from: str  # how the preset was chosen: the trace's device names, --gpu/--chip, the plane
    bf16_tflops: float
    fp8_tflops: float | None
    scale_up: str  # the scale-up fabric's name (NVLink, xGMI, ICI)
    scale_up_gbps: float
    nic_gbps: float
    sources: list[str]
    scale_out: str  # TPU: DCN
    hbm_gbps: float
    accelerator: str  # "TPU" for TPU jobs
    scale_up_domain: str  # what one scale-up domain is (a node, a slice)
    link_peaks_gbps: dict[str, float]
    note: str


class LedgerStraggler(TypedDict):
    """One row of ``ledger.stragglers`` (``core.ledger.StragglerRow``)."""

    device: str
    straggler_count: int
    caused_wait_ns: int


class LedgerTotals(TypedDict, total=False):
    """``ledger``: the §8 cross-rank ledger's totals (``core.ledger.Ledger.summary``) and its straggler table."""

    instances: int  # complete instances matched across ranks
    incomplete: int
    desynchronized: int
    clock_offsets_ns: dict[str, int]
    unaligned_hosts: list[str]
    stragglers: list[LedgerStraggler]


class Throughput(TypedDict, total=False):
    """``throughput``: tokens/s, model TFLOPS per device and MFU (``insight.flops.throughput_figures``, with
    ``--model``; or the run folder's manifest figures), and each projection's at its step time."""

    tokens_per_second: float
    model_flops_per_token: float
    tflops_per_device: float
    devices: int
    peak_tflops: float
    dtype: str
    mfu: float
    peak_device: str
    model: str
    seq_len: int
    step_ns: int


class Utilization(TypedDict, total=False):
    """``utilization``: the FLOPs the trace's ops state (TPU XPlanes) against the chip's peak
    (``insight.utilization.utilization``)."""

    flops_source: str  # the stat summed: model_flops where stated, else flops
    flops: float
    flops_per_step: float
    tflops_per_s_per_device: float
    note: str
    peak_tflops: float
    peak_from: str
    mfu: float
    ops_above_peak: list[dict[str, Any]]
    ops_above_peak_count: int
    ops_above_peak_flops_share: float
    steps_above_peak: list[dict[str, Any]]
    # XLA's own figures beside the recounted ones, where moeprof recounted ragged dots (docs/metrics.md)
    recounted_ops: int
    flops_xla: float
    flops_per_step_xla: float
    tflops_per_s_per_device_xla: float
    mfu_xla: float
    # spec §10's useful work where the run records its experts' load: mfu and tflops_per_s_per_device then count
    # the useful rows only, the ops' own count beside them
    useful: dict[str, Any]
    mfu_counted: float
    tflops_per_s_per_device_counted: float


class RoleRow(TypedDict, total=False):
    """One row of ``roles`` (spec §10): a MoE role's work per step, the mean over steps and devices
    (``core.roofline.role_rows``). Figures that need counts are None where its activities have none."""

    role: str  # core.roles.ROLES
    glue: bool  # token movement: router, permute, unpermute, an exchange on a group of one device
    time_ns: int
    share: float  # of the accumulated time (the roles partition the activities)
    exposed_ns: int  # the time the device does this role's work alone
    one_device_ns: int  # of time_ns, exchanges on a group of one device (local copies)
    row_flops: float  # of flops, those moeprof counted from the rows a grouped GEMM computes (padding included)
    flops: float | None
    hbm_bytes: float | None
    roof_ns: float | None
    below_roof_ns: float | None
    uncounted_ns: float | None
    flop_util: float | None
    hbm_util: float | None
    bound: str | None  # compute | memory


class RooflineRow(TypedDict, total=False):
    """One row of ``roofline.ops``, ``.scopes`` or ``.roles``: summed over the window and the devices."""

    op: str
    role: str
    scope: str
    count: int
    time_ns: int
    uncounted_ns: int
    flops: float | None
    hbm_bytes: float | None
    flop_util: float | None
    hbm_util: float | None  # not capped: above 1 a count is wrong
    bound: str | None
    roof_ns: float | None
    below_roof_ns: float | None


class TokenMovement(TypedDict, total=False):
    """``roofline.glue``: the token movement around the experts (router, permute, unpermute, exchanges on a group
    of one device), per step and device."""

    time_ns: int
    share: float  # of the accumulated time
    flops: float | None
    hbm_bytes: float | None
    tflops_per_s: float | None
    hbm_util: float | None
    roles: list[str]


# ``roofline`` (spec §10): the one peak every screen measures against and where it comes from ("from": the device
# plane, a preset, --chip), the job's compute precision (bf16, f32, fp8: the peak is for it, or said not to be), the
# time without counts, the roofline per op, scope and role (``core.roofline.roofline_section``) and the token
# movement. A functional TypedDict: its key "from" is a Python keyword
Roofline = TypedDict(
    "Roofline",
    {
        "peak_flops": float | None,  # FLOP/s of one device
        "peak_hbm_bytes_per_s": float | None,
        "from": str,
        "precision": str,
        "uncounted_ns": int,
        "steps": int,
        "devices": int,
        "ops": list[RooflineRow],
        "scopes": list[RooflineRow],
        "roles": list[RooflineRow],
        "glue": TokenMovement,
        "note": str,
    },
    total=False,
)


class EdgeEnd(TypedDict):
    """``edge_exposure.first`` / ``.last``: the exposed time of the devices' first (last) collectives."""

    exposed_ns: int
    op: str  # the op with the most of it


class EdgeExposure(TypedDict):
    """``edge_exposure``: exposed communication at the capture's edges, where the capture cuts the run of steps
    (each device's first and last collective; ``insight.edges``)."""

    exposed_ns: int
    first: EdgeEnd
    last: EdgeEnd
    by_op: dict[str, int]
    by_kind: dict[str, int]


class Launches(TypedDict):
    """``launches``: what the host's kernel launches say (``readers.kineto.launch_facts``, summed over the
    files): launches, those whose activity the trace lacks, those recorded inside a graph capture."""

    kernel_launches: int
    without_activity: int
    captured: int
    captured_without_activity: int
    capture_api: str  # the call that opened the capture (cudaStreamBeginCapture, hipStreamBeginCapture)


class InspectorP2P(TypedDict, total=False):
    """``inspector.p2p``: the P2P records and how many found their peer."""

    records: int
    matched_records: int
    unmatched_records: int
    instances: int
    incomplete_instances: int
    beyond_shortest_us: float
    last_to_arrive: list[dict[str, Any]]


class InspectorResult(TypedDict, total=False):
    """``inspector``: what NCCL Inspector logs tell without a timeline (``core.inspector.measure``)."""

    format: str  # "nccl-inspector"
    versions: list[str]
    records: int
    collective_records: int
    p2p_records: int
    processes: int
    communicators: list[dict[str, Any]]
    exec_us: float
    instances: int
    incomplete_instances: int
    tied_instances: int
    beyond_shortest_us: float
    last_to_arrive: list[dict[str, Any]]
    bandwidth: list[dict[str, Any]]
    p2p: InspectorP2P
    cannot_tell: list[str]
