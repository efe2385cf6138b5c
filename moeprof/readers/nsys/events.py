"""The event table of one export: the activities (kernels, copies, memsets) with what their launches' NVTX
ranges say (collective, annotation, XLA op and module, bytes, group), steps, and the host synchronizations."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.events import make_table
from ...core.trace import GPU, Job, Trace, empty_markers
from ...errors import InputError
from ..nccl_calls import launch_info
from .columns import floats, ints, numeric, shown_value, time_column
from .nvtx import ALL_TO_ALL, P2P_ANNOTATION, innermost, kv_columns, nvtx_ranges
from .payloads import comm_members, decode_payloads, groups
from .steps import module_launches, step_markers
from .tables import KERNEL, MEMCPY, MEMCPY_ENUM_FALLBACK, MEMCPY_SIDE, MEMSET, PID_SHIFT, Frames


def _copy_kind(enum_name: str) -> str:
    """CUDA_MEMCPY_KIND_HTOA -> HtoD (arrays are device memory); unknown -> ""."""
    m = re.search(r"([HDAP])TO([HDAP])$", enum_name.upper())
    if not m:
        return ""
    return f"{MEMCPY_SIDE[m.group(1)]}to{MEMCPY_SIDE[m.group(2)]}"


def _activities(frames: Frames, path: Path) -> pd.DataFrame:
    """The three activity tables as one frame, sorted by (start, end): times as int64 ns (see ``times``),
    rows without a device dropped."""

    def times(frame: pd.DataFrame, table: str) -> dict[str, np.ndarray]:
        return {"start": time_column(frame, table, "start", path), "end": time_column(frame, table, "end", path)}

    parts = []
    k = frames.kernels
    if len(k):
        parts.append(
            pd.DataFrame(
                {
                    **times(k, KERNEL),
                    "deviceId": k["deviceId"],
                    "streamId": k["streamId"],
                    "pid": k["pid"],
                    "name": k["name"].fillna("").astype(object),
                    "activity": "kernel",
                    "copy_kind": "",
                    "bytes": np.nan,
                    "launch_tid": k["launch_tid"],
                    "launch_start": k["launch_start"],
                    "launch_end": k["launch_end"] if "launch_end" in k else np.nan,
                }
            )
        )
    m = frames.memcpys
    if len(m):
        enum = frames.memcpy_enum or MEMCPY_ENUM_FALLBACK
        codes = ints(m["copyKind"], len(m))
        uniq, inv = np.unique(codes, return_inverse=True)
        kinds = np.array([_copy_kind(enum.get(int(c), "")) for c in uniq], dtype=object)[inv]
        # a device-to-device copy between two different GPUs is a peer copy, whatever its kind says
        src, dst = ints(m["srcDeviceId"], len(m)), ints(m["dstDeviceId"], len(m))
        kinds[(kinds == "DtoD") & (src >= 0) & (dst >= 0) & (src != dst)] = "PtoP"
        names = np.where(kinds == "", "Memcpy", "Memcpy " + kinds.astype(str)).astype(object)
        parts.append(
            pd.DataFrame(
                {
                    **times(m, MEMCPY),
                    "deviceId": m["deviceId"],
                    "streamId": m["streamId"],
                    "pid": m["pid"],
                    "name": names,
                    "activity": "memcpy",
                    "copy_kind": kinds,
                    "bytes": floats(m["bytes"]),
                    "launch_tid": m["launch_tid"],
                    "launch_start": m["launch_start"],
                    "launch_end": m["launch_end"] if "launch_end" in m else np.nan,
                }
            )
        )
    s = frames.memsets
    if len(s):
        parts.append(
            pd.DataFrame(
                {
                    **times(s, MEMSET),
                    "deviceId": s["deviceId"],
                    "streamId": s["streamId"],
                    "pid": s["pid"],
                    "name": "Memset",
                    "activity": "memset",
                    "copy_kind": "",
                    "bytes": floats(s["bytes"]),
                    "launch_tid": s["launch_tid"],
                    "launch_start": s["launch_start"],
                    "launch_end": s["launch_end"] if "launch_end" in s else np.nan,
                }
            )
        )
    if not parts:
        return pd.DataFrame(
            columns=[
                "start",
                "end",
                "deviceId",
                "streamId",
                "pid",
                "name",
                "activity",
                "copy_kind",
                "bytes",
                "launch_tid",
                "launch_start",
                "launch_end",
            ]
        )
    act = pd.concat(parts, ignore_index=True)
    device, null, bad = numeric(act["deviceId"])
    if bad.any():
        value = act["deviceId"].iloc[int(np.flatnonzero(bad)[0])]
        raise InputError(path, f"an activity table's deviceId holds {shown_value(value)}, not a number")
    act["deviceId"] = device
    act = act[~null]
    return act.sort_values(["start", "end"], kind="stable", ignore_index=True)


def build(frames: Frames, host: str, host_index: int, path: Path, step_marker: re.Pattern[str] | None = None) -> Trace:
    act = _activities(frames, path)
    n = len(act)
    dev_ids = ints(act["deviceId"], n)
    gpus = np.unique(dev_ids)
    local = np.searchsorted(gpus, dev_ids)
    n_gpus = len(gpus)
    dev_names = np.array([f"{host}/GPU:{g}" for g in gpus], dtype=object)
    global_id = host_index * n_gpus + local

    nv = nvtx_ranges(frames, step_marker)
    launch_tid = ints(act["launch_tid"], n)
    launch_t = ints(act["launch_start"], n)
    has_launch = np.flatnonzero(pd.notna(act["launch_tid"]).to_numpy() & pd.notna(act["launch_start"]).to_numpy())
    q_tid, q_t = launch_tid[has_launch], launch_t[has_launch]
    launch_end = ints(act["launch_end"], n) if "launch_end" in act else np.full(n, -1, dtype=np.int64)
    launch_known = pd.notna(act["launch_tid"]).to_numpy() & (launch_end >= 0)

    collective = np.full(n, "", dtype=object)
    annotation = np.full(n, "", dtype=object)
    hlo_op = np.full(n, "", dtype=object)
    hlo_module = np.full(n, "", dtype=object)
    program_id = np.full(n, -1, dtype=np.int64)
    nbytes = floats(act["bytes"]) if n else np.zeros(0)
    group = np.full(n, "", dtype=object)
    module_runs = empty_markers()

    def enclosing(ranges: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(activity rows, range rows) for activities launched inside one of ``ranges``."""
        hit = innermost(ranges["tid"].to_numpy(), ranges["start"].to_numpy(), ranges["end"].to_numpy(), q_tid, q_t)
        ok = hit >= 0
        return has_launch[ok], hit[ok]

    if len(nv) and len(has_launch):
        ann = nv.loc[nv["is_annotation"]]
        rows, src = enclosing(ann)
        annotation[rows] = ann["clean"].to_numpy(dtype=object)[src]

        calls = nv.loc[nv["is_nccl"]].reset_index(drop=True)
        if len(calls):
            payload = decode_payloads(calls, frames.schemas)
            info = launch_info(calls, payload)
            rows, src = enclosing(calls)
            coll = info["coll"].to_numpy(dtype=object)[src]
            # a group of sends and receives guessed to be an all-to-all defers to a framework
            # annotation that names a point-to-point exchange
            codes, uniques = pd.factorize(annotation[rows])
            p2p = (
                np.array([bool(P2P_ANNOTATION.search(a)) and not ALL_TO_ALL.search(a) for a in uniques], dtype=bool)[
                    codes
                ]
                if len(rows)
                else np.zeros(0, dtype=bool)
            )
            coll = np.where(info["heuristic"].to_numpy(dtype=bool)[src] & p2p, "send_recv", coll).astype(object)
            collective[rows] = coll
            b = info["nbytes"].to_numpy(dtype=np.float64)[src]
            nbytes[rows] = np.where(np.isnan(b), nbytes[rows], b)
            members = comm_members(calls, payload, act, dev_ids, gpus, host_index)
            if members:
                group[rows] = groups(
                    coll,
                    info["comm"].to_numpy(dtype=np.float64)[src],
                    info["peers"].to_numpy(dtype=object)[src],
                    global_id[rows],
                    members,
                )

        _inherit(act, has_launch, collective, annotation)

        # XLA: the thunk names the op (and, in newer XLA, module and program); the module range fills the rest
        for family in ("thunk_kv", "module_kv"):
            sel = nv.loc[nv[family] != ""]
            if not len(sel):
                continue
            rows, src = enclosing(sel)
            fields = kv_columns(sel[family].to_numpy(dtype=object)[src])
            if family == "module_kv" and "hlo_module" in fields:
                module_runs = module_launches(host, dev_names[local[rows]], fields["hlo_module"], src, act, rows)
            if family == "thunk_kv" and "hlo_op" in fields:
                hlo_op[rows] = fields["hlo_op"]
            if "hlo_module" in fields:
                empty = hlo_module[rows] == ""
                hlo_module[rows[empty]] = fields["hlo_module"][empty]
            if "program_id" in fields:
                empty = program_id[rows] < 0
                program_id[rows[empty]] = ints(pd.Series(fields["program_id"]).replace("", None), len(rows))[empty]

    end_ns = ints(act["end"], n)
    events = make_table(
        {
            "host": host,
            "device": dev_names[local] if n else np.empty(0, dtype=object),
            "global_id": global_id.astype(np.int64),
            "gpus_per_domain": n_gpus,
            "stream": _stream_names(ints(act["streamId"], n)),
            "name": act["name"].to_numpy(dtype=object),
            "start_ns": ints(act["start"], n),
            "end_ns": end_ns,
            "activity": act["activity"].to_numpy(dtype=object),
            "copy_kind": act["copy_kind"].to_numpy(dtype=object),
            "hlo_module": hlo_module,
            "hlo_op": hlo_op,
            "program_id": program_id,
            "collective": collective,
            "annotation": annotation,
            "bytes": nbytes,
            "group": group,
            "source": "nsys",
            # §9: the launching runtime call's return and thread (the replay's launch bound); a call that
            # returned after its activity ended waited for it (a synchronous copy): the host issued it at the
            # call's start, and moves with the synchronization before that
            "launch_ns": np.where(launch_known, np.where(launch_end > end_ns, launch_t, launch_end), -1),
            "launch_thread": np.where(launch_known, launch_tid.astype(str).astype(object), ""),
        },
        n=n,
    )
    clean = nv["clean"].astype(str) if len(nv) else pd.Series([], dtype=object)
    if clean.str.contains(r"XlaModule:#|Thunk:#", regex=True).any():
        framework = "jax"
    elif clean.str.contains(r"^aten::|ProfilerStep#|^nccl:|c10d", regex=True).any():
        framework = "pytorch"
    else:
        framework = "unknown"
    return Trace(
        events=events,
        path=str(path),
        format="nsys",
        markers=pd.concat([step_markers(nv, host), module_runs], ignore_index=True),
        framework=framework,
        annotations=tuple(str(c) for c in pd.unique(clean.to_numpy(dtype=object))),
        job=Job(hosts=(host,) if frames.hostname else ()),
        devices={str(dev_names[i]): int(host_index * n_gpus + i) for i in range(n_gpus)},
        device_models={f"{host}/GPU:{g}": frames.gpu_names[g] for g in gpus if g in frames.gpu_names},
        device_kinds={str(d): GPU for d in dev_names.tolist()},
        host_syncs=_host_syncs(frames, act, dev_ids, host),
    )


def _host_syncs(frames: Frames, act: pd.DataFrame, dev_ids: np.ndarray, host: str) -> pd.DataFrame:
    """§9: the runtime calls that waited for the device (``SYNC_CALL``) as device, thread, start, end (the
    thread as ``launch_thread`` writes it). The call's device: its CUPTI_ACTIVITY_KIND_SYNCHRONIZATION row
    (same correlationId and process; ``deviceId``), else the activity it launched (a synchronous copy's
    memcpy: same launching thread and call start), else the only device its process has activity on;
    calls on no device of the file are left out (the replay could not place them)."""
    calls = frames.sync_calls
    out = pd.DataFrame(
        {
            "device": pd.Series(dtype=object),
            "thread": pd.Series(dtype=object),
            "start_ns": pd.Series(dtype=np.int64),
            "end_ns": pd.Series(dtype=np.int64),
        }
    )
    if not len(calls) or not len(act):
        return out
    m = len(calls)
    start, s_null, s_bad = numeric(calls["start"])
    end, e_null, e_bad = numeric(calls["end"])
    tid = ints(calls["tid"], m)
    corr = ints(calls["corr"], m, -2)
    pid = np.where(tid >= 0, tid >> PID_SHIFT, -1)
    device = np.full(m, -1, dtype=np.int64)

    def fill(keys: pd.DataFrame, lookup: pd.DataFrame, on: list[str]) -> None:
        # left-join the calls still without a device onto lookup(on -> deviceId), first match wins
        todo = device < 0
        if not todo.any() or not len(lookup):
            return
        first = lookup.drop_duplicates(on, keep="first")
        got = keys.loc[todo, on].merge(first, on=on, how="left", sort=False)["deviceId"]
        device[todo] = got.fillna(-1).to_numpy(dtype=np.int64)

    keys = pd.DataFrame({"corr": corr, "pid": pid, "tid": tid, "start": start})
    if len(frames.sync_devices):
        fill(keys, frames.sync_devices, ["corr", "pid"])
    launched = pd.notna(act["launch_tid"]).to_numpy() & pd.notna(act["launch_start"]).to_numpy()
    if launched.any():
        n = len(act)
        fill(
            keys,
            pd.DataFrame(
                {
                    "tid": ints(act["launch_tid"], n)[launched],
                    "start": ints(act["launch_start"], n)[launched],
                    "deviceId": dev_ids[launched],
                }
            ),
            ["tid", "start"],
        )
    a_pid = ints(act["pid"], len(act))
    per_pid = pd.DataFrame({"pid": a_pid, "deviceId": dev_ids}).drop_duplicates()
    counts = per_pid["pid"].map(per_pid["pid"].value_counts())
    fill(keys, per_pid.loc[(counts == 1).to_numpy() & (per_pid["pid"] >= 0).to_numpy()], ["pid"])

    ok = (device >= 0) & np.isin(device, dev_ids) & (tid >= 0) & ~(s_null | s_bad | e_null | e_bad) & (end >= start)
    # one call exported twice (old schemas: an outer and an inner row, same thread and correlation id): the
    # outer one, which returned last
    twice = pd.DataFrame({"tid": tid, "corr": corr, "end": end}).sort_values("end", ascending=False, kind="stable")
    twice = twice[twice["corr"].to_numpy() >= 0]
    ok[twice.index[twice.duplicated(["tid", "corr"], keep="first")].to_numpy()] = False
    return pd.DataFrame(
        {
            "device": np.array([f"{host}/GPU:{d}" for d in device[ok].tolist()], dtype=object),
            "thread": tid[ok].astype(str).astype(object),
            "start_ns": start[ok],
            "end_ns": end[ok],
        }
    )


def _stream_names(ids: np.ndarray) -> np.ndarray:
    """ "stream <id>" per activity, "" where the export has no stream id."""
    uniq, inv = np.unique(ids, return_inverse=True)
    names = np.array([f"stream {i}" if i >= 0 else "" for i in uniq], dtype=object)
    return names[inv.reshape(-1)] if len(ids) else np.empty(0, dtype=object)


def _inherit(act: pd.DataFrame, has_launch: np.ndarray, collective: np.ndarray, annotation: np.ndarray) -> None:
    """An activity whose launch is not in the capture (a window cut before it) takes the
    collective and annotation that *every* attributed launch of the same kernel, on the
    same process, GPU and stream, agrees on; nothing when they disagree."""
    n = len(act)
    orphan = np.ones(n, dtype=bool)
    orphan[has_launch] = False
    if not orphan.any() or not (collective != "").any():
        return
    key, _ = pd.factorize(
        pd.MultiIndex.from_arrays(
            [
                ints(act["pid"], n),
                ints(act["deviceId"], n),
                ints(act["streamId"], n),
                act["name"].to_numpy(dtype=object),
            ]
        )
    )
    seen = pd.DataFrame({"key": key[has_launch], "coll": collective[has_launch], "ann": annotation[has_launch]})
    seen = seen[seen["coll"] != ""]
    if not len(seen):
        return
    pairs = seen.drop_duplicates()
    agreed = pairs[~pairs["key"].duplicated(keep=False)].set_index("key")
    # agreement must also cover launches of that kernel that no NCCL range enclosed
    plain = pd.Series(key[has_launch][collective[has_launch] == ""]).unique()
    agreed = agreed.drop(index=agreed.index.intersection(pd.Index(plain)))
    rows = np.flatnonzero(orphan & np.isin(key, agreed.index.to_numpy()))
    if len(rows):
        look = agreed.reindex(key[rows])
        collective[rows] = look["coll"].to_numpy(dtype=object)
        annotation[rows] = look["ann"].to_numpy(dtype=object)
