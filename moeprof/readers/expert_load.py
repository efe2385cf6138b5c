"""``--expert-load FILE``: the tokens a run routed per (step, layer, expert), as frameworks log them (spec §11).

What is read, tolerantly (column and key names case-insensitive, ``-`` and spaces as ``_``; aliases in
:data:`ALIASES`):

* CSV or TSV (the delimiter sniffed: ``,``, tab, ``;``, ``|``) with a header row naming at least the expert
  and its tokens, and optionally step, layer, device (rank) and dropped;
* JSON: a list of such records, or an object holding one (``{"records": [...]}``, any key); JSON Lines (one
  record per line); or the counts as nested arrays, ``[layer][expert]`` or ``[step][layer][expert]`` (bare, or
  under a key such as ``tokens_per_expert``), or a list of per-step objects carrying such an array
  (``[{"step": 0, "expert_load": [[...]]}]``, as ``capture demo``'s manifest records it);
* gzipped, any of the above.

A missing step is step 0 (one step); a missing layer is layer 0; experts no record names count 0 tokens up to
the largest expert id. Layer names such as ``model.layers.3.mlp`` give their last number. Anything else (no
expert or tokens column, a count that is not a number >= 0, an id that is not an integer >= 0, one (step,
layer, expert, device) given twice, nothing at all) is refused in one line naming the file, the row and the
problem (exit 2); the file is only read.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.expert_load import LOAD_COLUMNS, RoutedLoad
from ..errors import InputError

# fmt: off
ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("step", "iteration", "iter", "global_step", "train_step", "it", "step_id"),
    "layer": ("layer", "layer_id", "layer_idx", "layer_index", "layer_number", "moe_layer", "layer_name"),
    "expert": ("expert", "expert_id", "expert_idx", "expert_index", "expert_number"),
    "tokens": ("tokens", "num_tokens", "n_tokens", "token_count", "tokens_per_expert", "count", "load", "routed",
               "routed_tokens", "assignments", "rows"),
    "device": ("device", "rank", "ep_rank", "device_id", "gpu", "source_device", "src_device"),
    "dropped": ("dropped", "tokens_dropped", "dropped_tokens", "overflow"),
}
# fmt: on
_FIELD_OF = {alias: name for name, aliases in ALIASES.items() for alias in aliases}
# keys under which a JSON document holds its counts as arrays
ARRAY_KEYS = ("tokens_per_expert", "expert_load", "load", "counts", "tokens", "expert_counts")
MAX_BYTES = 1 << 30  # a load log is small; beyond this it is not one
MAX_EXPERTS = 1 << 16  # ids per layer (DeepSeek-V3 has 256 routed experts)
MAX_LAYERS = 1 << 14
MAX_TOKENS = 1e15  # tokens per (step, layer, expert): beyond any batch
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def _key(name: object) -> str:
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


def read_expert_load(path: str | Path) -> RoutedLoad:
    """The load ``path`` logs, as a :class:`RoutedLoad` (source ``file``); one-line refusals (InputError)."""
    path = Path(path)
    text = _text(path)
    stripped = text.lstrip()
    if not stripped:
        raise InputError(path, "empty: no expert load in it")
    if stripped[0] in "[{":
        records = _json_records(path, stripped)
    else:
        records = _csv_records(path, stripped)
    return _load(path, records)


def _text(path: Path) -> str:
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise InputError(path, "a folder, not an expert-load file (a JSON or CSV of step, layer, expert, tokens)")
        if size > MAX_BYTES:
            raise InputError(path, f"{size / 2**30:.1f} GiB: too large for an expert-load log (at most 1 GiB)")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "a folder, not an expert-load file") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            raise InputError(path, "a gzip file that does not decompress (truncated?)") from None
        if len(raw) > MAX_BYTES:
            raise InputError(path, "decompresses to more than 1 GiB: too large for an expert-load log")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(path, "not text (not UTF-8): expected a JSON or CSV expert-load log") from None


# ---------------------------------------------------------------- JSON


def _json_records(path: Path, text: str) -> list[tuple[str, Mapping[str, Any]]]:
    try:
        doc: Any = json.loads(text)
    except ValueError as exc:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].lstrip().startswith("{"):
            return _json_lines(path, lines)
        raise InputError(path, f"not valid JSON ({exc}); is it truncated?") from None
    return _records_of(path, doc)


def _json_lines(path: Path, lines: list[str]) -> list[tuple[str, Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any]]] = []
    for i, line in enumerate(lines, 1):
        try:
            value = json.loads(line)
        except ValueError:
            raise InputError(path, f"line {i} is not valid JSON (neither one JSON document nor JSON Lines)") from None
        if not isinstance(value, dict):
            raise InputError(path, f"line {i} is not a JSON object (JSON Lines of step, layer, expert, tokens)")
        out.append((f"line {i}", value))
    return out


def _records_of(path: Path, doc: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, record) of a JSON document in any of the accepted shapes."""
    if isinstance(doc, dict):
        if _is_record(doc):
            return [("the object", doc)]
        for value in doc.values():  # a list of records under some key
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                if any(_is_record(v) or _array_of(v) is not None for v in value):
                    return _records_of(path, value)
        array = _array_of(doc)
        if array is not None:
            return _array_records(path, array, doc.get("step") if isinstance(doc.get("step"), int) else None)
        raise InputError(
            path,
            "JSON without expert load: expected records of step, layer, expert, tokens, or counts as "
            f"[layer][expert] arrays under one of {', '.join(ARRAY_KEYS)}",
        )
    if isinstance(doc, list):
        if not doc:
            raise InputError(path, "an empty JSON list: no expert load in it")
        if all(isinstance(v, dict) for v in doc):
            if any(_is_record(v) for v in doc):  # records (a bad one is named where it is read)
                return [(f"record {i}", v) for i, v in enumerate(doc)]
            out: list[tuple[str, Mapping[str, Any]]] = []
            for i, v in enumerate(doc):  # per-step objects carrying an array
                array = _array_of(v)
                if array is None:
                    raise InputError(path, f"record {i} has no expert and tokens (nor an array of counts)")
                step = v.get("step", v.get("iteration", i))
                out.extend(_array_records(path, array, step if isinstance(step, int) else i, f"record {i}"))
            return out
        if all(isinstance(v, list | int | float) and not isinstance(v, bool) for v in doc):
            return _array_records(path, doc, None)
    raise InputError(path, f"a JSON {type(doc).__name__} that holds no expert load")


def _is_record(value: Mapping[str, Any]) -> bool:
    fields = {_FIELD_OF.get(_key(k)) for k in value}
    return "expert" in fields and "tokens" in fields


def _array_of(value: Any) -> list | None:
    if not isinstance(value, dict):
        return None
    for key, v in value.items():
        if _key(key) in ARRAY_KEYS and isinstance(v, list):
            return v
    return None


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, list):
        if not value:
            return depth + 1
        depth += 1
        value = value[0]
    return depth


def _array_records(
    path: Path, array: list, step: int | None, where: str = "the array"
) -> list[tuple[str, Mapping[str, Any]]]:
    """Records of nested counts: ``[expert]`` (one layer), ``[layer][expert]``, ``[step][layer][expert]``."""
    depth = _depth(array)
    if depth == 1:
        array, depth = [array], 2
    if depth == 2:
        array = [array]
        steps = [step or 0]
    elif depth == 3:
        if step is not None:
            raise InputError(path, f"{where}: a [step][layer][expert] array inside a step's record")
        steps = list(range(len(array)))
    else:
        raise InputError(path, f"{where}: expected counts as [layer][expert] or [step][layer][expert] arrays")
    out: list[tuple[str, Mapping[str, Any]]] = []
    for s, per_layer in zip(steps, array):
        if not isinstance(per_layer, list):
            raise InputError(path, f"{where}: step {s} is not a list of layers")
        for layer, per_expert in enumerate(per_layer):
            if not isinstance(per_expert, list):
                raise InputError(path, f"{where}: step {s}, layer {layer} is not a list of counts per expert")
            out.extend(
                (
                    f"{where} [step {s}][layer {layer}][expert {e}]",
                    {"step": s, "layer": layer, "expert": e, "tokens": v},
                )
                for e, v in enumerate(per_expert)
            )
    return out


# ---------------------------------------------------------------- CSV


def _csv_records(path: Path, text: str) -> list[tuple[str, Mapping[str, Any]]]:
    head = text[:65536]
    try:
        dialect: Any = csv.Sniffer().sniff(head.splitlines()[0] if head else "", delimiters=",\t;|")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    try:
        header = next(reader)
    except (StopIteration, csv.Error):
        raise InputError(path, "no header row: expected a CSV of step, layer, expert, tokens") from None
    names = [_FIELD_OF.get(_key(h)) for h in header]
    if "expert" not in names or "tokens" not in names:
        shown = ", ".join(repr(h) for h in header[:8])
        raise InputError(
            path,
            f"not an expert-load CSV: its header ({shown}) names no "
            + " and no ".join(n for n in ("expert", "tokens") if n not in names)
            + " column (expected step, layer, expert, tokens[, device])",
        )
    for name in ("step", "layer", "expert", "tokens", "device", "dropped"):
        if names.count(name) > 1:
            raise InputError(path, f"the header names the {name} column twice")
    out: list[tuple[str, Mapping[str, Any]]] = []
    try:
        for i, row in enumerate(reader, 2):
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise InputError(path, f"line {i} has {len(row)} fields, the header {len(header)}")
            out.append((f"line {i}", {h: cell for h, cell in zip(header, row)}))
    except csv.Error as exc:
        raise InputError(path, f"not a readable CSV ({exc})") from None
    return out


# ---------------------------------------------------------------- records to the table


def _integer(path: Path, where: str, field: str, value: Any, limit: int) -> int:
    given = value  # as the file gives it, for the refusal
    if isinstance(value, bool) or value is None:
        raise InputError(path, f"{where}: {field} {value!r} is not an integer >= 0")
    if isinstance(value, str):
        text = value.strip()
        if field == "layer" and not re.fullmatch(r"[+]?\d+(\.0*)?", text):
            m = _LAST_NUMBER.search(text)  # "model.layers.3.mlp" -> 3
            if m is None:
                raise InputError(path, f"{where}: layer {value!r} has no layer number")
            text = m.group(1)
        try:
            value = float(text)
        except ValueError:
            raise InputError(path, f"{where}: {field} {value!r} is not an integer >= 0") from None
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0 or value != int(value):
        raise InputError(path, f"{where}: {field} {given!r} is not an integer >= 0")
    if value >= limit:
        raise InputError(path, f"{where}: {field} {int(value):,} is beyond any MoE model (at most {limit - 1:,})")
    return int(value)


def _count(path: Path, where: str, field: str, value: Any) -> float:
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise InputError(path, f"{where}: {field} {value!r} is not a number") from None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise InputError(path, f"{where}: {field} {value!r} is not a number")
    if not math.isfinite(number) or number < 0:
        raise InputError(path, f"{where}: {field} {value!r} is not a count (a finite number >= 0)")
    if number > MAX_TOKENS:
        raise InputError(path, f"{where}: {field} {number:g} is beyond any batch")
    return float(number)


def _load(path: Path, records: Sequence[tuple[str, Mapping[str, Any]]]) -> RoutedLoad:
    if not records:
        raise InputError(path, "no records: no expert load in it")
    rows: list[tuple[int, int, int, int, float]] = []
    drops: list[tuple[int, int, float]] = []
    seen: dict[tuple[int, int, int, int], str] = {}
    has_device = False
    for where, record in records:
        fields: dict[str, Any] = {}
        for k, v in record.items():
            name = _FIELD_OF.get(_key(k))
            if name is not None and name not in fields:
                fields[name] = v
        if "expert" not in fields or "tokens" not in fields:
            raise InputError(
                path, f"{where} has no " + " and no ".join(n for n in ("expert", "tokens") if n not in fields)
            )
        step = _integer(path, where, "step", fields["step"], 1 << 62) if fields.get("step") not in (None, "") else 0
        layer = (
            _integer(path, where, "layer", fields["layer"], MAX_LAYERS) if fields.get("layer") not in (None, "") else 0
        )
        expert = _integer(path, where, "expert", fields["expert"], MAX_EXPERTS)
        device = -1
        if fields.get("device") not in (None, ""):
            device = _integer(path, where, "device", fields["device"], 1 << 31)
            has_device = True
        tokens = _count(path, where, "tokens", fields["tokens"])
        key = (step, layer, expert, device)
        if key in seen:
            on = f", device {device}" if device >= 0 else ""
            raise InputError(
                path, f"{where} repeats step {step}, layer {layer}, expert {expert}{on} ({seen[key]} gave it first)"
            )
        seen[key] = where
        rows.append((step, layer, expert, device, tokens))
        if fields.get("dropped") not in (None, ""):
            drops.append((step, layer, _count(path, where, "dropped", fields["dropped"])))
    if has_device and any(r[3] < 0 for r in rows):
        raise InputError(path, "some records name a device and some do not: give every record its device, or none")
    frame = pd.DataFrame(rows, columns=list(LOAD_COLUMNS))
    dropped = None
    if drops:
        dropped = pd.DataFrame(drops, columns=["step", "layer", "dropped"])
        dropped = dropped.groupby(["step", "layer"], as_index=False).agg(dropped=("dropped", "sum"))
    # a device column says which device logged a row (the tokens it routed), not where the experts live: the
    # expert axis' devices stay unknown
    return RoutedLoad(
        frame=frame,
        source="file",
        origin=str(path),
        experts=int(frame["expert"].max()) + 1,
        dropped=dropped,
    )
