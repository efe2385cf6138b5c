"""Chrome trace-event JSON: xprof/TensorBoard trace viewer exports and PyTorch Kineto traces.

The file is decoded once into typed columns (``kineto_columns``, msgspec); the
content then decides the reader: Kineto traces carry ``deviceProperties``/
``distributedInfo`` or ``kernel`` events and are read from those columns; xprof
exports, which name their processes ``/device:GPU:N``, are small and decoded again
into dicts with orjson. A gzip is inflated under a memory cap.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson
import pandas as pd

from ..core.events import make_table, us_interval_to_ns
from ..core.trace import GPU, TPU, Job, Trace, empty_markers, make_markers, trailing_number
from ..core.vocabulary import vocabulary
from ..errors import InputError
from .base import ReadContext
from .discovery import capture_stem
from .tpu_ops import (
    ASYNC,
    MODULES,
    OPS,
    STEPS,
    TPU_LINES,
    ChipLines,
    OpEvents,
    device_times,
    step_markers,
    tpu_activity,
)

_GPU_PROCESS = re.compile(r"/device:GPU:(\d+)")
# a TPU chip's process: "/device:TPU:0" (JAX, xprof's legacy trace viewer), "<host> /device:TPU:0" (xprof's
# streaming viewer); "/device:TPU:0 SparseCore 0" is not a chip
_TPU_PROCESS = re.compile(r"/device:TPU:(\d{1,9})$")
_STREAM_THREAD = re.compile(r"^Stream #")


# memory to decode JSON, as a multiple of its (uncompressed) size: Kineto columns need ~3x, and
# the limit on inflating a gzip is set by it (xprof JSON decodes to dicts, ~8x, but is small)
JSON_MEMORY_FACTOR = 4
_INFLATE_STEP = 1 << 24  # bytes inflated per call: the cap is checked this often
_GIB = 2**30


def read_bytes(path: Path) -> bytes | bytearray:
    """The JSON text of a (possibly gzipped) trace file; one-line errors for the usual breakages.

    A gzip is inflated step by step and refused, before memory runs out, once its text
    outgrows what this machine could decode (``JSON_MEMORY_FACTOR`` x the text must fit).
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except MemoryError:
        raise InputError(path, f"out of memory reading {path.stat().st_size / _GIB:.1f} GiB") from None
    if not raw:
        raise InputError(path, "empty file")
    if raw[:2] == b"\x1f\x8b":
        return _gunzip(raw, path)
    return raw


def _inflate_limit() -> tuple[int | None, int | None]:
    """(the most bytes a gzip may inflate to, the memory available) -- None where not known or not checked."""
    from . import base  # looked up at call time: tests set a small memory

    if os.environ.get("MOEPROF_IGNORE_MEMORY_CHECK"):
        return None, None
    available = base.available_memory()
    return (None, None) if available is None else (available // JSON_MEMORY_FACTOR, available)


def _deflate_module() -> tuple[Any, type[Exception]]:
    """(the zlib-like module that inflates, its error): ISA-L's (python-isal, faster than zlib on trace JSON:
    docs/performance.md) where it imports, else zlib. Same interface."""
    try:
        from isal import isal_zlib
    except ImportError:
        return zlib, zlib.error
    return isal_zlib, cast(type[Exception], isal_zlib.error)


def _gunzip(data: bytes, path: Path) -> bytearray:
    """Inflate every gzip member of ``data``, refusing (InputError) output beyond the inflate limit."""
    limit, available = _inflate_limit()
    out = bytearray()
    view = memoryview(data)
    deflate, deflate_error = _deflate_module()
    try:
        while True:
            inflater = deflate.decompressobj(wbits=31)  # gzip header and trailer
            rest: bytes | memoryview = view
            while not inflater.eof:
                piece = inflater.decompress(rest, _INFLATE_STEP)
                rest = inflater.unconsumed_tail
                if not piece and not rest and not inflater.eof:  # input used up before the end of the stream
                    raise EOFError("Compressed file ended before the end-of-stream marker was reached")
                out += piece
                if limit is not None and len(out) > limit:
                    raise InputError(path, _too_large(data, len(out), limit, available or 0))
            tail = inflater.unused_data
            if not tail:
                return out
            if tail[:2] != b"\x1f\x8b":  # as gzip.decompress: only another member may follow
                raise OSError("Not a gzipped file (trailing data after the last member)")
            view = memoryview(tail)
    except (OSError, EOFError, zlib.error, deflate_error) as exc:
        raise InputError(path, f"truncated or corrupt gzip data ({exc})") from None
    except MemoryError:
        size = len(out)
        del out
        raise InputError(path, f"out of memory inflating gzip data (past {size / _GIB:.1f} GiB of text)") from None


def _too_large(data: bytes, produced: int, limit: int, available: int) -> str:
    # the gzip trailer holds the text's size modulo 2**32: the smallest such size not below what came out
    isize = int.from_bytes(data[-4:], "little")
    total = isize + ((max(produced - isize, 0) + 2**32 - 1) // 2**32) * 2**32
    size = f"to {total / _GIB:.1f} GiB" if total >= produced else f"to more than {limit / _GIB:.1f} GiB"
    return (
        f"too large to analyze in memory here: the gzip inflates {size} of JSON, which needs about "
        f"{total * JSON_MEMORY_FACTOR / _GIB:.0f} GiB ({available / _GIB:.0f} GiB available); analyze one file per "
        "rank, or set MOEPROF_IGNORE_MEMORY_CHECK=1 to try anyway"
    )


def _out_of_memory(path: Path, size: int) -> InputError:
    need = size * JSON_MEMORY_FACTOR / _GIB
    return InputError(
        path,
        f"out of memory decoding {size / _GIB:.2f} GiB of JSON (needs about {need:.1f} GiB);"
        " analyze one file per rank, or on a machine with more memory",
    )


def loads(raw: bytes | bytearray, path: Path) -> object:
    """orjson-decode JSON text; out of memory is said as such, not as invalid JSON."""
    try:
        return orjson.loads(raw)
    except MemoryError:
        raise _out_of_memory(path, len(raw)) from None
    except orjson.JSONDecodeError as exc:
        if "memory" in str(exc):  # orjson reports a failed allocation as a decode error
            raise _out_of_memory(path, len(raw)) from None
        raise InputError(path, f"not valid JSON ({exc}); is it truncated?") from None


def read_json(path: Path) -> dict:
    """Decode a (possibly gzipped) JSON trace into dicts; one-line errors for the usual breakages."""
    doc = loads(read_bytes(path), path)
    if isinstance(doc, list):  # the bare-array form of the trace-event format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(path, "JSON without a traceEvents list: not a Chrome/Kineto trace")
    return doc


def read(path: Path, context: ReadContext) -> Trace:
    """A Chrome trace-event file: Kineto when it says so (metadata keys, GPU activity events), else xprof.

    Kineto is decoded straight into columns; xprof's trace-viewer JSON is small and read as dicts.
    """
    from .kineto import read_kineto
    from .kineto_columns import decode_columns

    raw = read_bytes(path)
    try:
        columns = decode_columns(raw, path)
    except MemoryError:
        raise _out_of_memory(path, len(raw)) from None
    except RecursionError:  # msgspec's limit on nesting
        raise InputError(path, "JSON nested too deep to read (a value inside an event nests 1,000 levels?)") from None
    if columns.is_kineto:
        del raw  # the columns are all that is read from here on
        return read_kineto(columns, path, context)
    del columns
    doc = loads(raw, path)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(path, "JSON without a traceEvents list: not a Chrome/Kineto trace")
    return read_xprof_chrome(doc, path, context.placement.host_index, context.options.nvlink_domain_size)


def read_xprof_chrome(doc: dict, path: Path, host_index: int = 0, slice_size: int | None = None) -> Trace:
    """xprof's trace-viewer JSON: ``/device:GPU:N`` processes, ``Stream #N`` threads, µs floats; TPU chips
    (``/device:TPU:N``) with ``slice_size`` chips per slice where given (``--slice-size``).

    Every entry of ``traceEvents`` must be an object; a device activity (or step) must have a
    ``ts`` that is a number (a numeric string counts) and a ``dur`` that is one or absent. Ids
    that are not hashable (a list as ``pid``) name no process; text fields that are not text are ignored.
    """
    events = doc["traceEvents"]
    for i, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise InputError(path, f"traceEvents[{i}] is {_json_type(ev)}, not an event object")
    gpu_pids: dict[object, int] = {}
    tpu_pids: dict[object, int] = {}
    stream_tids: dict[tuple[object, object], str] = {}
    derived_tids: dict[tuple[object, object], str] = {}
    host = capture_stem(path.name)
    for ev in events:
        if ev.get("ph") != "M":
            continue
        name = ev.get("name")
        args = _args(ev)
        pid = _ident(ev.get("pid"))
        if pid is _NO_ID:
            continue
        if name == "process_name":
            m = _GPU_PROCESS.search(_text(args.get("name")))
            if m:
                if len(m.group(1)) > 9:
                    raise InputError(path, f"process {_text(args.get('name'))[:60]!r}: a GPU ordinal past 10^9")
                gpu_pids[pid] = int(m.group(1))
            elif tpu := _TPU_PROCESS.search(_text(args.get("name")).strip()):
                tpu_pids[pid] = int(tpu.group(1))
        elif name == "thread_name":
            tname = _text(args.get("name"))
            key = (pid, _ident(ev.get("tid")))
            if _STREAM_THREAD.match(tname):
                stream_tids[key] = tname
            else:
                derived_tids[key] = tname
    if tpu_pids and not gpu_pids:
        return _read_tpu(events, path, host, host_index, tpu_pids, derived_tids, slice_size)
    rows = [ev for ev in events if ev.get("ph") == "X" and _ident(ev.get("pid")) in gpu_pids]
    gpus = len(gpu_pids)
    activity = [ev for ev in rows if (_ident(ev["pid"]), _ident(ev.get("tid"))) in stream_tids]
    steps = [
        ev for ev in rows if derived_tids.get((_ident(ev["pid"]), _ident(ev.get("tid")))) in ("Steps", "XLA Modules")
    ]
    if not activity:
        return Trace(events=make_table({}, n=0), path=str(path), format="chrome")
    ts = _numbers(activity, "ts", path, "a device activity")
    dur = _numbers(activity, "dur", path, "a device activity")
    names = [_name(ev, path) for ev in activity]
    arg_dicts = [_args(ev) for ev in activity]
    start_ns, end_ns = us_interval_to_ns(ts, dur)
    ordinals = np.array([gpu_pids[_ident(ev["pid"])] for ev in activity], dtype=np.int64)
    vocab = vocabulary()
    copy = [vocab.copy_kind(n) for n in names]
    table = make_table(
        {
            "host": host,
            "device": [f"{host}/GPU:{o}" for o in ordinals],
            "global_id": host_index * gpus + ordinals,
            "gpus_per_domain": gpus,
            "stream": [stream_tids[(_ident(ev["pid"]), _ident(ev.get("tid")))] for ev in activity],
            "name": names,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "activity": [
                "memcpy" if c else ("memset" if vocab.memset_name.match(n) else "kernel") for c, n in zip(copy, names)
            ],
            "copy_kind": copy,
            "hlo_module": [_text(a.get("hlo_module")) for a in arg_dicts],
            "hlo_op": [_text(a.get("hlo_op")) for a in arg_dicts],
            # written by moeprof annotate (and harmless elsewhere): the HLO opcode and the communicating
            # group, so an annotated trace reads back with the same kinds and links
            "opcode": [_text(a.get("opcode")) for a in arg_dicts],
            "group": [_group(a.get("group")) for a in arg_dicts],
            "program_id": [_program_id(a.get("program_id")) for a in arg_dicts],
            "source": "chrome",
        }
    )
    markers = empty_markers()
    if steps:
        s_ts = _numbers(steps, "ts", path, "a step or module range")
        s_dur = _numbers(steps, "dur", path, "a step or module range")
        s_start, s_end = us_interval_to_ns(s_ts, s_dur)
        kinds = [
            "step" if derived_tids[(_ident(ev["pid"]), _ident(ev.get("tid")))] == "Steps" else "module" for ev in steps
        ]
        step_names = [_text(ev.get("name")) for ev in steps]
        markers = make_markers(
            host=host,
            device=[f"{host}/GPU:{gpu_pids[_ident(ev['pid'])]}" for ev in steps],
            kind=kinds,
            name=step_names,
            start_ns=s_start,
            end_ns=s_end,
            number=[trailing_number(n) if k == "step" else -1 for n, k in zip(step_names, kinds)],
        )
    has_hlo = bool((table["hlo_module"].astype(str) != "").any())
    return Trace(
        events=table,
        path=str(path),
        format="chrome",
        markers=markers,
        framework="jax" if has_hlo or any(k == "module" for k in kinds_of(markers)) else "unknown",
        job=Job(hosts=(host,)),
        devices={f"{host}/GPU:{o}": host_index * gpus + o for o in sorted(set(gpu_pids.values()))},
        device_kinds={f"{host}/GPU:{o}": GPU for o in sorted(set(gpu_pids.values()))},
    )


def _read_tpu(
    events: list[dict],
    path: Path,
    host: str,
    host_index: int,
    tpu_pids: dict[object, int],
    thread_names: dict[tuple[object, object], str],
    slice_size: int | None = None,
) -> Trace:
    """TPU chips in trace JSON (xprof's trace viewer, JAX's ``.trace.json.gz``): each ``/device:TPU:N``
    process's ``XLA Ops`` (and ``Async XLA Ops`` where written), ``Steps`` and ``XLA Modules`` threads, read as
    the XPlane reader reads the same lines (:mod:`.tpu_ops`). An op's HLO expression is ``args.long_name``
    (its event name is the short op name), its figures the other args."""
    chips_here = len(tpu_pids)
    by_line: dict[tuple[object, str], list[dict]] = {}
    for ev in events:
        if ev.get("ph") != "X":
            continue
        pid = _ident(ev.get("pid"))
        if pid not in tpu_pids:
            continue
        role = TPU_LINES.get(thread_names.get((pid, _ident(ev.get("tid"))), ""))
        if role is not None:
            by_line.setdefault((pid, role), []).append(ev)
    chips: dict[object, ChipLines] = {}
    for pid, ordinal in sorted(tpu_pids.items(), key=lambda kv: kv[1]):
        chips[pid] = ChipLines(f"{host}/TPU:{ordinal}", host_index * chips_here + ordinal)
    for (pid, role), line in by_line.items():
        chip = chips[pid]
        ts = _numbers(line, "ts", path, "a TPU op" if role in (OPS, ASYNC) else "a step or module range")
        dur = _numbers(line, "dur", path, "a TPU op" if role in (OPS, ASYNC) else "a step or module range")
        start, end = us_interval_to_ns(ts, dur)
        args = [_args(ev) for ev in line]
        offset = np.array([_ps(a.get("device_offset_ps")) for a in args], dtype=np.int64)
        duration = np.array([_ps(a.get("device_duration_ps")) for a in args], dtype=np.int64)
        has = (offset >= 0) & (duration >= 0)
        start, end = device_times(start, end, np.maximum(offset, 0), np.maximum(duration, 0), has)
        names = np.array([_name(ev, path) for ev in line], dtype=object)
        if role in (MODULES, STEPS):
            chip.markers.extend(step_markers(chip.device, "step" if role == STEPS else "module", names, start, end))
            continue
        expression = np.array([_text(a.get("long_name")) or n for a, n in zip(args, names.tolist())], dtype=object)
        ops = OpEvents(
            chip.device,
            chip.global_id,
            expression,
            start,
            end,
            category=np.array([_text(a.get("hlo_category")) for a in args], dtype=object),
            program_id=np.array([_program_id(a.get("program_id")) for a in args], dtype=np.int64),
            flops=np.array([_float_arg(a.get("flops")) for a in args]),
            model_flops=np.array([_float_arg(a.get("model_flops")) for a in args]),
            bytes_accessed=np.array([_float_arg(a.get("bytes_accessed")) for a in args]),
            tf_op=np.array([_text(a.get("tf_op")) for a in args], dtype=object),
            deduplicated=np.array([_text(a.get("deduplicated_name")) for a in args], dtype=object),
            done=np.array([_text(a.get("hlo_op")) for a in args], dtype=object) if role == ASYNC else None,
        )
        if role == OPS:
            chip.ops = ops
        else:
            chip.asyncs = ops
    table = tpu_activity(list(chips.values()), host, slice_size, source="chrome")
    rows = [(c.device, *m) for c in chips.values() for m in c.markers]
    markers = make_markers(
        host=host,
        device=[r[0] for r in rows],
        kind=[r[1] for r in rows],
        name=[r[2] for r in rows],
        start_ns=np.array([r[3] for r in rows], dtype=np.int64),
        end_ns=np.array([r[4] for r in rows], dtype=np.int64),
        number=np.array([r[5] for r in rows], dtype=np.int64),
    )
    return Trace(
        events=table,
        path=str(path),
        format="chrome",
        markers=markers,
        framework="jax",
        job=Job(hosts=(host,)),
        devices={c.device: c.global_id for c in chips.values()},
        device_kinds={c.device: TPU for c in chips.values()},
    )


def _ps(value: object) -> int:
    """A picosecond arg (xprof writes integers as text: "78061575000"); -1 where it is none."""
    number = _number(value)
    return int(number) if number is not None and 0 <= number < 2**62 and number == int(number) else -1


def _float_arg(value: object) -> float:
    number = _number(value)
    return float("nan") if number is None else number


_NO_ID = object()  # what an unhashable pid/tid (a list, an object) becomes: it names no process or thread
_GROUP = re.compile(r"\s*-?\d{1,18}(\s*,\s*-?\d{1,18})*\s*")


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _ident(value: object) -> object:
    """A pid/tid as a dict key; an unhashable one names nothing."""
    try:
        hash(value)
    except TypeError:
        return _NO_ID
    return value


def _args(ev: dict) -> dict:
    args = ev.get("args")
    return args if isinstance(args, dict) else {}  # a list or a string there holds no args


def _text(value: object) -> str:
    """A text field: numbers are spelled out, absent/null and anything not text (a list, an object) is ""."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return ""


def _name(ev: dict, path: Path) -> str:
    name = ev.get("name", "")
    if isinstance(name, dict | list):
        raise InputError(path, f"a device activity whose name is {_json_type(name)}, not text")
    return _text(name)


def _number(value: object) -> float | None:
    """A JSON number (or a numeric string) as a float; None where it is no number (text, bool, null, list)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an integer past float's range: a time no int64 ns holds
            return float("inf") if value > 0 else float("-inf")
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _numbers(events: list[dict], key: str, path: Path, what: str) -> np.ndarray:
    """``ts`` (required) or ``dur`` (absent: 0) of each event in µs; a value that is no number is refused."""
    out = np.empty(len(events), dtype=np.float64)
    for i, ev in enumerate(events):
        if key not in ev and key == "dur":
            out[i] = 0.0
            continue
        if key not in ev:
            raise InputError(path, f"{what} without a timestamp ({key})")
        value = _number(ev[key])
        if value is None:
            raise InputError(path, f"{what} whose {key} is {_json_type(ev[key])}, not a number")
        out[i] = value
    return out


def _group(value: object) -> str:
    """The communicating group moeprof annotate writes ("0,1,2,3"); anything else is no group."""
    if isinstance(value, str) and _GROUP.fullmatch(value):
        return ",".join(x.strip() for x in value.split(","))
    return ""


def _program_id(value: object) -> int:
    text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
    return int(text) if text.lstrip("-").isdigit() and len(text) <= 18 else -1


def kinds_of(markers: pd.DataFrame) -> list[str]:
    return [str(k) for k in markers["kind"].unique()] if len(markers) else []
