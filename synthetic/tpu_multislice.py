"""A synthetic 2-slice TPU job whose true figures are known: the XPlanes of a multi-slice MoE step.

Only one TPU chip is lent, and on one chip XLA compiles collectives away, so the real captures
(``../shared/traces/tpu/``) hold none. This module simulates a JAX MoE training step on two TPU v5e
slices of one host and four chips each (8 chips, global device ids ``slice * 4 + chip``) and writes
one XPlane per host that follows the real captures field by field, plus the collectives a
multi-slice job has: expert-parallel ``ragged-all-to-all`` dispatch and an async ``all-to-all``
combine, an FSDP ``all-gather-start``/``-done`` and an async ``reduce-scatter`` within each slice (ICI),
and the gradient all-reduce across slices (DCN) as MegaScale runs it: ``send``/``recv``/
``send-done``/``recv-done`` on the chip and the action graph on ``/device:CUSTOM:Megascale Trace``.
One chip (``SLOW_CHIP``) runs its expert GEMMs ``SLOW_FACTOR`` times slower; the second host's
clock is ``CLOCK_OFFSET_NS`` ahead of the first's.

Every random draw is made up front, so the job can be simulated again with one change
(:data:`CHANGES`): the slow chip fixed, the all-to-all transfers halved, the DCN transfer halved;
the counterfactual step times are the truth of spec §9's projection.

The truth (:func:`truth`) is computed here from the generator's own intervals, by brute force (one
boolean per nanosecond, plain loops over instances): spec §4 per chip and per step, the collectives,
and the §8 ledger (clock offsets, wait/transfer per instance, stragglers, caused wait). It uses no
moeprof code.

What the files hold, and where each fact comes from (see docs/synthetic-tpu.md for the full list):

* From the real captures (``demo_v5e_1chip.xplane.pb``, ``moe_ragged_dot_v5e_1chip.xplane.pb``, dumped
  with ``jax.profiler.ProfileData`` and the protobuf classes of ``moeprof.readers.xspace_proto``):
  the planes and their ids, plane stats, stat metadata registered in the same order, line ids and names,
  per-event stats and their types (``device_offset_ps``/``device_duration_ps`` uint64, ``Time Scale
  Multiplier`` double; on ``Async XLA Ops``: ``hlo_op`` the ``-done`` op, ``_a``, ``flow`` (low two
  bits 3), ``id`` the op's number), metadata stats on the event metadata (``hlo_category``,
  ``program_id`` uint64 above 2**63, ``flops``, ``model_flops``, ``bytes_accessed``, ``tf_op``, ...),
  op names as whole HLO expressions with operand shapes and TPU tiled layouts, ``display_name`` the
  op's short name (on ``Async XLA Ops`` the async kind), async ``-start`` ops printed unsugared
  (``async-start(...), calls=%async_computation.N``: the replica groups are only in the module's HLO),
  the async interval from the ``-start``'s start to the ``-done``'s end, ``Steps`` windows that run
  from the end of one module run to the end of the next, the HLO in ``/host:metadata``.
* From xprof's sources (openxla/xprof): hlo_category strings (``xla_op_utils.h``: ``send``,
  ``recv-done``, ``all-gather-start``, ...); a DCN collective is ``send`` ... ``recv-done`` on the chip,
  named by the ``_xla_host_transfer_rendezvous`` frontend attribute whose prefix is its kind
  (``all-reduce.273_312``; ``docs/megascale_stats.md``, ``dcn_analysis_test.cc``); the Megascale plane
  holds per-chip action graphs keyed by the ``graph_key`` stat ``device_<id>_gid_<rendezvous>$<launch>^i<n>``
  (``megascale_perfetto/xspace_loader.cc``): an execution event named by the graph key (stat
  ``input_size``), and ``DeviceToHost``/``NetworkSend``/``NetworkReceive``/``HostToDevice`` ``START``
  (``action_index``) and ``END`` events (``action_duration_ns``, ``buffer_sizes`` ``$c0=<bytes>``, on
  sends ``s<src>->d<dst>``, ``network_transport_latency_us`` on receives; ``trace_processor.cc``).
* From Orbax's multihost utils: a megascale device id is ``(slice + 1) * 100000`` plus the chip's id in
  its slice.
* Assumed (no public source found): the Megascale plane's line names and the string formats of
  ``transfer_source``/``transfer_destinations``; the ``display_name`` of an async collective on ``Async XLA
  Ops`` (the wrapped opcode, as ``slice`` for ``slice-start``); DCN ops' ``hlo_category``
  ``send``/``recv``/``send-done``/``recv-done`` (not ``host send``); that DCN sends and receives do not appear
  on ``Async XLA Ops``; that a chip's DCN peer is the chip at its position in the other slice.

``python -m synthetic sample_traces`` writes ``synthetic_tpu_2slice/`` and its truth file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from moeprof.readers.xspace_proto import iter_fields, messages

from .gpu import _PlaneBuilder, _varint
from .tpu import PLANE_STATS
from .xplane_encode import varint_bytes

SLICES = 2
CHIPS = 4  # per slice; one host per slice
LAYERS = 2
STEPS = 3
HOSTS = ("tpu-slice0-w0", "tpu-slice1-w0")
MODULE = "jit_train_step"
PROGRAM_ID = 16_843_209_337_100_475_409  # a uint64 above 2**63, as real program ids are
SLOW_CHIP = 6  # global id: slice 1, chip 2
SLOW_FACTOR = 1.6
CLOCK_OFFSET_NS = (0, 2_371_913)  # per host: its clock minus true time
BASE_NS = 40_000_000  # the first module run starts about here (device times are relative to the capture)
DEVICE_TYPE = str(PLANE_STATS["device_type_string"])  # the chip's plane stats, as synthetic.tpu writes them
PEAK_TFLOPS = float(PLANE_STATS["peak_teraflops_per_second"])
PEAK_HBM_GBPS = float(PLANE_STATS["peak_hbm_bw_gigabytes_per_second"])
HOST_SKEW_PS = 78  # an event's offset_ps minus its device_offset_ps (49386228828 - 49386228750 in the demo capture)

# the changes the job can be simulated again with, and the --what-if terms that project them
CHANGES: dict[str, list[str]] = {
    "none": [],
    "fix-slow-chip": [
        f"scale(device={HOSTS[SLOW_CHIP // CHIPS]}/TPU:{SLOW_CHIP % CHIPS},name~ragged_dot)={1 / SLOW_FACTOR!r}"
    ],
    "half-all-to-all": ["scale(kind=all-to-all)=0.5"],
    "half-dcn": ["scale(kind=all-reduce)=0.5"],
    "no-dcn": ["scale(kind=all-reduce)=0"],
}
# the changes of a collective's transfer: which collectives (a kind, or "dcn": the all-reduce across slices), times what
TRANSFER_CHANGES: dict[str, tuple[str, float]] = {
    "half-all-to-all": ("all-to-all", 0.5),
    "half-dcn": ("dcn", 0.5),
    "no-dcn": ("dcn", 0.0),
}

ICI_GROUPS = tuple(tuple(s * CHIPS + c for c in range(CHIPS)) for s in range(SLICES))
DCN_GROUPS = tuple(tuple(s * CHIPS + c for s in range(SLICES)) for c in range(CHIPS))


def device_name(g: int) -> str:
    return f"{HOSTS[g // CHIPS]}/TPU:{g % CHIPS}"


def megascale_id(g: int) -> int:
    """The chip's megascale device id: ``(slice + 1) * 100000 + its id within the slice`` (Orbax's multihost
    utils read the slice back as ``device_id // 100000 - 1``, "based on how Megascale device ids are assigned")."""
    return 100_000 * (g // CHIPS + 1) + g % CHIPS


# ----------------------------------------------------------------------------- the program
BF16_2D = "{1,0:T(8,128)(2,1)}"
F32_2D = "{1,0:T(8,128)}"
TOKENS, HIDDEN, ROWS, FFN, LOCAL_EXPERTS, EXPERTS, SHARD = 2048, 1024, 4096, 512, 4, 16, 256


def _bf16(*dims: int) -> str:
    return f"bf16[{','.join(map(str, dims))}]{BF16_2D if len(dims) == 2 else '{2,1,0:T(8,128)(2,1)}'}"


def _f32(*dims: int) -> str:
    return f"f32[{','.join(map(str, dims))}]{F32_2D if len(dims) == 2 else '{0:T(256)}'}"


U32_SYNC = "u32[]{:S(2)}"
OFFSETS = "s32[4]{0:T(128)}"


@dataclass
class Op:
    """One HLO instruction the chip runs (one ``XLA Ops`` event per execution), or a parameter/constant."""

    name: str
    shape: str
    opcode: str
    operands: tuple[str, ...] = ()
    attrs: str = ""
    role: str = "compute"  # compute | memcpy | sync | start | done | send | recv | send-done | recv-done | none
    category: str = ""
    scope: str = ""  # the JAX name scope (tf_op), "" for none
    duration: tuple[int, int] = (0, 0)  # base duration range, ns
    slow: bool = False  # the slow chip runs it SLOW_FACTOR times slower
    kind: str = ""  # collective kind (truth)
    groups: tuple[tuple[int, ...], ...] = ()
    transfer: tuple[int, int] = (0, 0)  # collective transfer range, ns
    pair: str = ""  # start <-> done
    async_display: str = ""  # display name on Async XLA Ops
    model_flops: int = 0
    dense_factor: int = 1  # XLA's flops over model flops (ragged_dot counted dense over all experts)


def _program() -> tuple[list[Op], list[str]]:
    """The step's HLO instructions in schedule order, and the extra computations of the module."""
    ops: list[Op] = [
        Op("Arg_0.1", _bf16(TOKENS, HIDDEN), "parameter", attrs="0", role="none"),
        Op("Arg_1.2", _bf16(HIDDEN, EXPERTS), "parameter", attrs="1", role="none"),
        Op("Arg_2.3", _bf16(LOCAL_EXPERTS, HIDDEN, FFN), "parameter", attrs="2", role="none"),
        Op("Arg_3.4", _bf16(LOCAL_EXPERTS, FFN, HIDDEN), "parameter", attrs="3", role="none"),
        Op("Arg_4.5", _bf16(HIDDEN, HIDDEN), "parameter", attrs="4", role="none"),
        Op("constant.6", OFFSETS, "constant", attrs="{0, 1024, 2048, 3072}", role="none"),
    ]
    extra: list[str] = [
        "%add.clone (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
        "  ROOT %add.0 = f32[] add(%x, %y)\n}"
    ]
    vmem = _bf16(TOKENS, HIDDEN).replace(")}", ")S(1)}")  # the copy's destination: memory space 1
    staged = f"({vmem}, {_bf16(TOKENS, HIDDEN)}, {U32_SYNC})"
    ops += [
        Op("copy-start.7", staged, "copy-start", ("Arg_0.1",), role="memcpy", category="copy-start",
           duration=(3, 6), pair="copy-done.7", async_display="async-copy"),
        Op("fusion.8", _bf16(TOKENS, HIDDEN), "fusion", ("Arg_0.1",), "kind=kLoop", category="loop fusion",
           scope="jit(train_step)/embed/rms_norm", duration=(18_000, 26_000), model_flops=4 * TOKENS * HIDDEN),
        Op("copy-done.7", vmem, "copy-done", ("copy-start.7",),
           role="memcpy", category="copy-done", duration=(3, 6), pair="copy-start.7"),
    ]  # fmt: skip
    prev = "fusion.8"
    for layer in range(LAYERS):
        n = 10 * (layer + 1)
        scope = f"jit(train_step)/moe_{layer}"
        combine_comp = f"async_computation.{n + 6}"
        extra.append(
            f"%{combine_comp} (param_0: bf16[{ROWS},{HIDDEN}]) -> bf16[{ROWS},{HIDDEN}] {{\n"
            f"  %param_0 = {_bf16(ROWS, HIDDEN)} parameter(0)\n"
            f"  ROOT %all-to-all.{n + 9} = {_bf16(ROWS, HIDDEN)} all-to-all(%param_0), channel_id={n + 9}, "
            f"replica_groups={_groups(ICI_GROUPS)}, dimensions={{0}}\n}}"
        )
        ops += [
            Op(f"convolution_fusion.{n}", _f32(TOKENS, EXPERTS), "fusion", (prev, "Arg_1.2"), "kind=kOutput",
               category="convolution fusion", scope=f"{scope}/router/dot_general", duration=(12_000, 20_000),
               model_flops=2 * TOKENS * HIDDEN * EXPERTS),
            Op(f"fusion.{n + 2}", _bf16(ROWS, HIDDEN), "fusion", (prev, f"convolution_fusion.{n}"), "kind=kLoop",
               category="loop fusion", scope=f"{scope}/dispatch/permute", duration=(14_000, 22_000)),
            Op(f"ragged_all_to_all.{n + 1}", _bf16(ROWS, HIDDEN), "ragged-all-to-all",
               (f"fusion.{n + 2}", f"fusion.{n + 2}", "constant.6", "constant.6", "constant.6", "constant.6"),
               f"channel_id={n + 1}, replica_groups={_groups(ICI_GROUPS)}", role="sync",
               category="ragged-all-to-all", scope=f"{scope}/dispatch/ragged_all_to_all", kind="all-to-all",
               groups=ICI_GROUPS, transfer=(40_000, 70_000)),
            Op(f"ragged_dot_fusion.{n + 4}", _bf16(ROWS, FFN), "fusion", (f"ragged_all_to_all.{n + 1}", "Arg_2.3"),
               "kind=kOutput", category="convolution fusion", scope=f"{scope}/experts/ragged_dot",
               duration=(120_000, 170_000), slow=True, model_flops=2 * ROWS * HIDDEN * FFN, dense_factor=EXPERTS),
            Op(f"ragged_dot_fusion.{n + 5}", _bf16(ROWS, HIDDEN), "fusion",
               (f"ragged_dot_fusion.{n + 4}", "Arg_3.4"), "kind=kOutput", category="convolution fusion",
               scope=f"{scope}/experts/ragged_dot", duration=(100_000, 140_000), slow=True,
               model_flops=2 * ROWS * FFN * HIDDEN, dense_factor=EXPERTS),
            Op(f"all-to-all-start.{n + 6}", f"(({_bf16(ROWS, HIDDEN)}), {_bf16(ROWS, HIDDEN)}, {U32_SYNC})",
               "async-start", (f"ragged_dot_fusion.{n + 5}",), f"calls=%{combine_comp}", role="start",
               category="async-start", scope=f"{scope}/combine/all_to_all", kind="all-to-all", groups=ICI_GROUPS,
               transfer=(50_000, 80_000), duration=(5, 9), pair=f"all-to-all-done.{n + 6}",
               async_display="all-to-all"),
            Op(f"convolution_fusion.{n + 7}", _bf16(TOKENS, HIDDEN), "fusion", (prev, "Arg_4.5"), "kind=kOutput",
               category="convolution fusion", scope=f"{scope}/shared_expert/dot_general",
               duration=(30_000, 48_000), model_flops=2 * TOKENS * HIDDEN * HIDDEN),
            Op(f"all-to-all-done.{n + 6}", _bf16(ROWS, HIDDEN), "async-done", (f"all-to-all-start.{n + 6}",),
               role="done", category="async-done", scope=f"{scope}/combine/all_to_all", duration=(3, 6),
               pair=f"all-to-all-start.{n + 6}"),
            Op(f"add_fusion.{n + 8}", _bf16(TOKENS, HIDDEN), "fusion",
               (f"convolution_fusion.{n + 7}", f"all-to-all-done.{n + 6}"), "kind=kLoop", category="loop fusion",
               scope=f"{scope}/combine/add", duration=(6_000, 11_000), model_flops=2 * TOKENS * HIDDEN),
        ]  # fmt: skip
        prev = f"add_fusion.{n + 8}"
    rs_comp = "async_computation.44"
    extra.append(
        f"%{rs_comp} (param_0: f32[{HIDDEN},{HIDDEN}]) -> f32[{SHARD},{HIDDEN}] {{\n"
        f"  %param_0 = {_f32(HIDDEN, HIDDEN)} parameter(0)\n"
        f"  ROOT %reduce-scatter.54 = {_f32(SHARD, HIDDEN)} reduce-scatter(%param_0), channel_id=54, "
        f"replica_groups={_groups(ICI_GROUPS)}, use_global_device_ids=true, dimensions={{0}}, to_apply=%add.clone\n}}"
    )
    rendezvous = "all-reduce.49_47"
    frontend = f'_xla_host_transfer_handler_name="megascale",_xla_host_transfer_rendezvous="{rendezvous}"'
    ops += [
        Op("convert_fusion.40", _f32(SHARD, HIDDEN), "fusion", (prev,), "kind=kLoop", category="loop fusion",
           scope="jit(train_step)/fsdp/convert", duration=(4_000, 7_000)),
        Op("all-gather-start.41", f"({_f32(SHARD, HIDDEN)}, {_f32(HIDDEN, HIDDEN)})", "all-gather-start",
           ("convert_fusion.40",), f"channel_id=41, replica_groups=[{SLICES},{CHIPS}]<=[{SLICES * CHIPS}], "
           "dimensions={0}, use_global_device_ids=true", role="start", category="all-gather-start",
           scope="jit(train_step)/fsdp/all_gather", kind="all-gather", groups=ICI_GROUPS,
           transfer=(30_000, 55_000), duration=(5, 9), pair="all-gather-done.41", async_display="all-gather"),
        Op("convolution_fusion.42", _bf16(TOKENS, HIDDEN), "fusion", (prev, "Arg_4.5"), "kind=kOutput",
           category="convolution fusion", scope="jit(train_step)/transpose(jvp(moe_1))/shared_expert/dot_general",
           duration=(55_000, 80_000), model_flops=2 * TOKENS * HIDDEN * HIDDEN),
        Op("all-gather-done.41", _f32(HIDDEN, HIDDEN), "all-gather-done", ("all-gather-start.41",), role="done",
           category="all-gather-done", scope="jit(train_step)/fsdp/all_gather", duration=(3, 6),
           pair="all-gather-start.41"),
        Op("convolution_fusion.43", _f32(HIDDEN, HIDDEN), "fusion", ("all-gather-done.41", "convolution_fusion.42"),
           "kind=kOutput", category="convolution fusion",
           scope="jit(train_step)/transpose(jvp(moe_1))/experts/dot_general", duration=(40_000, 60_000),
           model_flops=2 * TOKENS * HIDDEN * HIDDEN),
        Op("reduce-scatter-start.44", f"(({_f32(HIDDEN, HIDDEN)}), {_f32(SHARD, HIDDEN)}, {U32_SYNC})",
           "async-start", ("convolution_fusion.43",), f"calls=%{rs_comp}", role="start", category="async-start",
           scope="jit(train_step)/fsdp/reduce_scatter", kind="reduce-scatter", groups=ICI_GROUPS,
           transfer=(60_000, 95_000), duration=(5, 9), pair="reduce-scatter-done.44",
           async_display="reduce-scatter"),
        Op("convolution_fusion.45", _bf16(TOKENS, HIDDEN), "fusion", (prev, "Arg_4.5"), "kind=kOutput",
           category="convolution fusion", scope="jit(train_step)/transpose(jvp(moe_0))/shared_expert/dot_general",
           duration=(35_000, 55_000), model_flops=2 * TOKENS * HIDDEN * HIDDEN),
        Op("reduce-scatter-done.44", _f32(SHARD, HIDDEN), "async-done", ("reduce-scatter-start.44",), role="done",
           category="async-done", scope="jit(train_step)/fsdp/reduce_scatter", duration=(3, 6),
           pair="reduce-scatter-start.44"),
        Op("after-all.46", "token[]", "after-all", role="none"),
        Op("send.47", f"({_f32(SHARD, HIDDEN)}, u32[], token[])", "send", ("reduce-scatter-done.44", "after-all.46"),
           f'channel_id=47, is_host_transfer=true, frontend_attributes={{_xla_dcn_recv_channel="48",{frontend}}}',
           role="send", category="send", scope="jit(train_step)/dcn/psum", kind="all-reduce", groups=DCN_GROUPS,
           transfer=(150_000, 230_000), duration=(1_200, 1_800), pair="recv-done.48"),
        Op("recv.48", f"({_f32(SHARD, HIDDEN)}, u32[], token[])", "recv", ("after-all.46",),
           f"channel_id=48, is_host_transfer=true, frontend_attributes={{{frontend}}}", role="recv",
           category="recv", scope="jit(train_step)/dcn/psum", duration=(600, 1_000)),
        Op("fusion.50", _f32(SHARD, HIDDEN), "fusion", ("reduce-scatter-done.44",), "kind=kLoop",
           category="loop fusion", scope="jit(train_step)/optimizer/adam", duration=(20_000, 35_000),
           model_flops=6 * SHARD * HIDDEN),
        Op("send-done.47", "token[]", "send-done", ("send.47",), "channel_id=47, is_host_transfer=true",
           role="send-done", category="send-done", scope="jit(train_step)/dcn/psum", duration=(400, 700)),
        Op("recv-done.48", f"({_f32(SHARD, HIDDEN)}, token[])", "recv-done", ("recv.48",),
           "channel_id=48, is_host_transfer=true", role="recv-done", category="recv-done",
           scope="jit(train_step)/dcn/psum", duration=(700, 1_100), pair="send.47"),
        Op("get-tuple-element.52", _f32(SHARD, HIDDEN), "get-tuple-element", ("recv-done.48",), "index=0",
           role="none"),
        Op("add_fusion.51", _f32(SHARD, HIDDEN), "fusion", ("reduce-scatter-done.44", "get-tuple-element.52"),
           "kind=kLoop", category="loop fusion", scope="jit(train_step)/dcn/psum/add", duration=(8_000, 12_000),
           model_flops=SHARD * HIDDEN),
        Op("fusion.53", _f32(SHARD, HIDDEN), "fusion", ("add_fusion.51", "fusion.50"), "kind=kLoop",
           category="loop fusion", scope="jit(train_step)/optimizer/adam", duration=(40_000, 60_000),
           model_flops=10 * SHARD * HIDDEN),
    ]  # fmt: skip
    return ops, extra


def _groups(groups: Iterable[Iterable[int]]) -> str:
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in groups) + "}"


PROGRAM, EXTRA_COMPUTATIONS = _program()
BY_NAME = {op.name: op for op in PROGRAM}
RUN = [op for op in PROGRAM if op.role != "none"]  # the ops the chip runs, in schedule order
RENDEZVOUS = "all-reduce.49_47"


def _short_shape(shape: str) -> str:
    """A shape without layouts, as computation signatures print it."""
    import re

    return re.sub(r"\{[^{}]*\}", "", shape)


def hlo_text() -> str:
    """The module's HLO text, as XLA prints it (fusions call a computation of their own)."""
    comps = list(EXTRA_COMPUTATIONS)
    lines = []
    for op in PROGRAM:
        attrs = op.attrs
        if op.opcode == "fusion":
            comp = f"fused_computation.{op.name.rsplit('.', 1)[1]}"
            params = [BY_NAME[o].shape for o in op.operands]
            sig = ", ".join(f"param_{i}: {_short_shape(s)}" for i, s in enumerate(params))
            body = "".join(f"  %param_{i}.{op.name} = {_short_shape(s)} parameter({i})\n" for i, s in enumerate(params))
            etype = _short_shape(op.shape).split("[", 1)[0]
            comps.append(
                f"%{comp} ({sig}) -> {_short_shape(op.shape)} {{\n{body}"
                f"  %constant.{op.name} = {etype}[] constant(0)\n"
                f"  ROOT %broadcast.{op.name} = {_short_shape(op.shape)} "
                f"broadcast(%constant.{op.name}), dimensions={{}}\n}}"
            )
            attrs = f"{attrs}, calls=%{comp}"
        if op.opcode in ("parameter", "constant"):
            lines.append(f"  %{op.name} = {op.shape} {op.opcode}({op.attrs})")
            continue
        operands = ", ".join(f"%{o}" for o in op.operands)
        lines.append(f"  %{op.name} = {op.shape} {op.opcode}({operands}){', ' + attrs if attrs else ''}")
    outputs = ["fusion.53", "add_fusion.28"]
    shapes = ", ".join(BY_NAME[o].shape for o in outputs)
    root = f"  ROOT %tuple.60 = ({shapes}) tuple({', '.join('%' + o for o in outputs)})"
    params = [op for op in PROGRAM if op.opcode == "parameter"]
    sig = ", ".join(f"{op.name}: {_short_shape(op.shape)}" for op in params)
    ret = "(" + ", ".join(_short_shape(BY_NAME[o].shape) for o in outputs) + ")"
    entry = f"ENTRY %main.61 ({sig}) -> {ret} {{\n" + "\n".join(lines) + "\n" + root + "\n}"
    return f"HloModule {MODULE}\n\n" + "\n\n".join(comps) + "\n\n" + entry + "\n"


def hlo_proto_bytes() -> bytes:
    """The module as ``/host:metadata`` stores it (an ``xla.HloProto``), without the module id: XLA numbers modules
    per process, which would make the file depend on what the process parsed before."""
    from jaxlib._hlo import hlo_module_from_text

    module = hlo_module_from_text(hlo_text()).as_serialized_hlo_module_proto()
    kept, pos = [], 0
    for number, _wire, _start, end in iter_fields(module):
        if number != 5:  # HloModuleProto.id
            kept.append(module[pos:end])
        pos = end
    body = b"".join(kept)
    return b"\x0a" + _varint(len(body)) + body


def expression(op: Op) -> str:
    """The op's name on ``XLA Ops``: the whole HLO expression with operand shapes, as the TPU profiler prints it."""
    operands = ", ".join(f"{BY_NAME[o].shape} %{o}" for o in op.operands)
    attrs = op.attrs
    if op.opcode == "fusion":
        attrs = f"{attrs}, calls=%fused_computation.{op.name.rsplit('.', 1)[1]}"
    return f"%{op.name} = {op.shape} {op.opcode}({operands}){', ' + attrs if attrs else ''}"


# ----------------------------------------------------------------------------- the simulation
@dataclass
class Event:
    """One op as a chip ran it (true time, ns)."""

    op: Op
    step: int
    start: int
    end: int


@dataclass
class Chip:
    events: list[Event] = field(default_factory=list)
    runs: list[tuple[int, int]] = field(default_factory=list)  # module runs
    # DCN action graph per step: (exec start, d2h end, send end, receive end, h2d end)
    dcn: list[tuple[int, int, int, int, int]] = field(default_factory=list)


@dataclass
class Job:
    change: str
    seed: int
    steps: int
    chips: list[Chip]

    def step_times(self) -> list[int]:
        """Per step, the job's step time (spec §5, §9; true time): its chips' ``Steps`` windows (a device-side
        marker is the step as it is: from the end of the chip's previous run, the idle before the step included;
        :func:`step_windows`) from the earliest start to the latest end."""
        out = []
        for k in range(self.steps):
            begins = [c.runs[k - 1][1] if k else c.runs[0][0] for c in self.chips]
            out.append(max(c.runs[k][1] for c in self.chips) - min(begins))
        return out


def simulate(change: str = "none", seed: int = 31, steps: int = STEPS) -> Job:
    """Run the job (with one of :data:`CHANGES`); deterministic for a seed. Ops run one after another on each
    chip; a synchronous collective ends on every member at the last arrival plus its transfer; an async one
    completes at the last member's ``-start`` end plus its transfer, and its ``-done`` blocks until then; the DCN
    all-reduce completes at the later ``send`` end of the two members plus its transfer, and ``recv-done``
    blocks until then. A chip starts its next step a gap after its own last op (JAX dispatches the next step
    ahead, so no chip waits for the others of its host between steps); the first step starts per slice."""
    if change not in CHANGES:
        raise ValueError(f"unknown change {change!r}")
    rng = np.random.default_rng(seed)
    n_chips, n_ops = SLICES * CHIPS, len(RUN)
    lo = np.array([op.duration[0] for op in RUN])
    hi = np.array([max(op.duration[1], op.duration[0] + 1) for op in RUN])
    base = rng.integers(lo, hi, (steps, n_ops))
    jitter = rng.uniform(0.97, 1.03, (n_chips, steps, n_ops))
    gaps = rng.integers(20, 400, (n_chips, steps, n_ops))
    t_lo = np.array([op.transfer[0] for op in RUN])
    t_hi = np.array([max(op.transfer[1], op.transfer[0] + 1) for op in RUN])
    groups = max(SLICES, CHIPS)
    transfers = rng.integers(t_lo[:, None], t_hi[:, None], (steps, n_ops, groups))  # per step, op and group
    host_gap = rng.integers(150_000, 250_000, (SLICES, steps))
    launch = rng.integers(0, 3_000, (n_chips, steps))
    first = rng.integers(0, 20_000, SLICES)
    dma = rng.integers(2_000, 5_000, (n_chips, steps, 2))  # D2H and H2D of the DCN action graph

    slow = np.ones(n_chips)
    if change != "fix-slow-chip":
        slow[SLOW_CHIP] = SLOW_FACTOR
    scale = {op.name: 1.0 for op in RUN}
    if change in TRANSFER_CHANGES:
        which, factor = TRANSFER_CHANGES[change]
        for op in RUN:
            if op.kind == which or (which == "dcn" and op.role == "send"):
                scale[op.name] = factor

    chips = [Chip() for _ in range(n_chips)]
    run_end = np.zeros(n_chips, dtype=np.int64)
    for k in range(steps):
        t = np.zeros(n_chips, dtype=np.int64)
        for g in range(n_chips):
            # JAX dispatches ahead: a chip starts its next step its gap (the next batch's infeed) after its own end
            begin = BASE_NS + int(first[g // CHIPS]) if k == 0 else int(run_end[g]) + int(host_gap[g // CHIPS, k])
            t[g] = begin + int(launch[g, k])
        starts = t.copy()
        completion: dict[tuple[str, int], int] = {}  # (pair, group index) -> when the collective completes
        send_end = np.zeros(n_chips, dtype=np.int64)
        for i, op in enumerate(RUN):
            arrive = t + gaps[:, k, i]
            dur = np.array(
                [int(round(base[k, i] * jitter[g, k, i] * (slow[g] if op.slow else 1.0))) for g in range(n_chips)]
            )
            end = arrive + dur
            if op.role == "sync":
                for j, group in enumerate(op.groups):
                    last = max(int(arrive[g]) for g in group)
                    for g in group:
                        end[g] = last + int(round(transfers[k, i, j] * scale[op.name]))
            elif op.role in ("start", "send"):
                for j, group in enumerate(op.groups):
                    done = max(int(end[g]) for g in group) + int(round(transfers[k, i, j] * scale[op.name]))
                    completion[(op.pair, j)] = done
                if op.role == "send":
                    send_end = end.copy()
            elif op.role in ("done", "recv-done"):
                starter = BY_NAME[op.pair]
                for j, group in enumerate(starter.groups):
                    for g in group:
                        end[g] = max(int(arrive[g]), completion[(op.name, j)]) + int(dur[g])
            for g in range(n_chips):
                chips[g].events.append(Event(op, k, int(arrive[g]), int(end[g])))
            t = end
        for g in range(n_chips):
            chips[g].runs.append((int(starts[g]), int(t[g])))
            run_end[g] = t[g]
            # the DCN action graph: D2H after the send, the network, H2D ending when the data is on the chip
            j = next(j for j, group in enumerate(DCN_GROUPS) if g in group)
            arrived = completion[("recv-done.48", j)]
            d2h_end = int(send_end[g]) + int(dma[g, k, 0])
            h2d_start = max(arrived - int(dma[g, k, 1]), d2h_end)
            send_ev = next(e for e in chips[g].events if e.step == k and e.op.name == "send.47")
            chips[g].dcn.append((send_ev.start, d2h_end, d2h_end + (h2d_start - d2h_end) // 3, h2d_start, arrived))
    return Job(change, seed, steps, chips)


# ----------------------------------------------------------------------------- activities (spec §1-3 reading)
@dataclass
class Activity:
    """One device activity as spec §1 counts it on a TPU (the reading in docs/metrics.md)."""

    chip: int
    name: str  # the op that names it (the -start op of an async collective, ``send`` of a DCN one)
    start: int  # on the host's own clock
    end: int
    bucket: str
    kind: str = ""
    ib_fraction: float | None = None
    group: tuple[int, ...] = ()
    step: int = 0


def activities(job: Job) -> list[Activity]:
    """The chip's activities: each ``XLA Ops`` event, except that an async collective (``-start`` ... ``-done``,
    ``send`` ... ``recv-done``) is one comm activity from the start of its first op to the end of its last, which
    the ops between re-describe (``recv``, ``send-done``). Async copies (``copy-start``/``copy-done``) stay two
    memcpy ops: their async interval moves no data between chips."""
    out: list[Activity] = []
    for g, chip in enumerate(job.chips):
        offset = CLOCK_OFFSET_NS[g // CHIPS]
        opened: dict[str, Event] = {}
        for ev in chip.events:
            op = ev.op
            if op.role in ("start", "send"):
                opened[op.pair] = ev
                continue
            if op.role in ("recv", "send-done"):
                continue
            if op.role in ("done", "recv-done"):
                first = opened.pop(op.name)
                starter = first.op
                group = next(grp for grp in starter.groups if g in grp)
                ib = 1.0 if len({m // CHIPS for m in group}) > 1 else 0.0
                out.append(
                    Activity(
                        g, starter.name, first.start + offset, ev.end + offset, "comm", starter.kind, ib, group, ev.step
                    )
                )
                continue
            if op.role == "sync":
                group = next(grp for grp in op.groups if g in grp)
                out.append(
                    Activity(g, op.name, ev.start + offset, ev.end + offset, "comm", op.kind, 0.0, group, ev.step)
                )
                continue
            out.append(Activity(g, op.name, ev.start + offset, ev.end + offset, op.role, step=ev.step))
    return out


# ----------------------------------------------------------------------------- truth by brute force
def _mask(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> np.ndarray:
    m = np.zeros(hi - lo, dtype=bool)
    for s, e in intervals:
        a, b = max(s, lo), min(e, hi)
        if b > a:
            m[a - lo : b - lo] = True
    return m


def _figures(acts: list[Activity], lo: int, hi: int) -> dict[str, int]:
    """Spec §4 over the window [lo, hi), activities clipped, by counting nanoseconds."""
    sums = dict.fromkeys(("compute", "comm", "memcpy", "other"), 0)
    ib = 0.0
    masks = {b: _mask(((a.start, a.end) for a in acts if a.bucket == b), lo, hi) for b in sums}
    for a in acts:
        d = max(0, min(a.end, hi) - max(a.start, lo))
        sums[a.bucket] += d
        if a.bucket == "comm":
            ib += d * float(a.ib_fraction or 0.0)
    any_mask = masks["compute"] | masks["comm"] | masks["memcpy"] | masks["other"]
    fig = {
        "accumulated_ns": sum(sums.values()),
        **{f"{b}_ns": v for b, v in sums.items()},
        "span_ns": hi - lo,
        "busy_ns": int(any_mask.sum()),
        "idle_ns": int((~any_mask).sum()),
        "exposed_comm_ns": int((masks["comm"] & ~masks["compute"]).sum()),
        "overlapped_comm_ns": int((masks["comm"] & masks["compute"]).sum()),
        "comm_ib_ns": round(ib),
        "comm_unknown_link_ns": 0,
    }
    fig["comm_nvlink_ns"] = fig["comm_ns"] - fig["comm_ib_ns"]
    return fig


def step_windows(job: Job, g: int) -> list[tuple[int, int]]:
    """The chip's ``Steps`` windows on its host's clock: from the end of the previous module run (the first:
    from its start) to the end of this one, as the real captures' Steps line has them."""
    offset = CLOCK_OFFSET_NS[g // CHIPS]
    runs = job.chips[g].runs
    return [((runs[k - 1][1] if k else runs[0][0]) + offset, runs[k][1] + offset) for k in range(len(runs))]


def _median(values: list[int]) -> float:
    v = sorted(values)
    n = len(v)
    return float(v[n // 2]) if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def ledger(acts: list[Activity]) -> dict:
    """Spec §8 by its text: instances (op, group, n), clock offsets, wait/transfer, stragglers."""
    comm = sorted((a for a in acts if a.bucket == "comm"), key=lambda a: (a.start, a.end))
    seen: dict[tuple[int, str, tuple[int, ...]], int] = {}
    instances: dict[tuple[str, tuple[int, ...], int], list[Activity]] = {}
    for a in comm:
        n = seen.get((a.chip, a.name, a.group), 0)
        seen[(a.chip, a.name, a.group)] = n + 1
        instances.setdefault((a.name, a.group, n), []).append(a)
    assert all(len(m) == len(key[1]) for key, m in instances.items())  # every instance complete, by design
    # clocks: host 0 is the reference; per instance with members on both hosts, mean end difference
    diffs = []
    for members in instances.values():
        if members[0].kind not in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
            continue
        by_host = [[m.end for m in members if m.chip // CHIPS == h] for h in range(SLICES)]
        if all(by_host):
            diffs.append(sum(by_host[1]) / len(by_host[1]) - sum(by_host[0]) / len(by_host[0]))
    delta = [0, round(_median(diffs))] if diffs else [0, 0]
    waits: dict[int, list[tuple[int, int]]] = {}
    transfers: dict[int, list[tuple[int, int]]] = {}
    straggler_count = dict.fromkeys(range(SLICES * CHIPS), 0)
    caused = dict.fromkeys(range(SLICES * CHIPS), 0)
    rows = []
    for (name, _group, n), members in sorted(instances.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        aligned = {m.chip: m.start - delta[m.chip // CHIPS] for m in members}
        last = max(aligned.values())
        straggler = sorted((device_name(c) for c, s in aligned.items() if s == last))[0]
        wait_sum = 0
        for m in members:
            d = m.end - m.start
            w = min(max(last - aligned[m.chip], 0), d)
            waits.setdefault(m.chip, []).append((m.start, m.start + w))
            transfers.setdefault(m.chip, []).append((m.start + w, m.end))
            wait_sum += w
            rows.append({"name": name, "n": n, "device": device_name(m.chip), "wait_ns": w, "transfer_ns": d - w})
        chip = next(c for c in aligned if device_name(c) == straggler)
        straggler_count[chip] += 1
        caused[chip] += wait_sum
    return {
        "instances": len(instances),
        "delta": delta,
        "waits": waits,
        "transfers": transfers,
        "straggler_count": straggler_count,
        "caused_wait_ns": caused,
        "rows": rows,
    }


def truth(job: Job) -> dict:
    """Every figure the tests compare: §4 per chip and per step, collectives, the §8 ledger, §9 step times."""
    acts = activities(job)
    led = ledger(acts)
    devices, steps = [], []
    for g in range(SLICES * CHIPS):
        mine = [a for a in acts if a.chip == g]
        lo, hi = min(a.start for a in mine), max(a.end for a in mine)
        fig = {"device": device_name(g), **_figures(mine, lo, hi)}
        compute = _mask(((a.start, a.end) for a in mine if a.bucket == "compute"), lo, hi)
        wait = _mask(led["waits"].get(g, []), lo, hi)
        transfer = _mask(led["transfers"].get(g, []), lo, hi)
        fig.update(
            comm_wait_ns=sum(e - s for s, e in led["waits"].get(g, [])),
            comm_transfer_ns=sum(e - s for s, e in led["transfers"].get(g, [])),
            comm_unmatched_ns=0,
            exposed_transfer_ns=int((transfer & ~compute).sum()),
            exposed_unmatched_ns=0,
            exposed_wait_ns=int((wait & ~compute & ~transfer).sum()),
            straggler_count=led["straggler_count"][g],
            caused_wait_ns=led["caused_wait_ns"][g],
        )
        devices.append(fig)
        for k, (s, e) in enumerate(step_windows(job, g)):
            steps.append({"step": k, "device": device_name(g), "start_ns": s, "end_ns": e, **_figures(mine, s, e)})
    keys = [k for k in devices[0] if k.endswith("_ns") or k == "straggler_count"]
    collectives: dict[str, dict] = {}
    for a in acts:
        if a.bucket != "comm":
            continue
        mine = [b for b in acts if b.chip == a.chip and b.bucket == "compute"]
        covered = _mask(((b.start, b.end) for b in mine), a.start, a.end)
        row = collectives.setdefault(
            a.name,
            {"name": a.name, "kind": a.kind, "count": 0, "total_ns": 0, "exposed_ns": 0, "ib_fraction": a.ib_fraction},
        )
        row["count"] += 1
        row["total_ns"] += a.end - a.start
        row["exposed_ns"] += int((~covered).sum())
    for split in led["rows"]:  # the ledger's split of each collective's time (its activities lie in their windows)
        row = collectives[split["name"]]
        row["wait_ns"] = row.get("wait_ns", 0) + split["wait_ns"]
        row["transfer_ns"] = row.get("transfer_ns", 0) + split["transfer_ns"]
    scopes: dict[str, int] = {}
    for ev_chip in job.chips:
        for ev in ev_chip.events:
            if ev.op.scope:
                scopes[ev.op.scope] = scopes.get(ev.op.scope, 0) + ev.end - ev.start
    flops = _flop_truth(job)
    return {
        "scenario": "synthetic_tpu_2slice",
        "change": job.change,
        "devices": devices,
        "total": {k: sum(d[k] for d in devices) for k in keys},
        "steps": steps,
        "collectives": sorted(collectives.values(), key=lambda r: r["name"]),
        "ledger": {
            "instances": led["instances"],
            "incomplete": 0,
            "desynchronized": 0,
            "clock_offsets_ns": {HOSTS[h]: led["delta"][h] for h in range(SLICES)},
        },
        "step_ns": job.step_times(),
        "what_if": CHANGES,
        "slow_device": device_name(SLOW_CHIP),
        "scope_ns": dict(sorted(scopes.items())),
        "peak_tflops": PEAK_TFLOPS,
        **flops,
    }


def _flop_truth(job: Job) -> dict:
    """XLA's and the model's FLOPs per step and chip, and the ops whose XLA FLOPs exceed the peak in some run."""
    per_step = []
    above: set[str] = set()
    peak_per_ns = PEAK_TFLOPS * 1e3  # FLOP per ns
    for k in range(job.steps):
        xla = model = 0
        for chip in job.chips:
            for ev in chip.events:
                if ev.step != k:
                    continue
                model += ev.op.model_flops
                xla += ev.op.model_flops * ev.op.dense_factor
                if ev.op.model_flops * ev.op.dense_factor > peak_per_ns * (ev.end - ev.start):
                    above.add(ev.op.name)
        per_step.append({"step": k, "flops": xla, "model_flops": model})
    return {"flops_per_step": per_step, "ops_above_peak": sorted(above)}


# ----------------------------------------------------------------------------- writers
# the stat metadata of a TPU device plane, in the order the real captures register them
DEVICE_STATS = [
    "device_offset_ps", "device_duration_ps", "core_details", "device_type_string", "peak_teraflops_per_second",
    "peak_hbm_bw_gigabytes_per_second", "peak_cmem_rd_bw_gigabytes_per_second",
    "peak_cmem_wr_bw_gigabytes_per_second", "peak_vmem_rd_bw_gigabytes_per_second",
    "peak_vmem_wr_bw_gigabytes_per_second", "peak_sram_rd_bw_gigabytes_per_second",
    "peak_sram_wr_bw_gigabytes_per_second", "has_megacore", "has_merged_vmem", "throttle %", "run_id", "replica_id",
    "Time Scale Multiplier", "core_type", "queue_id", "_a", "flow", "id", "hlo_op", "hlo_category",
    "deduplicated_name", "tf_op", "flops", "model_flops", "source", "source_stack", "bytes_accessed",
    "raw_bytes_accessed", "memory_access_breakdown", "shape_with_layout", "program_id", "symbol_id",
    "all_reduce_id", "all_reduce_unique_id", "dcn_collective_info", "offload_type", "offload_duration_ps",
    "tc_offload_start_id", "offload_core_id", "offload_execution_index", "_p", "_pt", "_c", "_ct", "% util",
    "process_id",
]  # fmt: skip
MEGASCALE_STATS = [
    "graph_key", "local_device_id", "num_actions", "collective_type", "input_size", "send_channel_id",
    "recv_channel_id", "slack_us", "action_type", "start_end_type", "action_index", "action_duration_ns",
    "action_inputs", "transfer_source", "transfer_destinations", "dcn_topology_level", "buffer_sizes",
    "compute_operation", "chunk", "launch_id", "loop_iteration", "graph_protos", "network_transport_latency_us",
    "transmission_budget_us", "delay_budget_us", "hlo_module", "multi_slice_topology",
    "activation_to_network_receive_duration_us", "_c", "_ct", "process_id",
]  # fmt: skip
PROCESS_ID = (4711, 5113)


class _Stat:
    """A typed stat value (the XStat oneof the real captures use for it)."""

    def __init__(self, kind: str, value: object) -> None:
        self.kind, self.value = kind, value


def u64(v: int) -> _Stat:
    return _Stat("uint64_value", v)


def i64(v: int) -> _Stat:
    return _Stat("int64_value", v)


def f64(v: float) -> _Stat:
    return _Stat("double_value", v)


def s(v: str) -> _Stat:
    return _Stat("str_value", v)


def b(v: bytes) -> _Stat:
    return _Stat("bytes_value", v)


class _Plane(_PlaneBuilder):
    """A plane whose stat metadata are registered up front (in the real captures' order), whose stats carry
    their real types, and whose event metadata carry a display name and stats."""

    def __init__(self, plane, name: str, plane_id: int, stat_names: list[str]) -> None:
        super().__init__(plane, name, plane_id)
        for n in stat_names:
            self.stat_id(n)
        self.metadata_ids: dict[tuple[str, str], int] = {}

    def _set(self, stat, name: str, value: _Stat) -> None:
        stat.metadata_id = self.stat_id(name)
        setattr(stat, value.kind, value.value)

    def stats(self, values: dict[str, _Stat]) -> None:
        for name, value in values.items():
            self._set(self.plane.stats.add(), name, value)

    def event_id(self, name: str, display: str = "", stats: dict[str, _Stat] | None = None, key: str = "") -> int:
        """The event metadata of ``name`` (``key`` tells apart entries of one name, as XLA Ops and Async XLA Ops)."""
        if (name, key) not in self.metadata_ids:
            i = len(self.metadata_ids) + 1
            self.metadata_ids[(name, key)] = i
            em = self.plane.event_metadata[i]
            em.id, em.name = i, name
            if display:
                em.display_name = display
            for stat_name, value in (stats or {}).items():
                self._set(em.stats.add(), stat_name, value)
        return self.metadata_ids[(name, key)]

    def line(self, line_id: int, name: str, timestamp_ns: int = 0):
        return self.plane.lines.add(id=line_id, display_id=0, name=name, timestamp_ns=timestamp_ns)

    def event(self, line, metadata_id: int, start_ns: int, dur_ns: int, stats: dict[str, _Stat]) -> None:
        # an event with device times has its own offset on the host-synced clock, a few ps off (the real captures)
        skew = HOST_SKEW_PS if "device_offset_ps" in stats else 0
        ev = line.events.add(metadata_id=metadata_id, offset_ps=start_ns * 1000 + skew, duration_ps=dur_ns * 1000)
        for name, value in stats.items():
            self._set(ev.stats.add(), name, value)


def _chip_plane_stats(pid: int) -> dict[str, _Stat]:
    return {
        "core_details": b(b""),
        "device_type_string": s(DEVICE_TYPE),
        "peak_teraflops_per_second": f64(PEAK_TFLOPS),
        "peak_hbm_bw_gigabytes_per_second": f64(PEAK_HBM_GBPS),
        "peak_cmem_rd_bw_gigabytes_per_second": f64(0.0),
        "peak_cmem_wr_bw_gigabytes_per_second": f64(0.0),
        "peak_vmem_rd_bw_gigabytes_per_second": f64(18432.00247463936),
        "peak_vmem_wr_bw_gigabytes_per_second": f64(6144.004404019201),
        "peak_sram_rd_bw_gigabytes_per_second": f64(18432.00247463936),
        "peak_sram_wr_bw_gigabytes_per_second": f64(6144.004404019201),
        "has_megacore": i64(0),
        "has_merged_vmem": i64(1),
        "process_id": i64(pid),
    }


def _op_metadata(op: Op, symbol: int) -> dict[str, _Stat]:
    """The metadata stats XLA attaches to an op's event metadata (as the real captures have them)."""
    from moeprof.core.hlo import shape_bytes

    moved = shape_bytes(op.shape) + sum(shape_bytes(BY_NAME[o].shape) for o in op.operands)
    stats = {
        "hlo_category": s(op.category),
        "program_id": u64(PROGRAM_ID),
        "symbol_id": u64(symbol),
        "flops": i64(op.model_flops * op.dense_factor),
        "model_flops": i64(op.model_flops),
        "bytes_accessed": i64(moved),
        "memory_access_breakdown": b(bytes([8, 1, 16, 2, 24]) + varint_bytes(moved)),  # opaque to readers
        "raw_bytes_accessed": i64(moved),
        "shape_with_layout": s(op.shape),
    }
    if op.scope:
        stats["source"] = s("/workspace/train/moe.py:214")
        stats["source_stack"] = s("/workspace/train/moe.py:214:18\n/workspace/train/train.py:88:11\n")
        stats["tf_op"] = s(f"{op.scope}:")
    return stats


def _side_plane(space, name: str, pid: int) -> None:
    """A chip's ``#ChipN Host Interface`` / ``#ChipN Misc`` plane: the chip's stats, no events."""
    side = _Plane(space.planes.add(), name, 0, [*DEVICE_STATS[:14], "_c", "_ct", "flow", "% util", "process_id"])
    side.stats(_chip_plane_stats(pid))
    side.event_id("ThreadpoolListener::Region")
    side.line(9223372036854775807, "_counters_")


def write_xplane(job: Job, host: int, path: Path) -> None:
    """The XPlane one host's ``jax.profiler`` would write: its 4 chips, the host, the Megascale plane."""
    m = messages()
    space = m["XSpace"]()
    space.hostnames.append(HOSTS[host])
    offset = CLOCK_OFFSET_NS[host]
    pid = PROCESS_ID[host]

    meta = _Plane(space.planes.add(), "/host:metadata", 0, ["Hlo Proto", "program_id"])
    meta.stats({
        "jax_version": s("0.10.2"),
        "tpu_version": s("PJRT C API\nTFRT TPU v5 lite\nBuilt on Jun 17 2026 11:08:48 (1781719728) cl/933746096"),
        "jaxlib_version": s("0.10.2"),
        "cpu_version": s("cpu"),
        "process_id": i64(pid),
    })  # fmt: skip
    meta.event_id(
        f"{MODULE}({PROGRAM_ID})",
        f"{MODULE}({PROGRAM_ID})",
        {"Hlo Proto": b(hlo_proto_bytes()), "program_id": u64(PROGRAM_ID)},
    )

    flow = 0
    first_chip = host * CHIPS
    for c in range(CHIPS):
        g = first_chip + c
        chip = job.chips[g]
        _side_plane(space, f"#Chip{c} Host Interface", pid)
        plane = _Plane(space.planes.add(), f"/device:TPU:{c}", 2 + c, DEVICE_STATS)
        plane.stats(_chip_plane_stats(pid))
        counters = plane.line(124, "_counters_")
        plane.event(counters, plane.event_id("VDD Core FW Throttle(%)"), chip.runs[0][0] + offset - 500_000, 0,
                    {"throttle %": f64(0.0)})  # fmt: skip
        steps_line = plane.line(1, "Steps")
        for k, (s0, e0) in enumerate(step_windows(job, g)):
            plane.event(steps_line, plane.event_id(str(k)), s0, e0 - s0,
                        {"device_offset_ps": u64(s0 * 1000), "device_duration_ps": u64((e0 - s0) * 1000)})  # fmt: skip
        modules = plane.line(2, "XLA Modules")
        for k, (r0, r1) in enumerate(chip.runs):
            plane.event(modules, plane.event_id(f"{MODULE}({PROGRAM_ID})"), r0 + offset, r1 - r0, {
                "device_offset_ps": u64((r0 + offset) * 1000), "device_duration_ps": u64((r1 - r0) * 1000),
                "run_id": u64(100 + k), "replica_id": i64(0), "queue_id": u64(0), "core_type": u64(0),
                "_ct": i64(12), "_c": i64(0x2D3F_0000_0000_0000 + 4096 * k + g),
            })  # fmt: skip
        ops_line = plane.line(3, "XLA Ops")
        symbols = {op.name: 100 + i for i, op in enumerate(RUN)}
        for ev in chip.events:
            op = ev.op
            mid = plane.event_id(expression(op), op.name, _op_metadata(op, symbols[op.name]))
            plane.event(ops_line, mid, ev.start + offset, ev.end - ev.start, {
                "device_offset_ps": u64((ev.start + offset) * 1000),
                "device_duration_ps": u64((ev.end - ev.start) * 1000),
                "Time Scale Multiplier": f64(1.0),
            })  # fmt: skip
        async_line = plane.line(4, "Async XLA Ops")
        opened: dict[str, Event] = {}
        for ev in chip.events:
            op = ev.op
            if op.role in ("start", "memcpy") and op.async_display:
                opened[op.pair] = ev
                continue
            if ev.op.name not in opened:
                continue
            first = opened.pop(ev.op.name)
            starter = first.op
            flow += 1
            mid = plane.event_id(
                expression(starter), starter.async_display, _op_metadata(starter, symbols[starter.name]), "async"
            )
            plane.event(async_line, mid, first.start + offset, ev.end - first.start, {
                "device_offset_ps": u64((first.start + offset) * 1000),
                "device_duration_ps": u64((ev.end - first.start) * 1000),
                "hlo_op": s(ev.op.name),
                "_a": i64(1),
                "flow": u64(flow << 2 | 3),
                "id": u64(int(starter.name.rsplit(".", 1)[1])),
            })  # fmt: skip
        plane.line(7, "TC Overlay")
        plane.line(9223372036854775807, "_counters_")
        _side_plane(space, f"#Chip{c} Misc", pid)

    _write_megascale(space, job, host)
    _write_host(space, job, host)
    task = _Plane(
        space.planes.add(), "Task Environment", 0, ["profile_start_time", "profile_stop_time", "profile_options"]
    )
    task.stats({
        "profile_start_time": u64(1_796_465_220_053_563_272 + offset),
        "profile_stop_time": u64(1_796_465_220_053_563_272 + offset + job.chips[first_chip].runs[-1][1] + 1_000_000),
        "profile_options": b(b"\x08\x01\x10\x02\x18\x01 \x01(\x018\x01"),
    })  # fmt: skip
    path.write_bytes(space.SerializeToString(deterministic=True))


def _write_megascale(space, job: Job, host: int) -> None:
    """The DCN all-reduce's action graph per chip and step (xprof's megascale_perfetto reads it)."""
    plane = _Plane(space.planes.add(), "/device:CUSTOM:Megascale Trace", 0, MEGASCALE_STATS)
    plane.stats({"graph_protos": b(b""), "process_id": i64(PROCESS_ID[host])})
    offset = CLOCK_OFFSET_NS[host]
    nbytes = SHARD * HIDDEN * 4
    for c in range(CHIPS):
        g = host * CHIPS + c
        peer = next(m for grp in DCN_GROUPS if g in grp for m in grp if m != g)
        me, other = megascale_id(g), megascale_id(peer)
        line = plane.line(1 + c, f"device_{me}")
        for k, (start, d2h_end, send_end, recv_end, h2d_end) in enumerate(job.chips[g].dcn):
            key = f"device_{me}_gid_{RENDEZVOUS}${k + 1}^i{k}"
            common = {"graph_key": s(key), "local_device_id": i64(me)}
            plane.event(line, plane.event_id(key), start + offset, h2d_end - start, {
                **common, "num_actions": i64(4), "collective_type": s("all-reduce"), "input_size": i64(nbytes),
                "hlo_module": s(MODULE), "launch_id": i64(k + 1), "loop_iteration": i64(k),
                "multi_slice_topology": s(f"{SLICES}x{CHIPS}"), "dcn_topology_level": s("DCN"),
                "send_channel_id": i64(47), "recv_channel_id": i64(48),
            })  # fmt: skip
            actions = [
                ("DeviceToHost", start, d2h_end, {"buffer_sizes": s(f"$c0={nbytes}")}),
                ("NetworkSend", d2h_end, send_end, {
                    "buffer_sizes": s(f"s{me}->{other}d$c0={nbytes}"),
                    "transfer_source": s(f"slice{host}:chip{c}"),
                    "transfer_destinations": s(f"slice{peer // CHIPS}:chip{peer % CHIPS}"),
                }),
                ("NetworkReceive", send_end, recv_end, {
                    "buffer_sizes": s(f"$c0={nbytes}"),
                    "network_transport_latency_us": u64(max(1, (recv_end - send_end) // 1000)),
                    "transfer_source": s(f"slice{peer // CHIPS}:chip{peer % CHIPS}"),
                    "transfer_destinations": s(f"slice{host}:chip{c}"),
                }),
                ("HostToDevice", recv_end, h2d_end, {"buffer_sizes": s(f"$c0={nbytes}")}),
            ]  # fmt: skip
            for index, (action, a0, a1, extra) in enumerate(actions):
                plane.event(line, plane.event_id(f"{action} START"), a0 + offset, 0, {
                    **common, "action_type": s(action), "start_end_type": s("START"), "action_index": i64(index),
                })  # fmt: skip
                plane.event(line, plane.event_id(f"{action} END"), a0 + offset, a1 - a0, {
                    **common, "action_type": s(action), "start_end_type": s("END"), "action_index": i64(index),
                    "action_duration_ns": i64(a1 - a0), **extra,
                })  # fmt: skip


def _write_host(space, job: Job, host: int) -> None:
    """Host threads: the Python loop and PjRt's execute calls (host activity, never device time)."""
    pid = PROCESS_ID[host]
    plane = _Plane(space.planes.add(), "/host:CPU", 0, ["process_id", "run_id", "name", "_c", "_ct"])
    plane.stats({"process_id": i64(pid)})
    offset = CLOCK_OFFSET_NS[host]
    runs = job.chips[host * CHIPS].runs
    python = plane.line(3953809312069811208, "python3")
    plane.event(python, plane.event_id("$profiler.py:307 trace"), runs[0][0] + offset - 2_000_000,
                runs[-1][1] - runs[0][0] + 3_000_000, {})  # fmt: skip
    main = plane.line(pid, f"main/{pid}")
    for k, (r0, _r1) in enumerate(runs):
        plane.event(main, plane.event_id("PJRT_LoadedExecutable_Execute"), r0 + offset - 90_000, 60_000,
                    {"_ct": i64(14), "_c": i64(8589934595 + k)})  # fmt: skip
        plane.event(main, plane.event_id(f"CommonPjRtLoadedExecutable::Execute ({MODULE.removeprefix('jit_')})"),
                    r0 + offset - 85_000, 50_000, {"run_id": i64(1102652764 + k)})  # fmt: skip


# ----------------------------------------------------------------------------- files
NAME = "synthetic_tpu_2slice"
TRUTH_NAME = f"{NAME}.truth.json"


def write_job(out: Path, change: str = "none", seed: int = 31, steps: int = STEPS) -> tuple[list[Path], Job]:
    """One XPlane per host into ``out`` (created) and the truth file beside them; the job simulated."""
    job = simulate(change, seed, steps)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for h in range(SLICES):
        p = out / f"{HOSTS[h]}.xplane.pb"
        write_xplane(job, h, p)
        paths.append(p)
    return paths, job


def write_samples(out: Path) -> list[Path]:
    """The committed sample: ``synthetic_tpu_2slice/`` and ``synthetic_tpu_2slice.truth.json``."""
    paths, job = write_job(out / NAME)
    t = out / TRUTH_NAME
    t.write_text(json.dumps(truth(job), indent=1) + "\n")
    return [*paths, t]
