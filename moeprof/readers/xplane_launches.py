"""Launch evidence in an XPlane: which device events one execution of an XLA module launched.

Raw GPU captures carry no step markers and no ``XLA Modules`` line (xprof derives
those lines later), so spec §5's fallback, one execution of the dominant module per
step, is delimited from what the capture does hold:

- every kernel and copy on a ``/device:GPU:N`` stream line carries ``correlation_id``,
  the id of the host call that launched it (``cuLaunchKernel``, ``hipModuleLaunchKernel``,
  ... on a ``/host:CPU`` line: the launching thread's line on CUDA, a ``Host Threads/<tid>``
  line on ROCm);
- the host thread that runs an execution wraps it in ``GpuExecutable::ExecuteThunks``
  (stat ``module_name``) and ``<module>:XLA GPU module`` ranges.

:func:`moeprof.core.steps.launch_module_runs` turns these into module runs per GPU.
Both decoder routes gather the same columns: the wire route from its stat columns
(:mod:`.xplane`), the jaxlib route here, in a second pass that reads every stat.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..core.events import categorical, categorical_of
from ..core.steps import event_modules, launch_module_runs

if TYPE_CHECKING:
    from .xplane import _Chunk

# §9: host calls that wait for the device: runtime/driver synchronizations and synchronous copies (CUDA, HIP),
# with an API-version or per-thread-stream suffix; and copies whose memcpy_details say they were not async
SYNC_CALL = re.compile(
    r"^(?:(?:cuda|hip)(?:DeviceSynchronize|ThreadSynchronize|StreamSynchronize|EventSynchronize"
    r"|Memcpy|Memcpy2D|Memcpy3D|MemcpyPeer|MemcpyToSymbol|MemcpyFromSymbol|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD)"
    r"|cu(?:CtxSynchronize|StreamSynchronize|EventSynchronize"
    r"|Memcpy|MemcpyDtoH|MemcpyHtoD|MemcpyDtoD|Memcpy2D|Memcpy3D|MemcpyPeer))(?:_v\d+|_ptds|_ptsz)*$"
)
_SYNC_COPY = re.compile(r"(?:^|\s)async:0(?:\s|$)")
EXECUTE_THUNKS = "GpuExecutable::ExecuteThunks"  # XLA GPU's host range of one execution; stat module_name
GPU_MODULE_RANGE = re.compile(r"^(.+):XLA GPU module$")  # the same execution, named by its module
_STREAM_LINE = re.compile(r"^Stream #")


def executions(names: np.ndarray, module_names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which host events are one execution of an XLA module (mask), and the module of each."""
    codes, uniques = pd.factorize(np.asarray(names, dtype=object))
    matches = [GPU_MODULE_RANGE.match(str(u)) for u in uniques]  # per distinct name, never per event
    by_name = np.array([m.group(1) if m else "" for m in matches], dtype=object)
    thunks = np.array([u == EXECUTE_THUNKS for u in uniques], dtype=bool)
    module = np.where(thunks[codes], np.asarray(module_names, dtype=object), by_name[codes])
    return np.asarray(module != "", dtype=bool), np.asarray(module, dtype=object)


def sync_names(names: np.ndarray) -> np.ndarray:
    """Which of these (distinct) host event names are calls that wait for the device (``SYNC_CALL``)."""
    return np.array([bool(SYNC_CALL.match(str(n))) for n in np.asarray(names, dtype=object).tolist()], dtype=bool)


def sync_copies(details: np.ndarray) -> np.ndarray:
    """Which of these (distinct) ``memcpy_details`` values say the copy was synchronous (``async:0``)."""
    return np.array([bool(_SYNC_COPY.search(str(d))) for d in np.asarray(details, dtype=object).tolist()], dtype=bool)


def host_evidence(
    line_no: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    corr: np.ndarray,
    is_sync: np.ndarray,
    names: np.ndarray | None = None,
    module_names: np.ndarray | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """From columns over the host lines' events: host launch calls (events with a correlation id:
    ``correlation_id, launch_ns`` (its start), ``end_ns``, ``line``), the host's module executions
    (``line, module, start_ns, end_ns``; only given ``names`` and ``module_names``: steps without an XLA
    Modules line need them) and its calls that wait for the device (``is_sync``: ``line, start_ns, end_ns,
    correlation_id``)."""
    launch = corr >= 0
    if names is not None and module_names is not None:
        is_exec, module = executions(names, module_names)
    else:
        is_exec, module = np.zeros(len(corr), dtype=bool), np.full(len(corr), "", dtype=object)
    # every column a fresh array made here: the frames take them as they are (no consolidating copy)
    return (
        pd.DataFrame(
            {
                "correlation_id": corr[launch],
                "launch_ns": starts[launch],
                "end_ns": ends[launch],
                "line": line_no[launch],
            },
            copy=False,
        ),
        pd.DataFrame(
            {"line": line_no[is_exec], "module": module[is_exec], "start_ns": starts[is_exec], "end_ns": ends[is_exec]},
            copy=False,
        ),
        pd.DataFrame(
            {
                "line": line_no[is_sync],
                "start_ns": starts[is_sync],
                "end_ns": ends[is_sync],
                "correlation_id": corr[is_sync],
            },
            copy=False,
        ),
    )


def first_calls(call_ids: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per activity correlation id (``corr``, -1 none): whether a host call has it, and (for those) the row of
    the first call with it. Correlation ids count up from a small number: a table indexed by id where they are
    that dense (no sort of the calls), else a search in the sorted distinct ids."""
    lo = int(call_ids.min())
    span = int(call_ids.max()) - lo + 1
    if lo >= 0 and span <= 4 * call_ids.size + 4096:
        first = np.full(span, call_ids.size, dtype=np.int64)
        np.minimum.at(first, call_ids - lo, np.arange(call_ids.size, dtype=np.int64))  # the first call of each id
        inside = (corr >= lo) & (corr < lo + span)
        at = np.full(corr.size, call_ids.size, dtype=np.int64)
        at[inside] = first[corr[inside] - lo]
        found = at < call_ids.size
        return found, at[found]
    ids, first_of = np.unique(call_ids, return_index=True)
    at = np.minimum(np.searchsorted(ids, corr), len(ids) - 1)
    found = (corr >= 0) & (ids[at] == corr)
    return found, first_of[at[found]]


def launch_bounds(
    chunks: list[_Chunk], launches: pd.DataFrame | None, syncs: pd.DataFrame | None
) -> tuple[np.ndarray, pd.Categorical, pd.DataFrame]:
    """Spec §9 for the stream chunks' rows, in table order: ``launch_ns`` (the launching host call's end, or its
    start where the call returned after its activity ended: a synchronous copy; -1 unknown), ``launch_thread``
    (the host line's number as text; "" unknown) and the host synchronizations (``device, thread, start_ns,
    end_ns``; a call's device: the activity with its correlation id, else the only device its line launched
    on). A kernel's launch is the first host call with its correlation id, as for the steps."""
    n = sum(len(c.start_ns) for c in chunks)
    launch_ns = np.full(n, -1, dtype=np.int64)
    line = np.full(n, -1, dtype=np.int64)
    empty = pd.DataFrame(
        {
            "device": pd.Series(dtype=object),
            "thread": pd.Series(dtype=object),
            "start_ns": pd.Series(dtype=np.int64),
            "end_ns": pd.Series(dtype=np.int64),
        }
    )
    if launches is None or launches.empty or not n or any(c.correlation is None for c in chunks):
        return launch_ns, categorical("", n), empty
    corr = np.concatenate([c.correlation for c in chunks if c.correlation is not None])
    end = np.concatenate([c.end_ns for c in chunks])
    found, row = first_calls(launches["correlation_id"].to_numpy(dtype=np.int64), corr)
    call_start = launches["launch_ns"].to_numpy(dtype=np.int64)[row]
    call_end = launches["end_ns"].to_numpy(dtype=np.int64)[row]
    launch_ns[found] = np.where(call_end > end[found], call_start, call_end)
    line[found] = launches["line"].to_numpy(dtype=np.int64)[row]
    # a string per host line, not per row (line -1, unknown: the last, ""), as the table's categorical column
    lines = int(line.max(initial=-1)) + 1
    thread = categorical_of(np.where(line < 0, lines, line), np.array([*map(str, range(lines)), ""], dtype=object))
    if syncs is None or syncs.empty:
        return launch_ns, thread, empty
    device = np.repeat(np.array([c.device for c in chunks], dtype=object), [len(c.start_ns) for c in chunks])
    s_line = syncs["line"].to_numpy(dtype=np.int64)
    s_corr = syncs["correlation_id"].to_numpy(dtype=np.int64)
    s_dev = np.full(len(syncs), None, dtype=object)
    # the activity the call launched (a synchronous copy)
    by_corr = pd.Series(device[found], index=corr[found])
    by_corr = by_corr[~by_corr.index.duplicated(keep="first")]
    has = s_corr >= 0
    s_dev[has] = by_corr.reindex(s_corr[has]).to_numpy(dtype=object)
    # else the only device the call's line launched on
    pairs = pd.DataFrame({"line": line[found], "device": device[found]}).drop_duplicates()
    one = pairs[~pairs["line"].duplicated(keep=False)]
    by_line = pd.Series(one["device"].to_numpy(dtype=object), index=one["line"].to_numpy())
    todo = pd.isna(s_dev)
    s_dev[todo] = by_line.reindex(s_line[todo]).to_numpy(dtype=object)
    ok = ~pd.isna(s_dev)
    return (
        launch_ns,
        thread,
        pd.DataFrame(
            {
                "device": s_dev[ok].astype(object),
                "thread": s_line[ok].astype(str).astype(object),
                "start_ns": syncs["start_ns"].to_numpy(dtype=np.int64)[ok],
                "end_ns": syncs["end_ns"].to_numpy(dtype=np.int64)[ok],
            }
        ),
    )


def jaxlib_launch_evidence(
    gpu_planes: list, host_planes: list, chunks: list[_Chunk], steps: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The wire route's correlation ids and host evidence through ProfileData: sets each stream chunk's
    ``correlation`` and returns :func:`host_evidence` (module executions only with ``steps``). Every stat
    of every stream and host event is read (a Python step each): the fallback route's price for launch
    bounds on GPU traces."""
    stream_chunks = iter(chunks)  # with GPU planes, the chunks are the stream lines', in walk order
    for _, plane in gpu_planes:
        for line in plane.lines:
            if _STREAM_LINE.match(line.name):
                next(stream_chunks).correlation = np.array(
                    [_int64(dict(ev.stats).get("correlation_id")) for ev in line.events], dtype=np.int64
                )
    names: list[str] = []
    line_no: list[int] = []
    starts: list[float] = []
    ends: list[float] = []
    corr: list[int] = []
    module_names: list[str] = []
    sync: list[bool] = []
    lines = [line for plane in host_planes for line in plane.lines]
    for i, line in enumerate(lines):
        for ev in line.events:
            stats = dict(ev.stats) if ev.stats else {}
            module = stats.get("module_name", "")
            names.append(ev.name)
            line_no.append(i)
            starts.append(ev.start_ns)
            ends.append(ev.start_ns + ev.duration_ns)
            corr.append(_int64(stats.get("correlation_id")))
            if isinstance(module, bytes):  # as the wire decoder reads a bytes value
                module = module.decode("utf-8", "replace")
            module_names.append(module if isinstance(module, str) else "")
            detail = stats.get("memcpy_details", "")
            if isinstance(detail, bytes):
                detail = detail.decode("utf-8", "replace")
            sync.append(bool(SYNC_CALL.match(ev.name)) or (isinstance(detail, str) and bool(_SYNC_COPY.search(detail))))
    return host_evidence(
        np.array(line_no, dtype=np.int64),
        np.rint(np.array(starts, dtype=np.float64)).astype(np.int64),
        np.rint(np.array(ends, dtype=np.float64)).astype(np.int64),
        np.array(corr, dtype=np.int64),
        np.array(sync, dtype=bool),
        np.array(names, dtype=object) if steps else None,
        np.array(module_names, dtype=object) if steps else None,
    )


def _int64(value: object) -> int:
    """An integer stat as the wire decoder reads it (uint64 as its bit pattern); -1 when not an integer."""
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        v = int(value)
        return v - (1 << 64) if v >= 1 << 63 else v
    return -1


def launch_runs(
    chunks: list[_Chunk], launches: pd.DataFrame | None, executions: pd.DataFrame | None
) -> list[tuple[str, str, str, int, int, int]]:
    """Module executions per GPU as marker rows ``(device, "module_launch", module, start, end, -1)``."""
    streams = [c for c in chunks if c.correlation is not None]
    if launches is None or executions is None or launches.empty or executions.empty or not streams:
        return []
    n = [len(c.names) for c in streams]
    names = np.concatenate([c.names for c in streams])
    modules = np.full(len(names), "", dtype=object)
    offsets = np.cumsum(n) - n
    for c, off in zip(streams, offsets.tolist(), strict=True):
        modules[c.stat_index + off] = c.modules  # the stats the reader kept (some events of a name only)
    corr = np.concatenate([c.correlation for c in streams if c.correlation is not None])
    # each kernel's launch: the first host call with its correlation id (launches is not empty here)
    ids, first = np.unique(launches["correlation_id"].to_numpy(dtype=np.int64), return_index=True)
    at = np.minimum(np.searchsorted(ids, corr), len(ids) - 1)
    launch_ns = np.where((corr >= 0) & (ids[at] == corr), launches["launch_ns"].to_numpy(dtype=np.int64)[first][at], -1)
    events = pd.DataFrame(
        {
            "device": np.repeat(np.array([c.device for c in streams], dtype=object), n),
            "module": event_modules(names, modules),
            "start_ns": np.concatenate([c.start_ns for c in streams]),
            "end_ns": np.concatenate([c.end_ns for c in streams]),
            "launch_ns": launch_ns,
        }
    )
    runs = launch_module_runs(events, executions)
    return [
        (str(d), "module_launch", str(m), int(s), int(e), -1)
        for d, m, s, e in zip(runs["device"], runs["module"], runs["start_ns"], runs["end_ns"], strict=True)
    ]
