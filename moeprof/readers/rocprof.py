"""AMD rocprofv3 (rocprofiler-sdk) output: the CSV kernel trace with its companions.

rocprofv3 writes one output set per process, ``<prefix>kernel_trace.csv``, ``<prefix>agent_info.csv``,
``<prefix>memory_copy_trace.csv`` (prefix ``<pid>_`` in a ``<hostname>/`` folder by default, ``NAME_`` with
``-o NAME``; rocprofiler-sdk ``source/lib/output/generateCSV.cpp``). The kernel trace (or, without one, the
memory-copy trace) is the capture; the others are read from beside it. What each field means and where
the writer defines it: docs/metrics.md, "rocprofv3".

- Times are integer ns on CLOCK_BOOTTIME (``source/lib/common/utility.hpp``), read as they are.
- ``Agent_Id`` is a label, ``"Agent <n>"`` (n the agent's relative index, ``Logical_Node_Id`` in the agent
  list), ``"GPU <k>"`` (``--agent-index type``), or a bare number (older rocprofv3)
  (``source/lib/output/metadata.cpp``, ``create_agent_index``). A device is ``<host>/GPU:<k>``, k the
  agent's index among the node's GPUs, named in ``device_models`` by its ``Product_Name``.
- Rows are not in time order; they are sorted here.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ..core.events import categorical, categorical_of, column_codes, lookup, make_table
from ..core.steps import step_marker_pattern
from ..core.trace import GPU, Trace, empty_markers, make_markers, trailing_number
from ..core.vocabulary import vocabulary
from ..errors import InputError
from .base import ReadContext
from .rocprof_names import (
    AGENT_SUFFIX,
    COPY_SUFFIX,
    HIP_SUFFIX,
    MARKER_SUFFIX,
    RCCL_SUFFIX,
    capture_prefix,
    companion,
    host_name,
)

KERNEL_COLUMNS = ("Agent_Id", "Kernel_Name", "Start_Timestamp", "End_Timestamp")
KERNEL_OPTIONAL = ("Queue_Id", "Stream_Id", "Correlation_Id")
# the API traces (generateCSV.cpp; rocprofiler-sdk source/docs/data/rccl_trace.csv shows the header)
API_COLUMNS = ("Function", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp")
# --marker-trace: the API trace's columns, Function the ROCTx message of a range or mark (generateCSV.cpp)
MARKER_COLUMNS = ("Domain", "Function", "Start_Timestamp", "End_Timestamp")
_GROUP = re.compile(r"^(nccl|rccl)Group(Start|End)$")
_RCCL_NAME = re.compile(r"nccl(Symk)?(Dev)?Kernel")
COPY_COLUMNS = ("Direction", "Source_Agent_Id", "Destination_Agent_Id", "Start_Timestamp", "End_Timestamp")
COPY_OPTIONAL = ("Stream_Id", "Correlation_Id")
AGENT_COLUMNS = ("Node_Id", "Logical_Node_Id", "Agent_Type")

# rocprofiler_memory_copy_operation_t (rocprofiler-sdk fwd.h), as the CSV spells it
_DIRECTIONS = {
    "HOST_TO_HOST": "HtoH",
    "HOST_TO_DEVICE": "HtoD",
    "DEVICE_TO_HOST": "DtoH",
    "DEVICE_TO_DEVICE": "DtoD",
}
_LABEL = re.compile(r"^\s*(?:(agent|gpu)\s*)?(\d+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Agents:
    """The node's agents: label number -> GPU index (None: a CPU), and GPU index -> product name."""

    by_logical: dict[int, int | None]  # Logical_Node_Id -> GPU index (None: not a GPU)
    names: dict[int, str]  # GPU index -> product name
    n_gpus: int  # GPUs of the node (0: no agent list)
    source: str = ""  # the agent list's file name


# ---- CSV ---------------------------------------------------------------------------------------------------------


def _open_text(path: Path) -> io.TextIOBase:
    raw = path.open("rb")
    if raw.read(2) == b"\x1f\x8b":
        raw.seek(0)
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8", errors="replace", newline="")
    raw.seek(0)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline="")


def _header(path: Path) -> list[str]:
    try:
        with _open_text(path) as fh:
            row = next(csv.reader([fh.readline()]), [])
    except (OSError, EOFError, zlib.error, csv.Error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    return [c.strip() for c in row]


def read_csv_table(
    path: Path, required: tuple[str, ...], optional: tuple[str, ...], what: str, categories: bool = True
) -> pd.DataFrame:
    """The columns a reader needs from one rocprofv3 CSV, every row; a missing column, a cut or malformed
    row, or a time that is no integer is refused in one line naming the file."""
    header = _header(path)
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(
            path, f"not a rocprofv3 {what}: no column {', '.join(missing)} (header: {','.join(header)[:200]})"
        )
    wanted = [c for c in (*required, *optional) if c in header]
    times = [c for c in wanted if c.endswith("_Timestamp")]
    if categories:
        fast = _arrow_table(path, wanted, times)
        if fast is not None:
            return fast
    # pandas' parser: where Arrow refused the file, to say which row is wrong and how
    dtypes: dict[str, Any] = {c: str if c in times or not categories else "category" for c in wanted}
    try:
        frame = pd.read_csv(
            path,
            usecols=wanted,
            # categories: a trace repeats a few dozen names and labels over millions of rows
            dtype=dtypes,
            keep_default_na=False,
            na_values={c: [""] for c in times},
            compression=_compression(path),
            engine="c",
            low_memory=False,
        )
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(path, f"cannot read: {exc}") from None
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(path, f"malformed CSV (cut short?): {str(exc).strip().splitlines()[0][:200]}") from None
    for c in times:
        frame[c] = _integers(frame[c], path, c)
    for c in wanted:
        if c in times:
            continue
        absent = frame[c].isna().to_numpy()
        if absent.any():
            if c in required:
                row = int(np.flatnonzero(absent)[0])
                raise InputError(path, f"row {row + 2} has no {c} (cut short?)")
            frame[c] = frame[c].astype(str).where(~absent, "")
    return frame


def _arrow_table(path: Path, wanted: list[str], times: list[str]) -> pd.DataFrame | None:
    """The columns through Arrow's multi-threaded CSV reader (times int64, strings as categories), or None
    where anything is off (a cut or malformed row, a time that is not decimal digits or past int64, an absent
    value): the pandas route then reads the file again and names the problem.

    Times are parsed as text, checked to be ASCII digits and cast: Arrow's own int64 conversion also takes
    ``0x1F`` (as 31) and padding blanks, which rocprofv3 never writes (it prints uint64 in decimal). The text
    columns cost no more than Arrow's integer parse (benchmarks/bench_rocprof.py: the ratio unchanged)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    # strings dictionary-encoded while they are parsed: pandas categories without a pass of their own
    types = {c: (pa.string() if c in times else pa.dictionary(pa.int32(), pa.string())) for c in wanted}
    convert = pacsv.ConvertOptions(
        include_columns=wanted, column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False
    )
    try:
        with pa.input_stream(str(path), compression=_compression(path)) as stream:
            table = pacsv.read_csv(stream, convert_options=convert)
    except (pa.ArrowException, OSError, EOFError, zlib.error, ValueError):
        return None
    if any(table[c].null_count for c in wanted):
        return None
    table = table.unify_dictionaries()  # one dictionary per column over the reader's blocks
    data: dict[str, object] = {}
    for c in wanted:
        column = table[c].combine_chunks()
        if c in times:
            if not pc.all(pc.ascii_is_decimal(column)).as_py():
                return None
            try:
                data[c] = pc.cast(column, pa.int64()).to_numpy()
            except pa.ArrowException:  # past int64: the pandas route keeps it at the limit
                return None
        else:
            categories = pd.Index(column.dictionary.to_pylist(), dtype=object)
            data[c] = pd.Categorical.from_codes(column.indices.to_numpy(), categories=categories)
    return pd.DataFrame(data)


def _compression(path: Path) -> Literal["gzip"] | None:
    with path.open("rb") as fh:
        return "gzip" if fh.read(2) == b"\x1f\x8b" else None


def _integers(column: pd.Series, path: Path, name: str) -> np.ndarray:
    """A timestamp column read as text -> int64: rocprofv3 writes uint64 ns in decimal digits; anything else
    (empty, a sign, a fraction, an exponent, ``0x1F``, blanks) is refused naming the row. A value past int64
    is kept at its limit, where screen_times drops it with a warning (docs/metrics.md, "Times moeprof
    accepts")."""
    text = column.astype(object).where(column.notna(), "").astype(str)
    digits = text.str.fullmatch(r"[0-9]+").to_numpy(dtype=bool)
    if not digits.all():
        row = int(np.flatnonzero(~digits)[0])
        raise InputError(
            path, f"{name} of row {row + 2} is {text.iloc[row][:40]!r}: not an integer time in ns (cut short?)"
        )
    long = (text.str.len() > 18).to_numpy(dtype=bool)
    out = np.empty(len(text), dtype=np.int64)
    out[~long] = text[~long].astype(np.int64).to_numpy()
    limit = int(np.iinfo(np.int64).max)
    out[long] = [min(int(t), limit) for t in text[long].tolist()]
    return out


def read_agents(path: Path | None) -> Agents:
    """The agent list beside a trace (``<prefix>agent_info.csv``: ``Node_Id``, ``Logical_Node_Id``,
    ``Agent_Type``, ``Product_Name``; rocprofiler-sdk ``generateCSV.cpp``), or an empty one."""
    if path is None:
        return Agents({}, {}, 0)
    frame = read_csv_table(path, AGENT_COLUMNS, ("Product_Name", "Name"), "agent list", categories=False)
    try:
        logical = frame["Logical_Node_Id"].astype(np.int64).to_numpy()
    except (ValueError, OverflowError):
        raise InputError(path, "Logical_Node_Id holds a value that is no integer") from None
    is_gpu = frame["Agent_Type"].str.strip().str.upper().eq("GPU").to_numpy()
    order = np.argsort(logical, kind="stable")
    by_logical: dict[int, int | None] = {}
    names: dict[int, str] = {}
    k = 0
    product = frame["Product_Name"] if "Product_Name" in frame else frame.get("Name", pd.Series([""] * len(frame)))
    for i in order.tolist():
        if is_gpu[i]:
            by_logical[int(logical[i])] = k
            name = str(product.iloc[i]).strip()
            if name:
                names[k] = name
            k += 1
        else:
            by_logical[int(logical[i])] = None
    return Agents(by_logical, names, k, path.name)


def _gpu_index(labels: pd.Series, agents: Agents, path: Path, column: str) -> np.ndarray:
    """Each row's GPU index from its agent label (-1: a CPU agent). Labels are mapped once each."""
    codes, uniques = column_codes(labels)
    table = np.empty(len(uniques), dtype=np.int64)
    for i, label in enumerate(uniques.tolist()):
        m = _LABEL.match(str(label))
        if m is None:
            raise InputError(path, f'{column} {str(label)[:40]!r} is no agent label ("Agent <n>", "GPU <k>")')
        n = int(m.group(2))
        if (m.group(1) or "").lower() == "gpu" or not agents.by_logical:
            table[i] = n  # already a GPU index, or no agent list to map through
        elif n not in agents.by_logical:
            raise InputError(path, f"{column} {label!r} names no agent of the agent list {agents.source}")
        else:
            gpu = agents.by_logical[n]
            table[i] = -1 if gpu is None else gpu
    return table[codes] if len(codes) else np.zeros(0, dtype=np.int64)


def _stream_names(frame: pd.DataFrame) -> pd.Categorical:
    """``stream <Stream_Id>`` (the HIP stream, 0 the default stream), ``queue <Queue_Id>`` in older
    outputs without a stream column."""
    col, word = ("Stream_Id", "stream") if "Stream_Id" in frame else ("Queue_Id", "queue")
    if col not in frame:
        return categorical("", len(frame))
    codes, uniques = column_codes(frame[col])
    return categorical_of(codes, np.array([f"{word} {u}".strip() for u in uniques.tolist()], dtype=object))


def read(path: Path, context: ReadContext | None = None) -> Trace:
    """One rocprofv3 CSV output set: the kernel trace (or the memory-copy trace) given, its agent list and
    memory copies read from beside it."""
    context = context or ReadContext()
    path = Path(path)
    prefix = capture_prefix(path.name)
    header = _header(path)
    if "Logical_Node_Id" in header and "Kernel_Name" not in header:
        raise InputError(path, "a rocprofv3 agent list, not a trace: give the kernel trace beside it")
    warnings: list[str] = []
    agents_path = companion(path, AGENT_SUFFIX) if prefix is not None else None
    agents = read_agents(agents_path)
    if agents_path is None:
        warnings.append(
            f"{path}: no {prefix or '<prefix>_'}{AGENT_SUFFIX} beside it: devices numbered by rocprofv3's agent"
            " label, GPU model unknown"
        )
    if "Kernel_Name" in header:
        kernels = read_csv_table(path, KERNEL_COLUMNS, KERNEL_OPTIONAL, "kernel trace")
        copies_path = companion(path, COPY_SUFFIX)
        copies = read_csv_table(copies_path, COPY_COLUMNS, COPY_OPTIONAL, "memory copy trace") if copies_path else None
    elif "Direction" in header:
        kernels, copies, copies_path = (
            None,
            read_csv_table(path, COPY_COLUMNS, COPY_OPTIONAL, "memory copy trace"),
            path,
        )
    else:
        raise InputError(path, f"not a rocprofv3 kernel or memory copy trace (header: {','.join(header)[:200]})")
    parts = []
    if kernels is not None:
        part = _kernel_columns(kernels, agents, path)
        part["collective"] = categorical(rccl_collectives(kernels, path), len(kernels))
        parts.append(part)
    if copies is not None and copies_path is not None:
        parts.append(_copy_columns(copies, agents, copies_path))
    trace = build_trace(parts, agents, host_name(path), path, context, "rocprof-csv", warnings)
    marker_path = companion(path, MARKER_SUFFIX)
    if marker_path is None:
        return trace
    f = read_csv_table(marker_path, MARKER_COLUMNS, (), "marker API trace", categories=False)
    marks = pd.DataFrame(
        {
            "category": f["Domain"].astype(str).to_numpy(dtype=object),
            "text": f["Function"].astype(str).to_numpy(dtype=object),
            "start": f["Start_Timestamp"],
            "end": f["End_Timestamp"],
        }
    )
    return with_roctx_steps(trace, marks, context)


def with_roctx_steps(trace: Trace, marks: pd.DataFrame, context: ReadContext) -> Trace:
    """The trace with its ROCTx ranges (``marks``: ``category``, ``text``, ``start``, ``end``) as step markers
    and their texts as annotations: the rule of every rocprofv3 output (CSV, JSON, rocpd)."""
    texts = marks.loc[marks["category"].astype(str).str.startswith("MARKER"), "text"].to_numpy(dtype=object)
    annotations = tuple(str(n) for n in pd.unique(texts) if n)
    return replace(trace, markers=roctx_steps(marks, trace, context), annotations=annotations)


def roctx_steps(marks: pd.DataFrame, trace: Trace, context: ReadContext) -> pd.DataFrame:
    """ROCTx ranges (rows whose ``category`` starts with ``MARKER``) named like steps (or matching
    ``--step-marker``), host ranges: each one's step on a GPU of the process is what it launched there
    (spec §5; without launch evidence, what started inside it: ``core.steps.launched_windows``).
    A step's number is the one its text ends with, else its order among the ranges of that text."""
    marks = marks.loc[marks["category"].fillna("").astype(str).str.startswith("MARKER")]
    if not len(marks):
        return empty_markers()
    vocab = vocabulary()
    user = step_marker_pattern(context.options.step_marker)
    codes, uniques = pd.factorize(marks["text"].to_numpy(dtype=object))
    step = np.array([bool(vocab.step_range.match(u)) or bool(user and user.search(u)) for u in uniques], dtype=bool)
    s = marks.loc[step[codes]].sort_values("start", kind="stable")
    if not len(s):
        return empty_markers()
    text_codes, texts = pd.factorize(s["text"].to_numpy(dtype=object))
    numbers = np.array([trailing_number(str(t)) for t in texts.tolist()], dtype=np.int64)
    number = pd.Series(numbers[text_codes] if len(text_codes) else np.zeros(0, dtype=np.int64), index=s.index)
    ordinal = s.groupby("text").cumcount()
    host = str(trace.events["host"].iloc[0]) if len(trace.events) else ""
    return make_markers(
        host=host,
        device="",  # a ROCTx range times the host: its step on each GPU is what it launched (spec §5)
        kind="step",
        name=s["text"].to_numpy(dtype=object),
        start_ns=s["start"].to_numpy(dtype=np.int64),
        end_ns=s["end"].to_numpy(dtype=np.int64),
        number=number.where(number >= 0).fillna(ordinal).to_numpy(dtype=np.int64),
    )


def rccl_collectives(kernels: pd.DataFrame, path: Path) -> np.ndarray:
    """The RCCL function (``ncclAllReduce``, ...) that launched each RCCL kernel, from the API traces beside
    the kernel trace ("" where none says): the kernel's ``Correlation_Id`` is its launching call's, the RCCL
    call's own when HIP is not traced; with ``hip_api_trace.csv``, the RCCL call of the kernel's HIP launch
    is the one of its thread that spans the launch (the CSV has no ancestor id), and a launch inside
    ``ncclGroupEnd`` takes the last collective call of its thread before it."""
    out = np.full(len(kernels), "", dtype=object)
    rccl_path = companion(path, RCCL_SUFFIX)
    if rccl_path is None or "Correlation_Id" not in kernels:
        return out
    codes, names = column_codes(kernels["Kernel_Name"])
    is_rccl = np.array([bool(_RCCL_NAME.search(str(n))) for n in names.tolist()], dtype=bool)
    rows = np.flatnonzero(lookup(codes, is_rccl, False))
    if not len(rows):
        return out
    calls = read_csv_table(rccl_path, API_COLUMNS, (), "RCCL API trace", categories=False)
    calls = calls.sort_values("Start_Timestamp", kind="stable")
    function = calls["Function"].to_numpy(dtype=object)
    named = function.copy()  # each call's collective: a group's end takes its thread's last collective
    last: dict[str, str] = {}
    for i, (fn, thread) in enumerate(zip(function.tolist(), calls["Thread_Id"].tolist())):
        if _GROUP.match(fn):
            named[i] = last.get(thread, "") if fn.endswith("End") else ""
        else:
            last[thread] = fn
    by_id = dict(zip(calls["Correlation_Id"].tolist(), named.tolist()))
    corr = kernels["Correlation_Id"].astype(str).to_numpy(dtype=object)[rows]
    out[rows] = [by_id.get(c, "") for c in corr.tolist()]
    hip_path = companion(path, HIP_SUFFIX)
    todo = rows[out[rows] == ""]
    if hip_path is None or not len(todo):
        return out
    hip = read_csv_table(hip_path, API_COLUMNS, (), "HIP API trace", categories=False)
    launch = dict(zip(hip["Correlation_Id"].tolist(), zip(hip["Thread_Id"].tolist(), hip["Start_Timestamp"].tolist())))
    spans: dict[str, list[tuple[int, int, str]]] = {}
    for thread, start, end, fn in zip(
        calls["Thread_Id"].tolist(), calls["Start_Timestamp"].tolist(), calls["End_Timestamp"].tolist(), named.tolist()
    ):
        spans.setdefault(thread, []).append((int(start), int(end), fn))
    for row, c in zip(todo.tolist(), kernels["Correlation_Id"].astype(str).to_numpy(dtype=object)[todo].tolist()):
        if c not in launch:
            continue
        thread, t = launch[c]
        inside = [fn for s, e, fn in spans.get(thread, ()) if s <= t <= e and fn]
        if inside:
            out[row] = inside[-1]
    return out


def _kernel_columns(frame: pd.DataFrame, agents: Agents, path: Path) -> dict[str, Any]:
    return {
        "gpu": _gpu_index(frame["Agent_Id"], agents, path, "Agent_Id"),
        "name": categorical(frame["Kernel_Name"], len(frame)),
        "start_ns": frame["Start_Timestamp"].to_numpy(dtype=np.int64),
        "end_ns": frame["End_Timestamp"].to_numpy(dtype=np.int64),
        "stream": _stream_names(frame),
        "activity": categorical("kernel", len(frame)),
        "copy_kind": categorical("", len(frame)),
    }


def copy_kinds(direction: pd.Series | np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """HtoD/DtoH/DtoD/HtoH from the direction; a device-to-device copy between two GPUs is PtoP (fwd.h:
    a peer copy is DEVICE_TO_DEVICE with two GPU agents)."""
    codes, uniques = column_codes(direction)
    words = np.array(
        [_DIRECTIONS.get(str(u).upper().removeprefix("MEMORY_COPY_"), "") for u in uniques.tolist()], dtype=object
    )
    kind = words[codes] if len(codes) else np.empty(0, dtype=object)
    peer = (kind == "DtoD") & (src >= 0) & (dst >= 0) & (src != dst)
    return np.where(peer, "PtoP", kind).astype(object)


def _copy_columns(frame: pd.DataFrame, agents: Agents, path: Path) -> dict[str, Any]:
    src = _gpu_index(frame["Source_Agent_Id"], agents, path, "Source_Agent_Id")
    dst = _gpu_index(frame["Destination_Agent_Id"], agents, path, "Destination_Agent_Id")
    kind = copy_kinds(frame["Direction"], src, dst)
    unknown = kind == ""
    if unknown.any():
        said = frame["Direction"].iloc[int(np.flatnonzero(unknown)[0])]
        raise InputError(path, f"Direction {str(said)[:40]!r} is no memory copy direction")
    # a copy belongs to the GPU that takes part: the destination of a host-to-device copy, else the source
    gpu = np.where(kind == "HtoD", dst, np.where(src >= 0, src, dst))
    return {
        "gpu": gpu,
        "name": categorical(np.where(kind == "", "Memcpy", "Memcpy " + kind.astype(str)).astype(object), len(kind)),
        "start_ns": frame["Start_Timestamp"].to_numpy(dtype=np.int64),
        "end_ns": frame["End_Timestamp"].to_numpy(dtype=np.int64),
        "stream": _stream_names(frame),
        "activity": categorical("memcpy", len(frame)),
        "copy_kind": categorical(kind, len(kind)),
        "collective": categorical("", len(kind)),
    }


def _concat(values: list[Any]) -> Any:
    if isinstance(values[0], pd.Categorical):
        if len(values) == 1:
            return values[0]
        # one kind of record may come with string categories (a CSV read by pandas' fallback, pandas 3's str
        # dtype), another with object ones: union_categoricals refuses a mix
        same = [
            v if v.categories.dtype == object else pd.Categorical.from_codes(v.codes, v.categories.astype(object))
            for v in values
        ]
        return union_categoricals(same)
    return np.concatenate(values)


def build_trace(
    parts: list[dict[str, Any]],
    agents: Agents,
    host: str,
    path: Path,
    context: ReadContext,
    fmt: str,
    warnings: list[str],
    extra: dict[str, Any] | None = None,
) -> Trace:
    """The event table of rocprofv3 records (one column dict per record kind): GPU rows only, in start
    order, one device per GPU agent that ran something."""
    cols: dict[str, Any] = {k: _concat([p[k] for p in parts]) for k in parts[0]} if parts else {}
    if extra:
        cols.update(extra)
    if not parts or not len(cols["gpu"]):
        raise InputError(path, "rocprofv3 trace with no kernel dispatch or memory copy")
    on_gpu = cols["gpu"] >= 0
    if not on_gpu.any():
        raise InputError(path, "rocprofv3 trace whose every record ran on a CPU agent: no GPU activity")
    if not on_gpu.all():
        warnings.append(f"{path}: left out {int((~on_gpu).sum()):,} records of CPU agents (not GPU activity)")
        cols = {k: v[on_gpu] for k, v in cols.items()}
    order = np.lexsort((cols["end_ns"], cols["start_ns"]))
    cols = {k: v[order] for k, v in cols.items()}
    gpu = cols.pop("gpu")
    used = np.unique(gpu)
    per_host = context.placement.devices_per_host or max(agents.n_gpus, int(used.max()) + 1)
    host_index = context.placement.host_index
    host = context.placement.host or host
    global_id = host_index * per_host + gpu
    dev_names = np.array([f"{host}/GPU:{g}" for g in range(int(used.max()) + 1)], dtype=object)
    events = make_table(
        {
            **cols,
            "host": host,
            "device": categorical_of(np.searchsorted(used, gpu), dev_names[used]),
            "global_id": global_id,
            "gpus_per_domain": per_host,
            "source": "rocprof",
        },
        n=len(gpu),
        owned=True,  # every array here was made by the reader (sorted copies, new columns)
    )
    return Trace(
        events=events,
        path=str(path),
        format=fmt,
        devices={str(dev_names[g]): int(host_index * per_host + g) for g in used.tolist()},
        device_models={str(dev_names[g]): agents.names[g] for g in used.tolist() if g in agents.names},
        device_kinds={str(dev_names[g]): GPU for g in used.tolist()},
        warnings=tuple(warnings),
    )
