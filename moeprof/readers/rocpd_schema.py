"""How a rocpd database (rocprofv3's SQLite output, ROCm 7's default) is recognized and named, with sqlite3
only (the sniffer and discovery use it; no pandas).

rocprofv3 writes one ``<prefix>results.db`` per process (``<pid>_`` in a ``<hostname>/`` folder by default,
``NAME_`` with ``-o NAME``; rocprofiler-sdk ``source/lib/output/generateRocpd.cpp``, ``get_output_filename(cfg,
"results", "db")``). Its tables carry the file's uuid as a suffix (``rocpd_kernel_dispatch_<uuid>``) and
unsuffixed views read them (``source/share/rocprofiler-sdk-rocpd/rocpd_views.sql``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .sqlite_files import SQLITE_ERRORS

RESULTS_SUFFIX = "_results.db"
# the views a reader needs, every rocpd schema version has them (rocpd_views.sql 3.0.0 on)
REQUIRED_VIEWS = ("rocpd_info_agent", "rocpd_kernel_dispatch", "rocpd_string", "rocpd_event")


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection that takes no lock and writes nothing beside the file (``immutable=1``)."""
    return sqlite3.connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri=True)


def is_rocpd(path: Path) -> bool:
    """Whether a SQLite file holds rocpd's schema (a ``rocpd_*`` table or view); False where it cannot tell."""
    try:
        conn = connect(path)
    except (sqlite3.Error, OSError, ValueError):
        return False
    try:
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type IN ('table', 'view') AND name LIKE 'rocpd\\_%' ESCAPE '\\' LIMIT 1"
        ).fetchone()
        return row is not None
    except SQLITE_ERRORS:
        return False
    finally:
        conn.close()


def hostname(path: Path) -> str | None:
    """The host a rocpd database was written on (``rocpd_info_node.hostname``), None where it cannot be read."""
    try:
        conn = connect(path)
    except (sqlite3.Error, OSError, ValueError):
        return None
    try:
        row = conn.execute("SELECT hostname FROM rocpd_info_node WHERE hostname <> '' LIMIT 1").fetchone()
        return str(row[0]) if row and row[0] is not None else None
    except SQLITE_ERRORS:
        return None
    finally:
        conn.close()
