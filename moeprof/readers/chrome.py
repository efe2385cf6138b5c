"""Chrome trace-event JSON: xprof/TensorBoard trace viewer exports and PyTorch Kineto traces.

The file is decoded once with orjson (C, several times faster than ``json`` and
lighter on memory); the content then decides the reader: Kineto traces carry
``deviceProperties``/``distributedInfo`` or ``kernel`` events, xprof exports name
their processes ``/device:GPU:N``.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from ..core.events import make_table, us_interval_to_ns
from ..core.trace import Job, Trace, empty_markers, make_markers
from ..core.vocabulary import vocabulary
from ..errors import InputError
from .base import ReadContext
from .discover import capture_stem

_GPU_PROCESS = re.compile(r"/device:GPU:(\d+)")
_STREAM_THREAD = re.compile(r"^Stream #")


def read_json(path: Path) -> dict:
    """Decode a (possibly gzipped) JSON trace; one-line errors for the usual breakages."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw:
        raise InputError(path, "empty file")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(path, f"truncated or corrupt gzip data ({exc})") from None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc}); is it truncated?") from None
    if isinstance(doc, list):  # the bare-array form of the trace-event format
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise InputError(path, "JSON without a traceEvents list: not a Chrome/Kineto trace")
    return doc


def read(path: Path, context: ReadContext) -> Trace:
    """A Chrome trace-event file: Kineto when it says so (metadata keys, GPU activity events), else xprof."""
    doc = read_json(path)
    from .kineto import is_kineto, read_kineto

    if is_kineto(doc):
        return read_kineto(doc, path, context)
    return read_xprof_chrome(doc, path, context.placement.host_index)


def read_xprof_chrome(doc: dict, path: Path, host_index: int = 0) -> Trace:
    """xprof's trace-viewer JSON: ``/device:GPU:N`` processes, ``Stream #N`` threads, µs floats."""
    events = doc["traceEvents"]
    gpu_pids: dict[object, int] = {}
    stream_tids: dict[tuple[object, object], str] = {}
    derived_tids: dict[tuple[object, object], str] = {}
    host = capture_stem(path.name)
    for ev in events:
        if ev.get("ph") != "M":
            continue
        name = ev.get("name")
        args = ev.get("args") or {}
        if name == "process_name":
            m = _GPU_PROCESS.search(str(args.get("name", "")))
            if m:
                gpu_pids[ev.get("pid")] = int(m.group(1))
        elif name == "thread_name":
            tname = str(args.get("name", ""))
            key = (ev.get("pid"), ev.get("tid"))
            if _STREAM_THREAD.match(tname):
                stream_tids[key] = tname
            else:
                derived_tids[key] = tname
    rows = [ev for ev in events if ev.get("ph") == "X" and ev.get("pid") in gpu_pids]
    gpus = len(gpu_pids)
    activity = [ev for ev in rows if (ev.get("pid"), ev.get("tid")) in stream_tids]
    steps = [ev for ev in rows if derived_tids.get((ev.get("pid"), ev.get("tid"))) in ("Steps", "XLA Modules")]
    if not activity:
        return Trace(events=make_table({}, n=0), path=str(path), format="chrome")
    ts = np.array([float(ev.get("ts", 0.0)) for ev in activity])
    dur = np.array([float(ev.get("dur", 0.0)) for ev in activity])
    names = [str(ev.get("name", "")) for ev in activity]
    args = [ev.get("args") or {} for ev in activity]
    start_ns, end_ns = us_interval_to_ns(ts, dur)
    ordinals = np.array([gpu_pids[ev["pid"]] for ev in activity], dtype=np.int64)
    vocab = vocabulary()
    copy = [vocab.copy_kind(n) for n in names]
    table = make_table(
        {
            "host": host,
            "device": [f"{host}/GPU:{o}" for o in ordinals],
            "global_id": host_index * gpus + ordinals,
            "gpus_per_domain": gpus,
            "stream": [stream_tids[(ev["pid"], ev.get("tid"))] for ev in activity],
            "name": names,
            "start_ns": start_ns,
            "end_ns": end_ns,
            "activity": [
                "memcpy" if c else ("memset" if vocab.memset_name.match(n) else "kernel") for c, n in zip(copy, names)
            ],
            "copy_kind": copy,
            "hlo_module": [str(a.get("hlo_module", "")) for a in args],
            "hlo_op": [str(a.get("hlo_op", "")) for a in args],
            # written by moeprof annotate (and harmless elsewhere): the HLO opcode and the communicating
            # group, so an annotated trace reads back with the same kinds and links
            "opcode": [str(a.get("opcode", "")) for a in args],
            "group": [str(a.get("group", "")) for a in args],
            "program_id": [
                int(a.get("program_id", -1)) if str(a.get("program_id", "")).lstrip("-").isdigit() else -1 for a in args
            ],
            "source": "chrome",
        }
    )
    markers = empty_markers()
    if steps:
        s_ts = np.array([float(ev.get("ts", 0.0)) for ev in steps])
        s_dur = np.array([float(ev.get("dur", 0.0)) for ev in steps])
        s_start, s_end = us_interval_to_ns(s_ts, s_dur)
        kinds = ["step" if derived_tids[(ev["pid"], ev.get("tid"))] == "Steps" else "module" for ev in steps]
        markers = make_markers(
            host=host,
            device=[f"{host}/GPU:{gpu_pids[ev['pid']]}" for ev in steps],
            kind=kinds,
            name=[str(ev.get("name", "")) for ev in steps],
            start_ns=s_start,
            end_ns=s_end,
            number=[_trailing_int(str(ev.get("name", ""))) if k == "step" else -1 for ev, k in zip(steps, kinds)],
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
    )


def kinds_of(markers: pd.DataFrame) -> list[str]:
    return [str(k) for k in markers["kind"].unique()] if len(markers) else []


def _trailing_int(text: str) -> int:
    m = re.search(r"(\d+)\s*$", text)
    return int(m.group(1)) if m else -1
