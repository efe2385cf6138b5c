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

from ..errors import InputError
from ..events import make_table
from ..hlo import HloModule, hlo_text_from_module_proto, parse_hlo_text
from ..options import LoadOptions
from .xspace_proto import WireError, iter_fields, length_delimited, messages

_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
_STREAM_LINE = re.compile(r"^Stream #")
_MODULE_KEY = re.compile(r"^(.*)\((\d+)\)$")
_COPY_KINDS = {
    "h2d": "HtoD",
    "htod": "HtoD",
    "d2h": "DtoH",
    "dtoh": "DtoH",
    "d2d": "DtoD",
    "dtod": "DtoD",
    "p2p": "PtoP",
    "ptop": "PtoP",
    "peer": "PtoP",
    "h2h": "HtoH",
    "htoh": "HtoH",
}
_COPY_NAME = re.compile(r"(?i)^memcpy\s*(h2d|htod|d2h|dtoh|d2d|dtod|p2p|ptop|peer|h2h|htoh)")
_MEMSET_NAME = re.compile(r"(?i)^memset")
HLO_STAT_NAMES = ("Hlo Proto", "hlo_proto")


@dataclass
class XSpaceHeader:
    hostnames: list[str]
    hlo: dict[tuple[str, int], HloModule]  # (module name, program id) -> module; program id -1 = any


def read_header(data: bytes, path: Path) -> XSpaceHeader:
    """Host names and the HLO of every program, without touching the event lines."""
    hostnames: list[str] = []
    hlo: dict[tuple[str, int], HloModule] = {}
    try:
        for number, wire, start, end in iter_fields(data):
            if number == 4 and wire == 2:
                hostnames.append(bytes(data[start:end]).decode("utf-8", "replace"))
            elif number == 1 and wire == 2:
                name = length_delimited(memoryview(data)[start:end], 2)
                if name == b"/host:metadata":
                    hlo.update(_read_hlo_plane(bytes(data[start:end])))
            elif wire != 2 and number in (1, 4):
                raise WireError("unexpected wire type")
    except WireError as exc:
        raise InputError(path, f"not a valid XPlane file ({exc}); is it truncated?") from None
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


class _Columns:
    """Growing column lists for one trace (appends are the cheap part of the walk)."""

    def __init__(self) -> None:
        self.cols: dict[str, list] = {
            k: []
            for k in (
                "device",
                "global_id",
                "stream",
                "name",
                "start_ns",
                "end_ns",
                "activity",
                "copy_kind",
                "hlo_module",
                "hlo_op",
                "program_id",
                "run_id",
            )
        }

    def extend_line(
        self,
        device: str,
        gid: int,
        stream: str,
        names: list[str],
        starts: list[float],
        durs: list[float],
        hlo_modules: list[str],
        hlo_ops: list[str],
        program_ids: list[int],
        run_ids: list[int] | None = None,
        activity: str | None = None,
    ) -> None:
        n = len(names)
        c = self.cols
        c["device"].extend([device] * n)
        c["global_id"].extend([gid] * n)
        c["stream"].extend([stream] * n)
        c["name"].extend(names)
        c["start_ns"].extend(starts)
        c["end_ns"].extend(np.add(starts, durs).tolist() if n else [])
        c["hlo_module"].extend(hlo_modules)
        c["hlo_op"].extend(hlo_ops)
        c["program_id"].extend(program_ids)
        c["run_id"].extend(run_ids if run_ids is not None else [-1] * n)
        if activity is not None:
            c["activity"].extend([activity] * n)
            c["copy_kind"].extend([""] * n)
        else:
            for name in names:
                m = _COPY_NAME.match(name)
                if m:
                    c["activity"].append("memcpy")
                    c["copy_kind"].append(_COPY_KINDS[m.group(1).lower()])
                elif _MEMSET_NAME.match(name):
                    c["activity"].append("memset")
                    c["copy_kind"].append("")
                else:
                    c["activity"].append("kernel")
                    c["copy_kind"].append("")


def _walk_stream_line(line) -> tuple[list, list, list, list, list, list]:
    names, starts, durs, mods, ops, pids = [], [], [], [], [], []
    for ev in line.events:
        names.append(ev.name)
        starts.append(ev.start_ns)
        durs.append(ev.duration_ns)
        mod = op = ""
        pid = -1
        for key, value in ev.stats:
            if key == "hlo_op":
                op = value
            elif key == "hlo_module":
                mod = value
            elif key == "program_id":
                pid = value
        mods.append(mod)
        ops.append(op)
        pids.append(pid)
    return names, starts, durs, mods, ops, pids


def parse(path: Path, *, host_index: int = 0, options: LoadOptions | None = None) -> pd.DataFrame:
    """Read one ``.xplane.pb`` into the event table (raw columns), plus step/module marker rows.

    ``host_index`` is this host's position among the job's hosts: GPU ``N`` of
    host ``h`` gets global id ``h * gpus + N`` (the ids HLO replica groups use).
    """
    from jax.profiler import ProfileData  # heavy import, only when an XPlane is read

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not data:
        raise InputError(path, "empty file")
    header = read_header(data, path)
    try:
        profile = ProfileData.from_serialized_xspace(data)
    except Exception as exc:  # jaxlib raises bare RuntimeErrors on bad protos
        raise InputError(
            path, f"not a valid XPlane file: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    del data
    host = header.hostnames[0] if header.hostnames else path.name.split(".")[0]

    cols = _Columns()
    markers: list[tuple[str, str, str, float, float, int]] = []  # device, activity, name, start, end, step
    gpu_planes = []
    host_planes = []
    for plane in profile.planes:
        m = _GPU_PLANE.match(plane.name)
        if m:
            gpu_planes.append((int(m.group(1)), plane))
        elif plane.name.startswith("/host:CPU"):
            host_planes.append(plane)
    gpus = len(gpu_planes)
    for ordinal, plane in gpu_planes:
        device = f"{host}/GPU:{ordinal}"
        gid = host_index * gpus + ordinal
        for line in plane.lines:
            lname = line.name
            if _STREAM_LINE.match(lname):
                names, starts, durs, mods, ops, pids = _walk_stream_line(line)
                cols.extend_line(device, gid, lname, names, starts, durs, mods, ops, pids)
            elif lname == "Steps":
                for ev in line.events:
                    step = _step_number(ev.name, dict(ev.stats).get("step_num"))
                    markers.append((device, "step", ev.name, ev.start_ns, ev.end_ns, step))
            elif lname == "XLA Modules":
                for ev in line.events:
                    markers.append((device, "module", ev.name, ev.start_ns, ev.end_ns, -1))
    for plane in host_planes:
        for line in plane.lines:
            thunks: list[tuple] = []
            for ev in line.events:
                stats = ev.stats
                if not stats:
                    continue
                sd = dict(stats)
                if "step_num" in sd:
                    markers.append(("", "step", ev.name, ev.start_ns, ev.end_ns, _step_number(ev.name, sd["step_num"])))
                elif not gpu_planes and "hlo_op" in sd and "device_ordinal" in sd:
                    thunks.append(
                        (
                            sd["device_ordinal"],
                            ev.name,
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
                cols.extend_line(
                    f"{host}/CPU:{ordinal}",
                    int(ordinal),
                    line.name,
                    names,
                    starts,
                    durs,
                    mods,
                    ops,
                    pids,
                    runs,
                    activity="kernel",
                )
    del profile

    c = cols.cols
    events = make_table(
        {
            "host": host,
            "device": c["device"],
            "global_id": np.asarray(c["global_id"], dtype=np.int64),
            "stream": c["stream"],
            "name": c["name"],
            "start_ns": np.rint(np.asarray(c["start_ns"], dtype=np.float64)).astype(np.int64),
            "end_ns": np.rint(np.asarray(c["end_ns"], dtype=np.float64)).astype(np.int64),
            "activity": c["activity"],
            "copy_kind": c["copy_kind"],
            "hlo_module": c["hlo_module"],
            "hlo_op": c["hlo_op"],
            "program_id": np.asarray(c["program_id"], dtype=np.int64),
            "source": "xplane",
            "gpus_per_domain": gpus,
        }
    )
    if not gpu_planes and len(events):
        run_ids = np.asarray(c["run_id"], dtype=np.int64)
        events = _drop_nested(events)
        markers.extend(_cpu_module_runs(events, run_ids[events.index.to_numpy()]))
        events = events.reset_index(drop=True)
        n_local = int(events["global_id"].max()) + 1
        if host_index:
            # CPU device ordinals are local: make them global like GPU ordinals
            events["global_id"] = events["global_id"] + host_index * n_local
        events["gpus_per_domain"] = n_local
    attach_hlo(events, header.hlo)
    if markers:
        m = pd.DataFrame(markers, columns=["device", "activity", "name", "start_ns", "end_ns", "step"])
        marker_rows = make_table(
            {
                "host": host,
                "device": m["device"].to_numpy(dtype=object),
                "name": m["name"].to_numpy(dtype=object),
                "start_ns": np.rint(m["start_ns"].to_numpy(dtype=np.float64)).astype(np.int64),
                "end_ns": np.rint(m["end_ns"].to_numpy(dtype=np.float64)).astype(np.int64),
                "activity": m["activity"].to_numpy(dtype=object),
                "program_id": m["step"].to_numpy(dtype=np.int64),
                "source": "xplane",
            }
        )
        events = pd.concat([events, marker_rows], ignore_index=True)
    return events


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
        events[col] = column
