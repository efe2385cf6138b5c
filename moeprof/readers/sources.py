"""Trace inputs named by URL (``gs://``, ``s3://``, ``memory://``, ``file://``...) beside local paths.

A source is a local :class:`~pathlib.Path` or a URL kept as text (a ``Path``
would fold its ``//``). Local paths never import fsspec: ``is_url`` is a
regular expression, and fsspec is imported only when a URL is met.

- ``discovery.discover_url`` expands a URL the way ``discover`` expands a local path
  (a file; a folder of rank/host files; a TensorBoard log dir; a run folder), with
  :func:`filesystem` and :func:`url_info` from here. ``file://`` URLs become local paths at
  once, and take the local route.
- ``local_file`` gives a reader a real file: the path itself for local sources,
  else a copy in a fresh temporary folder of the process that reads it (a Dask
  worker's own TMPDIR; never beside the user's trace), removed afterwards. The
  copy keeps the file's name, which readers use for host and rank names.
  Every reader gets the copy, not only those that need a real path (SQLite,
  jaxlib's XPlane reader): the JSON readers decode the whole file anyway.
- ``read_url`` reads one remote file; its Trace and its errors name the URL, not the copy.

Remote protocols need their fsspec backend installed (gcsfs for ``gs://``,
s3fs for ``s3://``); without it the error says which one, in one line.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from ..errors import InputError

if TYPE_CHECKING:
    from ..core.trace import Trace
    from .base import ReadContext

# scheme://... (a Windows drive letter "C:\" has no "//" after the colon)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")

TraceSource = Path | str  # a local path, or a URL


def is_url(source: object) -> bool:
    """Whether an input names a URL rather than a local path (no import, no I/O)."""
    return isinstance(source, str) and _URL.match(source) is not None


def file_url_path(url: str) -> Path | None:
    """The local path of a ``file://`` URL (None for any other URL)."""
    parsed = urlparse(url)
    if parsed.scheme.lower() != "file" or parsed.netloc not in ("", "localhost"):
        return None
    return Path(unquote(parsed.path))


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) for a URL; one-line errors for unknown or uninstalled protocols."""
    import fsspec

    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:  # unknown protocol, or its package missing ("Install s3fs to access S3")
        raise InputError(url, f"cannot open this URL: {exc}") from None


def url_info(fs: Any, path: str, url: str) -> dict:
    try:
        return fs.info(path)
    except FileNotFoundError:
        raise InputError(url, "no such file or directory") from None
    except Exception as exc:  # each backend has its own errors (HTTP, auth): the message is what matters
        raise InputError(url, f"cannot read: {exc}") from None


@contextmanager
def local_file(source: TraceSource) -> Iterator[Path]:
    """A real local path for a source: itself, or a temporary copy removed on exit."""
    if not is_url(source):
        yield Path(source)
        return
    url = str(source)
    local = file_url_path(url)
    if local is not None:
        yield local
        return
    fs, path = filesystem(url)
    is_dir = url_info(fs, path, url).get("type") == "directory"  # an nsys parquet export is a folder
    with tempfile.TemporaryDirectory(prefix="moeprof-") as tmp:
        target = Path(tmp) / (PurePosixPath(path).name or "trace")
        try:
            fs.get(path, str(target), recursive=is_dir)
        except FileNotFoundError:
            raise InputError(url, "no such file or directory") from None
        except Exception as exc:
            raise InputError(url, f"cannot read: {exc}") from None
        yield target


def read_url(url: str, context: ReadContext) -> Trace:
    """Read one remote trace file through a local copy; the Trace and its errors name the URL."""
    from . import read_file

    with local_file(url) as path:
        try:
            trace = read_file(path, context)
        except InputError as exc:
            if exc.path != str(path):
                raise
            raise InputError(url, exc.problem) from None
        # a reader's warning may quote the copy's path: quote the URL instead
        warnings = tuple(w.replace(str(path), url) for w in trace.warnings)
    return trace.replace(path=url, warnings=warnings)
