"""Columns of an export as int64 and float64, whatever their type: exports differ (typed SQLite columns,
nullable parquet columns, text or blobs where a number should be), and a value that is no number is
NULL, a refusal (a time), or skipped, never a silent zero."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ...core.events import floats_to_ns
from ...core.time_window import TIME_LIMIT_NS, UNPLACEABLE_NS
from ...errors import InputError
from ...words import plural


def numeric(values: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A column as (int64 rounded to the nearest integer, NULL mask, not-a-number mask), without a warning.

    Integer columns convert exactly; floats round, with NaN as NULL; a number past +-2^62 (or inf) becomes
    ``UNPLACEABLE_NS``. Text holding a number is that number; other text, blobs, booleans and lists are
    not numbers. Typed columns (every real export) take the vectorized paths.
    """
    s = values if isinstance(values, pd.Series) else pd.Series(values)
    n = len(s)
    none = np.zeros(n, dtype=bool)
    dtype = s.dtype
    if pd.api.types.is_bool_dtype(dtype):
        null = s.isna().to_numpy(dtype=bool)
        return np.zeros(n, dtype=np.int64), null, ~null
    if pd.api.types.is_integer_dtype(dtype):
        null = s.isna().to_numpy(dtype=bool)
        if pd.api.types.is_unsigned_integer_dtype(dtype):
            raw = s.to_numpy(dtype=np.uint64, na_value=0)
            big = raw > np.uint64(2**63 - 1)
            return np.where(big, UNPLACEABLE_NS, raw.astype(np.int64)), null, none
        return s.to_numpy(dtype=np.int64, na_value=0), null, none
    if pd.api.types.is_float_dtype(dtype):
        f = s.to_numpy(dtype=np.float64, na_value=np.nan)
        null = np.isnan(f)
        return floats_to_ns(np.where(null, 0.0, f)), null, none
    out = np.zeros(n, dtype=np.int64)
    null = np.zeros(n, dtype=bool)
    bad = np.zeros(n, dtype=bool)
    for i, v in enumerate(s.to_numpy(dtype=object)):
        number = one_number(v)
        if number is None:
            null[i] = True
        elif isinstance(number, int):
            out[i] = number
        else:
            bad[i] = True
    return out, null, bad


_NOT_A_NUMBER = object()


def one_number(v: object) -> object:
    """One value of a mixed column: an int (rounded, UNPLACEABLE_NS past +-2^62), None (NULL) or _NOT_A_NUMBER."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, bool | np.bool_):
        return _NOT_A_NUMBER
    if isinstance(v, int | np.integer):
        return int(v) if -TIME_LIMIT_NS < int(v) < TIME_LIMIT_NS else UNPLACEABLE_NS
    if isinstance(v, float | np.floating):
        return None if np.isnan(v) else int(floats_to_ns(np.array([v], dtype=np.float64))[0])
    if isinstance(v, str) and len(v) <= 40:
        text = v.strip()
        try:
            return one_number(int(text))
        except ValueError:
            pass
        try:
            return one_number(float(text))
        except ValueError:
            return _NOT_A_NUMBER
    return _NOT_A_NUMBER


def ints(values: object, n: int, default: int = -1) -> np.ndarray:
    """A column of nullable numbers as int64 (NULL, and anything that is no number, -> default)."""
    if values is None:
        return np.full(n, default, dtype=np.int64)
    out, null, bad = numeric(values)
    return np.where(null | bad, default, out)


def time_column(frame: pd.DataFrame, table: str, col: str, path: Path) -> np.ndarray:
    """An activity table's ``start``/``end`` in ns; NULL is a time no int64 holds (the reader's screen drops
    the row and counts it); a value that is no number (text, a blob, a list) refuses the file."""
    out, null, bad = numeric(frame[col])
    if bad.any():
        value = frame[col].iloc[int(np.flatnonzero(bad)[0])]
        rows = plural(int(bad.sum()), "row")
        raise InputError(path, f"{table}.{col} holds {shown_value(value)}, not a time in ns ({rows} like it)")
    return np.where(null, UNPLACEABLE_NS, out)


def shown_value(value: object) -> str:
    """A cell that is no number, in a few words: text 'abc', bytes b'\\xff', a list, a boolean."""
    if isinstance(value, bool | np.bool_):
        return "a boolean"
    if isinstance(value, str | bytes):
        text = repr(value)
        return f"{'text' if isinstance(value, str) else 'bytes'} {text[:40]}{'...' if len(text) > 40 else ''}"
    if isinstance(value, list | tuple | np.ndarray):
        return "a list"
    return f"a {type(value).__name__}"


def floats(values: object) -> np.ndarray:
    s = values if isinstance(values, pd.Series) else pd.Series(values)
    if pd.api.types.is_numeric_dtype(s.dtype) and not pd.api.types.is_bool_dtype(s.dtype):
        return s.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    out = np.full(len(s), np.nan)
    for i, v in enumerate(s.to_numpy(dtype=object)):
        if isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_):
            out[i] = float(v)
        elif isinstance(v, str) and len(v) <= 40:
            try:
                out[i] = float(v)
            except ValueError:
                pass
    return out


def texts(col: pd.Series) -> np.ndarray:
    """A text column as objects: str kept, NULL as None, bytes decoded leniently (as the SQLite route does
    for text that is not UTF-8), anything else (a number, a list) as None."""
    values = col.to_numpy(dtype=object)
    if all(type(v) is str for v in values):  # the usual case, no copy per value
        return values
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        if isinstance(v, str):
            out[i] = v
        elif isinstance(v, bytes | bytearray):
            out[i] = bytes(v).decode("utf-8", "replace")
        else:
            out[i] = None
    return out
