"""Structure-aware mutations of the seeds, one family per format, and the fixed file-system cases.

A case is built from ``(base seed, index)`` alone: the same pair gives the same files, the same mutation
log and the same expectation, so a failure can be replayed (``python -m tests.fuzz --replay SEED:INDEX``).

Every mutation step also says what a correct moeprof must do with the result:

- ``reject``: the input is bad beyond doubt (truncated JSON, no device activity, a device time that no
  int64 nanosecond can hold): exit 2 with one line.
- ``same``: the change carries no meaning (unknown keys, event order, WAL journal mode): exit 0 with the
  seed's own figures.
- ``same_or_reject``: the same values in another type (numbers as strings): the seed's figures, or exit 2.
- ``any``: exit 0 with sane figures, or exit 2 with one line.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import random
import sqlite3
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import protowire as pw
from .seeds import KINETO, NSYS_PARQUET, NSYS_SQLITE, ROCPROF_CSV, ROCPROF_JSON, XPLANE, XPROF_JSON, Seed, all_seeds

ANY, REJECT, SAME, SAME_OR_REJECT = "any", "reject", "same", "same_or_reject"
# why a step makes the input one to refuse (in the step's text, for the failure classifier)
NO_ACTIVITY, NO_INT64, NOT_A_NUMBER, NOT_A_TRACE, BROKEN_BYTES = (
    "[no device activity]",
    "[time beyond int64 ns]",  # not a refusal: the activity is dropped, and the analysis must warn (oracle)
    "[device time not a number]",  # a device activity whose start cannot be read: placing it anywhere is a guess
    "[not a trace]",
    "[broken bytes]",
)
INT64_MAX = 2**63 - 1

ACTIVITY_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
KINETO_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


@dataclass(frozen=True)
class Special:
    """A file-system object that is not plain bytes."""

    kind: str  # fifo | symlink | sparse | dir
    target: str = ""  # symlink target
    size: int = 0  # sparse file size


@dataclass
class Case:
    key: str  # "<base seed>:<index>" or "special:<name>"
    seed: str  # seed name, "" for cases built from nothing
    fmt: str
    steps: list[str]
    expect: str
    files: dict[str, bytes | Special]  # relative to the case's input folder "in/"
    arg: str  # the input path given on the command line, relative to "in/" (or absolute)
    target: str  # the file the mutation changed: an error must name it (or the argument)
    command: str = "analyze"
    mode: str = "worker"  # worker (CliRunner in the long-lived worker process) | subprocess (python -m moeprof)
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    readonly_dirs: tuple[str, ...] = ()  # folders under "in/" made read-only
    executables: dict[str, str] = field(default_factory=dict)  # "bin/<name>" -> script text (fake tools)
    memory_mb: int | None = None  # address-space limit of the run
    options: tuple[str, ...] = ()  # after the command's own arguments (value_cases: --what-if TERM, --baseline F)

    def describe(self) -> str:
        return (
            f"case {self.key} [{self.fmt}/{self.seed or '-'}, {self.command}, {self.mode}, expect {self.expect}]: "
            + (" ; ".join(self.steps) or "unmutated")
        )


def combine(expects: list[str]) -> str:
    if REJECT in expects:
        return REJECT
    if all(e == SAME for e in expects):
        return SAME
    if all(e in (SAME, SAME_OR_REJECT) for e in expects):
        return SAME_OR_REJECT
    return ANY


# ---- hostile values ------------------------------------------------------------------------------------------------

DEEP = 1000  # nesting depth of the deep-nesting values
_DEEP_LIST, _DEEP_DICT, _BAD_UTF8 = "@@FUZZ_DEEP_LIST@@", "@@FUZZ_DEEP_DICT@@", "@@FUZZ_BAD_UTF8@@"
_DUP_KEY = "@@FUZZ_DUP_KEY@@"  # written as "correlation": an object holding that key twice

EXTREME_INTS = [0, -1, 1, 2**31, INT64_MAX, -(2**63), 2**64 - 1, 2**64, 10**20, -(10**20)]
EXTREME_FLOATS = [1e300, -1e300, 1.7e15, 1e-300, 0.5, -0.0, math.nan, math.inf, -math.inf]
HOSTILE_STRINGS = ["", "x", "12", "1e3", " 7 ", "-5", "\x00", "a\nb", "名前", "%s%n{}", "A" * 100_000, _BAD_UTF8]
HOSTILE_SHAPES: list[object] = [None, True, [], [1, 2], {}, {"a": 1}, _DEEP_LIST, _DEEP_DICT]


def hostile_value(rng: random.Random, numeric_bias: bool = False) -> object:
    pools: list[list] = [EXTREME_INTS, EXTREME_FLOATS, HOSTILE_STRINGS, HOSTILE_SHAPES]
    weights = [4, 4, 1, 1] if numeric_bias else [2, 2, 2, 2]
    return rng.choice(rng.choices(pools, weights)[0])


def show(value: object) -> str:
    if value == _DEEP_LIST:
        return f"[[...{DEEP} deep...]]"
    if value == _DEEP_DICT:
        return f"{{a:{{a:...{DEEP} deep...}}}}"
    if value == _BAD_UTF8:
        return "invalid UTF-8 bytes"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} chars)"


def json_bytes(doc: object, indent: int | None = None) -> bytes:
    text = json.dumps(doc, indent=indent, separators=None if indent else (",", ":"), ensure_ascii=False)
    text = text.replace(json.dumps(_DEEP_LIST), "[" * DEEP + "]" * DEEP)
    text = text.replace(json.dumps(_DEEP_DICT), '{"a":' * DEEP + "{}" + "}" * DEEP)
    text = text.replace(json.dumps(_DUP_KEY), '"correlation"')
    return text.encode("utf-8", "surrogatepass").replace(_BAD_UTF8.encode(), b"\xff\xfe\xc3")


def ns_fits(*us: float) -> bool:
    """Whether microsecond times convert to int64 nanoseconds."""
    try:
        return all(math.isfinite(v) and abs(v * 1e3) < 2**63 for v in us)
    except TypeError:
        return True  # not a number: the reader's problem, not a range one


def not_a_number(v: object) -> bool:
    """A JSON value that is no number, not even a numeric string (booleans and null included)."""
    if isinstance(v, bool) or v is None:
        return True
    if isinstance(v, int | float):
        return False
    if isinstance(v, str):
        try:
            float(v)
            return False
        except ValueError:
            return True
    return True


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v)


# ---- JSON: xprof trace viewer and Kineto ---------------------------------------------------------------------------


class JsonTrace:
    def __init__(self, raw: bytes, fmt: str) -> None:
        self.gz = raw[:2] == b"\x1f\x8b"
        self.doc: object = json.loads(gzip.decompress(raw) if self.gz else raw)
        self.fmt = fmt
        self.indent: int | None = None
        self._layout: tuple[set, set] | None = None  # xprof: GPU pids and stream threads, from metadata events

    @property
    def events(self) -> list:
        doc = self.doc
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
            return doc["traceEvents"]
        return doc if isinstance(doc, list) else []

    def is_device(self, ev: object) -> bool:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            return False
        if self.fmt == KINETO:
            return ev.get("cat") in KINETO_DEVICE_CATS
        gpu_pids, streams = self._xprof_layout()
        return _hashable(ev.get("pid")) in gpu_pids and (_hashable(ev.get("pid")), _hashable(ev.get("tid"))) in streams

    def _xprof_layout(self) -> tuple[set, set]:
        if self._layout is None:
            self._layout = self._read_layout()
        return self._layout

    def _read_layout(self) -> tuple[set, set]:
        gpu_pids, streams = set(), set()
        for ev in self.events:
            if not isinstance(ev, dict) or ev.get("ph") != "M" or not isinstance(ev.get("args"), dict):
                continue
            name = str(ev["args"].get("name", ""))
            if ev.get("name") == "process_name" and name.startswith("/device:GPU:"):
                gpu_pids.add(_hashable(ev.get("pid")))
            elif ev.get("name") == "thread_name" and name.startswith("Stream #"):
                streams.add((_hashable(ev.get("pid")), _hashable(ev.get("tid"))))
        return gpu_pids, streams

    def serialize(self) -> bytes:
        raw = json_bytes(self.doc, self.indent)
        return gzip.compress(raw, mtime=0) if self.gz else raw


def _hashable(v: object) -> object:
    return json.dumps(v, sort_keys=True) if isinstance(v, list | dict) else v


EVENT_KEYS = ["ts", "dur", "pid", "tid", "ph", "cat", "name", "args", "id"]
ARG_KEYS = [
    "External id", "correlation", "device", "stream", "Collective name", "Process Group Ranks", "Group size",
    "In msg nelems", "Out msg nelems", "dtype", "hlo_op", "hlo_module", "program_id", "opcode", "group", "bytes",
    "name", "Process Group Name", "In split size", "Out split size",
]  # fmt: skip


def _pick_event(rng: random.Random, t: JsonTrace, device_share: float = 0.6) -> int | None:
    events = t.events
    if not events:
        return None
    device = [i for i, e in enumerate(events) if t.is_device(e)]
    if device and rng.random() < device_share:
        return rng.choice(device)
    return rng.randrange(len(events))


def j_field(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    i = _pick_event(rng, t)
    if i is None or not isinstance(t.events[i], dict):
        return "field: no event object", ANY
    ev = t.events[i]
    key = rng.choice(sorted(set(ev) | set(EVENT_KEYS)))
    device = t.is_device(ev)
    if key in ("ts", "dur") and rng.random() < 0.25 and _num(ev.get(key)) is not None:
        ev[key] = repr(ev[key])  # the same number, as a string
        return f"event {i} ({'device' if device else 'other'}) {key} = the same value as a string", (
            SAME_OR_REJECT if device else ANY
        )
    value = hostile_value(rng, numeric_bias=key in ("ts", "dur", "pid", "tid", "id"))
    expect = ANY
    no_int64 = False
    if device and key in ("ts", "dur") and _num(value) is not None:
        ts = _num(value) if key == "ts" else _num(ev.get("ts"))
        dur = _num(value) if key == "dur" else _num(ev.get("dur"))
        if ts is not None and dur is not None and not ns_fits(ts, ts + max(dur, 0.0)):
            no_int64 = True  # a device activity no int64 nanosecond can place: dropped with a warning
    tag = f" {NO_INT64}" if no_int64 else ""
    if device and key == "ts" and not_a_number(value):
        expect, tag = REJECT, f" {NOT_A_NUMBER}"
    ev[key] = value
    return (
        f"event {i} ({'device' if device else 'other'} {ev.get('cat', ev.get('ph'))}) {key} = {show(value)}{tag}",
        expect,
    )


def j_arg(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    with_args = [i for i, e in enumerate(t.events) if isinstance(e, dict) and isinstance(e.get("args"), dict)]
    if not with_args:
        return "arg: no event with args", ANY
    i = rng.choice(with_args)
    args = t.events[i]["args"]
    key = rng.choice(sorted(set(args) | set(ARG_KEYS)))
    value = hostile_value(rng)
    args[key] = value
    return f"event {i} args[{key!r}] = {show(value)}", ANY


def j_args_shape(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    i = _pick_event(rng, t)
    if i is None or not isinstance(t.events[i], dict):
        return "args-shape: no event object", ANY
    kind = rng.choice(["list", "string", "number", "deep-list", "deep-dict", "many-keys", "duplicate-keys"])
    value: object = {
        "list": [1, "a", {"b": 2}],
        "string": "args",
        "number": 7,
        "deep-list": _DEEP_LIST,
        "deep-dict": {"Collective name": _DEEP_DICT},
        "many-keys": {f"k{n}": n for n in range(5000)},
        # a dict cannot hold a key twice, the JSON text can: the sentinel key is written as "correlation"
        "duplicate-keys": {"correlation": 1, "External id": 1, _DUP_KEY: [2, 3]},
    }[kind]
    t.events[i]["args"] = value
    return f"event {i} args = {kind}", ANY


def j_drop_key(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    i = _pick_event(rng, t)
    if i is None or not isinstance(t.events[i], dict) or not t.events[i]:
        return "drop-key: no event object", ANY
    key = rng.choice(sorted(t.events[i]))
    device = t.is_device(t.events[i])
    del t.events[i][key]
    if device and key == "ts":
        return f"device event {i} loses 'ts' {NOT_A_NUMBER}", REJECT
    return f"event {i} loses {key!r}", ANY


def j_not_object(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    i = _pick_event(rng, t, device_share=0.3)
    if i is None:
        return "not-object: no events", ANY
    value = rng.choice([1, "event", None, [], [dict(t.events[i])] if isinstance(t.events[i], dict) else [], True, 1.5])
    t.events[i] = value
    return f"event {i} replaced by {show(value)}", ANY


def j_duplicate(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    i = _pick_event(rng, t)
    if i is None:
        return "duplicate: no events", ANY
    n = rng.choice([1, 100, 1000])
    t.events[i + 1 : i + 1] = [json.loads(json.dumps(t.events[i]))] * n
    return f"event {i} repeated {n} more times", ANY


def j_top(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    if not isinstance(t.doc, dict):
        return "top: not an object", ANY
    choices = ["traceEvents", "doc", "bare-list"]
    if t.fmt == KINETO:
        choices += ["distributedInfo", "rank", "world_size", "pg_config", "deviceProperties", "deviceProperty",
                    "schemaVersion"] * 2  # fmt: skip
    else:
        choices += ["displayTimeUnit"]
    what = rng.choice(choices)
    if what == "traceEvents":
        value = rng.choice([None, {}, "events", 3, {"0": t.events[:1]}])
        t.doc["traceEvents"] = value
        return f"traceEvents = {show(value)} {NOT_A_TRACE}", REJECT
    if what == "doc":
        t.doc = rng.choice([None, 1, "trace", True, [], [[]]])
        return f"the document = {show(t.doc)} {NOT_A_TRACE}", REJECT
    if what == "bare-list":
        t.doc = t.events
        return "the document = its bare traceEvents array", SAME if t.fmt == XPROF_JSON else ANY
    if what in ("rank", "world_size", "pg_config"):
        info = t.doc.setdefault("distributedInfo", {})
        if not isinstance(info, dict):
            info = t.doc["distributedInfo"] = {}
        value = hostile_value(rng, numeric_bias=what != "pg_config")
        info[what] = value
        return f"distributedInfo.{what} = {show(value)}", ANY
    if what == "deviceProperty":
        props = t.doc.get("deviceProperties")
        if isinstance(props, list) and props:
            j = rng.randrange(len(props))
            props[j] = hostile_value(rng) if rng.random() < 0.5 else {"id": hostile_value(rng), "name": "x"}
            return f"deviceProperties[{j}] = {show(props[j])}", ANY
        what = "deviceProperties"
    value = hostile_value(rng)
    t.doc[what] = value
    return f"{what} = {show(value)}", ANY


def j_meta(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    meta = [i for i, e in enumerate(t.events) if isinstance(e, dict) and e.get("ph") == "M"]
    if not meta:
        return j_field(rng, t)
    i = rng.choice(meta)
    ev = t.events[i]
    t._layout = None
    value = rng.choice(
        ["/device:GPU:99999999999999999999", "/device:GPU:-1", "/device:GPU:0", "/device:GPU:", "Stream #1", "Steps",
         "XLA Modules", _BAD_UTF8, [], {"name": "/device:GPU:3"}, 12]
    )  # fmt: skip
    if rng.random() < 0.8 and isinstance(ev.get("args"), dict):
        ev["args"]["name"] = value
        return f"metadata event {i} ({ev.get('name')}) args.name = {show(value)}", ANY
    key = rng.choice(["pid", "tid", "name"])
    ev[key] = hostile_value(rng)
    return f"metadata event {i} {key} = {show(ev[key])}", ANY


def j_no_device(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    keep = [e for e in t.events if not t.is_device(e)]
    t.events[:] = keep
    return f"every device activity event removed {NO_ACTIVITY}", REJECT


def j_neutral(rng: random.Random, t: JsonTrace) -> tuple[str, str]:
    what = rng.choice(["unknown-key", "shuffle", "indent", "compression"])
    if what == "unknown-key":
        for e in t.events:
            if isinstance(e, dict):
                e["zz_fuzz_unknown"] = {"nested": [1, 2]}
        return "an unknown key added to every event", SAME
    if what == "shuffle":
        rng.shuffle(t.events)
        return "events shuffled", SAME
    if what == "indent":
        t.indent = 2
        return "written indented", SAME
    t.gz = not t.gz
    return f"written {'gzip-compressed' if t.gz else 'uncompressed'} (same file name)", SAME


def j_huge_durations(rng: random.Random, t: JsonTrace) -> str:
    """Activities of 1.7e15 µs (54 years; each fits int64 ns, a few of them summed do not)."""
    device = [e for e in t.events if t.is_device(e)]
    picked = rng.sample(device, min(len(device), rng.choice([1, 6, 12])))
    for e in picked:
        e["dur"] = 1.7e15
    return f"{len(picked)} device events get dur = 1.7e15 us"


JSON_OPS: list[tuple[Callable[[random.Random, JsonTrace], tuple[str, str]], int]] = [
    (j_field, 10), (j_arg, 5), (j_args_shape, 2), (j_drop_key, 3), (j_not_object, 2), (j_duplicate, 2),
    (j_top, 3), (j_meta, 2), (j_no_device, 1), (j_neutral, 2),
]  # fmt: skip


# ---- XPlane --------------------------------------------------------------------------------------------------------

_TIME_FIELDS = {("XEvent", "offset_ps"), ("XEvent", "duration_ps"), ("XLine", "timestamp_ns"), ("XLine", "duration_ps")}
XPLANE_INTS = [0, 1, -1, INT64_MAX, -(2**63), 2**62, 2**64 - 1, 10**18, INT64_MAX - 10**6]
XPLANE_STRINGS = [b"", b"\xff\xfe\xfd", b"A" * 100_000, b"/device:GPU:99999999999999999999", b"/device:GPU:-1",
                  b"/device:GPU:0", b"Stream #1\n2", b"\x00", "名前".encode(), b"Steps", b"XLA Ops"]  # fmt: skip


class XSpace:
    def __init__(self, raw: bytes, seed: Seed) -> None:
        self.fields = pw.decode(raw)
        self.gpu = "cpu" not in seed.name

    def nodes(self, pred: Callable[[pw.Field, str], bool]) -> list[tuple[list[pw.Field], int, pw.Field, str]]:
        return [(parent, i, f, msg) for _, parent, i, f, msg in pw.walk(self.fields) if pred(f, msg)]

    def serialize(self) -> bytes:
        return pw.encode(self.fields)


def _where(f: pw.Field, msg: str) -> str:
    return f"{msg}.{f.name}"


def x_int(rng: random.Random, x: XSpace) -> tuple[str, str]:
    nodes = x.nodes(lambda f, m: f.wire == pw.VARINT)
    weights = [6 if (m, f.name) in _TIME_FIELDS else 1 for _, _, f, m in nodes]
    _, i, f, msg = rng.choices(nodes, weights)[0]
    f.value = rng.choice(XPLANE_INTS) & (2**64 - 1)
    shown = f.value - 2**64 if f.value >= 2**63 else f.value
    return f"{_where(f, msg)} #{i} = {shown}", ANY


def x_double(rng: random.Random, x: XSpace) -> tuple[str, str]:
    stats = x.nodes(lambda f, m: m == "XStat" and f.number in (2, 3, 4, 5, 6, 7))
    if not stats:
        return "double: no stat values", ANY
    _, i, f, _ = rng.choice(stats)
    value = rng.choice([math.nan, math.inf, -math.inf, 1e300, -0.0, 5e-324])
    f.number, f.wire, f.name, f.kind = 2, pw.FIXED64, "double_value", "double"
    f.value = struct.unpack("<Q", struct.pack("<d", value))[0]
    return f"XStat value #{i} = double {value}", ANY


def x_string(rng: random.Random, x: XSpace) -> tuple[str, str]:
    nodes = x.nodes(lambda f, m: f.kind == "string")
    _, _, f, msg = rng.choice(nodes)
    old = f.value if isinstance(f.value, bytes) else b""
    f.value = rng.choice(XPLANE_STRINGS)
    return f"{_where(f, msg)} {old[:30]!r} = {show(f.value)}", ANY


def x_bytes(rng: random.Random, x: XSpace) -> tuple[str, str]:
    nodes = x.nodes(lambda f, m: f.kind == "bytes" and isinstance(f.value, bytes))
    if not nodes:
        return x_string(rng, x)
    _, i, f, msg = rng.choice(nodes)
    raw = bytearray(f.value)  # type: ignore[arg-type]
    how = rng.choice(["truncate", "flip", "garbage", "empty"])
    if how == "truncate" and raw:
        raw = raw[: rng.randrange(len(raw))]
    elif how == "flip" and raw:
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
    elif how == "garbage":
        raw = bytearray(rng.randbytes(rng.randint(1, 64)))
    else:
        raw = bytearray()
    f.value = bytes(raw)
    return f"{_where(f, msg)} #{i} (bytes, e.g. the HLO proto) {how}", ANY


def x_dangling(rng: random.Random, x: XSpace) -> tuple[str, str]:
    nodes = x.nodes(lambda f, m: f.name in ("metadata_id", "ref_value"))
    _, i, f, msg = rng.choice(nodes)
    f.value = rng.choice([987654, 2**40 + 3, 0])
    return f"{_where(f, msg)} #{i} = {f.value} (no such metadata)", ANY


def x_delete(rng: random.Random, x: XSpace) -> tuple[str, str]:
    nodes = x.nodes(lambda f, m: True)
    weights = [4 if f.name in ("name", "event_metadata", "stat_metadata", "hostnames", "value", "key") else 1
               for _, _, f, _ in nodes]  # fmt: skip
    parent, i, f, msg = rng.choices(nodes, weights)[0]
    del parent[i]
    return f"{_where(f, msg)} #{i} deleted", ANY


def x_duplicate(rng: random.Random, x: XSpace) -> tuple[str, str]:
    nodes = x.nodes(lambda f, m: f.is_message)
    parent, i, f, msg = rng.choice(nodes)
    n = rng.choice([1, 2, 50])
    parent[i + 1 : i + 1] = [pw.decode(pw.encode([f]), msg)[0] for _ in range(n)]
    return f"{_where(f, msg)} #{i} repeated {n} more times", ANY


def x_wrong_wire(rng: random.Random, x: XSpace) -> tuple[str, str]:
    nodes = x.nodes(lambda f, m: True)
    _, i, f, msg = rng.choice(nodes)
    if f.wire == pw.LENGTH:
        f.wire, f.value = pw.VARINT, 5
    elif f.wire == pw.VARINT:
        f.wire, f.value = pw.LENGTH, pw.varint(f.value)  # type: ignore[arg-type]
    else:
        f.wire, f.value = pw.VARINT, 1
    return f"{_where(f, msg)} #{i} written with wire type {f.wire}", ANY


def x_cut_message(rng: random.Random, x: XSpace) -> tuple[str, str]:
    nodes = x.nodes(lambda f, m: f.is_message)
    _, i, f, msg = rng.choice(nodes)
    raw = pw.encode(f.value)  # type: ignore[arg-type]
    cut = rng.randrange(len(raw)) if raw else 0
    f.value = raw[:cut]
    return f"{_where(f, msg)} #{i} cut to {cut} of {len(raw)} bytes", ANY


def x_line_time(rng: random.Random, x: XSpace) -> tuple[str, str]:
    lines = x.nodes(lambda f, m: m == "XPlane" and f.name == "lines" and f.is_message)
    _, i, line, _ = rng.choice(lines)
    value = rng.choice([INT64_MAX - 1000, INT64_MAX, -(2**63), 2**62, -1])
    fields = [f for f in line.value if f.name == "timestamp_ns"]  # type: ignore[union-attr]
    if fields:
        fields[0].value = value & (2**64 - 1)
    else:
        line.value.append(pw.Field(3, pw.VARINT, value & (2**64 - 1), "int64", "timestamp_ns"))  # type: ignore[union-attr]
    return f"XLine #{i} timestamp_ns = {value}", ANY


def x_no_device(rng: random.Random, x: XSpace) -> tuple[str, str]:
    for _, _, plane, _ in x.nodes(lambda f, m: m == "XSpace" and f.name == "planes" and f.is_message):
        names = pw.get(plane.value, "name")  # type: ignore[arg-type]
        if names and pw.text(names[0]).startswith("/device:"):
            plane.value = [f for f in plane.value if f.name != "lines"]  # type: ignore[union-attr]
    return f"every line of every /device: plane removed{' ' + NO_ACTIVITY if x.gpu else ''}", REJECT if x.gpu else ANY


def x_unknown_field(rng: random.Random, x: XSpace) -> tuple[str, str]:
    where = rng.choice(["XSpace", "XEvent"])
    if where == "XSpace":
        x.fields.append(pw.Field(99, pw.VARINT, 7))
    else:
        events = x.nodes(lambda f, m: m == "XLine" and f.name == "events" and f.is_message)
        events[rng.randrange(len(events))][2].value.append(pw.Field(99, pw.LENGTH, b"fuzz"))  # type: ignore[union-attr]
    return f"an unknown field (number 99) added to an {where}", SAME


XPLANE_OPS: list[tuple[Callable[[random.Random, XSpace], tuple[str, str]], int]] = [
    (x_int, 10), (x_double, 2), (x_string, 4), (x_bytes, 3), (x_dangling, 3), (x_delete, 4), (x_duplicate, 3),
    (x_wrong_wire, 3), (x_cut_message, 3), (x_line_time, 2), (x_no_device, 1), (x_unknown_field, 1),
]  # fmt: skip


# ---- Nsight SQLite -------------------------------------------------------------------------------------------------

SQL_VALUES = [
    ("NULL", "NULL"), ("0", "0"), ("-1", "-1"), ("2^63-1", str(INT64_MAX)), ("-2^63", str(-(2**63))),
    ("1e300", "1e300"), ("-1e300", "-1e300"), ("0.5", "0.5"), ("'abc'", "'abc'"), ("''", "''"),
    ("blob x'ff00'", "x'ff00'"), ("invalid UTF-8 text", "CAST(x'ff41c3' AS TEXT)"), ("1.7e18", "1.7e18"),
]  # fmt: skip
HOSTILE_TABLES = {
    "ENUM_CUDA_MEMCPY_OPER": (
        "id INTEGER, name TEXT, label TEXT",
        [("NULL", "'CUDA_MEMCPY_KIND_HTOD'", "'x'"), ("1", "NULL", "NULL"), ("'x'", "'y'", "'z'"),
         (str(INT64_MAX), "'CUDA_MEMCPY_KIND_PTOP'", "''"), ("10", "CAST(x'ff' AS TEXT)", "''")],
    ),
    "TARGET_INFO_GPU": ("id INTEGER, name TEXT", [("NULL", "'H100'"), ("'a'", "NULL"), ("-1", "x'00ff'")]),
    "TARGET_INFO_SYSTEM_ENV": (
        "globalVid INT, devStateName TEXT, name TEXT, nameEnum INT, value TEXT",
        [("0", "'Local'", "'Hostname'", "619", "NULL"), ("0", "'Local'", "'Hostname'", "619", "'a\nb'"),
         ("0", "'Local'", "'Hostname'", "619", "CAST(x'ff' AS TEXT)"), ("0", "NULL", "NULL", "NULL", "NULL")],
    ),
    "NVTX_PAYLOAD_SCHEMA_ENTRIES": (
        "domainId INT, schemaId INT, idx INT, flags INT, type INT, name TEXT, description TEXT, arrayOrUnionDetail INT,"
        " offset INT",
        [("NULL", "NULL", "NULL", "0", "NULL", "NULL", "NULL", "NULL", "NULL"),
         ("0", "1", "0", "0", "9999", "'x'", "''", "0", str(INT64_MAX))],
    ),
    "NVTX_PAYLOAD_SCHEMAS": (
        "domainId INT, schemaId INT, name TEXT, type INT, flags INT, numEntries INT, payloadSize INT, alignTo INT",
        [("0", "1", "'s'", "1", "0", "1", "-1", "0"), ("NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL")],
    ),
}  # fmt: skip


class Sqlite:
    def __init__(self, raw: bytes) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="moeprof-fuzz-db-")
        self.path = Path(self._tmp.name) / "x.sqlite"
        self.path.write_bytes(raw)
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.wal = False

    def tables(self) -> list[str]:
        return sorted(r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))

    def columns(self, table: str) -> list[str]:
        return [r[1] for r in self.conn.execute(f'PRAGMA table_info("{table}")')]

    def rows(self, table: str) -> int:
        return self.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]

    def serialize(self) -> bytes:
        if self.wal:
            self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.close()  # the last connection checkpoints the WAL into the file and removes it
        data = self.path.read_bytes()
        self._tmp.cleanup()
        return data


def _pick_table(rng: random.Random, db: Sqlite) -> str | None:
    tables = db.tables()
    if not tables:
        return None
    weights = [5 if t in ACTIVITY_TABLES else 2 if t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "StringIds", "NVTX_EVENTS")
               else 1 for t in tables]  # fmt: skip
    return rng.choices(tables, weights)[0]


def _sql(db: Sqlite, statement: str) -> str:
    try:
        db.conn.execute(statement)
        return ""
    except sqlite3.Error as exc:
        return f" (SQLite refused: {exc})"


@dataclass
class CellUpdate:
    """What :func:`update_cell` did: the column, the value's label, the table's rows, whether every row was set,
    and SQLite's refusal (" (SQLite refused: ...)", "" where it took the value)."""

    col: str
    label: str
    rows: int
    every: bool
    note: str

    @property
    def took_a_time(self) -> bool:
        """A time column of a row took the value."""
        return self.col in ("start", "end") and not self.note and self.rows > 0

    def describe(self, table: str, note: str) -> str:
        return f"{table}.{self.col} = {self.label} in {'every row' if self.every else 'one row'}{note}"


def update_cell(rng: random.Random, db: Sqlite, table: str, time_share: float) -> CellUpdate:
    """A hostile SQL value (SQL_VALUES) into one column of ``table`` (a start or end column in ``time_share`` of the
    draws where it has one): in one row, or in every row (a fifth of the draws, and an empty table)."""
    cols = db.columns(table)
    time_cols = [c for c in cols if c in ("start", "end")]
    col = rng.choice(time_cols) if time_cols and rng.random() < time_share else rng.choice(cols)
    label, literal = rng.choice(SQL_VALUES)
    n = db.rows(table)
    every = rng.random() < 0.2 or n == 0
    where = "" if every else f' WHERE rowid = (SELECT rowid FROM "{table}" LIMIT 1 OFFSET {rng.randrange(n)})'
    return CellUpdate(col, label, n, every, _sql(db, f'UPDATE "{table}" SET "{col}" = {literal}{where}'))


def s_cell(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    table = _pick_table(rng, db)
    if table is None:
        return "cell: no tables", ANY
    cell = update_cell(rng, db, table, 0.5)
    note, expect = cell.note, ANY
    timed = table in ACTIVITY_TABLES and cell.took_a_time
    if timed and cell.label in ("1e300", "-1e300"):
        note += f" {NO_INT64}"  # a device time no int64 nanosecond holds: dropped with a warning
    elif timed and cell.label in ("'abc'", "''", "blob x'ff00'", "invalid UTF-8 text"):
        expect = REJECT
        note += f" {NOT_A_NUMBER}"
    return cell.describe(table, note), expect


def s_drop_table(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    table = _pick_table(rng, db)
    if table is None:
        return "drop: no tables", ANY
    note = _sql(db, f'DROP TABLE "{table}"')
    left = [t for t in db.tables() if t in ACTIVITY_TABLES and db.rows(t)]
    return f"table {table} dropped{note}" + ("" if left else f" {NO_ACTIVITY}"), ANY if left else REJECT


def s_drop_column(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    table = _pick_table(rng, db)
    if table is None:
        return "drop-column: no tables", ANY
    col = rng.choice(db.columns(table))
    note = _sql(db, f'ALTER TABLE "{table}" DROP COLUMN "{col}"')
    return f"column {table}.{col} dropped{note}", ANY


def s_empty_activity(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    for t in db.tables():
        if t in ACTIVITY_TABLES:
            db.conn.execute(f'DELETE FROM "{t}"')
    return f"every activity row deleted (tables kept) {NO_ACTIVITY}", REJECT


def s_delete_some(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    table = _pick_table(rng, db)
    if table is None:
        return "delete: no tables", ANY
    # rows picked by the case's generator, never SQLite's random(): a case must replay byte for byte
    db.conn.execute(f'DELETE FROM "{table}" WHERE rowid % {rng.randint(2, 5)} = {rng.randint(0, 1)}')
    left = [t for t in db.tables() if t in ACTIVITY_TABLES and db.rows(t)]
    return f"some rows of {table} deleted" + ("" if left else f" {NO_ACTIVITY}"), ANY if left else REJECT


def s_text_column(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    tables = [t for t in db.tables() if t in ACTIVITY_TABLES and db.rows(t)]
    if not tables:
        return "text-column: no activity rows", ANY
    table = rng.choice(tables)
    cols = db.columns(table)
    col = rng.choice([c for c in cols if c in ("start", "end", "deviceId", "streamId")] or cols)
    select = ", ".join(f'CAST("{c}" AS TEXT) AS "{c}"' if c == col else f'"{c}"' for c in cols)
    note = _sql(db, f'CREATE TABLE fuzz_tmp AS SELECT {select} FROM "{table}"')
    note = note or _sql(db, f'DROP TABLE "{table}"') or _sql(db, f'ALTER TABLE fuzz_tmp RENAME TO "{table}"')
    return f"{table}.{col} holds its numbers as TEXT{note}", SAME_OR_REJECT if not note else ANY


def s_hostile_table(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    name = rng.choice(sorted(HOSTILE_TABLES))
    cols, rows = HOSTILE_TABLES[name]
    db.conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    db.conn.execute(f'CREATE TABLE "{name}" ({cols})')
    for row in rows:
        db.conn.execute(f'INSERT INTO "{name}" VALUES ({", ".join(row)})')
    return f"table {name} replaced by rows with NULL/odd ids and values", ANY


def s_dangling_strings(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    if "StringIds" not in db.tables():
        return "dangling: no StringIds", ANY
    k = rng.choice([1, 3, 1000])
    ids = [r[0] for r in db.conn.execute("SELECT id FROM StringIds ORDER BY id")]
    gone = rng.sample(ids, min(k, len(ids)))
    db.conn.executemany("DELETE FROM StringIds WHERE id = ?", [(i,) for i in gone])
    return f"{k} StringIds rows deleted (names point nowhere)", ANY


def s_duplicate_rows(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in db.tables() and rng.random() < 0.5:
        db.conn.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        return "every runtime launch row duplicated (same correlation ids)", SAME
    table = _pick_table(rng, db)
    if table is None:
        return "duplicate: no tables", ANY
    note = _sql(db, f'INSERT INTO "{table}" SELECT * FROM "{table}"')
    return f"every row of {table} duplicated{note}", ANY


def s_nvtx_text(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    if "NVTX_EVENTS" not in db.tables() or "text" not in db.columns("NVTX_EVENTS"):
        return s_cell(rng, db)
    step = "'ProfilerStep#99999999999999999999'"
    label, literal = rng.choice(
        [("'%'", "'%'"), ("'_'", "'_'"), ("invalid UTF-8", "CAST(x'ff80' AS TEXT)"), ("NULL", "NULL"), (step, step),
         ("'nccl:all_to_all' x 10000", "replace(hex(zeroblob(10000)), '00', 'nccl:all_to_all')")]
    )  # fmt: skip
    db.conn.execute(f"UPDATE NVTX_EVENTS SET text = {literal} WHERE rowid % 3 = 0")
    return f"NVTX_EVENTS.text = {label} in every third row", ANY


def s_neutral(rng: random.Random, db: Sqlite) -> tuple[str, str]:
    if rng.random() < 0.5:
        db.wal = True
        return "journal mode WAL", SAME
    db.conn.execute("CREATE TABLE IF NOT EXISTS FUZZ_UNRELATED (x INTEGER, y TEXT)")
    db.conn.execute("INSERT INTO FUZZ_UNRELATED VALUES (1, 'a')")
    return "an unrelated table added", SAME


def s_huge_durations(rng: random.Random, db: Sqlite) -> str:
    """Activities of 1.7e18 ns (each fits int64, a few of them summed do not)."""
    tables = [t for t in db.tables() if t in ACTIVITY_TABLES and {"start", "end"} <= set(db.columns(t))]
    if not tables:
        return "huge durations: no activity table"
    table, k = rng.choice(tables), rng.choice([1, 6, 12])
    note = _sql(db, f'UPDATE "{table}" SET "end" = start + 1700000000000000000 WHERE rowid IN '
                    f'(SELECT rowid FROM "{table}" ORDER BY rowid LIMIT {k})')  # fmt: skip
    return f"{k} rows of {table} get end = start + 1.7e18 ns{note}"


SQLITE_OPS: list[tuple[Callable[[random.Random, Sqlite], tuple[str, str]], int]] = [
    (s_cell, 12), (s_drop_table, 3), (s_drop_column, 3), (s_empty_activity, 1), (s_delete_some, 2),
    (s_text_column, 2), (s_hostile_table, 3), (s_dangling_strings, 2), (s_duplicate_rows, 2), (s_nvtx_text, 1),
    (s_neutral, 2),
]  # fmt: skip


# ---- Nsight parquet folder -----------------------------------------------------------------------------------------


def sqlite_to_tables(raw: bytes) -> dict[str, pa.Table]:
    """What ``nsys export --type parquetdir`` holds: one table per SQLite table, arrow-inferred columns."""
    with tempfile.TemporaryDirectory(prefix="moeprof-fuzz-pq-") as tmp:
        db = Path(tmp) / "x.sqlite"
        db.write_bytes(raw)
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        conn.text_factory = lambda b: b.decode("utf-8", "replace")
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            out = {}
            for name in names:
                cur = conn.execute(f'SELECT * FROM "{name}"')
                cols = [d[0] for d in cur.description]
                rows = cur.fetchall()
                data = {}
                for i, c in enumerate(cols):
                    values = [r[i] for r in rows]
                    try:
                        data[c] = pa.array(values)
                    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types after a mutation: keep them as text
                        data[c] = pa.array([None if v is None else str(v) for v in values], pa.string())
                out[name] = pa.table(data) if data else pa.table({})
            return out
        finally:
            conn.close()


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


class Parquet:
    def __init__(self, tables: dict[str, pa.Table]) -> None:
        self.tables = tables
        self.raw: dict[str, bytes] = {}  # files written as given bytes instead of from a table

    def serialize(self) -> dict[str, bytes]:
        files = {f"{n}.parquet": _parquet_bytes(t) for n, t in self.tables.items()}
        files.update(self.raw)
        return files


def _pick_pq_table(rng: random.Random, p: Parquet, with_rows: bool = False) -> str | None:
    names = [n for n in sorted(p.tables) if p.tables[n].num_columns and (p.tables[n].num_rows or not with_rows)]
    if not names:
        return None
    weights = [5 if n in ACTIVITY_TABLES else 2 if n == "StringIds" else 1 for n in names]
    return rng.choices(names, weights)[0]


def _replace_column(table: pa.Table, name: str, column: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), name, column)


def p_drop_file(rng: random.Random, p: Parquet) -> tuple[str, str]:
    name = _pick_pq_table(rng, p) or "StringIds"
    p.tables.pop(name, None)
    return f"{name}.parquet removed", ANY


def p_string_column(rng: random.Random, p: Parquet) -> tuple[str, str]:
    name = _pick_pq_table(rng, p, with_rows=True)
    if name is None:
        return "string-column: no tables", ANY
    t = p.tables[name]
    col = rng.choice([c for c in t.column_names if c in ("start", "end", "deviceId")] or t.column_names)
    t = _replace_column(t, col, pa.array([None if v is None else str(v) for v in t[col].to_pylist()], pa.string()))
    p.tables[name] = t
    return f"{name}.{col} holds its values as strings", SAME_OR_REJECT


def p_cast_column(rng: random.Random, p: Parquet) -> tuple[str, str]:
    name = _pick_pq_table(rng, p, with_rows=True)
    if name is None:
        return "cast: no tables", ANY
    t = p.tables[name]
    col = rng.choice(t.column_names)
    kind = rng.choice(["float64", "binary", "null", "bool", "list"])
    values = t[col].to_pylist()
    if kind == "float64":
        arr = pa.array([None if not isinstance(v, int | float) else float(v) for v in values], pa.float64())
    elif kind == "binary":
        arr = pa.array([None if v is None else str(v).encode() + b"\xff" for v in values], pa.binary())
    elif kind == "null":
        arr = pa.nulls(len(values))
    elif kind == "bool":
        arr = pa.array([bool(v) for v in values], pa.bool_())
    else:
        arr = pa.array([[v] for v in values])
    p.tables[name] = _replace_column(t, col, arr)
    return f"{name}.{col} cast to {kind}", ANY


def p_drop_column(rng: random.Random, p: Parquet) -> tuple[str, str]:
    name = _pick_pq_table(rng, p)
    if name is None:
        return "drop-column: no tables", ANY
    col = rng.choice(p.tables[name].column_names)
    p.tables[name] = p.tables[name].drop_columns([col])
    return f"column {name}.{col} dropped", ANY


def p_values(rng: random.Random, p: Parquet) -> tuple[str, str]:
    name = _pick_pq_table(rng, p, with_rows=True)
    if name is None:
        return "values: no tables", ANY
    t = p.tables[name]
    times = [c for c in t.column_names if c in ("start", "end")]
    col = rng.choice(times if times and rng.random() < 0.5 else t.column_names)
    values = t[col].to_pylist()
    row = rng.randrange(len(values))
    value = rng.choice([None, 0, -1, INT64_MAX, -(2**63)])
    if value is not None and not pa.types.is_integer(t.schema.field(col).type):
        value = None
    values[row] = value
    p.tables[name] = _replace_column(t, col, pa.array(values, t.schema.field(col).type))
    return f"{name}.{col} row {row} = {value}", ANY


def p_garbage_time(rng: random.Random, p: Parquet) -> tuple[str, str]:
    tables = [
        n for n in ACTIVITY_TABLES if n in p.tables and p.tables[n].num_rows and "start" in p.tables[n].column_names
    ]
    if not tables:
        return p_values(rng, p)
    name = rng.choice(tables)
    t = p.tables[name]
    col = rng.choice([c for c in ("start", "end") if c in t.column_names])
    values = [None if v is None else str(v) for v in t[col].to_pylist()]
    row = rng.randrange(len(values))
    values[row] = rng.choice(["abc", "", "1,5", "0x10"])
    p.tables[name] = _replace_column(t, col, pa.array(values, pa.string()))
    return f"{name}.{col} as strings, row {row} = {values[row]!r} {NOT_A_NUMBER}", REJECT


def p_empty_activity(rng: random.Random, p: Parquet) -> tuple[str, str]:
    for n in ACTIVITY_TABLES:
        if n in p.tables:
            p.tables[n] = p.tables[n].slice(0, 0)
    return f"every activity table emptied (schemas kept) {NO_ACTIVITY}", REJECT


def p_corrupt_file(rng: random.Random, p: Parquet) -> tuple[str, str]:
    name = _pick_pq_table(rng, p) or "StringIds"
    raw = bytearray(_parquet_bytes(p.tables.pop(name)) if name in p.tables else b"PAR1")
    how = rng.choice(["truncate", "flip", "empty", "not-parquet"])
    if how == "truncate":
        raw = raw[: rng.randrange(len(raw))]
    elif how == "flip":
        for _ in range(rng.randint(1, 16)):
            raw[rng.randrange(len(raw))] ^= 0xFF
    elif how == "empty":
        raw = bytearray()
    else:
        raw = bytearray(b"id,value\n1,x\n")
    p.raw[f"{name}.parquet"] = bytes(raw)
    return f"{name}.parquet bytes: {how}", ANY


def p_neutral(rng: random.Random, p: Parquet) -> tuple[str, str]:
    p.tables["FUZZ_UNRELATED"] = pa.table({"x": [1, 2], "y": ["a", "b"]})
    return "an unrelated table added", SAME


PARQUET_OPS: list[tuple[Callable[[random.Random, Parquet], tuple[str, str]], int]] = [
    (p_drop_file, 3), (p_string_column, 3), (p_cast_column, 4), (p_drop_column, 3), (p_values, 4),
    (p_empty_activity, 1), (p_corrupt_file, 3), (p_neutral, 1), (p_garbage_time, 2),
]  # fmt: skip


# ---- rocprofv3 CSV -------------------------------------------------------------------------------------------------

# what the reader needs of each file (moeprof.readers.rocprof), by the file's suffix
ROCPROF_REQUIRED = {
    "kernel_trace.csv": ("Agent_Id", "Kernel_Name", "Start_Timestamp", "End_Timestamp"),
    "memory_copy_trace.csv": (
        "Direction",
        "Source_Agent_Id",
        "Destination_Agent_Id",
        "Start_Timestamp",
        "End_Timestamp",
    ),
    "agent_info.csv": ("Node_Id", "Logical_Node_Id", "Agent_Type"),
    "rccl_api_trace.csv": ("Function", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp"),
    "hip_api_trace.csv": ("Function", "Thread_Id", "Correlation_Id", "Start_Timestamp", "End_Timestamp"),
    "marker_api_trace.csv": ("Domain", "Function", "Start_Timestamp", "End_Timestamp"),  # ROCTx: the steps
}


class CsvFile:
    """One rocprofv3 CSV as rows of strings (gzip kept), written back as rocprofv3 quotes it."""

    def __init__(self, name: str, raw: bytes) -> None:
        self.gz = raw[:2] == b"\x1f\x8b"
        text = (gzip.decompress(raw) if self.gz else raw).decode()
        rows = list(csv.reader(io.StringIO(text)))
        self.header, self.rows = rows[0], rows[1:]
        self.kind = next(k for k in ROCPROF_REQUIRED if name.removesuffix(".gz").endswith(k))

    def serialize(self) -> bytes:
        out = io.StringIO()
        out.write(",".join(f'"{h}"' for h in self.header) + "\n")
        w = csv.writer(out, lineterminator="\n")
        w.writerows(self.rows)
        data = out.getvalue().encode()
        return gzip.compress(data, mtime=0) if self.gz else data


def _cell(rng: random.Random, f: CsvFile) -> tuple[int, int]:
    return rng.randrange(len(f.rows)), rng.randrange(len(f.header))


def r_hostile_cell(rng: random.Random, f: CsvFile) -> tuple[str, str]:
    if not f.rows:
        return "hostile cell: no rows", ANY
    r, c = _cell(rng, f)
    value = hostile_value(rng, numeric_bias=True)
    text = "" if value is None else str(value)[:2000].replace(_BAD_UTF8, "\ufffd")
    f.rows[r][c] = text
    return f"{f.kind} row {r} {f.header[c]} = {show(value)}", ANY


def r_time_text(rng: random.Random, f: CsvFile) -> tuple[str, str]:
    times = [i for i, h in enumerate(f.header) if h.endswith("_Timestamp")]
    if not f.rows or not times:
        return "time as text: no time column", ANY
    r, c = rng.randrange(len(f.rows)), rng.choice(times)
    f.rows[r][c] = rng.choice(["soon", "1.5e3x", "12:00", "0x1F", "--"])
    return f"{f.kind} row {r} {f.header[c]} = text {NOT_A_NUMBER}", REJECT


def r_drop_column(rng: random.Random, f: CsvFile) -> tuple[str, str]:
    c = rng.randrange(len(f.header))
    name = f.header[c]
    del f.header[c]
    for row in f.rows:
        if len(row) > c:
            del row[c]
    needed = name in ROCPROF_REQUIRED[f.kind]
    return f"{f.kind} column {name} dropped" + (f" {NOT_A_TRACE}" if needed else ""), (REJECT if needed else ANY)


def r_shuffle(rng: random.Random, f: CsvFile) -> tuple[str, str]:
    rng.shuffle(f.rows)
    return f"{f.kind} rows shuffled", SAME


def r_extra_column(rng: random.Random, f: CsvFile) -> tuple[str, str]:
    f.header.append("Fuzz_Extra")
    for row in f.rows:
        row.append(str(rng.randint(0, 9)))
    return f"{f.kind}: an unknown column added", SAME


def r_delete_rows(rng: random.Random, f: CsvFile) -> tuple[str, str]:
    keep = rng.choice([0, 1, 2])
    f.rows = [row for i, row in enumerate(f.rows) if i % 3 == keep] if keep else []
    return f"{f.kind}: " + ("every row deleted" if not keep else "two rows in three deleted"), ANY


def r_huge_time(rng: random.Random, f: CsvFile) -> tuple[str, str]:
    times = [i for i, h in enumerate(f.header) if h.endswith("_Timestamp")]
    if not f.rows or not times:
        return "huge time: no time column", ANY
    r, c = rng.randrange(len(f.rows)), rng.choice(times)
    f.rows[r][c] = str(rng.choice([2**63 - 1, 2**64 - 1, 2**62, 10**20, -5]))
    return f"{f.kind} row {r} {f.header[c]} = {f.rows[r][c]}", ANY


ROCPROF_OPS: list[tuple[Callable[[random.Random, CsvFile], tuple[str, str]], int]] = [
    (r_hostile_cell, 5), (r_time_text, 2), (r_drop_column, 3), (r_shuffle, 2), (r_extra_column, 1),
    (r_delete_rows, 2), (r_huge_time, 2),
]  # fmt: skip


def _leaves(node: object, path: tuple = ()) -> list[tuple]:
    """Every (container path, key) of a JSON document, for a mutation to pick one."""
    out: list[tuple] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for k, v in items:
        out.append((*path, k))
        out.extend(_leaves(v, (*path, k)))
    return out


def _at(doc: object, path: tuple) -> object:
    for k in path:
        doc = doc[k]  # type: ignore[index]
    return doc


def _mutate_rocprof_json(rng: random.Random, raw: bytes, n: int) -> tuple[bytes, list[str], list[str]]:
    """Hostile values and dropped keys anywhere in a rocprofv3 JSON document (times, ids, handles, names)."""
    doc = json.loads(raw)
    steps, expects = [], []
    for _ in range(n):
        leaves = _leaves(doc)
        if not leaves:
            break
        where = rng.choice(leaves)
        parent = _at(doc, where[:-1])
        if rng.random() < 0.4 and isinstance(parent, dict):
            del parent[where[-1]]
            steps.append(f"{'.'.join(map(str, where))} dropped")
        else:
            value = hostile_value(rng, numeric_bias=True)
            parent[where[-1]] = value  # type: ignore[index]
            steps.append(f"{'.'.join(map(str, where))} = {show(value)}")
        expects.append(ANY)
    return maybe_byte_mutation(rng, json_bytes(doc), ROCPROF_JSON, False, steps, expects), steps, expects


def _mutate_rocprof(
    rng: random.Random, seed: Seed, target: str, n: int
) -> tuple[dict[str, bytes], list[str], list[str]]:
    files = dict(seed.files)
    if seed.fmt == ROCPROF_JSON:
        files[target], steps, expects = _mutate_rocprof_json(rng, files[target], n)
        return files, steps, expects
    steps: list[str] = []
    expects: list[str] = []
    if rng.random() < 0.1 and not target.removesuffix(".gz").endswith("kernel_trace.csv"):
        del files[target]  # a companion missing: devices keep their labels, or no copies
        return files, [f"{target} removed"], [ANY]
    f = CsvFile(target, files[target])
    # deleting rows first: a later deletion would take away the bad value an earlier step put in
    for op in sorted((_pick(rng, ROCPROF_OPS) for _ in range(n)), key=lambda op: op is not r_delete_rows):
        s, e = op(rng, f)
        steps.append(s)
        expects.append(e)
    files[target] = maybe_byte_mutation(rng, f.serialize(), seed.fmt, f.gz, steps, expects)
    return files, steps, expects


# ---- bytes ---------------------------------------------------------------------------------------------------------


def maybe_byte_mutation(
    rng: random.Random, raw: bytes, fmt: str, gz: bool, steps: list[str], expects: list[str]
) -> bytes:
    """One case in five: a :func:`byte_mutation` after the structured steps, logged in ``steps`` and ``expects``."""
    if rng.random() < 0.2:
        raw, s, e = byte_mutation(rng, raw, fmt, gz)
        steps.append(f"bytes: {s}")
        expects.append(e)
    return raw


def byte_mutation(rng: random.Random, raw: bytes, fmt: str, gz: bool) -> tuple[bytes, str, str]:
    """A format-blind change of a file's bytes, after the structured ones."""
    json_like = fmt in (XPROF_JSON, KINETO, ROCPROF_JSON)
    ops = (
        ["truncate", "flip", "append", "empty"]
        + (["crc"] if gz else [])
        + (["bad-utf8"] if json_like and not gz else [])
    )
    how = rng.choice(ops)
    if how == "truncate" and len(raw) > 1:
        cut = rng.randrange(1, len(raw))
        return (
            raw[:cut],
            f"cut to {cut} of {len(raw)} bytes" + (f" {BROKEN_BYTES}" if json_like else ""),
            (REJECT if json_like else ANY),
        )
    if how == "flip" and raw:
        data = bytearray(raw)
        spots = sorted(rng.randrange(len(data)) for _ in range(rng.randint(1, 8)))
        for s in spots:
            data[s] ^= 1 << rng.randrange(8)
        return bytes(data), f"bits flipped at {spots}", ANY
    if how == "append":
        reject = json_like and not gz
        return (
            raw + b"\x00\xffgarbage",
            "garbage appended" + (f" {BROKEN_BYTES}" if reject else ""),
            (REJECT if reject else ANY),
        )
    if how == "crc" and len(raw) > 8:
        data = bytearray(raw)
        data[-8] ^= 0xFF
        return bytes(data), f"gzip CRC corrupted {BROKEN_BYTES}", REJECT
    if how == "bad-utf8":
        at = raw.find(b'"name":"')
        if at >= 0:
            at += len(b'"name":"')
            return raw[:at] + b"\xff\xfe" + raw[at:], "invalid UTF-8 in a name", ANY
    return b"", f"emptied {BROKEN_BYTES}", REJECT


# ---- cases ---------------------------------------------------------------------------------------------------------

SEED_WEIGHTS = {
    "xplane-8gpu": 2, "xplane-small": 6, "xplane-2host": 2, "xplane-cpu-logdir": 1, "xprof-json": 1,
    "xprof-json-small": 4, "kineto-rank": 4, "kineto-2ranks": 2, "kineto-tiny": 5, "nsys-sqlite": 2,
    "nsys-small": 4, "nsys-rich": 4, "nsys-parquet": 5,
}  # fmt: skip
# rocprofv3 cases are drawn apart (generate_rocprof), so that the cases of earlier campaigns replay as they were
ROCPROF_SEED_WEIGHTS = {"rocprof-2proc": 3, "rocprof-gz": 2, "rocprof-json": 3}
# TPU XPlanes likewise (generate_tpu)
TPU_SEED_WEIGHTS = {"xplane-tpu": 1}
COMMANDS = [("analyze", 88), ("events", 3), ("report", 3), ("annotate", 3), ("check", 3)]
HUGE_DURATIONS_SHARE = 0.06
SUBPROCESS_EVERY = 25  # one case in N runs through `python -m moeprof` instead of the in-process worker


def _pick(rng: random.Random, ops: list[tuple[Callable, int]]) -> Callable:
    return rng.choices([o for o, _ in ops], [w for _, w in ops])[0]


def _steps(rng: random.Random) -> int:
    return rng.choice([1, 1, 1, 2, 2, 3])


def mutate(
    rng: random.Random, seed: Seed, target: str, extra: random.Random | None = None
) -> tuple[dict[str, bytes], list[str], list[str]]:
    """The seed's files with ``target`` mutated, the mutation log and each step's expectation.

    ``extra`` draws the mutations added after the first campaign (huge durations), from a stream of its
    own so that the cases of that campaign (KNOWN_FAILURES.md) still replay as they were.
    """
    extra = extra or random.Random(0)
    files = dict(seed.files)
    steps: list[str] = []
    expects: list[str] = []
    n = _steps(rng)
    if seed.fmt in (XPROF_JSON, KINETO):
        trace = JsonTrace(files[target], seed.fmt)
        ops = [_pick(rng, JSON_OPS) for _ in range(n)]
        ops.sort(key=lambda op: op is j_no_device)  # removing every device event last: nothing adds one back
        for op in ops:
            s, e = op(rng, trace)
            steps.append(s)
            expects.append(e)
        if extra.random() < HUGE_DURATIONS_SHARE:
            steps.append(j_huge_durations(extra, trace))
            expects.append(ANY)
        steps = _retag(steps, _json_unplaceable_left(trace))
        files[target] = trace.serialize()
        gz = trace.gz
    elif seed.fmt == XPLANE:
        space = XSpace(files[target], seed)
        ops = [_pick(rng, XPLANE_OPS) for _ in range(n)]
        ops.sort(key=lambda op: op is x_no_device)
        for op in ops:
            s, e = op(rng, space)
            steps.append(s)
            expects.append(e)
        files[target] = space.serialize()
        gz = False
    elif seed.fmt == NSYS_SQLITE:
        db = Sqlite(files[target])
        for op in sorted((_pick(rng, SQLITE_OPS) for _ in range(n)), key=lambda op: op is s_empty_activity):
            s, e = op(rng, db)
            steps.append(s)
            expects.append(e)
        if extra.random() < HUGE_DURATIONS_SHARE:
            steps.append(s_huge_durations(extra, db))
            expects.append(ANY)
        expects = _unless_gone(steps, expects, _sqlite_has_bad_times(db))
        steps = _retag(steps, _sqlite_unplaceable_left(db))
        files[target] = db.serialize()
        gz = False
    elif seed.fmt == ROCPROF_CSV:
        return _mutate_rocprof(rng, seed, target, n)
    else:
        return _mutate_parquet(rng, seed, target, n)
    files[target] = maybe_byte_mutation(rng, files[target], seed.fmt, gz, steps, expects)
    return files, steps, expects


def _mutate_parquet(
    rng: random.Random, seed: Seed, folder: str, n: int
) -> tuple[dict[str, bytes], list[str], list[str]]:
    (sqlite_name,) = seed.files
    raw = seed.files[sqlite_name]
    steps: list[str] = []
    expects: list[str] = []
    if rng.random() < 0.3:  # a bad export read through the parquet route
        db = Sqlite(raw)
        s, e = _pick(rng, [(op, w) for op, w in SQLITE_OPS if op is not s_neutral])(rng, db)
        raw = db.serialize()
        steps.append(f"sqlite before export: {s}")
        expects.append(e)
    p = Parquet(sqlite_to_tables(raw))
    for op in sorted((_pick(rng, PARQUET_OPS) for _ in range(n)), key=lambda op: op is p_empty_activity):
        s, e = op(rng, p)
        steps.append(s)
        expects.append(e)
    expects = _unless_gone(steps, expects, _parquet_has_bad_times(p))
    steps = _retag(steps, _parquet_unplaceable_left(p))
    files = {f"{folder}/{name}": data for name, data in p.serialize().items()}
    if f"{folder}/CUPTI_ACTIVITY_KIND_KERNEL.parquet" not in files:
        steps.append(f"(no kernel table left: not an nsys parquet folder) {NOT_A_TRACE}")
        expects.append(REJECT)
    return files, steps, expects


def _unless_gone(steps: list[str], expects: list[str], bad_left: bool) -> list[str]:
    """A time that is no number makes the case one to refuse only while it is still there: a later step may
    have dropped its table or deleted its row."""
    if bad_left:
        return expects
    return [ANY if e == REJECT and NOT_A_NUMBER in s else e for s, e in zip(steps, expects, strict=True)]


def _retag(steps: list[str], left: bool) -> list[str]:
    """A device time beyond int64 must be warned about only while it is still there (a later step may have
    deleted its event, row or table, or made its event no device activity)."""
    return steps if left else [s.replace(NO_INT64, "[time beyond int64 ns, since undone]") for s in steps]


def _unplaceable(v: object) -> bool:
    return isinstance(v, float) and not (math.isfinite(v) and abs(v) < 2**63)


def _json_unplaceable_left(t: JsonTrace) -> bool:
    for ev in t.events:
        if t.is_device(ev):
            assert isinstance(ev, dict)
            ts, dur = _num(ev.get("ts")), _num(ev.get("dur", 0.0))
            if ts is not None and dur is not None and not ns_fits(ts, ts + max(dur, 0.0)):
                return True
    return False


def _sqlite_unplaceable_left(db: Sqlite) -> bool:
    for table in set(db.tables()) & set(ACTIVITY_TABLES):
        for col in {"start", "end"} & set(db.columns(table)):
            try:
                (n,) = db.conn.execute(
                    f'SELECT count(*) FROM "{table}" WHERE typeof("{col}") = \'real\' AND abs("{col}") >= 9.2e18'
                ).fetchone()
            except sqlite3.Error:
                return True
            if n:
                return True
    return False


def _parquet_unplaceable_left(p: Parquet) -> bool:
    if p.raw:
        return True
    for name in ACTIVITY_TABLES:
        table = p.tables.get(name)
        for col in {"start", "end"} & set(table.column_names if table is not None else []):
            assert table is not None
            if any(_unplaceable(v) for v in table.column(col).to_pylist()):
                return True
    return False


def _is_number_text(v: object) -> bool:
    if isinstance(v, bool):
        return False
    if v is None or isinstance(v, int | float):
        return True
    if isinstance(v, str):
        try:
            float(v)
            return True
        except ValueError:
            return False
    return False


def _sqlite_has_bad_times(db: Sqlite) -> bool:
    """Whether an activity table still holds a start/end that is no number (text that is not one, a blob)."""
    for table in db.tables():
        if table not in ACTIVITY_TABLES:
            continue
        for col in {"start", "end"} & set(db.columns(table)):
            try:
                rows = db.conn.execute(
                    f'SELECT "{col}" FROM "{table}" WHERE typeof("{col}") IN (\'text\', \'blob\')'
                ).fetchall()
            except sqlite3.Error:
                return True
            if any(not _is_number_text(v) for (v,) in rows):
                return True
    return False


def _parquet_has_bad_times(p: Parquet) -> bool:
    if p.raw:
        return True  # a file given as bytes: not looked into
    for name in ACTIVITY_TABLES:
        table = p.tables.get(name)
        if table is None:
            continue
        for col in {"start", "end"} & set(table.column_names):
            if any(not _is_number_text(v) for v in table.column(col).to_pylist()):
                return True
    return False


def parquet_seed_files(seed: Seed) -> dict[str, bytes]:
    """The unmutated parquet folder of a parquet seed."""
    (sqlite_name,) = seed.files
    tables = Parquet(sqlite_to_tables(seed.files[sqlite_name])).serialize()
    return {f"{seed.arg}/{name}": data for name, data in tables.items()}


def seed_files(seed: Seed) -> dict[str, bytes]:
    return parquet_seed_files(seed) if seed.fmt == NSYS_PARQUET else dict(seed.files)


def drawn_case(
    rng: random.Random,
    key: str,
    index: int,
    name: str,
    seed: Seed,
    fmt: str,
    files: dict[str, bytes],
    target: str,
    steps: list[str],
    expects: list[str],
) -> Case:
    """A random case of seed ``name`` once its files are mutated: the command is the last draw of the case's stream,
    and one case in SUBPROCESS_EVERY runs as ``python -m moeprof``."""
    command = rng.choices([c for c, _ in COMMANDS], [w for _, w in COMMANDS])[0]
    return Case(
        key=key,
        seed=name,
        fmt=fmt,
        steps=steps,
        expect=combine(expects),
        files=dict(files),
        arg=seed.arg,
        target=target,
        command=command,
        mode="subprocess" if index % SUBPROCESS_EVERY == 0 else "worker",
    )


def generate(base_seed: int, index: int) -> Case:
    rng = random.Random(f"moeprof-fuzz:{base_seed}:{index}")
    seeds = all_seeds()
    name = rng.choices(list(SEED_WEIGHTS), list(SEED_WEIGHTS.values()))[0]
    seed = seeds[name]
    target = rng.choice(seed.targets)
    files, steps, expects = mutate(rng, seed, target, random.Random(f"moeprof-fuzz-extra:{base_seed}:{index}"))
    return drawn_case(rng, f"{base_seed}:{index}", index, name, seed, seed.fmt, files, target, steps, expects)


def generate_rocprof(base_seed: int, index: int) -> Case:
    """A rocprofv3 case (replay: ``python -m tests.fuzz --replay rocprof:SEED:INDEX``)."""
    rng = random.Random(f"moeprof-fuzz-rocprof:{base_seed}:{index}")
    name = rng.choices(list(ROCPROF_SEED_WEIGHTS), list(ROCPROF_SEED_WEIGHTS.values()))[0]
    seed = all_seeds()[name]
    target = rng.choice(seed.targets)
    files, steps, expects = _mutate_rocprof(rng, seed, target, _steps(rng))
    return drawn_case(rng, f"rocprof:{base_seed}:{index}", index, name, seed, seed.fmt, files, target, steps, expects)


def generate_tpu(base_seed: int, index: int) -> Case:
    """A TPU XPlane case: the XPlane mutations on a real TPU capture (replay: ``--replay tpu:SEED:INDEX``)."""
    rng = random.Random(f"moeprof-fuzz-tpu:{base_seed}:{index}")
    name = rng.choices(list(TPU_SEED_WEIGHTS), list(TPU_SEED_WEIGHTS.values()))[0]
    seed = all_seeds()[name]
    target = rng.choice(seed.targets)
    files, steps, expects = mutate(rng, seed, target, random.Random(f"moeprof-fuzz-tpu-extra:{base_seed}:{index}"))
    return drawn_case(rng, f"tpu:{base_seed}:{index}", index, name, seed, seed.fmt, files, target, steps, expects)


def seed_case(name: str, mode: str = "worker") -> Case:
    seed = all_seeds()[name]
    return Case(f"seed:{name}", name, seed.fmt, [], SAME, dict(seed_files(seed)), seed.arg, seed.targets[0], mode=mode)


# ---- file-system and environment cases -------------------------------------------------------------------------------

_FAKE_NSYS = """#!{python}
import sys, time, shutil
mode = {mode!r}
out = sys.argv[sys.argv.index("--output") + 1]
if mode == "hang":
    time.sleep(100000)
elif mode == "fail":
    sys.stderr.write("Processing [====]\\nERROR: cannot open report\\nline three of the error\\n")
    sys.exit(1)
elif mode == "garbage":
    open(out, "wb").write(b"not a database")
elif mode == "ok":
    shutil.copyfile({sqlite!r}, out)
"""

BOMB_INFLATED = 2 << 30  # 2 GiB of JSON whitespace...
BOMB_MEMORY_MB = 1024  # ...read under a 1 GiB address-space limit (moeprof reads a small JSON trace in ~600 MB)


@cache
def gzip_bomb() -> bytes:
    """A gzip file of 2 MiB that inflates to 2 GiB of valid JSON (many members: each is quick to make)."""
    chunk = gzip.compress(b" \n\t\r" * (16 << 20), compresslevel=9, mtime=0)
    head = gzip.compress(b'{"traceEvents":[', mtime=0)
    tail = gzip.compress(b"]}", mtime=0)
    return head + chunk * (BOMB_INFLATED // (64 << 20)) + tail


SPECIALS = (
    "fifo", "dev-null", "dev-null-link", "newline-name-bad", "newline-name-missing", "wal-readonly", "sparse-json",
    "sparse-xplane", "gzip-bomb", "empty-dir", "dir-named-sqlite", "missing", "nsys-rep-no-nsys", "nsys-rep-hang",
    "nsys-rep-fail", "nsys-rep-garbage", "nsys-rep-ok",
)  # fmt: skip
# the bomb needs its own memory limit; two more show the stderr of a real `python -m moeprof`
SUBPROCESS_SPECIALS = {f"special:{n}" for n in ("gzip-bomb", "dev-null", "newline-name-bad")}


def special_cases(python: str) -> list[Case]:
    """One case per hostile file-system object or environment; all run as real subprocesses."""
    seeds = all_seeds()
    kineto = seeds["kineto-tiny"].files["worker2.pt.trace.json"]
    nsys = seeds["nsys-small"].files["node0.sqlite"]

    def fake_nsys(mode: str) -> dict[str, str]:
        return {"bin/nsys": _FAKE_NSYS.format(python=python, mode=mode, sqlite="in/export.sqlite")}

    wal = Sqlite(nsys)
    wal.wal = True
    wal_bytes = wal.serialize()
    rep = b"NVIDIA Nsight Systems report (fuzz stand-in)\x00" + bytes(64)
    cases = [
        Case("special:fifo", "", "fs", ["a FIFO named like a trace"], REJECT, {"trace.json": Special("fifo")},
             "trace.json", "trace.json", timeout=8),
        Case("special:dev-null", "", "fs", ["/dev/null as the input"], REJECT, {}, "/dev/null", "/dev/null"),
        Case("special:dev-null-link", "", "fs", ["x.sqlite -> /dev/null"], REJECT,
             {"x.sqlite": Special("symlink", "/dev/null")}, "x.sqlite", "x.sqlite"),
        Case("special:newline-name-bad", "", "fs", ["a truncated Kineto trace named 'bad<newline>rank0.pt.trace.json'"],
             REJECT, {"bad\nrank0.pt.trace.json": kineto[: len(kineto) // 2]}, "bad\nrank0.pt.trace.json",
             "bad\nrank0.pt.trace.json"),
        Case("special:newline-name-missing", "", "fs", ["a missing file named 'no<newline>such.json'"], REJECT, {},
             "no\nsuch.json", "no\nsuch.json"),
        Case("special:wal-readonly", "nsys-small", NSYS_SQLITE, ["WAL-mode export in a read-only folder"], SAME,
             {"ro/node0.sqlite": wal_bytes}, "ro/node0.sqlite", "ro/node0.sqlite", readonly_dirs=("ro",)),
        Case("special:sparse-json", "", "fs", ["a 1 TiB sparse file named .trace.json"], REJECT,
             {"huge.trace.json": Special("sparse", size=1 << 40)}, "huge.trace.json", "huge.trace.json"),
        Case("special:sparse-xplane", "", "fs", ["a 1 TiB sparse file named .xplane.pb"], REJECT,
             {"huge.xplane.pb": Special("sparse", size=1 << 40)}, "huge.xplane.pb", "huge.xplane.pb"),
        Case("special:gzip-bomb", "", "fs", [f"gzip bomb: {BOMB_INFLATED >> 30} GiB JSON, {BOMB_MEMORY_MB} MiB limit"],
             REJECT, {"bomb.pt.trace.json.gz": gzip_bomb()}, "bomb.pt.trace.json.gz", "bomb.pt.trace.json.gz",
             memory_mb=BOMB_MEMORY_MB, timeout=60),
        Case("special:empty-dir", "", "fs", ["an empty folder"], REJECT, {"empty": Special("dir")}, "empty", "empty"),
        Case("special:dir-named-sqlite", "", "fs", ["a folder named x.sqlite"], REJECT, {"x.sqlite": Special("dir")},
             "x.sqlite", "x.sqlite"),
        Case("special:missing", "", "fs", ["a path that does not exist"], REJECT, {}, "nope.xplane.pb",
             "nope.xplane.pb"),
        Case("special:nsys-rep-no-nsys", "", "fs", [".nsys-rep and no nsys on PATH"], REJECT, {"r.nsys-rep": rep},
             "r.nsys-rep", "r.nsys-rep", env={"PATH": "/nonexistent"}),
        Case("special:nsys-rep-hang", "", "fs", [".nsys-rep whose `nsys export` never returns (timeout 3 s asked)"],
             REJECT, {"r.nsys-rep": rep}, "r.nsys-rep", "r.nsys-rep", env={"MOEPROF_NSYS_EXPORT_TIMEOUT": "3"},
             executables=fake_nsys("hang"), timeout=15),
        Case("special:nsys-rep-fail", "", "fs", [".nsys-rep whose `nsys export` fails with three stderr lines"], REJECT,
             {"r.nsys-rep": rep}, "r.nsys-rep", "r.nsys-rep", executables=fake_nsys("fail")),
        Case("special:nsys-rep-garbage", "", "fs", [".nsys-rep whose `nsys export` writes garbage"], REJECT,
             {"r.nsys-rep": rep}, "r.nsys-rep", "r.nsys-rep", executables=fake_nsys("garbage")),
        Case("special:nsys-rep-ok", "nsys-small", NSYS_SQLITE, [".nsys-rep exported by a stand-in nsys"], SAME,
             {"r.nsys-rep": rep, "export.sqlite": nsys}, "r.nsys-rep", "r.nsys-rep", executables=fake_nsys("ok")),
    ]  # fmt: skip
    for c in cases:
        c.mode = "subprocess" if c.key in SUBPROCESS_SPECIALS else "worker"
    return cases
