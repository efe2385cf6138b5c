"""XPlane (``.xplane.pb``), what ``jax.profiler`` and ``jax.collect_profile`` write.

Device activity is read from the ``/device:GPU:N`` planes' stream lines
(``Stream #N(...)``) only; derived lines (``XLA Ops``, ``XLA Modules``,
``Steps``, ``TensorFlow Ops``...) re-describe those kernels and are read as
step/module markers, never as activity; without an ``XLA Modules`` line (raw GPU
captures), module executions come from launch evidence (:mod:`.xplane_launches`).
Traces without GPU planes (CPU captures) use each XLA CPU device's thunk executions instead.

The events are decoded by moeprof's own wire decoder (:mod:`.xplane_wire`: C kernels where they were built,
else numba or numpy), which reads only the lines and stats the analysis uses; jaxlib's ``ProfileData`` (events
walked natively, stats resolved) is the fallback for a file the decoder refuses. The HLO of each program and
the host name are read from the file's ``/host:metadata`` plane and ``XSpace.hostnames``.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError

from ..core.events import (
    categorical_of,
    first_rows,
    floats_to_ns,
    make_table,
    narrowest_int,
    numbered,
    set_strings,
)
from ..core.hlo import HloModule, hlo_text_from_module_proto, parse_hlo_text
from ..core.steps import step_marker_pattern
from ..core.trace import CPU, GPU, TPU, Job, Trace, make_markers, trailing_number
from ..core.vocabulary import searches, vocabulary
from ..errors import InputError, unforeseen_in
from ..options import LoadOptions
from ..workers import default_decode_threads
from .base import Placement, ReadContext, native_log
from .discovery import capture_stem
from .tpu_ops import (
    ASYNC,
    OPS,
    TPU_LINES,
    TPU_PLANE,
    TPU_STATS,
    ChipLines,
    OpEvents,
    device_times,
    step_markers,
    tpu_activity,
)
from .xplane_launches import host_evidence, jaxlib_launch_evidence, launch_bounds, launch_runs, sync_copies, sync_names
from .xspace_proto import WireError, length_delimited, messages, peek, plane_stats

if TYPE_CHECKING:
    from .xplane_wire import Line, Plane, StatColumn

_GPU_PLANE = re.compile(r"^/device:GPU:(\d{1,9})$")  # an ordinal of 10 digits or more is no GPU's
# the host-side action graph of DCN collectives between TPU slices (megascale); events there mean a multi-slice job
MEGASCALE_PLANE = "/device:CUSTOM:Megascale Trace"
_STREAM_LINE = re.compile(r"^Stream #")
_MODULE_KEY = re.compile(r"^(.*)\((\d+)\)$")
HLO_STAT_NAMES = ("Hlo Proto", "hlo_proto")


@dataclass
class XSpaceHeader:
    hostnames: list[str]
    hlo: dict[tuple[str, int], HloModule]  # (module name, program id) -> module; program id -1 = any
    plane_names: list[str] = field(default_factory=list)


def read_header(path: Path) -> XSpaceHeader:
    """Host names and the HLO of every program, reading field headers and the metadata plane only."""
    try:
        hostnames, plane_names, metadata = peek(path, read_plane="/host:metadata")
        hlo = _read_hlo_plane(metadata) if metadata else {}
    except (WireError, IndexError) as exc:
        raise InputError(path, f"not a valid XPlane file ({exc or 'bad field header'}); is it truncated?") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except DecodeError as exc:  # the protobuf runtime on the metadata plane
        raise InputError(path, f"the /host:metadata plane (HLO) is corrupt: {str(exc).splitlines()[0]}") from None
    return XSpaceHeader(hostnames, hlo, plane_names)


# string stats a device plane may name its GPU with, tried before a description from its numbers
_MODEL_STATS = ("device_name", "device_model", "device_type_string", "device_type")


def device_description(stats: dict[str, object]) -> str | None:
    """What a ``/device:GPU:N`` plane says its GPU is: a model name where a stat holds one, else a description
    from the numbers XLA and TensorFlow write (vendor, compute capability, SMs/CUs, memory, clock), e.g.
    "AMD gfx94x (304 CUs, 192 GiB, 2100 MHz)" (ROCm writes compute capability 9.4 for gfx94x: its
    last digit, the stepping, is not in the file). None where the plane has none of them."""
    for key in _MODEL_STATS:
        value = stats.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
    if not isinstance(major, int | float) or not isinstance(minor, int | float):
        return None
    vendor = stats.get("device_vendor")
    amd = isinstance(vendor, str) and vendor.strip().upper() == "AMD"
    parts = []
    cores, memory, clock = stats.get("core_count"), stats.get("memory_size"), stats.get("clock_rate")
    if isinstance(cores, int) and cores > 0:
        parts.append(f"{cores} {'CUs' if amd else 'SMs'}")
    if isinstance(memory, int) and memory > 0:
        parts.append(f"{round(memory / 2**30)} GiB")
    if isinstance(clock, int) and clock > 0:
        parts.append(f"{round(clock / 1000)} MHz")  # kHz in the file
    arch = f"AMD gfx{int(major)}{int(minor)}x" if amd else f"NVIDIA compute capability {int(major)}.{int(minor)}"
    return f"{arch} ({', '.join(parts)})" if parts else arch


# a TPU plane's own peaks (stat -> Trace.device_peaks key): the chip's, before any preset's
_PEAK_STATS = {"peak_teraflops_per_second": "tflops", "peak_hbm_bw_gigabytes_per_second": "hbm_gbps"}


def plane_peaks(stats: dict[str, object]) -> dict[str, float]:
    """The peaks a device plane states (positive finite numbers only), keyed as ``Trace.device_peaks``."""
    out = {}
    for stat, key in _PEAK_STATS.items():
        value = stats.get(stat)
        if isinstance(value, int | float) and not isinstance(value, bool) and 0 < float(value) < float("inf"):
            out[key] = float(value)
    return out


def device_models(
    path: Path, host: str, first: int, ordinals: list[int], decoded: dict[int, dict[str, object]] | None = None
) -> dict[str, str]:
    """Device -> what its plane says the GPU is (:func:`device_description`); {} where the planes do not say.
    ``decoded``: the planes' own stats by ordinal where the decoder already read them (else the file's
    plane headers are walked for them)."""
    if decoded is None:
        try:
            planes = plane_stats(path, lambda name: bool(_GPU_PLANE.match(name)))
        except (WireError, OSError, ValueError, struct.error):
            return {}  # the events were read: a plane whose stats do not decode only loses its model
        decoded = {int(_GPU_PLANE.match(name).group(1)): stats for name, stats in planes.items()}  # type: ignore[union-attr]
    out = {}
    for ordinal, stats in decoded.items():
        described = device_description(stats)
        if described and ordinal in ordinals:
            out[f"{host}/GPU:{first + ordinal}"] = described
    return out


def _read_hlo_plane(plane_bytes: bytes) -> dict[tuple[str, int], HloModule]:
    plane = messages()["XPlane"]()
    plane.ParseFromString(plane_bytes)
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    modules: dict[tuple[str, int], HloModule] = {}
    for key, meta in plane.event_metadata.items():
        for stat in meta.stats:
            if stat_names.get(stat.metadata_id) not in HLO_STAT_NAMES or not stat.bytes_value:
                continue
            # the stat holds an xla.HloProto; its field 1 is the HloModuleProto
            module_proto = length_delimited(stat.bytes_value, 1)
            text = hlo_text_from_module_proto(module_proto) if module_proto else None
            if text is None:
                continue
            module = parse_hlo_text(text)
            m = _MODULE_KEY.match(meta.name)
            program_id = int(m.group(2)) if m else int(key)
            name = m.group(1) if m else (meta.name or module.name)
            modules[(name, program_id)] = module
            modules.setdefault((name, -1), module)
    return modules


# copies and memsets matter per event only when XLA attributes them to an op (a collective done by copies)
_COPY_OR_SET = re.compile(r"(?i)^mem(cpy|set)")


@dataclass
class _Chunk:
    """The events of one stream line (or one CPU device's thunks on one thread), as arrays."""

    device: str
    global_id: int
    stream: str
    names: np.ndarray  # object; or int64 ids into the walk's name table (the wire route)
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64
    stat_index: np.ndarray  # rows (in this chunk) whose XLA stats were read, increasing
    modules: np.ndarray  # object, one per stat row
    ops: np.ndarray  # object
    program_ids: np.ndarray  # int64
    run_ids: np.ndarray | None = None
    correlation: np.ndarray | None = None  # int64 per event (-1: none): launches (§9 bounds, §5 steps)


def _chunk_from_lists(
    device: str,
    global_id: int,
    stream: str,
    names: list[str],
    starts: list[float],
    durs: list[float],
    stats: list[tuple[int, str, str, int]],
    run_ids: list[int] | None = None,
) -> _Chunk:
    """A chunk from the jaxlib walk (float ns, as ProfileData gives them; rounded as before)."""
    s = np.asarray(starts, dtype=np.float64)
    d = np.asarray(durs, dtype=np.float64)
    idx, mods, ops, pids = (list(x) for x in zip(*stats, strict=True)) if stats else ([], [], [], [])
    return _Chunk(
        device,
        global_id,
        stream,
        np.asarray(names, dtype=object),
        floats_to_ns(s),
        floats_to_ns(s + d),
        np.asarray(idx, dtype=np.int64),
        np.asarray(mods, dtype=object),
        np.asarray(ops, dtype=object),
        _stat_ints(pids),
        None if run_ids is None else _stat_ints(run_ids),
    )


def _stat_ints(values: list) -> np.ndarray:
    """Integer stats (program id, run id, device ordinal) as int64; a double, text or an integer past int64
    where one is expected (jaxlib hands stats over as they are typed in the file) is -1."""
    return np.array(
        [int(v) if isinstance(v, int | np.integer) and -(2**63) <= int(v) < 2**63 else -1 for v in values],
        dtype=np.int64,
    )


class _StatReader:
    """Reads each kernel's XLA stats (hlo_op, hlo_module, program_id).

    Reading stats is most of the cost of walking an XPlane from Python (jaxlib
    builds every stat of every event), so by default they are read on every
    event only for names that can be communication or copies, or whose first
    event's HLO op turns out to be a collective; a compute kernel's stats are
    read on its first event only. ``read_all`` reads them everywhere.
    """

    def __init__(self, hlo: dict[tuple[str, int], HloModule], read_all: bool) -> None:
        self.hlo = hlo
        self.read_all = read_all
        self.every_event: dict[str, bool] = {}
        self.comm_capable = vocabulary().comm_capable

    def _collective_op(self, module: str, program_id: int, op: str) -> bool:
        m = self.hlo.get((module, program_id)) or self.hlo.get((module, -1))
        inst = m.instructions.get(op) if m else None
        return bool(inst and inst.is_collective)

    def walk(self, line) -> tuple[list, list, list, list]:
        """Names, starts and durations of every event, and ``(index, module, op, program id)``
        for the events whose stats were read (sparse: appends are the cost of this loop)."""
        names, starts, durs, stats_rows = [], [], [], []
        every_event = self.every_event
        for i, ev in enumerate(line.events):
            name = ev.name
            names.append(name)
            starts.append(ev.start_ns)
            durs.append(ev.duration_ns)
            decided = every_event.get(name)
            if decided is False:
                continue
            mod = op = ""
            pid = -1
            for key, value in ev.stats:
                if key == "hlo_op":
                    op = value
                elif key == "hlo_module":
                    mod = value
                elif key == "program_id":
                    pid = value
            if op or mod:
                stats_rows.append((i, mod, op, pid))
            if decided is None:
                every_event[name] = (
                    self.read_all
                    or bool(self.comm_capable.search(name))
                    or (bool(op) and bool(_COPY_OR_SET.match(name)))
                    or self._collective_op(mod, pid, op)
                )
        return names, starts, durs, stats_rows


def _repeat_categorical(values: list[str], counts: np.ndarray) -> pd.Categorical:
    """One value per chunk, repeated over the chunk's rows, without a string per row."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    return pd.Categorical.from_codes(np.repeat(codes, counts), categories=pd.Index(uniques, dtype=object))


def _sparse_categorical(n: int, idx: np.ndarray, values: list[np.ndarray]) -> pd.Categorical:
    """A string column that is "" except at ``idx``."""
    codes, uniques = pd.factorize(np.concatenate([np.array([""], dtype=object), *values]))
    full: np.ndarray[Any, np.dtype[np.integer]] = np.zeros(n, dtype=narrowest_int(len(uniques)))
    full[idx] = codes[1:]
    return pd.Categorical.from_codes(full, categories=pd.Index(uniques, dtype=object))


def _table_from_chunks(
    chunks: list[_Chunk],
    host: str,
    gpus_per_domain: int,
    activity: str | None,
    name_table: np.ndarray | None = None,
    launch: Mapping[str, object] | None = None,
    columns: _StreamColumns | None = None,
) -> pd.DataFrame:
    """The event table of the stream chunks (``launch``: the §9 launch columns, made for this table; ``columns``:
    the chunks' names and times as whole columns, made for this table too)."""
    counts = np.array([len(c.names) for c in chunks], dtype=np.int64)
    total = int(counts.sum())
    if columns is not None and name_table is not None:
        name_codes, name_uniques = columns.name_codes, name_table[columns.name_used]
        starts, ends = columns.start_ns, columns.end_ns
    else:
        if name_table is not None:  # names as ids: factorized as ints, in the order the names appear
            ids = np.concatenate([c.names for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
            name_codes, used = numbered(ids, len(name_table))
            name_uniques = name_table[used]
        else:
            names = np.concatenate([c.names for c in chunks]) if chunks else np.zeros(0, dtype=object)
            name_codes, name_uniques = pd.factorize(names)
        starts = np.concatenate([c.start_ns for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
        ends = np.concatenate([c.end_ns for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
    # scatter the sparse XLA stats into full categorical columns ("" where not read)
    offsets = np.cumsum(counts) - counts
    idx = np.zeros(0, dtype=np.int64)
    if chunks:
        idx = np.concatenate([c.stat_index + off for c, off in zip(chunks, offsets.tolist(), strict=True)])
    program_ids = np.full(total, -1, dtype=np.int64)
    if len(idx):
        program_ids[idx] = np.concatenate([c.program_ids for c in chunks])
    modules = _sparse_categorical(total, idx, [c.modules for c in chunks])
    ops = _sparse_categorical(total, idx, [c.ops for c in chunks])
    act: pd.Categorical | str
    copy: pd.Categorical | str
    if activity is None:
        act_of, copy_of = vocabulary().activity_of(np.asarray(name_uniques, dtype=object))
        # the name codes number the names in order of first appearance (pd.factorize's), none missing
        in_order = not name_codes.size or int(name_codes.min()) >= 0
        act = categorical_of(name_codes, act_of, numbered=in_order)
        copy = categorical_of(name_codes, copy_of, numbered=in_order)
    else:
        act, copy = activity, ""
    table = make_table(
        {
            "host": host,
            "device": _repeat_categorical([c.device for c in chunks], counts),
            "global_id": np.repeat(np.array([c.global_id for c in chunks], dtype=np.int64), counts),
            "gpus_per_domain": gpus_per_domain,
            "stream": _repeat_categorical([c.stream for c in chunks], counts),
            "name": pd.Categorical.from_codes(name_codes, categories=pd.Index(name_uniques, dtype=object)),
            "start_ns": starts,
            "end_ns": ends,
            "activity": act,
            "copy_kind": copy,
            "hlo_module": modules,
            "hlo_op": ops,
            "program_id": program_ids,
            "source": "xplane",
            **(launch or {}),
        },
        n=total,
        owned=True,  # every array above was made here for this table: no consolidating copy of 1M rows
    )
    if chunks and chunks[0].run_ids is not None:
        table["run_id"] = np.concatenate([c.run_ids for c in chunks if c.run_ids is not None])
    return table


# the stats the reader uses: XLA's kernel attribution, step numbers, CPU thunks; launches and
# host executions of a module (steps without markers, spec §5)
WIRE_STATS = (
    "hlo_op",
    "hlo_module",
    "program_id",
    "step_num",
    "device_ordinal",
    "run_id",
    "correlation_id",
    "module_name",
)
# GPU planes: the kernels' XLA attribution and launches, the Steps line's numbers (no CPU thunk or host call is
# there: a stat decoded on each of 1M kernels and read by nothing costs its column)
GPU_STATS = ("hlo_op", "hlo_module", "program_id", "step_num", "correlation_id")
# host planes of GPU captures: step markers, and the launch evidence of steps without markers
HOST_STATS_WITH_GPUS = ("step_num", "correlation_id", "module_name", "memcpy_details")


@dataclass
class _Walk:
    """What a walk of the planes gives the table builder (either route)."""

    gpu_ordinals: list[int]  # the /device:GPU:N planes, in file order
    chunks: list[_Chunk]
    markers: list[dict[str, np.ndarray]]  # columns: device, kind, name, start_ns, end_ns, number
    line_names: set[str]
    name_table: np.ndarray | None = None  # the names chunks' int ids stand for (None: chunks hold names)
    # launch evidence for steps without markers (GPU planes without an XLA Modules line): host launch
    # calls (correlation_id, launch_ns) and the host's module executions (line, module, start_ns, end_ns)
    launches: pd.DataFrame | None = None
    executions: pd.DataFrame | None = None
    syncs: pd.DataFrame | None = None  # the host's calls that wait for the device (line, start_ns, end_ns, corr)
    # the GPU planes' own stats by ordinal (the wire route decodes them with the planes; None: read apart)
    gpu_stats: dict[int, dict[str, object]] | None = None
    # TPU chips (/device:TPU:N planes): their op lines and markers, and the planes' own stats by ordinal
    tpu: list[ChipLines] = field(default_factory=list)
    tpu_stats: dict[int, dict[str, object]] = field(default_factory=dict)
    multislice: bool = False  # the Megascale Trace plane holds events: DCN collectives between slices
    # the chunks' rows as whole columns, where the chunks are the stream lines' (None: the table concatenates them)
    columns: _StreamColumns | None = None


@dataclass
class _StreamColumns:
    """The stream chunks' names and times over all their rows, in chunk order, made once by the walk: the table
    takes them as they are (the chunks' own arrays are views of them), without a second concatenation."""

    name_codes: np.ndarray  # the names numbered in order of first appearance (as narrow as the categorical's codes)
    name_used: np.ndarray  # int64: the walk's name ids in that order
    start_ns: np.ndarray  # int64
    end_ns: np.ndarray  # int64


def _reader_route() -> str:
    """MOEPROF_XPLANE_READER=jaxlib reads with jaxlib's ProfileData (the fallback route), else the wire decoder."""
    return "jaxlib" if os.environ.get("MOEPROF_XPLANE_READER", "").lower() == "jaxlib" else "wire"


def _read_gzipped(path: Path, context: ReadContext) -> Trace:
    """A gzipped XPlane (``.xplane.pb.gz``: how captures are kept and shipped): inflated into a temporary
    folder under its own name (both decoders read a file; the input is never touched), read, removed."""
    import gzip
    import shutil
    import tempfile
    import zlib

    with tempfile.TemporaryDirectory(prefix="moeprof-xplane-") as folder:
        inflated = Path(folder) / path.name[: -len(".gz")]
        try:
            with gzip.open(path, "rb") as src, inflated.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(path, f"corrupt gzip data: {exc}") from None
        try:
            trace = read(inflated, context)
        except InputError as exc:  # said of the file the user named
            raise InputError(path, exc.problem) from None
    return trace.replace(path=str(path))


def read(path: Path, context: ReadContext) -> Trace:
    """Read one ``.xplane.pb`` (or a gzipped ``.xplane.pb.gz``): device activity (raw columns), step/module
    markers and the HLO.

    The placement's ``host_index`` is this host's position among the job's hosts:
    GPU ``N`` of host ``h`` gets global id ``h * gpus + N`` (the ids HLO replica groups use).
    The wire decoder (:mod:`.xplane_wire`) reads the file; jaxlib's ``ProfileData``
    reads it instead where the decoder refuses it (or when MOEPROF_XPLANE_READER=jaxlib).
    """
    if path.name.lower().endswith(".gz"):
        return _read_gzipped(path, context)
    options = context.options
    placement: Placement = context.placement
    host_index = placement.host_index
    if path.stat().st_size == 0:
        raise InputError(path, "empty file")
    with native_log(path):  # jaxlib's HLO printer logs to fd 2 on a broken module
        header = read_header(path)
    host = placement.host or (header.hostnames[0] if header.hostnames else capture_stem(path.name))
    first = placement.first_ordinal
    user_step = step_marker_pattern(options.step_marker)
    walk_args = (
        path,
        host,
        host_index,
        first,
        placement.devices_per_host,
        header.hlo,
        options.all_kernel_stats,
        user_step,
    )
    walk = None
    if _reader_route() == "wire":
        try:
            walk = _walk_wire(*walk_args, plane_names=header.plane_names, threads=decode_threads(options))
        except WireError:
            walk = None  # jaxlib may read what the decoder refuses; if not, it says why
    if walk is None:
        with native_log(path):  # jaxlib's C++ logs to fd 2 on what it cannot parse: one line, or nothing
            walk = _walk_jaxlib(*walk_args)
    if walk.tpu:
        return _tpu_trace(path, walk, header, host, placement, user_step, options.nvlink_domain_size)
    gpu_ordinals, chunks, line_names = walk.gpu_ordinals, walk.chunks, walk.line_names
    gpus = placement.devices_per_host or len(gpu_ordinals)
    gpu_planes = gpu_ordinals  # (the tail below only asks whether there are any, and their ordinals)

    host_syncs = None
    launch: dict[str, object] = {}
    if gpu_planes and any(len(c.start_ns) for c in chunks):
        # §9: each kernel's launching host call and thread, and the host's synchronizations
        launch["launch_ns"], launch["launch_thread"], host_syncs = launch_bounds(chunks, walk.launches, walk.syncs)
    events = _table_from_chunks(
        chunks, host, gpus, None if gpu_planes else "kernel", walk.name_table, launch, walk.columns
    )
    if not gpu_planes and len(events):
        run_ids = events.pop("run_id").to_numpy()
        events = _drop_nested(events)
        module_runs = _cpu_module_runs(events, run_ids[events.index.to_numpy()])
        events = events.reset_index(drop=True)
        n_local = int(events["global_id"].max()) + 1
        if host_index:
            # CPU device ordinals are local: make them global like GPU ordinals
            events["global_id"] = events["global_id"] + host_index * n_local
        events["gpus_per_domain"] = n_local
    attach_hlo(events, header.hlo)
    parts = walk.markers or [_marker_part([])]
    if not gpu_planes and len(events):
        parts = [*parts, _marker_part(module_runs)]
    if gpu_planes and "XLA Modules" not in line_names:
        parts = [*parts, _marker_part(launch_runs(chunks, walk.launches, walk.executions))]
    marker_table = make_markers(
        host=host,
        **{col: np.concatenate([part[col] for part in parts]) for col in ("device", "kind", "name")},
        **{
            col: np.concatenate([part[col] for part in parts]).astype(np.int64)
            for col in ("start_ns", "end_ns", "number")
        },
    )
    if "TensorFlow Ops" in line_names:
        framework = "tensorflow"
    elif header.hlo or "XLA Modules" in line_names or not gpu_planes:
        framework = "jax"
    else:
        framework = "unknown"
    devices = {f"{host}/GPU:{first + o}": host_index * gpus + first + o for o in gpu_ordinals}
    if not gpu_planes and len(events):
        pairs = events[["device", "global_id"]].drop_duplicates()
        devices = dict(zip(pairs["device"].astype(str), pairs["global_id"].astype(int), strict=True))
    trace = Trace(
        events=events,
        path=str(path),
        format="xplane",
        markers=marker_table,
        framework=framework,
        hlo=header.hlo,
        job=Job(hosts=tuple(header.hostnames)),
        devices=devices,
        device_models=device_models(path, host, first, list(gpu_ordinals), walk.gpu_stats) if gpu_planes else {},
        device_kinds=dict.fromkeys(devices, GPU if gpu_planes else CPU),  # no GPU plane: a CPU capture's devices
    )
    return trace if host_syncs is None else trace.replace(host_syncs=host_syncs)


def _tpu_trace(
    path: Path,
    walk: _Walk,
    header: XSpaceHeader,
    host: str,
    placement: Placement,
    user_step: re.Pattern | None,
    slice_size: int | None = None,
) -> Trace:
    """The trace of a file with TPU planes: its chips' ops (:mod:`.tpu_ops`), their Steps and XLA Modules.

    A chip's scale-up domain is its slice (ICI): ``slice_size`` (``--slice-size``) where given; else every chip
    the collectives name (their replica groups) when the capture shows no traffic between slices; where it
    does (the Megascale Trace plane holds events) the trace does not say how many chips a slice has, so the
    default is one host's chips and a warning asks for ``--slice-size``."""
    chips_here = placement.devices_per_host or len(walk.tpu)
    per_slice = slice_size or (chips_here if walk.multislice else None)
    events = tpu_activity(walk.tpu, host, per_slice, header.hlo, source="xplane")
    rows = [(chip.device, *m) for chip in walk.tpu for m in chip.markers]
    parts = [_marker_part([(d, kind, name, s, e, k) for d, kind, name, s, e, k in rows])]
    device_steps = any(kind == "step" for _, kind, *_ in rows)
    for part in walk.markers:  # host markers: a StepTraceAnnotation yields to the chips' own Steps line
        if device_steps:
            keep = np.array([bool(user_step and user_step.search(str(n))) for n in part["name"].tolist()], dtype=bool)
            part = {k: v[keep] for k, v in part.items()}
        parts.append(part)
    markers = make_markers(
        host=host,
        **{col: np.concatenate([part[col] for part in parts]) for col in ("device", "kind", "name")},
        **{
            col: np.concatenate([part[col] for part in parts]).astype(np.int64)
            for col in ("start_ns", "end_ns", "number")
        },
    )
    models, peaks = {}, {}
    for chip in walk.tpu:
        ordinal = int(chip.device.rsplit(":", 1)[1]) - placement.first_ordinal
        stats = walk.tpu_stats.get(ordinal, {})
        described = device_description(stats)
        if described:
            models[chip.device] = described
        if stated := plane_peaks(stats):
            peaks[chip.device] = stated
    warnings: tuple[str, ...] = ()
    if walk.multislice and not slice_size:
        warnings = (
            f"{path.name}: a multi-slice capture (its Megascale Trace plane holds DCN traffic) that does not say how "
            f"many chips a slice has: one host's {chips_here} chips are taken as a slice; give --slice-size N",
        )
    return Trace(
        events=events,
        path=str(path),
        format="xplane",
        markers=markers,
        framework="jax",
        hlo=header.hlo,
        job=Job(hosts=tuple(header.hostnames)),
        devices={chip.device: chip.global_id for chip in walk.tpu},
        device_models=models,
        device_kinds={chip.device: TPU for chip in walk.tpu},
        device_peaks=peaks,
        warnings=warnings,
    )


def _walk_jaxlib(
    path: Path,
    host: str,
    host_index: int,
    first: int,
    devices_per_host: int | None,
    hlo: dict[tuple[str, int], HloModule],
    read_all: bool,
    user_step: re.Pattern | None,
) -> _Walk:
    """Walk every event through jaxlib's ProfileData (a Python step per event)."""
    # jax.profiler.ProfileData is this class; importing it from jaxlib skips importing all of jax
    try:
        from jaxlib._profile_data import ProfileData
    except ImportError:  # pragma: no cover - a jaxlib that moved it
        from jax.profiler import ProfileData

    try:
        profile = ProfileData.from_file(str(path))  # C++ reads the file: no copy of it in Python
    except RuntimeError as exc:  # jaxlib's answer to a file that is no XSpace proto: its message says why
        said = str(exc).strip().splitlines()
        raise InputError(path, f"not a valid XPlane file{f': {said[0]}' if said else ''}") from None
    except Exception:  # anything else: the reader's own catch-all
        raise unforeseen_in(path, "not a valid XPlane file") from None
    markers: list[tuple[str, str, str, float, float, int]] = []  # device, activity, name, start, end, step
    gpu_planes = []
    host_planes = []
    tpu_planes = []
    multislice = False
    for plane in profile.planes:
        m = _GPU_PLANE.match(plane.name)
        if m:
            gpu_planes.append((int(m.group(1)), plane))
        elif TPU_PLANE.match(plane.name):
            tpu_planes.append(plane)
        elif plane.name == MEGASCALE_PLANE:
            multislice = any(True for line in plane.lines for _ in line.events)
        elif plane.name.startswith("/host:CPU"):
            host_planes.append(plane)
    chips = devices_per_host or len(tpu_planes)
    tpu = [_tpu_chip_jaxlib(path, plane, host, host_index, first, chips) for plane in tpu_planes]
    gpus = devices_per_host or len(gpu_planes)
    reader = _StatReader(hlo, read_all=read_all)
    line_names: set[str] = set()
    chunks: list[_Chunk] = []
    for ordinal, plane in gpu_planes:
        device = f"{host}/GPU:{first + ordinal}"
        gid = host_index * gpus + first + ordinal
        for line in plane.lines:
            lname = line.name
            line_names.add(lname)
            if _STREAM_LINE.match(lname):
                chunks.append(_chunk_from_lists(device, gid, lname, *reader.walk(line)))
            elif lname == "Steps":
                for ev in line.events:
                    step = _step_number(ev.name, dict(ev.stats).get("step_num"))
                    markers.append((device, "step", ev.name, ev.start_ns, ev.end_ns, step))
            elif lname == "XLA Modules":
                for ev in line.events:
                    markers.append((device, "module", ev.name, ev.start_ns, ev.end_ns, -1))
    # host events matter only as step markers (StepTraceAnnotation) and, in CPU captures, as thunks;
    # which names are which is decided on each name's first event, so other host events cost no stats
    host_names: dict[str, bool] = {}
    for plane in host_planes:
        for line in plane.lines:
            thunks: list[tuple] = []
            for ev in line.events:
                name = ev.name
                if host_names.get(name) is False:
                    continue
                stats = ev.stats
                sd = dict(stats) if stats else {}
                is_step = "step_num" in sd or bool(user_step and user_step.search(name))
                is_thunk = (
                    not gpu_planes
                    and not tpu_planes
                    and "hlo_op" in sd
                    and 0 <= _stat_ints([sd.get("device_ordinal")])[0] < 2**31
                )
                if name not in host_names:
                    host_names[name] = is_step or is_thunk
                if is_step:
                    markers.append(("", "step", name, ev.start_ns, ev.end_ns, _step_number(name, sd.get("step_num"))))
                elif is_thunk:
                    thunks.append(
                        (
                            sd["device_ordinal"],
                            name,
                            ev.start_ns,
                            ev.duration_ns,
                            sd.get("hlo_module", ""),
                            sd["hlo_op"],
                            sd.get("program_id", -1),
                            sd.get("run_id", -1),
                        )
                    )
            for ordinal, group in _by_first(thunks).items():
                names, starts, durs, mods, ops, pids, runs = (list(x) for x in zip(*(t[1:] for t in group)))
                stats = list(zip(range(len(names)), mods, ops, pids))
                chunks.append(
                    _chunk_from_lists(
                        f"{host}/CPU:{ordinal}", int(ordinal), line.name, names, starts, durs, stats, runs
                    )
                )
    launches = executions = None
    syncs = None
    if gpu_planes:  # launch bounds (§9) and, without an XLA Modules line, steps need launch evidence: a second pass
        launches, executions, syncs = jaxlib_launch_evidence(
            gpu_planes, host_planes, chunks, steps="XLA Modules" not in line_names
        )
    del profile
    frame = pd.DataFrame(markers, columns=["device", "kind", "name", "start_ns", "end_ns", "number"])
    part = {
        "device": frame["device"].to_numpy(dtype=object),
        "kind": frame["kind"].to_numpy(dtype=object),
        "name": frame["name"].to_numpy(dtype=object),
        "start_ns": floats_to_ns(frame["start_ns"].to_numpy(dtype=np.float64)),
        "end_ns": floats_to_ns(frame["end_ns"].to_numpy(dtype=np.float64)),
        "number": frame["number"].to_numpy(dtype=np.int64),
    }
    return _Walk(
        [o for o, _ in gpu_planes],
        chunks,
        [part],
        line_names,
        launches=launches,
        executions=executions,
        syncs=syncs,
        tpu=[chip for chip, _ in tpu],
        tpu_stats={_tpu_ordinal(p.name): own for p, (_, own) in zip(tpu_planes, tpu, strict=True)},
        multislice=multislice,
    )


def _tpu_chip_jaxlib(
    path: Path, plane, host: str, host_index: int, first: int, chips: int
) -> tuple[ChipLines, dict[str, object]]:
    """One TPU chip's op lines and markers through jaxlib's ProfileData (a Python step per event), and the
    plane's own stats. ProfileData gives an event its own stats only: the op's figures, which XLA writes
    on the event metadata, come from the plane's metadata map (protobuf parse of that plane)."""
    ordinal = _tpu_ordinal(plane.name)
    chip = ChipLines(f"{host}/TPU:{first + ordinal}", host_index * chips + first + ordinal)
    metadata = _tpu_metadata_stats(path, plane.name)
    for line in plane.lines:
        role = TPU_LINES.get(line.name)
        if role is None:
            continue
        names, starts, ends, offsets, durations, has, done = [], [], [], [], [], [], []
        for ev in line.events:
            stats = dict(ev.stats)
            names.append(ev.name)
            starts.append(ev.start_ns)
            ends.append(ev.start_ns + ev.duration_ns)
            off, dur = stats.get("device_offset_ps"), stats.get("device_duration_ps")
            ok = isinstance(off, int) and isinstance(dur, int) and 0 <= off < 2**63 and 0 <= dur < 2**63
            has.append(ok)
            offsets.append(off if ok else 0)
            durations.append(dur if ok else 0)
            hlo_op = stats.get("hlo_op")
            done.append(hlo_op if isinstance(hlo_op, str) else "")
        if not names:
            continue
        start, end = device_times(
            floats_to_ns(np.asarray(starts, dtype=np.float64)),
            floats_to_ns(np.asarray(ends, dtype=np.float64)),
            np.asarray(offsets, dtype=np.int64),
            np.asarray(durations, dtype=np.int64),
            np.asarray(has, dtype=bool),
        )
        name_array = np.asarray(names, dtype=object)
        if role not in (OPS, ASYNC):
            chip.markers.extend(
                step_markers(chip.device, "step" if line.name == "Steps" else "module", name_array, start, end)
            )
            continue
        codes, distinct = pd.factorize(name_array)
        meta = [metadata.get(str(n), {}) for n in distinct.tolist()]

        def per_event(stat: str, kind: str, meta: list[dict[str, object]] = meta, codes: np.ndarray = codes):
            values = [m.get(stat) for m in meta]
            if kind == "str":
                column = np.array([v if isinstance(v, str) else "" for v in values], dtype=object)
            elif kind == "bytes":
                column = np.array([v if isinstance(v, bytes) else b"" for v in values], dtype=object)
            elif kind == "int":  # a uint64 id as the int64 bit pattern the wire route reads
                ints = [v if type(v) is int and 0 <= v < 1 << 64 else -1 for v in values]
                column = np.array([v - (1 << 64) if v >= 1 << 63 else v for v in ints], dtype=np.int64)
            else:
                column = np.array(
                    [float(v) if isinstance(v, int | float) and not isinstance(v, bool) else np.nan for v in values],
                    dtype=np.float64,
                )
            return column[codes]

        events = OpEvents(
            chip.device,
            chip.global_id,
            name_array,
            start,
            end,
            category=per_event("hlo_category", "str"),
            program_id=per_event("program_id", "int"),
            flops=per_event("flops", "float"),
            model_flops=per_event("model_flops", "float"),
            bytes_accessed=per_event("bytes_accessed", "float"),
            memory_access=per_event("memory_access_breakdown", "bytes"),
            tf_op=per_event("tf_op", "str"),
            deduplicated=per_event("deduplicated_name", "str"),
            done=np.asarray(done, dtype=object) if role == ASYNC else None,
            line=line.name,
        )
        if role == OPS:
            chip.ops = events
        else:
            chip.asyncs = events
    own = {k: v for k, v in plane.stats if not isinstance(v, bytes)}
    return chip, own


def _tpu_metadata_stats(path: Path, plane_name: str) -> dict[str, dict[str, object]]:
    """A TPU plane's event metadata stats by event name (the op figures XLA keeps there)."""
    _, _, data = peek(path, read_plane=plane_name)
    if not data:
        return {}
    plane = messages()["XPlane"]()
    plane.ParseFromString(data)
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    wanted = set(TPU_STATS)
    out: dict[str, dict[str, object]] = {}
    for meta in plane.event_metadata.values():
        stats: dict[str, object] = {}
        for stat in meta.stats:
            name = stat_names.get(stat.metadata_id)
            if name not in wanted:
                continue
            field_name = stat.WhichOneof("value")
            if field_name == "ref_value":
                stats[name] = stat_names.get(stat.ref_value, "")
            elif field_name in ("str_value", "int64_value", "uint64_value", "double_value", "bytes_value"):
                stats[name] = getattr(stat, field_name)
        out.setdefault(meta.name, {}).update(stats)
    return out


def _by_first(rows: list[tuple]) -> dict:
    out: dict = {}
    for row in rows:
        out.setdefault(row[0], []).append(row)
    return out


def _step_number(name: str, stat: object) -> int:
    if isinstance(stat, (int, np.integer)) and -(2**63) <= int(stat) < 2**63:
        return int(stat)
    return trailing_number(name or "")


def _drop_nested(events: pd.DataFrame) -> pd.DataFrame:
    """Drop CPU thunks that run inside another thunk of the same thread (while/call bodies),
    so no time is counted twice."""
    ev = events.sort_values(["device", "stream", "start_ns", "end_ns"], ascending=[True, True, True, False])
    key = ev["device"].astype(str) + "\x00" + ev["stream"].astype(str)
    codes = pd.factorize(key)[0]
    ends = ev["end_ns"].to_numpy()
    # running max of ends inside each (device, thread) run, excluding the row itself
    reach = pd.Series(ends).groupby(codes).cummax().to_numpy()
    prev_reach = np.r_[-1, reach[:-1]]
    same = np.r_[False, codes[1:] == codes[:-1]]
    nested = same & (ends <= prev_reach)
    return ev[~nested]


def _cpu_module_runs(events: pd.DataFrame, run_ids: np.ndarray) -> list[tuple]:
    """One XLA module execution per (device, run id): the span of its thunks."""
    if not len(events):
        return []
    frame = pd.DataFrame(
        {
            "device": events["device"].to_numpy(),
            "run": run_ids,
            "module": events["hlo_module"].to_numpy(),
            "start": events["start_ns"].to_numpy(),
            "end": events["end_ns"].to_numpy(),
        }
    )
    frame = frame[frame["run"] >= 0]
    runs = frame.groupby(["device", "run", "module"], sort=False).agg(start=("start", "min"), end=("end", "max"))
    return [(dev, "module_run", mod, s, e, -1) for (dev, _, mod), s, e in zip(runs.index, runs["start"], runs["end"])]


def attach_hlo(events: pd.DataFrame, modules: dict[tuple[str, int], HloModule]) -> None:
    """Fill opcode, bytes and group from each kernel's HLO instruction (one lookup per distinct op)."""
    if not modules or not len(events):
        return
    keys = events[["hlo_module", "program_id", "hlo_op", "global_id"]]
    has_op = keys["hlo_op"].to_numpy(dtype=object) != ""
    if not has_op.any():
        return
    sub = keys[has_op]
    codes, uniques = pd.factorize(pd.MultiIndex.from_frame(sub))
    opcode = np.empty(len(uniques), dtype=object)
    nbytes = np.full(len(uniques), np.nan)
    group = np.empty(len(uniques), dtype=object)
    for i, (mod_name, pid, op, gid) in enumerate(uniques):
        module = modules.get((mod_name, int(pid))) or modules.get((mod_name, -1))
        inst = module.instructions.get(op) if module else None
        if inst is None:
            opcode[i], group[i] = "", ""
            continue
        opcode[i] = inst.opcode
        if inst.is_collective and module is not None:
            nbytes[i] = inst.bytes
            members = module.group_of(inst, int(gid))
            group[i] = ",".join(map(str, members)) if members else ""
        else:
            group[i] = ""
    idx = np.flatnonzero(has_op)
    for col, values in (("opcode", opcode), ("bytes", nbytes), ("group", group)):
        column = events[col].to_numpy(dtype=object if col != "bytes" else np.float64).copy()
        column[idx] = values[codes]
        if col == "bytes":
            events[col] = column
        else:
            set_strings(events, col, column)


def _marker_part(rows: list[tuple]) -> dict[str, np.ndarray]:
    """Marker columns from (device, kind, name, start, end, number) rows (few: module runs)."""
    m = pd.DataFrame(rows, columns=["device", "kind", "name", "start_ns", "end_ns", "number"])
    return {
        "device": m["device"].to_numpy(dtype=object),
        "kind": m["kind"].to_numpy(dtype=object),
        "name": m["name"].to_numpy(dtype=object),
        "start_ns": m["start_ns"].to_numpy(dtype=np.int64),
        "end_ns": m["end_ns"].to_numpy(dtype=np.int64),
        "number": m["number"].to_numpy(dtype=np.int64),
    }


# --------------------------------------------------------------------------------------------- the wire route


def decode_threads(options: LoadOptions) -> int:
    """Lines of a file the wire decoder decodes at once (``LoadOptions.decode_threads``; None: the cores
    this process may use, capped)."""
    if options.decode_threads is not None:
        return max(1, options.decode_threads)
    return default_decode_threads()


def _walk_wire(
    path: Path,
    host: str,
    host_index: int,
    first: int,
    devices_per_host: int | None,
    hlo: dict[tuple[str, int], HloModule],
    read_all: bool,
    user_step: re.Pattern | None,
    plane_names: list[str] | None = None,
    threads: int = 1,
) -> _Walk:
    """The same walk as :func:`_walk_jaxlib`, on the wire decoder's columns: nothing per event in Python.

    ``plane_names``: every plane of the file (from its field headers), to know before the host planes
    are decoded whether the file has GPU planes. ``threads``: lines decoded at once.

    Its choices match the jaxlib route's exactly: a kernel name's XLA stats are
    kept on every event only when the name (or the HLO op of its first event) can
    be communication or a copy, otherwise on its first event only; a host event
    name is a step marker or a CPU thunk as its first event says.
    """
    from .xplane_wire import read_xspace

    def gpu_plane(name: str) -> bool:
        return bool(_GPU_PLANE.match(name))

    def tpu_plane(name: str) -> bool:
        return bool(TPU_PLANE.match(name))

    def wanted_line(plane: str, line: str) -> bool:
        if tpu_plane(plane):
            return line in TPU_LINES
        return not gpu_plane(plane) or bool(_STREAM_LINE.match(line)) or line in ("Steps", "XLA Modules")

    def stats_of(plane: str) -> tuple[str, ...]:
        if tpu_plane(plane):
            return TPU_STATS
        if plane == MEGASCALE_PLANE:
            return ()
        if gpu_plane(plane):
            return GPU_STATS
        return HOST_STATS_WITH_GPUS if accelerator_trace else WIRE_STATS

    # with GPU or TPU planes, host lines matter for their step markers only (CPU thunks are read without them)
    accelerator_trace = any(gpu_plane(n) or tpu_plane(n) for n in plane_names or ())
    space = read_xspace(
        path,
        planes=lambda n: gpu_plane(n) or tpu_plane(n) or n == MEGASCALE_PLANE or n.startswith("/host:CPU"),
        stats=WIRE_STATS,
        lines=wanted_line,
        plane_stats=stats_of,
        threads=threads,
    )
    gpu_planes = [p for p in space.planes if gpu_plane(p.name)]
    tpu_planes = [p for p in space.planes if tpu_plane(p.name)]
    multislice = any(len(ln) for p in space.planes if p.name == MEGASCALE_PLANE for ln in p.lines)
    host_planes = [p for p in space.planes if p.name.startswith("/host:CPU")]
    ordinals = [int(_GPU_PLANE.match(p.name).group(1)) for p in gpu_planes]  # type: ignore[union-attr]
    gpus = devices_per_host or len(gpu_planes)
    line_names = {line.name for plane in gpu_planes for line in plane.lines}
    markers: list[dict[str, np.ndarray]] = []

    # GPU stream lines: one chunk each; the stat sampling is decided over all of them, in file order
    streams: list[tuple[str, int, str, _LineView]] = []
    registry: dict[str, int] = {}  # one id per distinct event name over the planes
    for ordinal, plane in zip(ordinals, gpu_planes, strict=True):
        device = f"{host}/GPU:{first + ordinal}"
        gid = host_index * gpus + first + ordinal
        labels = _Labels(plane.event_names, registry)
        for line in plane.lines:
            if _STREAM_LINE.match(line.name):
                streams.append((device, gid, line.name, _LineView(plane, line, labels)))
            elif line.name in ("Steps", "XLA Modules") and len(line):
                view = _LineView(plane, line, labels)
                steps_line = line.name == "Steps"
                markers.append(
                    {
                        "device": np.full(len(line), device, dtype=object),
                        "kind": np.full(len(line), "step" if steps_line else "module", dtype=object),
                        "name": view.names,
                        "start_ns": line.start_ns,
                        "end_ns": line.end_ns,
                        "number": view.step_numbers() if steps_line else np.full(len(line), -1, dtype=np.int64),
                    }
                )
    chunks, columns = _stream_chunks(streams, hlo, read_all, np.array(list(registry), dtype=object))
    # launch evidence: the §9 launch bounds, and steps without an XLA Modules line (§5)
    want_launches = bool(gpu_planes)

    # host lines: step markers (StepTraceAnnotation or --step-marker), and the thunks of CPU captures
    host_lines = [
        _LineView(plane, line, _Labels(plane.event_names, registry)) for plane in host_planes for line in plane.lines
    ]
    host_lines = [v for v in host_lines if len(v.ids)]  # a host line without events (a thread that ran nothing)
    launches = executions = syncs = None
    if host_lines:
        names = np.concatenate([v.ids for v in host_lines])
        if want_launches:
            table = np.array(list(registry), dtype=object)
            # calls that wait for the device: by name (once per distinct name) or a synchronous copy
            is_sync = sync_names(table)[names] | np.concatenate([v.sync_copies() for v in host_lines])
            by_launch = "XLA Modules" not in line_names  # steps from launches need the module executions
            launches, executions, syncs = host_evidence(
                np.repeat(np.arange(len(host_lines)), [len(v.ids) for v in host_lines]),
                np.concatenate([v.line.start_ns for v in host_lines]),
                np.concatenate([v.line.end_ns for v in host_lines]),
                np.concatenate([v.integers("correlation_id") for v in host_lines]),
                is_sync,
                table[names] if by_launch else None,
                np.concatenate([v.strings("module_name")[0] for v in host_lines]) if by_launch else None,
            )
        is_step: np.ndarray = np.concatenate([v.present("step_num") for v in host_lines])
        if user_step is not None:
            is_step |= np.concatenate([v.labels.matches(user_step, v.codes) for v in host_lines])
        is_thunk = np.zeros(len(names), dtype=bool)
        if not gpu_planes and not tpu_planes:
            is_thunk = np.concatenate([v.present("hlo_op") & v.present("device_ordinal") for v in host_lines])
        # a name's first event decides whether its later events are looked at
        processed = _first_decides(names, is_step | is_thunk)
        offset = 0
        for view in host_lines:
            n = len(view.ids)
            sl = slice(offset, offset + n)
            offset += n
            steps = np.flatnonzero(processed[sl] & is_step[sl])
            if len(steps):
                markers.append(
                    {
                        "device": np.full(len(steps), "", dtype=object),
                        "kind": np.full(len(steps), "step", dtype=object),
                        "name": view.names[steps],
                        "start_ns": view.line.start_ns[steps],
                        "end_ns": view.line.end_ns[steps],
                        "number": view.step_numbers()[steps],
                    }
                )
            thunks = np.flatnonzero(processed[sl] & ~is_step[sl] & is_thunk[sl])
            if len(thunks):
                chunks.extend(_thunk_chunks(host, view, thunks))
    if want_launches and launches is not None and not launches.empty:
        # the kernels' correlation ids matter only where a host call launched something (launch_bounds and
        # launch_runs read none without launches): no column of every kernel's otherwise
        for chunk, (*_, view) in zip(chunks[: len(streams)], streams, strict=True):
            chunk.correlation = view.integers("correlation_id")
    return _Walk(
        ordinals,
        chunks,
        markers,
        line_names,
        np.array(list(registry), dtype=object),
        launches,
        executions,
        syncs,
        {o: p.own_stats for o, p in zip(ordinals, gpu_planes, strict=True)},
        tpu=[_tpu_chip_wire(p, host, host_index, first, devices_per_host or len(tpu_planes)) for p in tpu_planes],
        tpu_stats={_tpu_ordinal(p.name): p.own_stats for p in tpu_planes},
        multislice=multislice,
        columns=columns if len(chunks) == len(streams) else None,  # CPU thunks appended: the table concatenates
    )


def _tpu_ordinal(plane_name: str) -> int:
    return int(TPU_PLANE.match(plane_name).group(1))  # type: ignore[union-attr]


def _tpu_chip_wire(plane: Plane, host: str, host_index: int, first: int, chips: int) -> ChipLines:
    """One TPU chip's op lines and markers, from the wire decoder's columns (no Python step per event)."""
    ordinal = _tpu_ordinal(plane.name)
    chip = ChipLines(f"{host}/TPU:{first + ordinal}", host_index * chips + first + ordinal)
    labels = np.array([*plane.event_names, ""], dtype=object)
    for line in plane.lines:
        role = TPU_LINES.get(line.name)
        if role is None or not len(line):
            continue
        offset, has_offset = line.stats["device_offset_ps"].integers(0)
        duration, has_duration = line.stats["device_duration_ps"].integers(0)
        start, end = device_times(line.start_ns, line.end_ns, offset, duration, has_offset & has_duration)
        names = labels[plane.name_index(line)]
        if role not in (OPS, ASYNC):
            kind = "step" if line.name == "Steps" else "module"
            chip.markers.extend(step_markers(chip.device, kind, names, start, end))
            continue
        events = OpEvents(
            chip.device,
            chip.global_id,
            names,
            start,
            end,
            category=_wire_strings(line.stats["hlo_category"]),
            program_id=line.stats["program_id"].integers(-1)[0],
            flops=_wire_numbers(line.stats["flops"]),
            model_flops=_wire_numbers(line.stats["model_flops"]),
            bytes_accessed=_wire_numbers(line.stats["bytes_accessed"]),
            memory_access=_wire_bytes(line.stats["memory_access_breakdown"]),
            tf_op=_wire_strings(line.stats["tf_op"]),
            deduplicated=_wire_strings(line.stats["deduplicated_name"]),
            done=_wire_strings(line.stats["hlo_op"]) if role == ASYNC else None,
            line=line.name,
        )
        if role == OPS:
            chip.ops = events
        else:
            chip.asyncs = events
    return chip


def _wire_strings(column: StatColumn) -> np.ndarray:
    """A string stat as an object array ("" where absent or not a string)."""
    codes, categories = column.string_codes()
    values = [c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in categories]
    return np.array([*values, ""], dtype=object)[codes]


def _wire_bytes(column: StatColumn) -> np.ndarray:
    """A bytes stat as an object array of bytes (b"" where absent or not bytes)."""
    codes, categories = column.string_codes()
    values = [c if isinstance(c, bytes) else b"" for c in categories]
    return np.array([*values, b""], dtype=object)[codes]


def _wire_numbers(column: StatColumn) -> np.ndarray:
    """A numeric stat as float64 (integers and doubles alike; NaN where absent or text)."""
    from .xplane_wire import STAT_DOUBLE

    ints, is_int = column.integers(0)
    out = np.where(is_int, ints.astype(np.float64), np.nan)
    if column.doubles is not None:
        out = np.where(column.kind == STAT_DOUBLE, column.doubles, out)
    return out


class _Labels:
    """A plane's event names, indexable by the decoder's name index (-1, an unknown id, reads ""), and
    their ids in ``registry`` (one id per distinct name over the file's planes; new names are added)."""

    def __init__(self, names: tuple[str, ...], registry: dict[str, int]) -> None:
        self.values = np.array([*names, ""], dtype=object)
        self.ids = np.array([registry.setdefault(n, len(registry)) for n in (*names, "")], dtype=np.int64)

    def matches(self, pattern: re.Pattern, codes: np.ndarray) -> np.ndarray:
        """Whether each coded name matches (the names a line uses are looked at once each)."""
        used, inverse = np.unique(codes, return_inverse=True)
        found = np.array([bool(pattern.search(v)) for v in self.values[used].tolist()], dtype=bool)
        return found[inverse.ravel()]

    def trailing_numbers(self, codes: np.ndarray) -> np.ndarray:
        """The number that ends each coded name (-1 if none)."""
        used, inverse = np.unique(codes, return_inverse=True)
        numbers = np.array([_step_number(v, None) for v in self.values[used].tolist()], dtype=np.int64)
        return numbers[inverse.ravel()]


class _LineView:
    """One decoded line with the helpers the walk needs (per distinct value, never per event)."""

    def __init__(self, plane: Plane, line: Line, labels: _Labels) -> None:
        self.plane = plane
        self.line = line
        self.labels = labels
        self.codes = plane.name_index(line)  # -1 -> the trailing ""

    @cached_property
    def ids(self) -> np.ndarray:
        """Each event's name id (int64; a stream line's are written into the walk's one column instead)."""
        return self.labels.ids[self.codes]

    @property
    def names(self) -> np.ndarray:
        return self.labels.values[self.codes]

    def present(self, stat: str) -> np.ndarray:
        return self.line.stats[stat].present

    def strings(self, stat: str) -> tuple[np.ndarray, np.ndarray]:
        """(values as an object array, "" where absent or not a string; mask of non-empty values)."""
        codes, values, nonempty = self.string_codes(stat)
        return values[codes], nonempty[codes]

    def string_codes(self, stat: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(codes into the values, -1 where absent or not a string; the distinct values as an object array with
        "" last, which -1 reads; whether each value is non-empty)."""
        codes, categories = self.line.stats[stat].string_codes()
        cats = [c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in categories]
        return codes, np.array([*cats, ""], dtype=object), np.array([bool(c) for c in cats] + [False], dtype=bool)

    def integers(self, stat: str) -> np.ndarray:
        return self.line.stats[stat].integers(-1)[0]

    def sync_copies(self) -> np.ndarray:
        """Events whose ``memcpy_details`` say a synchronous copy (decided per distinct value)."""
        codes, categories = self.line.stats["memcpy_details"].string_codes()
        cats = [c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in categories]
        return np.append(sync_copies(np.array(cats, dtype=object)), False)[codes]

    def step_numbers(self) -> np.ndarray:
        """A step marker's number: its integer step_num stat, else the digits that end its name, else -1."""
        values, is_int = self.line.stats["step_num"].integers(-1)
        if is_int.all():
            return values
        return np.where(is_int, values, self.labels.trailing_numbers(self.codes))


def _first_decides(names: np.ndarray, decision: np.ndarray) -> np.ndarray:
    """Events that are looked at: the first event of each name, and every event of a name it accepted."""
    if not len(names):
        return np.zeros(0, dtype=bool)
    codes, _ = pd.factorize(names)
    order = np.argsort(codes, kind="stable")
    starts = np.r_[0, np.flatnonzero(np.diff(codes[order])) + 1]
    first = order[starts]  # the first event of each name (codes count names in order of appearance)
    is_first = np.zeros(len(names), dtype=bool)
    is_first[first] = True
    return is_first | decision[first][codes]


def _stream_chunks(
    streams: list[tuple[str, int, str, _LineView]],
    hlo: dict[tuple[str, int], HloModule],
    read_all: bool,
    name_table: np.ndarray,
) -> tuple[list[_Chunk], _StreamColumns | None]:
    """Kernel chunks with the XLA stats sampled as :class:`_StatReader` samples them (names as ids into
    ``name_table``), and their names and times as whole columns (the chunks' arrays are views of them).

    Only the names and times are looked at on every row; the stats are read on the rows that carry an op or a
    module (none on most lines) and on each name's first row."""
    if not streams:
        return [], None
    views = [v for *_, v in streams]
    counts = [len(v.codes) for v in views]
    total = sum(counts)
    offsets = np.cumsum([0, *counts])
    ids = np.empty(total, dtype=np.int64)
    starts = np.empty(total, dtype=np.int64)
    ends = np.empty(total, dtype=np.int64)
    for v, a, b in zip(views, offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
        ids[a:b] = v.labels.ids[v.codes]
        starts[a:b] = v.line.start_ns
        ends[a:b] = v.line.end_ns
    codes, used = numbered(ids, len(name_table))
    uniques = name_table[used]
    first = first_rows(codes)  # the first event of each name (codes count names in order of appearance)
    # each line's ops and modules (as codes into its distinct values, "" last) and the rows that carry either
    stats = [_LineStats(v) for v in views]
    # the stats of each name's first event, in name order
    line_of = np.searchsorted(offsets, first, side="right") - 1
    first_op = np.empty(len(first), dtype=object)
    first_mod = np.empty(len(first), dtype=object)
    first_pid = np.empty(len(first), dtype=np.int64)
    for i in np.unique(line_of).tolist():
        at = np.flatnonzero(line_of == i)
        rows = first[at] - offsets[i]
        first_mod[at], first_op[at], first_pid[at] = stats[i].at(rows)
    # the decision per distinct name, from its first event (as _StatReader.walk decides it)
    decider = _StatReader(hlo, read_all)
    names = uniques.tolist()
    capable = [True] * len(names) if read_all else searches(decider.comm_capable, names)
    every = np.array(
        [
            can or (bool(op) and bool(_COPY_OR_SET.match(name))) or decider._collective_op(mod, int(pid), op)
            for can, name, op, mod, pid in zip(
                capable, names, first_op.tolist(), first_mod.tolist(), first_pid.tolist(), strict=True
            )
        ],
        dtype=bool,
    )
    is_first = np.zeros(total, dtype=bool)
    is_first[first] = True
    name_codes = codes.astype(narrowest_int(len(used)))  # the categorical's own width: no copy later
    del codes
    chunks = []
    bounds = zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    for (device, gid, stream, _), line, (a, b) in zip(streams, stats, bounds, strict=True):
        # a row's stats are recorded where it carries an op or a module, on every event of a name that decided so
        # and on each name's first event
        rows = line.carried
        rows = rows[every[name_codes[rows + a]] | is_first[rows + a]]
        mods, ops, pids = line.at(rows)
        chunks.append(_Chunk(device, gid, stream, ids[a:b], starts[a:b], ends[a:b], rows, mods, ops, pids))
    return chunks, _StreamColumns(name_codes, used, starts, ends)


class _LineStats:
    """A stream line's ``hlo_op``, ``hlo_module`` and ``program_id`` stats, read at chosen rows only."""

    def __init__(self, view: _LineView) -> None:
        self.op = view.line.stats["hlo_op"]
        self.mod = view.line.stats["hlo_module"]
        self.pid = view.line.stats["program_id"]
        self.op_values, self.op_set = _string_values(self.op)
        self.mod_values, self.mod_set = _string_values(self.mod)
        # the rows that carry an op or a module: the only ones whose stats can be recorded (none where neither
        # stat is on the line, as on most lines)
        self.carried = np.zeros(0, dtype=np.intp)
        if self.op.codes is not None or self.mod.codes is not None:
            has = np.zeros(len(view.codes), dtype=bool)
            if self.op.codes is not None:
                has |= self.op_set[self.op.codes]
            if self.mod.codes is not None:
                has |= self.mod_set[self.mod.codes]
            self.carried = np.flatnonzero(has)

    def at(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(modules, ops, program ids) at ``rows``: "" where absent or not a string, -1 where not an integer
        (jaxlib's route takes the stat whatever its type; integers are what XLA writes)."""
        mods = self.mod_values[self.mod.codes[rows]] if self.mod.codes is not None else _blank(len(rows))
        ops = self.op_values[self.op.codes[rows]] if self.op.codes is not None else _blank(len(rows))
        from .xplane_wire import STAT_INT64, STAT_UINT64

        if self.pid.ints is None:
            pids = np.full(len(rows), -1, dtype=np.int64)
        else:
            kind = self.pid.kind[rows]
            pids = np.where((kind == STAT_INT64) | (kind == STAT_UINT64), self.pid.ints[rows], -1)
        return mods, ops, pids


def _string_values(column: StatColumn) -> tuple[np.ndarray, np.ndarray]:
    """(a string stat's distinct values as an object array with "" last, which code -1 reads; whether each value
    is non-empty)."""
    categories = column.categories if column.codes is not None else ()
    cats = [c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in categories]
    return np.array([*cats, ""], dtype=object), np.array([bool(c) for c in cats] + [False], dtype=bool)


def _blank(n: int) -> np.ndarray:
    return np.full(n, "", dtype=object)


def _thunk_chunks(host: str, view: _LineView, thunks: np.ndarray) -> list[_Chunk]:
    """A CPU capture line's thunk executions, one chunk per XLA CPU device in order of appearance."""
    ordinals = view.integers("device_ordinal")[thunks]
    ops, _ = view.strings("hlo_op")
    mods, _ = view.strings("hlo_module")
    pids = view.integers("program_id")
    runs = view.integers("run_id")
    distinct, first = np.unique(ordinals, return_index=True)
    chunks = []
    for ordinal in distinct[np.argsort(first)].tolist():
        rows = thunks[ordinals == ordinal]
        chunks.append(
            _Chunk(
                f"{host}/CPU:{ordinal}",
                int(ordinal),
                view.line.name,
                view.ids[rows],
                view.line.start_ns[rows],
                view.line.end_ns[rows],
                np.arange(len(rows), dtype=np.int64),
                mods[rows],
                ops[rows],
                pids[rows],
                runs[rows],
            )
        )
    return chunks
