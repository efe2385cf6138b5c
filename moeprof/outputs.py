"""How moeprof writes a file the user named (a report, an annotated trace, an event table, a critical path, a
baseline, a run folder's analysis.json, a JUnit report): whole or not at all.

The bytes go to a temporary file beside the target, which takes the target's name only once every byte is
written and flushed to the disk (:func:`replacing`). A full disk, a file-size limit, an I/O error or Ctrl-C
part-way leaves the target as it was (a good report written before stays) and removes the temporary file: a
truncated report, or none where there was a good one, is worse than the refusal.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from .errors import InputError

TEMPORARY_MARK = ".moeprof-"  # in a temporary file's name: ``.report.html.moeprof-1a2b3c4d``


def _target(path: Path) -> Path:
    """Where the bytes of ``path`` land: a symbolic link's target (the link stays a link)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _mode(target: Path) -> int | None:
    """The permission bits the written file takes: the file's it replaces (None: a new file, the umask's)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return None


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A path to write ``path``'s new contents to: a new file beside it, renamed over ``path`` when the block
    ends without an exception (after an fsync), removed when it raises. Where ``path`` exists and is no regular
    file (a FIFO, ``/dev/null``) it is written as it is: there is nothing to rename over."""
    target = _target(Path(path))
    if target.exists() and not target.is_file():
        yield target
        return
    temporary = target.with_name(f".{target.name}{TEMPORARY_MARK}{secrets.token_hex(4)}")
    # created here, exclusively, with the umask's permissions (a plain open's); written by whoever takes the path
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield temporary
        mode = _mode(target)
        if mode is not None:
            os.chmod(temporary, mode)
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)  # the bytes on the disk before the name: a crash never leaves the target empty
        finally:
            os.close(fd)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def write_bytes(path: Path, data: bytes) -> None:
    """``path`` holds ``data``, whole, or is left as it was (:func:`replacing`); an OSError says why not."""
    with replacing(path) as temporary:
        temporary.write_bytes(data)


def write_text(path: Path, text: str) -> None:
    """``path`` holds ``text`` (UTF-8), whole, or is left as it was (:func:`replacing`)."""
    write_bytes(path, text.encode("utf-8"))


def cannot_write(path: Path, exc: OSError, what: str = "") -> InputError:
    """The one-line refusal of a write that failed: ``{path}: cannot write{what}: File too large``, said from
    the errno (pyarrow's strerror is ``Error writing bytes to file. Detail: [errno 27] File too large``)."""
    reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
    return InputError(path, f"cannot write{what}: {reason}")
