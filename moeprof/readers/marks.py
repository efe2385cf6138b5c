"""moeprof's own outputs, recognized by the mark each carries, so they are never read as traces.

Every file moeprof writes names moeprof and its schema where a reader meets it first:

- JSON (analysis, baseline, manifest, check, diff, history export): ``"schema": "moeprof.<kind>/<n>"``,
  the object's first key;
- the annotated trace (Chrome JSON): a leading ``"metadata": {"producer": "moeprof ...",
  "schema": "moeprof.annotated-trace/1"}`` (the one key Perfetto's JSON importer reads before
  ``traceEvents``; ``otherData`` there would end its parse);
- the event table: parquet key-value metadata ``moeprof`` (``{"schema": "moeprof.events/1"}``); CSV has no
  place for one that every CSV reader skips, so its header (the event table's columns) is its mark;
- the HTML report: ``<meta name="generator" content="moeprof ...">`` and ``<meta name="moeprof-schema">``;
- the history database: SQLite ``application_id`` :data:`HISTORY_APPLICATION_ID` (older ones: its tables).

Only the first bytes are read (a gzip's first inflated ones), never the whole file.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import zlib
from pathlib import Path

from ..core.events import EVENTS_V1_COLUMNS
from .sqlite_files import SQLITE_ERRORS

ANNOTATED_SCHEMA = "moeprof.annotated-trace/1"
EVENTS_SCHEMA = "moeprof.events/1"
REPORT_SCHEMA = "moeprof.report/1"
PARQUET_KEY = b"moeprof"
HISTORY_APPLICATION_ID = 0x6D6F6570  # "moep"
HEAD_BYTES = 8192
_SCHEMA = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"(moeprof\.[^"]{1,64})"')
_METADATA = re.compile(rb'^\s*\{\s*"metadata"\s*:\s*\{[^{}]{0,2048}?"schema"\s*:\s*"(moeprof\.[^"]{1,64})"')
_HTML = re.compile(rb'<meta name="moeprof-schema" content="(moeprof\.[^"]{1,64})"')
_HISTORY_TABLES = {"runs", "figures", "gates"}


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
        if head.startswith(b"\x1f\x8b"):
            with gzip.open(path, "rb") as gz:
                return gz.read(HEAD_BYTES)
    except (OSError, EOFError, zlib.error):
        return b""  # the reader says what is wrong with it
    return head


def moeprof_output(path: Path) -> str | None:
    """The moeprof schema a file written by moeprof carries (e.g. ``moeprof.analysis/1``), else None."""
    head = _head(path)
    if not head:
        return None
    for pattern in (_SCHEMA, _METADATA):
        m = pattern.match(head)
        if m:
            return m.group(1).decode()
    if head.startswith(b"PAR1"):
        return _parquet_mark(path)
    if head.startswith(b"SQLite format 3\x00"):
        return _history_mark(path, head)
    m = _HTML.search(head)
    if m:
        return m.group(1).decode()
    header = head.split(b"\n", 1)[0].strip().replace(b'"', b"").split(b",")
    if {c.encode() for c in EVENTS_V1_COLUMNS} <= set(header):
        return EVENTS_SCHEMA
    return None


def _parquet_mark(path: Path) -> str | None:
    try:
        import pyarrow.parquet as pq

        meta = pq.read_schema(path).metadata or {}
        value = json.loads(meta[PARQUET_KEY]) if PARQUET_KEY in meta else None
    except Exception:  # any unreadable parquet is simply not ours
        return None
    return str(value.get("schema")) if isinstance(value, dict) and value.get("schema") else None


def _history_mark(path: Path, head: bytes) -> str | None:
    if len(head) >= 72 and int.from_bytes(head[68:72], "big") == HISTORY_APPLICATION_ID:
        return "moeprof.history-db/1"
    try:
        # read-only and immutable: no journal or lock file is created beside the user's file
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            conn.close()
    except SQLITE_ERRORS:  # a damaged file is not ours: its reader says what is wrong with it
        return None
    ours = _HISTORY_TABLES <= tables and not any(t.startswith("CUPTI") for t in tables)
    return "moeprof.history-db/1" if ours else None


def no_trace_structure(path: Path) -> str | None:
    """Why a small JSON file is no trace at all (a config beside rank files), else None.

    Only a file whose whole text fits the head is judged; a larger one, or one that does not parse, goes to
    its reader, which refuses it if it is a broken trace."""
    head = _head(path)
    if not head or len(head) >= HEAD_BYTES or head.lstrip()[:1] not in (b"{", b"["):
        return None
    try:
        doc = json.loads(head)
    except ValueError:
        return None  # a truncated or broken trace: the reader refuses it
    if isinstance(doc, dict):
        if "traceEvents" in doc or "displayTimeUnit" in doc or "deviceProperties" in doc:
            return None
        keys = ", ".join(sorted(map(str, doc))[:4])
        return f"JSON with no traceEvents (keys: {keys}): not a trace"
    if isinstance(doc, list) and doc and all(isinstance(e, dict) and ("ph" in e or "ts" in e) for e in doc):
        return None
    return "a JSON list of no trace events: not a trace" if isinstance(doc, list) else None
