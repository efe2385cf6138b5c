"""``moeprof annotate``: the trace again, as Chrome/Perfetto trace-event JSON, with moeprof's view added.

Per device one process (named ``/device:GPU:N`` so moeprof's own Chrome reader
reads it back), one thread per stream (``Stream #...``) holding the original
activity with bucket, kind, link and ``ib_fraction`` as args, and derived
threads that the reader never counts as activity: one per category (the union
of its kernels), the exposed communication, and ``Steps`` (read back as step
markers, so steps round-trip too).

Timestamps are µs floats, as the format wants, relative to a whole-µs base:
small values keep every ns exact through the float round trip (an epoch-sized
µs float has only ~0.25 µs resolution).

Within a thread the slices are written grouped by name and args, not in time
order: the format does not ask for order (viewers and moeprof's reader sort),
and the slices of one thread never overlap, so nesting cannot depend on it.
"""

from __future__ import annotations

import gzip
import heapq
import re
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np
import orjson
import pandas as pd

from .._version import __version__
from ..core import intervals as iv
from ..core.analysis import Analysis
from ..core.events import BUCKETS, bucket_codes, column_codes, combine_codes, concat, first_rows, lookup
from ..core.timeline import CATEGORIES, EXPOSED, WAITING, TimelineView, category_codes_of
from ..core.trace import Trace
from ..outputs import replacing
from ..readers.marks import ANNOTATED_SCHEMA

TRANSFER = "comm moving bytes"  # comm outside its wait parts (§8), beside WAITING
CRITICAL = "critical path"  # §9: the projected step's critical path (annotate --what-if)
DERIVED_TID = 100_000  # derived threads sort after any stream
STEPS_TID = DERIVED_TID - 1


def natural_key(text: str) -> list:
    """Sort ``GPU:10`` after ``GPU:9``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def device_order(activity: pd.DataFrame) -> list[str]:
    """Devices in the order the analysis lists them (sorted names), which the ordinals follow."""
    return sorted({str(d) for d in activity["device"].unique()})


def pack(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Sub-lane of each interval so that no two in one sub-lane overlap (input sorted by start), in as
    few sub-lanes as the deepest overlap needs.

    One thread of the trace-event format must hold nested or disjoint slices only;
    a stream whose activities overlap (a trace's own quirk) spills into extra threads.
    An interval clear of every earlier one starts a run on lane 0; only the runs of
    two or more (the overlapping part of a stream) are packed one interval at a time.
    """
    lanes = np.zeros(start.size, dtype=np.int64)
    if start.size < 2:
        return lanes
    opens = np.ones(start.size, dtype=bool)
    opens[1:] = start[1:] >= np.maximum.accumulate(end)[:-1]
    if opens.all():
        return lanes
    firsts = np.flatnonzero(opens)
    lasts = np.r_[firsts[1:], start.size]
    runs = lasts - firsts > 1
    for a, b in zip(firsts[runs].tolist(), lasts[runs].tolist(), strict=True):
        free: list[tuple[int, int]] = []  # (end, lane) of each lane's last interval in this run
        used = 0
        for i, (s, e) in enumerate(zip(start[a:b].tolist(), end[a:b].tolist(), strict=True), a):
            if free and free[0][0] <= s:
                _, lane = heapq.heappop(free)
            else:
                lane, used = used, used + 1
            lanes[i] = lane
            heapq.heappush(free, (e, lane))
    return lanes


def _us(ns: np.ndarray | int) -> np.ndarray:
    return np.asarray(ns, dtype=np.float64) / 1e3


def _meta(name: str, pid: int, tid: int | None, args: dict) -> dict:
    ev: dict = {"ph": "M", "name": name, "pid": pid, "args": args}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _activity_args(frame: pd.DataFrame) -> tuple[np.ndarray, list[dict]]:
    """The args of each row as (code per row, one args dict per code): rows with the same evidence share
    one dict (a trace repeats a few thousand), each built once."""
    strings = {c: column_codes(frame[c]) for c in ("bucket", "kind", "hlo_op", "hlo_module", "group", "opcode")}
    ib = frame["ib_fraction"].to_numpy(dtype=np.float64)
    program = frame["program_id"].to_numpy(dtype=np.int64)
    combo = combine_codes(
        strings["bucket"][0],
        strings["kind"][0],
        ib,
        strings["hlo_op"][0],
        strings["hlo_module"][0],
        program,
        strings["group"][0],
        strings["opcode"][0],
    )
    firsts = first_rows(combo)

    def text(column: str) -> list:
        codes, values = strings[column]
        return lookup(codes[firsts], values, np.nan).tolist()

    out = []
    for b, k, f, o, m, p, g, c in zip(
        text("bucket"),
        text("kind"),
        ib[firsts].tolist(),
        text("hlo_op"),
        text("hlo_module"),
        program[firsts].tolist(),
        text("group"),
        text("opcode"),
        strict=True,
    ):
        f = None if np.isnan(f) else float(f)
        args: dict = {"bucket": str(b) or "other"}
        if b == "comm":
            link = "unknown" if f is None else ("nvlink" if f == 0 else ("ib" if f == 1 else "mixed"))
            args.update(kind=str(k), link=link, ib_fraction=f)
            if g:
                args["group"] = str(g)
        if o:
            args["hlo_op"] = str(o)
        if c:
            args["opcode"] = str(c)
        if m:
            args["hlo_module"] = str(m)
        if p >= 0:
            args["program_id"] = int(p)
        out.append(args)
    return combo, out


# A tail that this many of a thread's events share is written with one replace over their times, not
# a text piece per event: at 10M events the pieces and their join were most of annotate's writing
# (why the order this gives is safe: the module's docstring).
GROUP_FROM = 16
JOIN_EVENTS = 1 << 15  # events of the other route joined into one piece
_NEXT_PAIR = b'],"dur":['  # between two events' times in _times' text


def _times(start: np.ndarray, end: np.ndarray, base: int) -> bytes:
    """``ts,"dur":dur],"dur":[ts,"dur":dur...``: each event's times, the floats written by orjson as it
    writes them anywhere (the shortest text that reads back the same double)."""
    pairs = np.column_stack([_us(start - base), _us(end - start)])
    return orjson.dumps(pairs, option=orjson.OPT_SERIALIZE_NUMPY)[2:-2].replace(b",", b',"dur":')


def _one_tail(prefix: bytes, start: np.ndarray, end: np.ndarray, base: int, tail: bytes) -> list[bytes]:
    """Events that all share ``tail``, in the order given: one replace over their times."""
    return [prefix, _times(start, end, base).replace(_NEXT_PAIR, tail + prefix), tail]


def _slices(
    pid: int,
    tid: int,
    start: np.ndarray,
    end: np.ndarray,
    base: int,
    tail: bytes | tuple[list[bytes], np.ndarray],
    group_from: int = GROUP_FROM,
) -> list[bytes]:
    """Complete ("X") events as JSON text pieces that join to ``,{event},{event}...``, built without a
    dict per event.

    ``tail``: what follows ``dur`` (``,"name":...,"args":...}``), the same for every event, or a table of
    tails and each event's index into it. Events whose tail at least ``group_from`` of them share come
    first, grouped by tail; the others follow in the order given.
    """
    if not start.size:
        return []
    prefix = b',{"ph":"X","pid":%d,"tid":%d,"ts":' % (pid, tid)
    if isinstance(tail, bytes):
        return _one_tail(prefix, start, end, base, tail)
    table, index = tail
    codes, used = pd.factorize(index)  # the tails this thread uses
    tails = [table[u] for u in used.tolist()]
    grouped = np.bincount(codes) >= group_from
    pieces: list[bytes] = []
    in_group = grouped[codes]
    if grouped.any():
        rows = np.flatnonzero(in_group)
        rows = rows[np.argsort(codes[rows], kind="stable")]  # by tail, in the given order within one
        cuts = np.flatnonzero(np.diff(codes[rows])) + 1
        for part in np.split(rows, cuts):
            pieces += _one_tail(prefix, start[part], end[part], base, tails[int(codes[part[0]])])
        if in_group.all():
            return pieces
        rest = np.flatnonzero(~in_group)
        start, end, codes = start[rest], end[rest], codes[rest]
    # the rest, a piece per event (its times, then its tail with the next event's prefix), joined per
    # batch of events so that a thread hands the writer a few pieces, not two per event
    joined = np.array([t + prefix for t in tails], dtype=object)
    for at in range(0, start.size, JOIN_EVENTS):
        batch = slice(at, at + JOIN_EVENTS)
        n = len(start[batch])
        out: list[bytes] = [b""] * (2 * n + 1)
        out[0] = prefix
        out[1::2] = _times(start[batch], end[batch], base).split(_NEXT_PAIR)
        out[2::2] = joined[codes[batch]].tolist()
        out[-1] = tails[int(codes[batch][-1])]  # the last one's without the next prefix
        pieces.append(b"".join(out))
    return pieces


def _tail(name: str, args: dict) -> bytes:
    return b',"name":' + orjson.dumps(name) + b',"args":' + orjson.dumps(args) + b"}"


# ISA-L's deflate (python-isal) at level 1: about zlib level 3's size in a fraction of its time
# (docs/performance.md). zlib writing on its thread was what annotate waited for; zlib remains where isal
# does not import.
ISAL_LEVEL = 1
GZIP_LEVEL = 3


def open_gzip(out: Path) -> BinaryIO:
    """A gzip file for writing: ISA-L's deflate when installed, else zlib's. Either releases the GIL
    while it compresses, so the writer thread overlaps the next chunk's assembly."""
    try:
        from isal import igzip
    except ImportError:  # a platform without isal's wheels
        return cast(BinaryIO, gzip.open(out, "wb", compresslevel=GZIP_LEVEL))
    return cast(BinaryIO, igzip.open(out, "wb", compresslevel=ISAL_LEVEL))


class _Writer:
    """Writes pieces in order on a thread of its own, one device behind the caller: compressing a
    device's events (ISA-L and zlib let go of the GIL) overlaps building the next device's.

    A device's pieces are never joined into one bytes: at 10M events that copy (and the fresh pages
    behind it) took as long as building the text. Small pieces are joined into batches of about
    ``BATCH`` bytes, large ones written as they are."""

    BATCH = 4 << 20

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.pending: Future | None = None

    def write(self, pieces: list[bytes]) -> None:
        if self.pending is not None:
            self.pending.result()  # at most one device in flight; a failed write raises here
        self.pending = self.pool.submit(self._write, pieces)

    def _write(self, pieces: list[bytes]) -> None:
        batch: list[bytes] = []
        size = 0
        for piece in pieces:
            if len(piece) >= self.BATCH:
                if batch:
                    self.fh.write(b"".join(batch))
                    batch, size = [], 0
                self.fh.write(piece)
                continue
            batch.append(piece)
            size += len(piece)
            if size >= self.BATCH:
                self.fh.write(b"".join(batch))
                batch, size = [], 0
        if batch:
            self.fh.write(b"".join(batch))

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.pending is not None:
                self.pending.result()
        finally:
            self.pool.shutdown(wait=True)


def write_annotated(
    traces: list[Trace],
    result: Analysis,
    timeline: Sequence[TimelineView],
    out: Path,
    critical: pd.DataFrame | None = None,
    what_if: str = "",
) -> dict:
    """Write the annotated trace (gzipped when ``out`` ends in ``.gz``), whole or not at all
    (:func:`moeprof.outputs.replacing`); returns counts for the CLI.

    Activities come from the traces as read; exposed communication and steps from the
    devices' timeline views (``timeline``, measured with the analysis), so the file shows exactly what the
    figures measured. For a
    projection (``annotate --what-if``, spec §9) the traces are the projected timeline,
    ``critical`` its critical path's activities (device, start_ns, end_ns: a ``moeprof:
    critical path`` thread per device) and ``what_if`` the change, said in ``otherData``.
    """
    with replacing(out) as into:
        return _annotated(traces, result, timeline, out.suffix == ".gz", into, critical, what_if)


def _annotated(
    traces: list[Trace],
    result: Analysis,
    timeline: Sequence[TimelineView],
    gzipped: bool,
    into: Path,
    critical: pd.DataFrame | None,
    what_if: str,
) -> dict:
    activity = concat([t.events for t in traces])
    devices = device_order(activity)
    views = {v.device: v for v in timeline}
    starts = [activity["start_ns"].to_numpy(dtype=np.int64)]
    starts += [v.steps["start_ns"].to_numpy(dtype=np.int64) for v in views.values() if len(v.steps)]
    low = int(min(s.min() for s in starts if s.size)) if len(activity) else 0
    base = (low // 1000) * 1000  # whole µs, so offsets stay small floats that round back to the same ns
    step_figs = {(s.device, s.step): s for s in result.steps}
    by_device = activity.groupby("device", observed=True).indices
    # the table's columns once: every device takes its rows of them
    start_all = activity["start_ns"].to_numpy(dtype=np.int64)
    end_all = activity["end_ns"].to_numpy(dtype=np.int64)
    bucket_all = bucket_codes(activity["bucket"])
    category_all = category_codes_of(bucket_all, activity["ib_fraction"].to_numpy(dtype=np.float64))
    stream_all, stream_v = column_codes(activity["stream"])
    labels = [str(v) for v in stream_v] + ["nan"]  # a missing stream name reads "nan", as str() has it
    # what follows each activity's times: its name and args, written once per distinct pair
    args_code, args_list = _activity_args(activity)
    name_c, name_v = column_codes(activity["name"])
    pair_all = combine_codes(name_c, args_code)
    at = first_rows(pair_all)
    names_at = lookup(name_c[at], name_v, np.nan).tolist()
    tails = [_tail(str(n), args_list[a]) for n, a in zip(names_at, args_code[at].tolist(), strict=True)]
    counts = {"devices": len(devices), "activities": 0, "exposed": 0, "steps": 0, "critical": 0}
    step_numbers: set[int] = set()  # distinct steps, not step windows of every device
    opened = open_gzip(into) if gzipped else open(into, "wb")
    with opened as fh, _Writer(fh) as writer:
        # the mark first, where a reader meets it (readers.marks); Perfetto reads "metadata" before traceEvents
        mark = {"producer": f"moeprof {__version__}", "schema": ANNOTATED_SCHEMA}
        writer.write([b'{"metadata":' + orjson.dumps(mark) + b',"traceEvents":['])
        first = True
        for pid0, device in enumerate(devices):
            pid = pid0 + 1
            positions = by_device[device]
            view = views.get(device)
            meta = [
                _meta("process_name", pid, None, {"name": f"{device} [/device:GPU:{pid0}]", "moeprof_device": device}),
                _meta("process_sort_index", pid, None, {"sort_index": pid0}),
            ]
            pieces: list[bytes] = []  # the events after the metadata, as JSON text
            start = start_all[positions]
            end = np.maximum(end_all[positions], start)
            pair = pair_all[positions]
            # the streams by name
            stream_c = stream_all[positions]
            present = (np.flatnonzero(np.bincount(stream_c + 1, minlength=len(stream_v) + 1)) - 1).tolist()
            streams = sorted({labels[c] for c in present}, key=natural_key)
            tid = 0
            for j, stream in enumerate(streams):
                # the stream's rows by start (ties in row order)
                sel = np.flatnonzero(np.isin(stream_c, [c for c in present if labels[c] == stream]))
                sel = sel[np.argsort(start[sel], kind="stable")]
                sub = pack(start[sel], end[sel])
                # the reader counts only threads named "Stream #...": other line names get that prefix
                label = stream if stream.startswith("Stream #") else f"Stream #{j} {stream}".rstrip()
                for lane in range(int(sub.max()) + 1 if sub.size else 0):
                    tid += 1
                    meta += [
                        _meta("thread_name", pid, tid, {"name": label if lane == 0 else f"{label} (overlap {lane})"}),
                        _meta("thread_sort_index", pid, tid, {"sort_index": tid}),
                    ]
                    rows_in = sel[sub == lane]
                    pieces += _slices(pid, tid, start[rows_in], end[rows_in], base, (tails, pair[rows_in]))
                counts["activities"] += sel.size
            # derived tracks: not "Stream #", "Steps" or "XLA Modules", so never read back as activity
            codes = category_all[positions]
            tracks = [(c, *iv.union(start[codes == i], end[codes == i])) for i, c in enumerate(CATEGORIES)]
            if view is not None:
                tracks.append((EXPOSED, *view.exposed))
                # §8: where the ledger ran, comm split into waiting for the last member and moving bytes
                tracks.append((WAITING, *view.wait))
                comm = bucket_all[positions] == BUCKETS.index("comm")
                comm_s, comm_e = iv.union(start[comm], end[comm])
                if view.wait[0].size:
                    tracks.append((TRANSFER, *iv.subtract(comm_s, comm_e, *view.wait)))
            if critical is not None:
                mine = critical["device"].astype(str).to_numpy() == device
                c_s, c_e = critical["start_ns"].to_numpy(np.int64), critical["end_ns"].to_numpy(np.int64)
                tracks.append((CRITICAL, *iv.union(c_s[mine], c_e[mine])))
            for k, (name, seg_s, seg_e) in enumerate(tracks):
                if not seg_s.size:
                    continue
                tid = DERIVED_TID + k
                meta += [
                    _meta("thread_name", pid, tid, {"name": f"moeprof: {name}"}),
                    _meta("thread_sort_index", pid, tid, {"sort_index": tid}),
                ]
                pieces += _slices(pid, tid, seg_s, seg_e, base, _tail(name, {"moeprof": name}))
                if name == EXPOSED:
                    counts["exposed"] += seg_s.size
                if name == CRITICAL:
                    counts["critical"] += seg_s.size
            dev_steps = view.steps if view is not None else pd.DataFrame(columns=["step", "start_ns", "end_ns"])
            if not dev_steps.empty:
                meta += [
                    _meta("thread_name", pid, STEPS_TID, {"name": "Steps"}),
                    _meta("thread_sort_index", pid, STEPS_TID, {"sort_index": STEPS_TID}),
                ]
                for step, s, e in dev_steps[["step", "start_ns", "end_ns"]].itertuples(index=False):
                    fig = step_figs.get((device, int(step)))
                    extra = (
                        {k: fig.value(k) for k in ("comm_share", "exposed_comm_ns", "comm_ns", "span_ns")}
                        if fig
                        else {}
                    )
                    # "Step N": the reader numbers step markers by the trailing integer
                    pieces += _slices(
                        pid,
                        STEPS_TID,
                        np.array([s]),
                        np.array([e]),
                        base,
                        _tail(f"Step {int(step)}", {"step": int(step), **extra}),
                    )
                    step_numbers.add(int(step))
            # the device's events: its metadata, then every slice (each led by a comma)
            writer.write([(b"" if first else b",") + orjson.dumps(meta)[1:-1], *pieces])
            first = False
        tail = {
            "displayTimeUnit": "ns",
            "otherData": {
                "producer": f"moeprof {__version__}",
                "inputs": result.inputs,
                "time_base_ns": base,
                "comm_share": result.total.comm_share,
                "exposed_comm_ns": result.total.exposed_comm_ns,
                **({"what_if": what_if} if what_if else {}),
            },
        }
        writer.write([b"]," + orjson.dumps(tail)[1:]])
    counts["steps"] = len(step_numbers)
    return counts
