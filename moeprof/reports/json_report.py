"""The ``moeprof.analysis/1`` JSON object (spec §7): as bytes for stdout (:func:`write_json`: no decode into a
``str`` and echo back out), or as text."""

from __future__ import annotations

import sys
from typing import IO

import orjson

from ..core.analysis import Analysis


def to_json_bytes(analysis: Analysis, indent: bool = True) -> bytes:
    option = orjson.OPT_INDENT_2 if indent else 0
    return orjson.dumps(analysis.to_json(), option=option | orjson.OPT_SERIALIZE_NUMPY)


def to_json(analysis: Analysis, indent: bool = True) -> str:
    return to_json_bytes(analysis, indent).decode()


def write_json(analysis: Analysis, out: IO[str] | None = None) -> None:
    """The JSON object and a newline, written to ``out`` (stdout) as the bytes orjson made: what was written as
    text before goes first."""
    stream = out or sys.stdout
    data = to_json_bytes(analysis) + b"\n"
    stream.flush()
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text stream without bytes under it (a test's capture)
        stream.write(data.decode())
        return
    buffer.write(data)
