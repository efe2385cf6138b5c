"""XPlane (``.xplane.pb``), what ``jax.profiler`` and ``jax.collect_profile`` write.

Device activity is read from the ``/device:GPU:N`` planes' stream lines
(``Stream #N(...)``) only; derived lines (``XLA Ops``, ``XLA Modules``,
``Steps``, ``TensorFlow Ops``...) re-describe those kernels and are read as
step/module markers, never as activity. Traces without GPU planes (CPU captures)
use each XLA CPU device's thunk executions instead.

jaxlib's ``ProfileData`` walks events natively and resolves stats (event and
metadata stats merged, references resolved); the HLO of each program and the
host name, which ``ProfileData`` does not expose, are read from the file's
``/host:metadata`` plane and ``XSpace.hostnames`` with a tiny wire-format walk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..core.events import make_table, set_strings
from ..core.hlo import HloModule, hlo_text_from_module_proto, parse_hlo_text
from ..core.trace import Job, Trace, make_markers
from ..core.vocabulary import vocabulary
from ..errors import InputError
from .base import Placement, ReadContext
from .discover import capture_stem
from .xspace_proto import WireError, length_delimited, messages, peek

_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
_STREAM_LINE = re.compile(r"^Stream #")
_MODULE_KEY = re.compile(r"^(.*)\((\d+)\)$")
HLO_STAT_NAMES = ("Hlo Proto", "hlo_proto")


@dataclass
class XSpaceHeader:
    hostnames: list[str]
    hlo: dict[tuple[str, int], HloModule]  # (module name, program id) -> module; program id -1 = any


def read_header(path: Path) -> XSpaceHeader:
    """Host names and the HLO of every program, reading field headers and the metadata plane only."""
    try:
        hostnames, _, metadata = peek(path, read_plane="/host:metadata")
        hlo = _read_hlo_plane(metadata) if metadata else {}
    except (WireError, IndexError) as exc:
        raise InputError(path, f"not a valid XPlane file ({exc or 'bad field header'}); is it truncated?") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    return XSpaceHeader(hostnames, hlo)


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
    """The events of one stream line (or one CPU device's thunks on one thread)."""

    device: str
    global_id: int
    stream: str
    names: list[str]
    starts: list[float]
    durs: list[float]
    stats: list[tuple[int, str, str, int]]  # (index in this chunk, hlo_module, hlo_op, program_id), sparse
    run_ids: list[int] | None = None


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


def _sparse_categorical(n: int, idx: np.ndarray, values: list[str]) -> pd.Categorical:
    """A string column that is "" except at ``idx``."""
    codes, uniques = pd.factorize(np.asarray(["", *values], dtype=object))
    full = np.zeros(n, dtype=codes.dtype)
    full[idx] = codes[1:]
    return pd.Categorical.from_codes(full, categories=pd.Index(uniques, dtype=object))


def _table_from_chunks(chunks: list[_Chunk], host: str, gpus_per_domain: int, activity: str | None) -> pd.DataFrame:
    counts = np.array([len(c.names) for c in chunks], dtype=np.int64)
    total = int(counts.sum())
    names = np.fromiter((n for c in chunks for n in c.names), dtype=object, count=total)
    name_codes, name_uniques = pd.factorize(names)
    starts = np.concatenate([np.asarray(c.starts, dtype=np.float64) for c in chunks]) if chunks else np.zeros(0)
    durs = np.concatenate([np.asarray(c.durs, dtype=np.float64) for c in chunks]) if chunks else np.zeros(0)
    # scatter the sparse XLA stats into full categorical columns ("" where not read)
    offsets = np.cumsum(counts) - counts
    rows = [(off + i, m, o, p) for off, c in zip(offsets.tolist(), chunks) for i, m, o, p in c.stats]
    program_ids = np.full(total, -1, dtype=np.int64)
    idx = np.asarray([r[0] for r in rows], dtype=np.int64)
    modules = _sparse_categorical(total, idx, [r[1] for r in rows])
    ops = _sparse_categorical(total, idx, [r[2] for r in rows])
    if rows:
        program_ids[idx] = [r[3] for r in rows]
    if activity is None:
        act, copy = vocabulary().activity_of(np.asarray(name_uniques, dtype=object))
        act, copy = act[name_codes], copy[name_codes]
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
            "start_ns": np.rint(starts).astype(np.int64),
            "end_ns": np.rint(starts + durs).astype(np.int64),
            "activity": act,
            "copy_kind": copy,
            "hlo_module": modules,
            "hlo_op": ops,
            "program_id": program_ids,
            "source": "xplane",
        },
        n=total,
    )
    if chunks and chunks[0].run_ids is not None:
        table["run_id"] = np.fromiter((r for c in chunks for r in c.run_ids), dtype=np.int64, count=total)
    return table


def read(path: Path, context: ReadContext) -> Trace:
    """Read one ``.xplane.pb``: device activity (raw columns), step/module markers and the HLO.

    The placement's ``host_index`` is this host's position among the job's hosts:
    GPU ``N`` of host ``h`` gets global id ``h * gpus + N`` (the ids HLO replica groups use).
    """
    options = context.options
    placement: Placement = context.placement
    host_index = placement.host_index
    # jax.profiler.ProfileData is this class; importing it from jaxlib skips importing all of jax (~0.5 s)
    try:
        from jaxlib._profile_data import ProfileData
    except ImportError:  # pragma: no cover - a jaxlib that moved it
        from jax.profiler import ProfileData

    if path.stat().st_size == 0:
        raise InputError(path, "empty file")
    header = read_header(path)
    try:
        profile = ProfileData.from_file(str(path))  # C++ reads the file: no copy of it in Python
    except Exception as exc:  # jaxlib raises bare RuntimeErrors on bad protos
        raise InputError(
            path, f"not a valid XPlane file: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    host = placement.host or (header.hostnames[0] if header.hostnames else capture_stem(path.name))
    first = placement.first_ordinal

    markers: list[tuple[str, str, str, float, float, int]] = []  # device, activity, name, start, end, step
    gpu_planes = []
    host_planes = []
    for plane in profile.planes:
        m = _GPU_PLANE.match(plane.name)
        if m:
            gpu_planes.append((int(m.group(1)), plane))
        elif plane.name.startswith("/host:CPU"):
            host_planes.append(plane)
    gpus = placement.devices_per_host or len(gpu_planes)
    reader = _StatReader(header.hlo, read_all=options.all_kernel_stats)
    line_names: set[str] = set()
    chunks: list[_Chunk] = []
    for ordinal, plane in gpu_planes:
        device = f"{host}/GPU:{first + ordinal}"
        gid = host_index * gpus + first + ordinal
        for line in plane.lines:
            lname = line.name
            line_names.add(lname)
            if _STREAM_LINE.match(lname):
                chunks.append(_Chunk(device, gid, lname, *reader.walk(line)))
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
    user_step = None
    if options.step_marker:
        try:
            user_step = re.compile(options.step_marker)
        except re.error as exc:
            raise InputError(None, f"--step-marker {options.step_marker!r}: bad regular expression: {exc}") from None
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
                is_thunk = not gpu_planes and "hlo_op" in sd and "device_ordinal" in sd
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
                    _Chunk(f"{host}/CPU:{ordinal}", int(ordinal), line.name, names, starts, durs, stats, runs)
                )
    del profile

    events = _table_from_chunks(chunks, host, gpus, activity=None if gpu_planes else "kernel")
    if not gpu_planes and len(events):
        run_ids = events.pop("run_id").to_numpy()
        events = _drop_nested(events)
        markers.extend(_cpu_module_runs(events, run_ids[events.index.to_numpy()]))
        events = events.reset_index(drop=True)
        n_local = int(events["global_id"].max()) + 1
        if host_index:
            # CPU device ordinals are local: make them global like GPU ordinals
            events["global_id"] = events["global_id"] + host_index * n_local
        events["gpus_per_domain"] = n_local
    attach_hlo(events, header.hlo)
    m = pd.DataFrame(markers, columns=["device", "kind", "name", "start_ns", "end_ns", "number"])
    marker_table = make_markers(
        host=host,
        device=m["device"].to_numpy(dtype=object),
        kind=m["kind"].to_numpy(dtype=object),
        name=m["name"].to_numpy(dtype=object),
        start_ns=np.rint(m["start_ns"].to_numpy(dtype=np.float64)).astype(np.int64),
        end_ns=np.rint(m["end_ns"].to_numpy(dtype=np.float64)).astype(np.int64),
        number=m["number"].to_numpy(dtype=np.int64),
    )
    if "TensorFlow Ops" in line_names:
        framework = "tensorflow"
    elif header.hlo or "XLA Modules" in line_names or not gpu_planes:
        framework = "jax"
    else:
        framework = "unknown"
    devices = {f"{host}/GPU:{first + o}": host_index * gpus + first + o for o, _ in gpu_planes}
    if not gpu_planes and len(events):
        pairs = events[["device", "global_id"]].drop_duplicates()
        devices = dict(zip(pairs["device"].astype(str), pairs["global_id"].astype(int), strict=True))
    return Trace(
        events=events,
        path=str(path),
        format="xplane",
        markers=marker_table,
        framework=framework,
        hlo=header.hlo,
        job=Job(hosts=tuple(header.hostnames)),
        devices=devices,
    )


def _by_first(rows: list[tuple]) -> dict:
    out: dict = {}
    for row in rows:
        out.setdefault(row[0], []).append(row)
    return out


def _step_number(name: str, stat: object) -> int:
    if isinstance(stat, (int, np.integer)):
        return int(stat)
    m = re.search(r"(\d+)\s*$", name or "")
    return int(m.group(1)) if m else -1


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
    return [(dev, "module", mod, s, e, -1) for (dev, _, mod), s, e in zip(runs.index, runs["start"], runs["end"])]


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
        if inst.is_collective:
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
