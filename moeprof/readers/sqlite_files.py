"""SQLite files opened read-only, never written beside (the Nsight and rocpd readers share this)."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError

# what a damaged SQLite file raises: sqlite3's errors, and UnicodeDecodeError where SQLite's own message quotes
# a name that is not UTF-8 ("malformed database schema (f\\xffgures)"), which Python then cannot decode
SQLITE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error, UnicodeDecodeError)


@contextmanager
def open_read_only(db: Path, shown: Path, prefix: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to ``db`` (scratch space in a temporary folder, never beside it), its
    refusals one line naming ``shown``. The caller closes the connection (before the scratch goes)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as scratch:
        try:
            conn = connect_read_only(db, Path(scratch))
        except SQLITE_ERRORS as exc:
            raise InputError(shown, f"cannot open as SQLite: {sqlite_problem(exc)}") from None
        except OSError as exc:
            raise InputError(shown, f"cannot read: {exc.strerror or exc}") from None
        yield conn


def connect_read_only(db: Path, scratch: Path) -> sqlite3.Connection:
    """A connection to ``db`` that never writes a byte beside it.

    ``mode=ro`` is not enough: a WAL-mode database still gets ``-shm`` and ``-wal`` files next to it (and
    cannot be opened at all in a read-only folder). ``immutable=1`` makes SQLite take no locks and open
    no journal, WAL or shared-memory file, but it also ignores a ``-wal``/``-journal`` file that holds
    transactions not yet in the database; in that case the database and that file are copied into
    ``scratch``, where SQLite may apply them.
    """
    db = db.resolve()  # a link's -wal lies beside the file it points to
    pending = [
        companion
        for suffix in ("-wal", "-journal")
        if (companion := db.with_name(db.name + suffix)).is_file() and companion.stat().st_size > 0
    ]
    if not pending:
        # as_uri() percent-encodes '#', '?', '%' and spaces in the path
        return _checking(sqlite3.connect(db.as_uri() + "?mode=ro&immutable=1", uri=True))
    copy = scratch / "export.sqlite"
    shutil.copyfile(db, copy)
    for companion in pending:
        shutil.copyfile(companion, scratch / (copy.name + companion.name[len(db.name) :]))
    return _checking(sqlite3.connect(copy))


def _checking(conn: sqlite3.Connection) -> sqlite3.Connection:
    """SQLite checks each page's cells as it loads the page: without it, a page whose cell pointers were
    overwritten is read past its cells, and the same damaged file is refused on one run and read on the next."""
    conn.execute("PRAGMA cell_size_check = ON")
    return conn


# SQLite's messages for a damaged file, in what they mean for the user
_DAMAGED = {
    "database disk image is malformed": "damaged (SQLite finds a corrupt page in it)",
    "file is not a database": "not an SQLite database (damaged, or another kind of file)",
    "file is encrypted or is not a database": "not an SQLite database (damaged, or another kind of file)",
}


def sqlite_problem(exc: BaseException) -> str:
    """What an SQLite failure says is wrong with the file, without the statement that met it: pandas wraps
    sqlite3's error as "Execution failed on sql '<moeprof's SELECT>': <SQLite's message>" (the error SQLite
    raised is its cause); the messages of a damaged file say so in the user's terms."""
    cause = exc.__cause__
    if isinstance(cause, SQLITE_ERRORS):
        exc = cause
    text = one_line(exc)
    if text.startswith("Execution failed on sql"):  # wrapped, its cause lost: SQLite's message follows the SQL
        text = text.rsplit("': ", 1)[-1]
    return _DAMAGED.get(text.strip().lower(), text)


def one_line(exc: BaseException) -> str:
    """An error's first line; for an SQLite message Python could not decode, the message itself (read leniently)."""
    if isinstance(exc, UnicodeDecodeError) and isinstance(exc.object, bytes):
        return exc.object.decode("utf-8", "replace").strip().splitlines()[0] or type(exc).__name__
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
