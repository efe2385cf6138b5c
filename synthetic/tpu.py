"""TPU-shaped traces: XPlanes laid out as ``jax.profiler`` writes them on a TPU, and the same ops as JAX's
``.trace.json.gz``, from ops placed at chosen integer-ns times.

Field by field as the real captures (``../shared/traces/tpu``, TPU v5e, JAX 0.10.2) hold them:

* one ``/device:TPU:N`` plane per chip, with the plane stats ``device_type_string``,
  ``peak_teraflops_per_second``, ``peak_hbm_bw_gigabytes_per_second``, and the lines ``_counters_``,
  ``Steps``, ``XLA Modules``, ``XLA Ops``, ``Async XLA Ops``, ``TC Overlay`` (empty), in that order;
* an op's event metadata is named by its whole HLO expression and carries ``hlo_category``, ``program_id``
  (a uint64), ``flops``, ``model_flops``, ``bytes_accessed`` and ``tf_op``; its events carry
  ``device_offset_ps`` and ``device_duration_ps`` (the device clock) and ``Time Scale Multiplier``, while
  the event's own ``offset_ps`` is the host-synced time, a few hundred ps off (:data:`HOST_SKEW_PS`), so a
  reader that takes ``offset_ps`` gets other nanoseconds than xprof;
* an ``Async XLA Ops`` event spans an async op from its ``-start`` op's start to its ``-done`` op's end, is
  named by the start op's expression and carries the done op in ``hlo_op``;
* ``Steps`` events are named "0", "1", ... and tile time: step N runs from the end of step N-1 to the end of
  module N (the first from module 0's start); ``XLA Modules`` events are named ``module(program id)``;
* a ``/host:CPU`` plane with a ``StepTraceAnnotation``-like ``train`` range per step (``step_num``), which a
  reader must not prefer to the chip's own Steps line, and a ``/device:CUSTOM:Megascale Trace`` plane
  (empty unless the job is multi-slice: then one ``NetworkSend END`` event per DCN collective, with the
  ``graph_key`` xprof's megascale tools read).

The trace JSON route writes what JAX writes beside the XPlane: per chip a process ``/device:TPU:N`` whose
``XLA Ops`` thread holds every op, named by its short name, the expression in ``args.long_name`` and the
figures as text (``"flops"`` left out, as JAX leaves it out); ``Steps`` and ``XLA Modules`` threads; no
``Async XLA Ops`` events.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from moeprof.readers.xspace_proto import messages

from .gpu import _PlaneBuilder

MODULE = "jit_step"
PROGRAM_ID = 15805627424561511384  # a uint64 past int64, as real TPU program ids are
HOST_SKEW_PS = 378  # the event's host-synced offset_ps minus its device_offset_ps
PLANE_STATS = {
    "device_type_string": "TPU v5 Lite",
    "peak_teraflops_per_second": 202.7,
    "peak_hbm_bw_gigabytes_per_second": 819.1576375296,
}


@dataclass(frozen=True)
class Op:
    """One op of a chip's ``XLA Ops`` line: its HLO expression, device-clock times in ns and its figures."""

    expression: str
    start: int
    dur: int
    category: str
    flops: int = 0
    model_flops: int = 0
    bytes_accessed: int = 0
    tf_op: str = ""

    @property
    def name(self) -> str:
        return self.expression.split(" = ", 1)[0].lstrip("%")


@dataclass(frozen=True)
class AsyncOp:
    """One event of the ``Async XLA Ops`` line: the -start op's expression, the -done op's name, the span."""

    start_op: Op
    done: str
    start: int
    end: int


@dataclass
class Chip:
    ordinal: int
    ops: list[Op] = field(default_factory=list)
    asyncs: list[AsyncOp] = field(default_factory=list)
    modules: list[tuple[int, int]] = field(default_factory=list)  # executions of MODULE: (start, end)

    def steps(self) -> list[tuple[int, int]]:
        """The Steps line: step N from the end of step N-1 (module 0's start for the first) to module N's end."""
        out = []
        for i, (start, end) in enumerate(self.modules):
            out.append((start if i == 0 else out[-1][1], end))
        return out


def _ps(ns: int) -> int:
    return ns * 1000


def write_xplane(
    path: Path,
    host: str,
    chips: list[Chip],
    megascale_graph_keys: tuple[str, ...] = (),
    program_id: int = PROGRAM_ID,
) -> None:
    """One host's XPlane (see the module docstring). ``megascale_graph_keys``: one DCN send per key on the
    Megascale Trace plane (a multi-slice job); empty: the plane is there with no events, as on one slice.
    ``program_id``: the compiled program's fingerprint its ops and module executions carry."""
    m = messages()
    space = m["XSpace"]()
    space.hostnames.append(host)
    for chip in chips:
        plane = _PlaneBuilder(space.planes.add(), f"/device:TPU:{chip.ordinal}", 100 + chip.ordinal)
        for key, value in PLANE_STATS.items():
            stat = plane.plane.stats.add(metadata_id=plane.stat_id(key))
            if isinstance(value, str):
                stat.str_value = value
            else:
                stat.double_value = value
        plane.plane.lines.add(id=124, name="_counters_", timestamp_ns=0)
        steps = plane.plane.lines.add(id=1, name="Steps", timestamp_ns=0)
        for i, (start, end) in enumerate(chip.steps()):
            _event(plane, steps, str(i), start, end - start, {})
        modules = plane.plane.lines.add(id=2, name="XLA Modules", timestamp_ns=0)
        for run, (start, end) in enumerate(chip.modules):
            _event(plane, modules, f"{MODULE}({program_id})", start, end - start, {"run_id": run})
        ops = plane.plane.lines.add(id=3, name="XLA Ops", timestamp_ns=0)
        for op in sorted(chip.ops, key=lambda o: o.start):
            _metadata(plane, op, program_id)
            _event(plane, ops, op.expression, op.start, op.dur, {"Time Scale Multiplier": 1.0})
        asyncs = plane.plane.lines.add(id=4, name="Async XLA Ops", timestamp_ns=0)
        for a in sorted(chip.asyncs, key=lambda a: a.start):
            _metadata(plane, a.start_op, program_id)
            _event(plane, asyncs, a.start_op.expression, a.start, a.end - a.start, {"hlo_op": a.done, "_a": 1})
        plane.plane.lines.add(id=7, name="TC Overlay", timestamp_ns=0)
    megascale = _PlaneBuilder(space.planes.add(), "/device:CUSTOM:Megascale Trace", 50)
    if megascale_graph_keys:
        line = megascale.plane.lines.add(id=1, name="MegaScale", timestamp_ns=0)
        for i, key in enumerate(megascale_graph_keys):
            _event(megascale, line, "NetworkSend END", 1_000 + i, 1, {"graph_key": key}, device_stats=False)
    cpu = _PlaneBuilder(space.planes.add(), "/host:CPU", 1)
    train = cpu.plane.lines.add(id=1, name="python3", timestamp_ns=0)
    first = chips[0]
    for i, (start, end) in enumerate(first.steps()):  # the host's annotation: earlier and longer than the chip's step
        _event(cpu, train, "train", start - 50_000, end - start + 60_000, {"step_num": i}, device_stats=False)
    path.write_bytes(space.SerializeToString())


def _metadata(plane: _PlaneBuilder, op: Op, program_id: int = PROGRAM_ID) -> None:
    """The op's figures on its event metadata, once (as XLA writes them)."""
    meta = plane.plane.event_metadata[plane.event_id(op.expression)]
    if meta.stats:
        return
    meta.display_name = op.name
    for key, value in (
        ("hlo_category", op.category),
        ("program_id", program_id),
        ("flops", op.flops),
        ("model_flops", op.model_flops),
        ("bytes_accessed", op.bytes_accessed),
        ("tf_op", op.tf_op),
    ):
        if value == "":
            continue
        stat = meta.stats.add(metadata_id=plane.stat_id(key))
        if isinstance(value, str):
            stat.str_value = value
        elif key == "program_id":
            stat.uint64_value = value
        else:
            stat.int64_value = int(value)


def _event(plane: _PlaneBuilder, line, name: str, start: int, dur: int, stats: dict, device_stats: bool = True) -> None:
    ev = line.events.add(metadata_id=plane.event_id(name), offset_ps=_ps(start), duration_ps=_ps(dur))
    if device_stats:
        ev.offset_ps = _ps(start) + HOST_SKEW_PS  # the host-synced time: not what xprof measures
        for key, value in (("device_offset_ps", _ps(start)), ("device_duration_ps", _ps(dur))):
            ev.stats.add(metadata_id=plane.stat_id(key), int64_value=value)
    for key, value in stats.items():
        stat = ev.stats.add(metadata_id=plane.stat_id(key))
        if isinstance(value, str):
            stat.str_value = value
        elif isinstance(value, float):
            stat.double_value = value
        else:
            stat.int64_value = int(value)


def write_trace_json(path: Path, chips: list[Chip]) -> None:
    """The same chips as JAX's ``.trace.json.gz`` (see the module docstring): µs floats, figures as text."""
    events: list[dict] = []
    for chip in chips:
        pid = 3 + chip.ordinal
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"/device:TPU:{chip.ordinal}"}})
        for tid, line in ((1, "Steps"), (2, "XLA Modules"), (3, "XLA Ops"), (4, "Async XLA Ops")):
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": line}})

        def x(tid: int, name: str, start: int, dur: int, args: dict, pid: int = pid) -> dict:
            times = {"device_offset_ps": str(_ps(start)), "device_duration_ps": str(_ps(dur))}
            ts = (_ps(start) + HOST_SKEW_PS) / 1e6
            return {
                "ph": "X",
                "pid": pid,
                "tid": tid,
                "ts": ts,
                "dur": dur / 1e3,
                "name": name,
                "args": {**times, **args},
            }

        for i, (start, end) in enumerate(chip.steps()):
            events.append(x(1, str(i), start, end - start, {}))
        for start, end in chip.modules:
            events.append(x(2, f"{MODULE}({PROGRAM_ID})", start, end - start, {}))
        for op in chip.ops:
            args = {
                "long_name": op.expression,
                "hlo_category": op.category,
                "model_flops": str(op.model_flops),
                "bytes_accessed": str(op.bytes_accessed),
            }
            if op.tf_op:
                args["tf_op"] = op.tf_op
            events.append(x(3, op.name, op.start, op.dur, args))
    doc = {"displayTimeUnit": "ns", "metadata": {"highres-ticks": True}, "traceEvents": events}
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
