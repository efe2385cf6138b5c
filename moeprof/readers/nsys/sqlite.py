"""SQLite exports (``nsys export --type sqlite``): the activity tables with their runtime launches joined in
SQL, the NVTX ranges pre-filtered in SQL, the runtime calls that wait for the device."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.trace import Trace
from ...errors import InputError, unforeseen_in
from ..sqlite_files import open_read_only, sqlite_problem
from .columns import one_number, texts
from .events import build
from .nvtx import NVTX_LIKE
from .tables import (
    ACTIVITY_TABLES,
    DOMAIN_CREATE,
    KERNEL,
    MEMCPY,
    MEMSET,
    NAME_COLUMNS,
    NVTX,
    PID_SHIFT,
    RUNTIME,
    STRINGS,
    SYNC_CALL,
    SYNC_LIKE,
    Frames,
    Unplaceable,
    beside_activities,
    matching_calls,
    placing_columns,
)


class SqliteTables:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')").fetchall()
        self.names = {r[0] for r in rows}
        self._cols: dict[str, list[str]] = {}

    def columns(self, table: str) -> list[str]:
        if table not in self.names:
            return []
        if table not in self._cols:
            self._cols[table] = [r[1] for r in self.conn.execute(f'PRAGMA table_info("{table}")')]
        return self._cols[table]

    def rows(self, table: str) -> int:
        return int(self.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]) if table in self.names else 0

    def frame(self, table: str, cols: list[str]) -> pd.DataFrame:
        have = [c for c in cols if c in self.columns(table)]
        if not have:
            return pd.DataFrame()
        sql = f'SELECT {", ".join(f"{chr(34)}{c}{chr(34)}" for c in have)} FROM "{table}"'
        return pd.read_sql_query(sql, self.conn, dtype_backend="numpy_nullable")


def _launch_join(t: SqliteTables, alias: str, table: str) -> tuple[str, str]:
    """SELECT items and JOIN clause that attach each activity's runtime launch (thread, start)."""
    rcols = t.columns(RUNTIME)
    acols = t.columns(table)
    if not {"correlationId", "globalTid", "start"} <= set(rcols) or "correlationId" not in acols:
        return "NULL AS launch_tid, NULL AS launch_start, NULL AS launch_end", ""
    cond = f"r.correlationId = {alias}.correlationId"
    if "globalPid" in acols:
        # correlation ids restart in every process: match the process too
        cond += f" AND (r.globalTid >> {PID_SHIFT}) = ({alias}.globalPid >> {PID_SHIFT})"
    end = 'r."end"' if "end" in rcols else "NULL"
    return (
        f"r.globalTid AS launch_tid, r.start AS launch_start, {end} AS launch_end",
        f'LEFT JOIN "{RUNTIME}" r ON {cond}',
    )


def _activity_sql(t: SqliteTables, table: str, extra: list[str]) -> str | None:
    cols = t.columns(table)
    if not {"start", "end", "deviceId"} <= set(cols):
        return None
    a = "a"
    items = [f"{a}.rowid AS rid", f"{a}.start AS start", f'{a}."end" AS "end"', f"{a}.deviceId AS deviceId"]
    items.append(f"{a}.streamId AS streamId" if "streamId" in cols else "-1 AS streamId")
    items.append(f"({a}.globalPid >> {PID_SHIFT}) AS pid" if "globalPid" in cols else "NULL AS pid")
    joins = []
    if table == KERNEL:
        names = []
        for i, c in enumerate(c for c in NAME_COLUMNS if c in cols):
            if STRINGS in t.names:
                joins.append(f'LEFT JOIN "{STRINGS}" s{i} ON s{i}.id = {a}."{c}"')
                # a name column normally holds a StringIds id; take text as it is
                col = f'{a}."{c}"'
                names.append(f"NULLIF(CASE WHEN typeof({col}) = 'integer' THEN s{i}.value ELSE {col} END, '')")
            else:
                names.append(f"NULLIF(CAST({a}.\"{c}\" AS TEXT), '')")
        items.append(f"COALESCE({', '.join(names)}, '') AS name" if names else "'' AS name")
    for c in extra:
        items.append(f'{a}."{c}" AS "{c}"' if c in cols else f'NULL AS "{c}"')
    launch_items, launch_join = _launch_join(t, a, table)
    items.append(launch_items)
    return f'SELECT {", ".join(items)} FROM "{table}" {a} {" ".join(joins)} {launch_join}'


def _read_activity(t: SqliteTables, table: str, extra: list[str]) -> pd.DataFrame:
    if not placing_columns(t, table):
        return pd.DataFrame()
    sql = _activity_sql(t, table, extra)
    if sql is None:
        return pd.DataFrame()
    frame = pd.read_sql_query(sql, t.conn, dtype_backend="numpy_nullable")
    # a duplicated runtime correlation id would repeat an activity: keep its first launch
    return frame.drop_duplicates("rid", keep="first").drop(columns="rid")


def _string_expr(t: SqliteTables, cols: set[str], text_col: str, id_col: str, alias: str) -> tuple[str, str]:
    """SQL for an NVTX string held inline (``text``) or as a StringIds id (``textId``), and its JOIN."""
    parts, join = [], ""
    if text_col in cols:
        parts.append(f"n.{text_col}")
    if id_col in cols and STRINGS in t.names:
        join = f'LEFT JOIN "{STRINGS}" {alias} ON {alias}.id = n.{id_col}'
        parts.append(f"{alias}.value")
    if not parts:
        return "NULL", ""
    return (f"COALESCE({', '.join(parts)})" if len(parts) > 1 else parts[0]), join


def _nvtx_sql(t: SqliteTables, step_marker: re.Pattern[str] | None = None) -> tuple[str, list[str]] | None:
    cols = set(t.columns(NVTX))
    text, text_join = _string_expr(t, cols, "text", "textId", "st")
    if not {"start", "end"} <= cols or text == "NULL":
        return None
    js, js_join = _string_expr(t, cols, "jsonText", "jsonTextId", "sj")
    items = [
        "n.start AS start",
        'n."end" AS "end"',
        f"{text} AS text",
        "n.globalTid AS tid" if "globalTid" in cols else "0 AS tid",
        "n.domainId AS domain" if "domainId" in cols else "0 AS domain",
        f"{js} AS json",
        # as hex text: pandas' nullable reader would try to decode a blob as UTF-8
        "NULLIF(hex(n.binaryData), '') AS blob" if "binaryData" in cols else "NULL AS blob",
    ]
    base = f'SELECT {", ".join(items)} FROM "{NVTX}" n {text_join} {js_join} WHERE n."end" IS NOT NULL'
    if step_marker is not None:
        return base, []  # a user's step regex has no LIKE form: read every range, filter in Python
    like = " OR ".join(f"{text} LIKE ?" for _ in NVTX_LIKE)
    return f"{base} AND ({like})", list(NVTX_LIKE)


def _sqlite_frames(t: SqliteTables, step_marker: re.Pattern[str] | None = None) -> Frames:
    kernels = _read_activity(t, KERNEL, [])
    memcpys = _read_activity(t, MEMCPY, ["copyKind", "bytes", "srcDeviceId", "dstDeviceId"])
    memsets = _read_activity(t, MEMSET, ["bytes"])
    q = _nvtx_sql(t, step_marker)
    nvtx = pd.read_sql_query(q[0], t.conn, params=q[1], dtype_backend="numpy_nullable") if q else pd.DataFrame()
    domains: dict[int, str] = {}
    cols = set(t.columns(NVTX))
    text, join = _string_expr(t, cols, "text", "textId", "st")
    if {"eventType", "domainId"} <= cols and text != "NULL":
        sql = f'SELECT n.domainId, {text} FROM "{NVTX}" n {join} WHERE n.eventType = {DOMAIN_CREATE}'
        rows = t.conn.execute(sql).fetchall()
        domains = {
            d: v if isinstance(v, str) else "" for d, v in ((one_number(d), v) for d, v in rows) if type(d) is int
        }
    calls = _sqlite_sync_calls(t)
    return Frames(
        kernels,
        memcpys,
        memsets,
        nvtx,
        domains,
        **beside_activities(t.frame, calls),
    )


def _sqlite_sync_calls(t: SqliteTables) -> pd.DataFrame:
    """The runtime calls that wait for the device (``SYNC_CALL``): start, end, tid, corr. Names are
    ``nameId`` into StringIds (every export seen; the few matching ids are found first, so the runtime
    table is scanned once without a join), else a ``name`` text column."""
    cols = set(t.columns(RUNTIME))
    if not {"start", "end", "globalTid"} <= cols:
        return pd.DataFrame()
    items = 'r.start AS start, r."end" AS "end", r.globalTid AS tid, ' + (
        "r.correlationId AS corr" if "correlationId" in cols else "NULL AS corr"
    )
    if "nameId" in cols and STRINGS in t.names:
        like = " OR ".join("value LIKE ?" for _ in SYNC_LIKE)
        found = t.conn.execute(f'SELECT id, value FROM "{STRINGS}" WHERE {like}', SYNC_LIKE).fetchall()
        ids = sorted({i for i, v in found if type(i) is int and isinstance(v, str) and SYNC_CALL.match(v)})
        if not ids:
            return pd.DataFrame()
        sql = f'SELECT {items} FROM "{RUNTIME}" r WHERE r.nameId IN ({", ".join(map(str, ids))})'
        return pd.read_sql_query(sql, t.conn, dtype_backend="numpy_nullable")
    if "name" in cols:
        like = " OR ".join("r.name LIKE ?" for _ in SYNC_LIKE)
        sql = f'SELECT {items}, r.name AS name FROM "{RUNTIME}" r WHERE {like}'
        calls = pd.read_sql_query(sql, t.conn, params=SYNC_LIKE, dtype_backend="numpy_nullable")
        return matching_calls(calls, texts(calls["name"]) if len(calls) else np.empty(0, dtype=object))
    return pd.DataFrame()


def parse_sqlite(
    db: Path, shown: Path, stem: str, host_index: int, step_marker: re.Pattern[str] | None = None
) -> Trace:
    with open_read_only(db, shown, "moeprof-sqlite-") as conn:
        return _parse_connection(conn, shown, stem, host_index, step_marker)


def _parse_connection(
    conn: sqlite3.Connection, shown: Path, stem: str, host_index: int, step_marker: re.Pattern[str] | None
) -> Trace:
    try:
        tables = SqliteTables(conn)
        if not tables.names & set(ACTIVITY_TABLES):
            raise InputError(shown, "no CUPTI activity tables (not an Nsight Systems export?)")
        try:
            frames = _sqlite_frames(tables, step_marker)
        except sqlite3.OperationalError as exc:
            if "UTF-8" not in str(exc):
                raise
            # some exports hold strings that are not valid UTF-8 (raw symbol bytes): decode
            # leniently, which costs a Python call per string, so only when needed
            conn.text_factory = lambda b: b.decode("utf-8", "replace")
            frames = _sqlite_frames(tables, step_marker)
    except Unplaceable as exc:
        raise InputError(shown, str(exc)) from None
    except (sqlite3.Error, UnicodeDecodeError, pd.errors.DatabaseError) as exc:  # SQLite's (one may not decode)
        raise InputError(shown, f"not a readable Nsight Systems SQLite export: {sqlite_problem(exc)}") from None
    except ValueError:
        raise unforeseen_in(shown, "not a readable Nsight Systems SQLite export") from None
    finally:
        conn.close()
    return build(frames, frames.hostname or stem, host_index, shown, step_marker)
