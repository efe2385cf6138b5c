"""AMD rocprofv3's rocpd SQLite database (ROCm 7's default output): one ``<prefix>results.db`` per process.

What is read, and where rocprofiler-sdk defines it (``source/share/rocprofiler-sdk-rocpd/rocpd_tables.sql``,
``rocpd_views.sql``; the writer ``source/lib/output/generateRocpd.cpp``; docs/metrics.md, "Reading rocpd"):

- The unsuffixed views (``rocpd_kernel_dispatch`` over ``rocpd_kernel_dispatch_<uuid>``...), joined on ``id`` and
  ``guid`` as the tool's own ``data_views.sql`` does, not its ``kernels`` view, whose columns move between schema
  versions and whose inner joins drop a dispatch without a stream or thread row.
- ``rocpd_info_agent``: ``id`` is the agent's node id, ``type`` 'CPU'/'GPU', ``type_index`` its index among the
  node's GPUs, ``product_name`` ("AMD Instinct MI300X"). A device is ``<host>/GPU:<type_index>``.
- ``rocpd_kernel_dispatch``: ``agent_id``, ``start``/``end`` (integer ns, CLOCK_BOOTTIME), ``kernel_id`` ->
  ``rocpd_info_kernel_symbol.display_name`` (the formatted name), ``stream_id`` -> ``rocpd_info_stream.name``,
  ``event_id`` -> ``rocpd_event.stack_id`` (the internal correlation id of the launching HIP call).
- ``rocpd_memory_copy``: ``name_id`` -> ``rocpd_string`` (the direction, ``MEMORY_COPY_HOST_TO_DEVICE``...),
  ``src_agent_id``, ``dst_agent_id``, ``size`` (bytes).
- ``rocpd_region`` + ``rocpd_event``: host API spans; the category string says the domain (``RCCL_API``,
  ``HIP_RUNTIME_API_EXT``, ``MARKER_CORE_RANGE_API``); an API event's ``parent_stack_id`` is its ancestor, the
  API call that issued it. A kernel's collective comes from the RCCL call its HIP launch ran inside
  (grouped calls launch in ``ncclGroupEnd``: the Nsight reader's grouping decides their kind); a ROCTx range's
  text is ``rocpd_event.extdata`` ``{"message": ...}``; those named like steps are step markers.
"""

from __future__ import annotations

import array
import itertools
import json
import re
import sqlite3
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.events import categorical
from ..core.trace import Trace
from ..errors import InputError, unforeseen_in
from .base import ReadContext
from .nccl_calls import launch_info
from .rocpd_schema import REQUIRED_VIEWS, RESULTS_SUFFIX
from .rocprof import Agents, build_trace, copy_kinds, roctx_steps
from .sqlite_files import open_read_only, sqlite_problem

FORMAT = "rocpd"
_OPTIONAL_VIEWS = ("rocpd_info_kernel_symbol", "rocpd_memory_copy", "rocpd_region", "rocpd_info_stream",
                   "rocpd_arg", "rocpd_info_node")  # fmt: skip
_API_CATEGORIES = ("RCCL_API",)  # generateRocpd.cpp: an API event's category is its buffer-tracing kind's name


class _Refused(Exception):
    """A database that holds rocpd's schema but not what a trace needs; the message says what."""


def read(path: Path, context: ReadContext | None = None) -> Trace:
    """One rocpd database: its kernel dispatches and memory copies, one device per GPU agent."""
    context = context or ReadContext()
    path = Path(path)
    with open_read_only(path, path, "moeprof-rocpd-") as conn:
        try:
            return _read(conn, path, context)
        except _Refused as exc:
            raise InputError(path, str(exc)) from None
        except sqlite3.OperationalError as exc:
            if "no such" in str(exc):
                raise InputError(path, f"rocpd database without what a trace needs: {_line(exc)}") from None
            raise InputError(path, f"not a readable rocpd database (cut short?): {_line(exc)}") from None
        except sqlite3.Error as exc:
            raise InputError(path, f"not a readable rocpd database (cut short?): {_line(exc)}") from None
        except (UnicodeDecodeError, pd.errors.DatabaseError) as exc:  # SQLite's messages (one may not decode)
            raise InputError(path, f"not a readable rocpd database: {_line(exc)}") from None
        except (ValueError, TypeError, OverflowError):
            raise unforeseen_in(path, "not a readable rocpd database") from None
        finally:
            conn.close()


def _query(sql: str, conn: sqlite3.Connection) -> pd.DataFrame:
    """A query's rows as a frame (sqlite3's own errors, which name the missing table or column, pass through).

    A column whose every cell is an integer is int64; any other stays as its cells are (object), for the
    readers' own checked conversions: pandas' inference per row and its string columns cost more than the
    fetch itself on the host API rows."""
    cur = conn.execute(sql)
    rows = cur.fetchall()
    names = [d[0] for d in cur.description]
    if not rows:
        return pd.DataFrame.from_records(rows, columns=names)
    frame = pd.DataFrame({i: _cells(column) for i, column in enumerate(zip(*rows, strict=True))}, copy=False)
    frame.columns = names
    return frame


def _cells(column: tuple[Any, ...]) -> pd.Series:
    """One fetched column: int64 where every cell is a Python int (``array('q')`` takes nothing else, where
    numpy would parse text and truncate a fraction), else the cells as objects (no string dtype inferred)."""
    try:
        return pd.Series(np.frombuffer(array.array("q", column), dtype=np.int64), copy=False)
    except (TypeError, OverflowError):
        return pd.Series(np.array(column, dtype=object), dtype=object, copy=False)


def _line(exc: BaseException) -> str:
    return sqlite_problem(exc)[:200]


def _read(conn: sqlite3.Connection, path: Path, context: ReadContext) -> Trace:
    names = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    missing = [v for v in REQUIRED_VIEWS if v not in names]
    if missing:
        raise _Refused(f"not a rocpd database: no {', '.join(missing)} (rocprofv3 --output-format rocpd)")
    has = {v for v in _OPTIONAL_VIEWS if v in names}
    agents = _agents(conn)
    kernels = _kernels(conn, has, agents)
    copies = _copies(conn, has, agents) if "rocpd_memory_copy" in has else None
    warnings: list[str] = []
    regions = _regions(conn, has) if "rocpd_region" in has else _empty_regions()
    if len(kernels["gpu"]):
        kernels["collective"] = _collectives(conn, kernels.pop("event_id"), kernels["name"], regions, has)
    else:
        kernels.pop("event_id")
        kernels["collective"] = categorical("", 0)
    parts = [kernels]
    if copies is not None:
        copies["collective"] = categorical("", len(copies["gpu"]))
        parts.append(copies)
    host = _host(conn, has, path)
    trace = build_trace(parts, agents, host, path, context, FORMAT, warnings)
    markers = roctx_steps(regions, trace, context)
    annotations = tuple(str(n) for n in pd.unique(regions["text"].to_numpy(dtype=object)) if n)
    return replace(trace, markers=markers, annotations=annotations)


# ---- agents --------------------------------------------------------------------------------------------------------


def _agents(conn: sqlite3.Connection) -> Agents:
    """Agents by ``rocpd_info_agent.id`` (the node id kernels and copies name) -> index among the GPUs (None: a
    CPU), and the GPUs' product names."""
    rows = conn.execute("SELECT id, type, type_index, product_name, name FROM rocpd_info_agent").fetchall()
    gpu_of: dict[int, int] = {}
    names: dict[int, str] = {}
    by_id: dict[int, int | None] = {}
    for agent_id, kind, type_index, product, gfx in rows:
        if not isinstance(agent_id, int):
            raise _Refused(f"rocpd_info_agent.id {str(agent_id)[:40]!r} is no integer")
        if str(kind).upper() != "GPU":
            by_id[agent_id] = None
            continue
        if not isinstance(type_index, int) or type_index < 0:
            raise _Refused(f"rocpd_info_agent.type_index {str(type_index)[:40]!r} of GPU agent {agent_id} is no index")
        gpu_of[agent_id] = by_id[agent_id] = type_index
        label = str(product or gfx or "").strip()
        if label:
            names[type_index] = label
    if not gpu_of:
        raise _Refused("rocpd_info_agent lists no GPU agent")
    return Agents(by_id, names, max(gpu_of.values()) + 1)


def _gpu_index(agent_ids: pd.Series, agents: Agents, column: str) -> np.ndarray:
    """Each row's GPU index (-1: a CPU agent); an id the agent list lacks is refused."""
    ids = _int64(agent_ids, column)
    codes, uniques = pd.factorize(ids)
    table = np.empty(len(uniques), dtype=np.int64)
    for i, a in enumerate(uniques.tolist()):
        if int(a) not in agents.by_logical:
            raise _Refused(f"{column} {a} names no agent of rocpd_info_agent")
        gpu = agents.by_logical[int(a)]
        table[i] = -1 if gpu is None else gpu
    return table[codes] if len(codes) else np.zeros(0, dtype=np.int64)


def _int64(column: pd.Series, name: str) -> np.ndarray:
    """An integer column as int64; NULL, text or a fraction is refused naming the column. A whole number past
    int64 is kept at its limit, where the time screen drops it with a warning (docs/metrics.md, "Times moeprof
    accepts")."""
    if column.dtype.kind in "iu":
        return column.to_numpy(dtype=np.int64)
    values = pd.to_numeric(column, errors="coerce")
    ok = values.notna() & (values == np.floor(values))
    if not bool(ok.all()):
        row = int(np.flatnonzero(~ok.to_numpy())[0])
        raise _Refused(f"{name} of row {row + 1} is {str(column.iloc[row])[:40]!r}: not an integer")
    v = values.to_numpy(dtype=np.float64)
    high, low = v >= 2.0**63, v < -(2.0**63)
    out = np.where(high | low, 0.0, v).astype(np.int64)
    out[high] = np.iinfo(np.int64).max
    out[low] = np.iinfo(np.int64).min
    return out


# ---- kernel dispatches and memory copies ---------------------------------------------------------------------------


_DISPATCH_CELLS = ("agent_id", "start", '"end"', "stream_id", "kernel_id", "COALESCE(event_id, -1)")
_DISPATCH_SQL = f"SELECT {', '.join(_DISPATCH_CELLS)} FROM rocpd_kernel_dispatch"
_DISPATCH_COLUMNS = ("agent_id", "start", "end", "stream_id", "kernel_id", "stack")
# a text or blob cell sorts above every number in SQLite: one comparison per cell finds one (a NULL is found by
# a column's count, a fraction by the parse)
_NOT_NUMBER = " OR ".join(f"{c} > 9223372036854775807" for c in _DISPATCH_CELLS)
_DISPATCH_TEXT_SQL = (
    f"SELECT count(*), max({_NOT_NUMBER}), "
    + ", ".join(f"group_concat({c}, ',')" for c in _DISPATCH_CELLS)
    + " FROM rocpd_kernel_dispatch"
)
_DIGITS = 21  # the widest int64 in text, with its sign and the separator
_MIN_ROW_BYTES = 40  # a dispatch row of rocpd_tables.sql takes more (its guid alone is 36 bytes)


def _kernels(conn: sqlite3.Connection, has: set[str], agents: Agents) -> dict[str, Any]:
    """The dispatches as integer columns (no Python object per row); names and streams are looked up once per
    distinct id (kernel symbols and streams are a few hundred rows)."""
    block = _dispatch_block(conn)
    n = len(block[0])
    names = _lookup(conn, "rocpd_info_kernel_symbol", "display_name, kernel_name", has)
    kernel_names = _map_ids(block[4], lambda k: _kernel_name(names.get(k)))
    streams = _lookup(conn, "rocpd_info_stream", "name", has)
    stream_names = _map_ids(block[3], lambda i: _stream_name(streams.get(i), i))
    return {
        "gpu": _gpu_index(pd.Series(block[0]), agents, "rocpd_kernel_dispatch.agent_id"),
        "name": kernel_names,
        "start_ns": block[1],
        "end_ns": block[2],
        "stream": stream_names,
        "activity": categorical("kernel", n),
        "copy_kind": categorical("", n),
        "bytes": np.full(n, np.nan),
        "event_id": block[5],
    }


def _dispatch_block(conn: sqlite3.Connection) -> list[np.ndarray]:
    """The six dispatch columns (``_DISPATCH_CELLS``) as int64 arrays, by the first route that takes the table.

    1. Each column as one text that SQLite joins (``group_concat``) and numpy parses: no Python object per
       cell, about half of fetching the rows (benchmarks/bench_rocpd.py). Taken only where every cell is an
       integer: a text or blob cell is counted in the same scan, a NULL leaves its column short, a fraction
       does not parse.
    2. Where a column's text could pass SQLite's string limit: the rows' cells straight into an int64 buffer
       (``array('q')`` takes a Python int only, so any other cell fails it).
    3. Otherwise the checked route: the rows as they are, a bad time or agent refused naming its row (numpy's
       own conversion would truncate a fraction silently).
    """
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    (page_size,) = conn.execute("PRAGMA page_size").fetchone()
    fits = pages * page_size / _MIN_ROW_BYTES * _DIGITS < limit
    if not fits:
        (rows,) = conn.execute("SELECT count(*) FROM rocpd_kernel_dispatch").fetchone()
        fits = rows * _DIGITS < limit
    if fits:
        try:
            block = _dispatch_text(conn)
        except sqlite3.DataError:  # "string or blob too big": a build whose limit is lower than it says
            block = None
        if block is not None:
            return block
    else:
        try:
            flat = array.array("q", itertools.chain.from_iterable(conn.execute(_DISPATCH_SQL)))
            return [np.ascontiguousarray(c) for c in np.frombuffer(flat, dtype=np.int64).reshape(-1, 6).T]
        except (TypeError, OverflowError):
            pass
    return _dispatch_checked(conn)


def _dispatch_text(conn: sqlite3.Connection) -> list[np.ndarray] | None:
    """Route 1 of :func:`_dispatch_block`; None where a cell is no integer."""
    n, not_number, *texts = conn.execute(_DISPATCH_TEXT_SQL).fetchone()
    if not n:
        return [np.zeros(0, dtype=np.int64)] * 6
    if not_number or any(not isinstance(t, str) for t in texts):
        return None
    columns: list[np.ndarray] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # numpy before 2.x warns where it stops early
        for text in texts:
            try:
                column = np.fromstring(text, dtype=np.int64, sep=",")
            except (ValueError, DeprecationWarning):
                return None
            if len(column) != n:
                return None
            columns.append(column)
    return columns


def _dispatch_checked(conn: sqlite3.Connection) -> list[np.ndarray]:
    """Route 3 of :func:`_dispatch_block`: a NULL, text, fraction or number past int64 somewhere."""
    f = pd.DataFrame.from_records(conn.execute(_DISPATCH_SQL).fetchall(), columns=list(_DISPATCH_COLUMNS))
    if not len(f):
        return [np.zeros(0, dtype=np.int64)] * 6

    return [
        _int64(f["agent_id"], "rocpd_kernel_dispatch.agent_id"),
        _int64(f["start"], "rocpd_kernel_dispatch.start"),
        _int64(f["end"], "rocpd_kernel_dispatch.end"),
        _id_column(f["stream_id"], "rocpd_kernel_dispatch.stream_id", -1),
        _id_column(f["kernel_id"], "rocpd_kernel_dispatch.kernel_id", 0),
        _id_column(f["stack"], "rocpd_kernel_dispatch.event_id", -1),
    ]


def _id_column(column: pd.Series, name: str, missing: int) -> np.ndarray:
    """An id column (stream, kernel symbol, event) as int64: text or NULL is ``missing`` (the row loses its name
    only), but a number that is no whole int64 (a REAL such as 1e300 or 2.5, an infinity) is refused naming the
    column, where numpy's cast would make up an id (and warn on stderr)."""
    if column.dtype.kind in "iu":
        return column.to_numpy(dtype=np.int64)
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=np.float64)
    known = ~np.isnan(values)
    bad = known & ~((values == np.floor(values)) & (values >= -(2.0**63)) & (values < 2.0**63))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise _Refused(f"{name} of row {row + 1} is {str(column.iloc[row])[:40]!r}: not an integer id")
    out = np.full(len(values), missing, dtype=np.int64)
    out[known] = values[known].astype(np.int64)
    return out


def _lookup(conn: sqlite3.Connection, view: str, columns: str, has: set[str]) -> dict[int, tuple]:
    """A small id -> row table (kernel symbols, streams); empty when the view is missing."""
    if view not in has:
        return {}
    out: dict[int, tuple] = {}
    for row in conn.execute(f"SELECT id, {columns} FROM {view}"):
        if isinstance(row[0], int):
            out.setdefault(row[0], tuple(row[1:]))
    return out


def _map_ids(ids: np.ndarray, label: Callable[[int], str]) -> pd.Categorical:
    """Each row's label, computed once per distinct id (a categorical: no string object per row)."""
    codes, uniques = pd.factorize(ids)
    labels, categories = pd.factorize(np.array([label(int(u)) for u in uniques.tolist()], dtype=object))
    return pd.Categorical.from_codes(labels[codes] if len(codes) else codes, categories=pd.Index(categories))


def _kernel_name(row: tuple | None) -> str:
    """``display_name`` (the formatted name), else ``kernel_name``, else the writer's ``unknown_kernel``."""
    for value in row or ():
        if value is not None and str(value) != "":
            return str(value)
    return "unknown_kernel"


def _stream_name(row: tuple | None, stream_id: int) -> str:
    """rocpd's stream names ("Default Stream", "Stream 1"; generateRocpd.cpp, get_stream_id), else the id."""
    if row and row[0] is not None and str(row[0]) != "":
        return str(row[0])
    return f"stream {stream_id}"


def _streams(names: pd.Series, ids: pd.Series) -> np.ndarray:
    """rocpd's stream names ("Default Stream", "Stream 1"; generateRocpd.cpp, get_stream_id), else the id."""
    label = names.where(names.notna() & (names != ""), "stream " + ids.astype(str))
    return label.astype(str).to_numpy(dtype=object)


def _copies(conn: sqlite3.Connection, has: set[str], agents: Agents) -> dict[str, Any]:
    stream = "rocpd_info_stream" in has
    sql = (
        'SELECT M.start, M."end", S.string, M.src_agent_id, M.dst_agent_id, M.size, M.stream_id, '
        + ("ST.name " if stream else "NULL ")
        + "FROM rocpd_memory_copy M LEFT JOIN rocpd_string S ON S.id = M.name_id AND S.guid = M.guid "
        + ("LEFT JOIN rocpd_info_stream ST ON ST.id = M.stream_id AND ST.guid = M.guid" if stream else "")
    )
    f = _query(sql, conn)
    f.columns = ["start", "end", "direction", "src", "dst", "size", "stream_id", "stream"]
    src = _gpu_index(f["src"], agents, "rocpd_memory_copy.src_agent_id")
    dst = _gpu_index(f["dst"], agents, "rocpd_memory_copy.dst_agent_id")
    kind = copy_kinds(f["direction"].fillna("").to_numpy(dtype=object), src, dst)
    if len(kind) and (kind == "").any():
        said = f["direction"].iloc[int(np.flatnonzero(kind == "")[0])]
        raise _Refused(f"rocpd_memory_copy direction {str(said)[:40]!r} is no memory copy direction")
    gpu = np.where(kind == "HtoD", dst, np.where(src >= 0, src, dst))
    return {
        "gpu": gpu,
        "name": pd.Categorical(("Memcpy " + kind.astype(str)).astype(object)),
        "start_ns": _int64(f["start"], "rocpd_memory_copy.start"),
        "end_ns": _int64(f["end"], "rocpd_memory_copy.end"),
        "stream": pd.Categorical(_streams(f["stream"], f["stream_id"])),
        "activity": categorical("memcpy", len(f)),
        "copy_kind": categorical(kind, len(kind)),
        "bytes": pd.to_numeric(f["size"], errors="coerce").to_numpy(dtype=np.float64),
    }


# ---- host API: RCCL calls and ROCTx ranges -------------------------------------------------------------------------


def _empty_regions() -> pd.DataFrame:
    types = {"tid": "int64", "start": "int64", "end": "int64", "name": "object", "category": "object",
             "event_id": "float64", "stack_id": "float64", "text": "object"}  # fmt: skip
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in types.items()})


def _regions(conn: sqlite3.Connection, has: set[str]) -> pd.DataFrame:
    """RCCL API calls and ROCTx ranges (``rocpd_region`` with their event's category), the range's text its
    ``{"message": ...}``."""
    f = _query(
        'SELECT R.tid, R.start, R."end", N.string, C.string, E.id, E.stack_id, E.extdata '
        "FROM rocpd_region R JOIN rocpd_event E ON E.id = R.event_id AND E.guid = R.guid "
        "LEFT JOIN rocpd_string N ON N.id = R.name_id AND N.guid = R.guid "
        "LEFT JOIN rocpd_string C ON C.id = E.category_id AND C.guid = E.guid "
        "WHERE C.string = 'RCCL_API' OR C.string LIKE 'MARKER%'",
        conn,
    )
    f.columns = ["tid", "start", "end", "name", "category", "event_id", "stack_id", "extdata"]
    if not len(f):
        return _empty_regions()
    f["start"] = _int64(f["start"], "rocpd_region.start")
    f["end"] = _int64(f["end"], "rocpd_region.end")
    f["tid"] = _id_column(f["tid"], "rocpd_region.tid", -1)
    f["stack_id"] = pd.to_numeric(f["stack_id"], errors="coerce").astype(np.float64)
    f["event_id"] = pd.to_numeric(f["event_id"], errors="coerce").astype(np.float64)
    name = _strings(f["name"], str)
    f["name"] = pd.Series(name, index=f.index, dtype=object)
    text = _strings(f["extdata"], _message)
    marker = _strings(f["category"], lambda c: "MARKER" if c.startswith("MARKER") else "") != ""
    f["category"] = pd.Series(_strings(f["category"], str), index=f.index, dtype=object)
    f["text"] = pd.Series(np.where(marker & (text != ""), text, name), index=f.index, dtype=object)
    return f.drop(columns=["extdata"])


def _strings(column: pd.Series, label: Callable[[str], str]) -> np.ndarray:
    """``label`` of each row's text (a missing cell as ""), computed once per distinct cell; objects, no
    string dtype per row."""
    codes, uniques = pd.factorize(column.to_numpy(dtype=object))
    table = np.array([label(str(u)) for u in uniques.tolist()] + [label("")], dtype=object)
    return table[codes] if len(codes) else np.empty(0, dtype=object)


def _message(extdata: str) -> str:
    try:
        doc = json.loads(extdata) if extdata else {}
    except ValueError:
        return ""
    return str(doc.get("message", "")) if isinstance(doc, dict) else ""


def _collectives(
    conn: sqlite3.Connection, event_id: np.ndarray, names: pd.Categorical, regions: pd.DataFrame, has: set[str]
) -> pd.Categorical:
    """Per kernel, the collective of the RCCL call its launch ran inside ("" where none or not RCCL).

    A kernel's event carries its launch's internal correlation id (``stack_id``); the HIP launch's event has
    the same ``stack_id`` and, made inside an RCCL call, that call's id as ``parent_stack_id``
    (generateRocpd.cpp, insert_api_data: ancestor); the RCCL region's id is its own internal id. Only the
    events of RCCL kernels are looked up."""
    rccl = regions.loc[regions["category"] == "RCCL_API"]
    if not len(rccl):
        return categorical("", len(event_id))
    # HIP calls issued inside another API call: internal id -> ancestor
    anc = _query(
        "SELECT E.stack_id, E.parent_stack_id FROM rocpd_event E "
        "JOIN rocpd_string C ON C.id = E.category_id AND C.guid = E.guid "
        "WHERE C.string LIKE 'HIP%' AND E.parent_stack_id <> 0 AND E.parent_stack_id <> E.stack_id",
        conn,
    )
    ancestor = pd.Series(
        pd.to_numeric(anc.iloc[:, 1], errors="coerce").to_numpy(dtype=np.float64),
        index=pd.to_numeric(anc.iloc[:, 0], errors="coerce").to_numpy(dtype=np.float64),
    )
    ancestor = ancestor[~ancestor.index.duplicated()]
    peers = _peers(conn, has, rccl)
    calls = pd.DataFrame(
        {
            "clean": rccl["name"].to_numpy(dtype=object),
            "start": rccl["start"].to_numpy(dtype=np.int64),
            "tid": rccl["tid"].to_numpy(dtype=np.int64),
        }
    )
    payload = pd.DataFrame({"peer": peers, "nbytes": np.full(len(rccl), np.nan), "comm": np.full(len(rccl), np.nan)})
    info = launch_info(calls, payload)
    coll_of_call = pd.Series(info["coll"].to_numpy(dtype=object), index=rccl["stack_id"].to_numpy(dtype=np.float64))
    coll_of_call = coll_of_call[~coll_of_call.index.duplicated()]
    rccl_kernel = np.asarray(names.categories.str.contains(_RCCL_KERNEL, regex=True), dtype=bool)
    rows = np.flatnonzero(rccl_kernel[names.codes]) if len(names) else np.zeros(0, dtype=np.int64)
    # each distinct event once (a kernel's event -> its launch -> the RCCL call around it), then mapped over rows
    per_row, events = pd.factorize(event_id[rows])
    stack = _stack_ids(conn, np.sort(events))
    stack_id = stack.reindex(events.astype(np.float64)).to_numpy(dtype=np.float64)
    parent = ancestor.reindex(stack_id).to_numpy(dtype=np.float64)
    named = coll_of_call.reindex(parent).fillna("").to_numpy(dtype=object)
    # "" but at the RCCL kernels' rows: codes set there, no string per row
    labels, uniques = pd.factorize(np.concatenate([np.array([""], dtype=object), named]))
    codes = np.zeros(len(event_id), dtype=np.int64)
    codes[rows] = labels[1:][per_row]
    return pd.Categorical.from_codes(codes, categories=pd.Index(uniques, dtype=object))


_RCCL_KERNEL = r"(?i)nccl|rccl"


def _stack_ids(conn: sqlite3.Connection, event_ids: np.ndarray) -> pd.Series:
    """``rocpd_event.stack_id`` of some events (id -> stack id), looked up in chunks of literal ids."""
    parts = []
    for i in range(0, len(event_ids), 5000):
        chunk = ",".join(str(int(e)) for e in event_ids[i : i + 5000])
        parts.extend(conn.execute(f"SELECT id, stack_id FROM rocpd_event WHERE id IN ({chunk})").fetchall())
    f = pd.DataFrame.from_records(parts, columns=["id", "stack_id"])
    s = pd.Series(
        pd.to_numeric(f["stack_id"], errors="coerce").to_numpy(dtype=np.float64),
        index=pd.to_numeric(f["id"], errors="coerce").to_numpy(dtype=np.float64),
    )
    return s[~s.index.duplicated()]


def _peers(conn: sqlite3.Connection, has: set[str], rccl: pd.DataFrame) -> np.ndarray:
    """The ``peer`` argument of each RCCL call (ncclSend/ncclRecv; ``rocpd_arg``), NaN where none."""
    if "rocpd_arg" not in has:
        return np.full(len(rccl), np.nan)
    a = _query("SELECT event_id, value FROM rocpd_arg WHERE name = 'peer'", conn)
    # a few distinct peers over many calls: each value's text converted once
    codes, values = pd.factorize(a["value"].to_numpy(dtype=object))
    numbers = np.append(
        pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype=np.float64), np.nan
    )
    by_event = pd.Series(
        numbers[codes] if len(codes) else np.zeros(0),
        index=pd.to_numeric(a["event_id"], errors="coerce").to_numpy(dtype=np.float64),
    )
    by_event = by_event[~by_event.index.duplicated()]
    return by_event.reindex(rccl["event_id"].to_numpy(dtype=np.float64)).to_numpy(dtype=np.float64)


_PID_PREFIX = re.compile(r"^\d+$")


def _host(conn: sqlite3.Connection, has: set[str], path: Path) -> str:
    """``rocpd_info_node.hostname``; else the folder of a ``<pid>_results.db``, the ``NAME`` of
    ``NAME_results.db``, the file's stem."""
    if "rocpd_info_node" in has:
        try:
            row = conn.execute("SELECT hostname FROM rocpd_info_node WHERE hostname <> '' LIMIT 1").fetchone()
        except sqlite3.Error:
            row = None
        if row and row[0]:
            return str(row[0])
    name = path.name
    prefix = name[: -len(RESULTS_SUFFIX)] if name.lower().endswith(RESULTS_SUFFIX) else path.stem
    if prefix and not _PID_PREFIX.match(prefix):
        return prefix
    return path.resolve().parent.name or "host0"
