"""``moeprof annotate``: the annotated Chrome trace loads back with moeprof's own reader and gives the same figures.

Why "to the ns": annotate writes ``ts``/``dur`` as µs floats *relative to a whole-µs
base* (kept in ``otherData.time_base_ns``). Those floats are small, so the reader's
round-to-nearest-ns (spec §1) gives back every original ns exactly; absolute epoch
µs floats would only be good to ~0.25 µs.
"""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core.analysis import NS_KEYS
from moeprof.core.events import us_interval_to_ns
from moeprof.options import LoadOptions
from moeprof.pipeline import analyze_paths as _analyze_paths

from .helpers import SAMPLES

runner = CliRunner()
ALL = ["synthetic_1host_8gpu", "synthetic_1host_8gpu.trace.json.gz", "synthetic_2host_4gpu", "cpu_moe_8dev"]
# buckets and links of these come from evidence the Chrome reader reads today (kernel names, one host)
EXACT = ["synthetic_1host_8gpu", "synthetic_1host_8gpu.trace.json.gz"]
TIMING_KEYS = ("accumulated_ns", "span_ns", "busy_ns", "idle_ns")
LINK_KEYS = {
    "comm_nvlink_ns",
    "comm_ib_ns",
    "comm_unknown_link_ns",
    "exposed_comm_nvlink_ns",
    "exposed_comm_ib_ns",
    "exposed_comm_unknown_link_ns",
}


def analyze_paths(*args: object, **kwargs: object) -> SimpleNamespace:
    """The analysis in its JSON form (the contract the annotated trace is checked against)."""
    return SimpleNamespace(**_analyze_paths(*args, **kwargs).to_json())  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def annotated(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    out = {}
    folder = tmp_path_factory.mktemp("annotated")
    for i, name in enumerate(ALL):
        target = folder / f"a{i}.trace.json.gz"  # the reader names the host after the file stem: "a0/GPU:3"
        res = runner.invoke(app, ["annotate", str(SAMPLES / name), "-o", str(target)])
        assert res.exit_code == 0, res.output
        out[name] = (SAMPLES / name, target)
    return out


def _by_ordinal(original, back, stem: str) -> list[tuple[dict, dict]]:
    """Pair each original device with the annotated one: ordinal i is the i-th device of the analysis."""
    again = {d["device"]: d for d in back.devices}
    assert len(again) == len(original.devices)
    return [(d, again[f"{stem}/GPU:{i}"]) for i, d in enumerate(original.devices)]


def _doc(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.slow
@pytest.mark.parametrize("name", EXACT)
def test_round_trip_gives_the_same_figures_to_the_ns(annotated, name):
    src, out = annotated[name]
    original, back = analyze_paths([src]), analyze_paths([out])
    for a, b in _by_ordinal(original, back, out.name.split(".")[0]):
        assert {k: b[k] for k in NS_KEYS} == {k: a[k] for k in NS_KEYS}, a["device"]
        assert b["comm_share"] == pytest.approx(a["comm_share"], abs=0)
    base = _doc(out)["otherData"]["time_base_ns"]
    names = {d["device"]: f"{out.name.split('.')[0]}/GPU:{i}" for i, d in enumerate(original.devices)}
    steps_a = {(names[s["device"]], s["step"]): s for s in original.steps}
    steps_b = {(s["device"], s["step"]): s for s in back.steps}
    assert steps_a.keys() == steps_b.keys()
    for key, s in steps_a.items():
        t = steps_b[key]
        assert (t["start_ns"] + base, t["end_ns"] + base) == (s["start_ns"], s["end_ns"])
        assert {k: t[k] for k in NS_KEYS} == {k: s[k] for k in NS_KEYS}
    # the kind of a collective named by its HLO opcode needs the opcode, which the annotated trace carries
    assert [(c["name"], c["count"], c["total_ns"], c["exposed_ns"]) for c in back.collectives] == [
        (c["name"], c["count"], c["total_ns"], c["exposed_ns"]) for c in original.collectives
    ]


@pytest.mark.parametrize("name", ALL)
def test_round_trip_keeps_every_activity_and_step(annotated, name):
    src, out = annotated[name]
    original, back = analyze_paths([src]), analyze_paths([out])
    for a, b in _by_ordinal(original, back, out.name.split(".")[0]):
        assert {k: b[k] for k in TIMING_KEYS} == {k: a[k] for k in TIMING_KEYS}, a["device"]
    assert len(back.steps) == len(original.steps)


@pytest.mark.parametrize("name", ["cpu_moe_8dev", "synthetic_2host_4gpu", "synthetic_1host_8gpu"])
def test_round_trip_buckets_and_links(annotated, name):
    src, out = annotated[name]
    original = analyze_paths([src])
    # one annotated file holds every host: say how many devices share an NVLink domain, as for NVL72
    per_host = len(original.devices) // len({d["host"] for d in original.devices})
    multi_host = len({d["host"] for d in original.devices}) > 1
    back = analyze_paths([out], LoadOptions(nvlink_domain_size=per_host if multi_host else None))
    for a, b in _by_ordinal(original, back, out.name.split(".")[0]):
        assert {k: b[k] for k in NS_KEYS} == {k: a[k] for k in NS_KEYS}, a["device"]
    assert [(c["name"], c["kind"], c["link"]) for c in back.collectives] == [
        (c["name"], c["kind"], c["link"]) for c in original.collectives
    ]


@pytest.mark.parametrize("name", ALL)
def test_annotated_trace_layout(annotated, name):
    src, out = annotated[name]
    doc = _doc(out)
    original = analyze_paths([src])
    events = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert sorted(procs.values()) == sorted(f"{d['device']} [/device:GPU:{i}]" for i, d in enumerate(original.devices))
    assert all(n.startswith(("Stream #", "moeprof: ")) or n == "Steps" for n in threads.values()), (
        "a derived track named like activity would be counted twice"
    )
    slices: dict[tuple, list] = {}
    for e in events:
        if e["ph"] == "X":
            slices.setdefault((e["pid"], e["tid"]), []).append(e)
    for key, rows in slices.items():
        # the trace-event format wants slices on one thread disjoint or nested (Perfetto drops the rest)
        s, e = us_interval_to_ns(np.array([r["ts"] for r in rows]), np.array([r["dur"] for r in rows]))
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        assert (s[1:] >= np.maximum.accumulate(e)[:-1]).all(), threads[key]
    for i, dev in enumerate(original.devices):
        pid = i + 1
        exposed = [
            r
            for (p, t), rows in slices.items()
            if p == pid and threads[(p, t)] == "moeprof: exposed comm"
            for r in rows
        ]
        s, e = us_interval_to_ns(np.array([r["ts"] for r in exposed]), np.array([r["dur"] for r in exposed]))
        assert int((e - s).sum()) == dev["exposed_comm_ns"], dev["device"]
    comm = [e for e in events if e["ph"] == "X" and e.get("args", {}).get("bucket") == "comm"]
    assert comm and all({"kind", "link", "ib_fraction"} <= set(e["args"]) for e in comm)


def test_uncompressed_output_and_bad_names(tmp_path):
    out = tmp_path / "plain.json"
    res = runner.invoke(app, ["annotate", str(SAMPLES / "synthetic_1host_8gpu"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["traceEvents"]
    res = runner.invoke(app, ["annotate", str(SAMPLES / "synthetic_1host_8gpu"), "-o", str(tmp_path / "x.html")])
    assert res.exit_code == 2 and "trace-event JSON" in res.output
    res = runner.invoke(app, ["annotate", str(tmp_path / "missing"), "-o", str(out)])
    assert res.exit_code == 2 and "Traceback" not in res.output


def _one_gzip_member(data: bytes) -> bytes:
    """The text of a gzip file that is one member (what every trace viewer reads), checked as such."""
    d = zlib.decompressobj(31)
    text = d.decompress(data)
    assert d.eof and not d.unused_data
    return text


def test_isal_and_zlib_write_the_same_trace(tmp_path, monkeypatch):
    """annotate compresses with ISA-L where python-isal imports, with zlib where it does not: one gzip
    member either way, holding the same JSON text."""
    igzip = pytest.importorskip("isal.igzip")
    opened: list[str] = []

    def spy(how: str, real):
        def open_(*args, **kwargs):
            opened.append(how)
            return real(*args, **kwargs)

        return open_

    monkeypatch.setattr(igzip, "open", spy("isal", igzip.open))
    monkeypatch.setattr(gzip, "open", spy("zlib", gzip.open))
    written = {}
    for how in ("isal", "zlib"):
        if how == "zlib":
            monkeypatch.setitem(sys.modules, "isal", None)  # an import of it fails, as without its wheels
        out = tmp_path / f"{how}.trace.json.gz"
        res = runner.invoke(app, ["annotate", str(SAMPLES / "synthetic_2host_4gpu"), "-o", str(out)])
        assert res.exit_code == 0, res.output
        written[how] = out.read_bytes()
        assert opened.pop() == how and not opened  # that compressor wrote the file, and only it
    text = _one_gzip_member(written["isal"])
    assert text == _one_gzip_member(written["zlib"])
    assert json.loads(text)["traceEvents"]


@pytest.mark.slow
def test_wait_and_transfer_tracks_partition_comm(tmp_path):
    """§8 tracks: a device's comm is split into waiting for the last member and moving bytes, exactly."""
    out = tmp_path / "a.trace.json.gz"
    res = CliRunner().invoke(app, ["annotate", str(SAMPLES / "synthetic_2host_4gpu"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "3 steps" in res.output  # distinct steps, not 3 x 8 device windows
    doc = _doc(out)
    analysis = {d["device"]: d for d in _analyze_paths([SAMPLES / "synthetic_2host_4gpu"]).to_json()["devices"]}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    procs = {e["pid"]: e["args"]["moeprof_device"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    spans: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and threads.get((e["pid"], e["tid"]), "").startswith("moeprof: comm"):
            s = round(e["ts"] * 1000)
            spans.setdefault((e["pid"], threads[(e["pid"], e["tid"])]), []).append((s, s + round(e["dur"] * 1000)))

    def total(pid: int, name: str) -> int:
        return sum(b - a for a, b in spans.get((pid, name), []))

    def union(pid: int, *names: str) -> int:
        covered: set[int] = set()  # per ns: small synthetic windows
        for name in names:
            for a, b in spans.get((pid, name), []):
                covered.update(range(a, b))
        return len(covered)

    for pid, device in procs.items():
        comm = union(pid, "moeprof: comm NVLink", "moeprof: comm IB", "moeprof: comm ?link")
        waiting, moving = total(pid, "moeprof: comm waiting"), total(pid, "moeprof: comm moving bytes")
        assert waiting > 0 and moving > 0
        assert waiting + moving == comm, device  # disjoint, and together all of comm
        assert waiting <= analysis[device]["comm_wait_ns"]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("group_from", [1, 16, 10**9])
def test_slices_written_as_text_are_the_events_as_dicts(seed, group_from, monkeypatch):
    """The text the writer assembles without a dict per event parses to the events built as dicts, floats
    included (each written as the shortest text that reads back the same double), whether events are
    written grouped by their tail (a replace per tail), one piece each (joined in batches), or both."""
    from moeprof.reports import annotate
    from moeprof.reports.annotate import _slices, _tail

    monkeypatch.setattr(annotate, "JOIN_EVENTS", [7, 64, 1 << 15][seed % 3])  # batches cut anywhere
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    base = 1_733_011_200_000_000_000 + int(rng.integers(0, 10**6)) * 1000
    start = base + np.sort(rng.integers(0, 10**12, n))
    end = start + rng.integers(0, 10**7, n)
    names = ["ncclDevKernel_AllGather", 'a "quoted" \\ name', "µs-kernel", "rare"]
    args = [
        {"bucket": "comm", "ib_fraction": 0.25},
        {"bucket": "compute"},
        {"bucket": "other", "program_id": 7},
        {"bucket": "memcpy"},
    ]
    table = [_tail(nm, ar) for nm, ar in zip(names, args)]
    index = rng.choice(4, n, p=[0.45, 0.3, 0.2, 0.05])  # "rare" below 16 events: both routes in one thread
    for tail, expect in (((table, index), [(names[i], args[i]) for i in index]), (table[1], [(names[1], args[1])] * n)):
        text = b"".join(_slices(3, 7, start, end, base, tail, group_from=group_from))
        assert text.startswith(b",")
        got = json.loads(b"[" + text[1:] + b"]")
        want = [
            {"ph": "X", "pid": 3, "tid": 7, "ts": (s - base) / 1e3, "dur": (e - s) / 1e3, "name": nm, "args": ar}
            for s, e, (nm, ar) in zip(start.tolist(), end.tolist(), expect)
        ]

        def key(ev: dict) -> tuple:
            return ev["ts"], ev["dur"], ev["name"]

        assert sorted(got, key=key) == sorted(want, key=key)  # the same events, none lost or doubled
        for nm in names:  # each tail's events keep the order given
            assert [e for e in got if e["name"] == nm] == [e for e in want if e["name"] == nm]
        if group_from > n:
            assert got == want  # no tail is grouped: the order given
    assert _slices(1, 1, start[:0], end[:0], base, table[0]) == []


@pytest.mark.parametrize("batch", [1, 5, 64, 1 << 20])
def test_writer_writes_every_piece_in_order(batch, monkeypatch):
    """The writer's batching (small pieces joined, large ones written as they are) changes no byte."""
    import io

    from moeprof.reports.annotate import _Writer

    rng = np.random.default_rng(batch)
    devices = [
        [bytes(rng.integers(0, 256, int(rng.integers(0, 40)), dtype=np.uint8)) for _ in range(50)] for _ in range(4)
    ]
    monkeypatch.setattr(_Writer, "BATCH", batch)
    sink = io.BytesIO()
    with _Writer(sink) as writer:  # type: ignore[arg-type]
        for pieces in devices:
            writer.write(pieces)
    assert sink.getvalue() == b"".join(p for pieces in devices for p in pieces)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 60), st.integers(0, 15)),
        min_size=0,
        max_size=60,
    )
)
def test_pack_lanes_are_disjoint_and_as_few_as_the_deepest_overlap(spans):
    """Each sub-lane holds disjoint intervals (end <= next start), and there are exactly as many as the
    most intervals open at once: brute force over each interval's start."""
    from moeprof.reports.annotate import pack

    spans.sort(key=lambda t: t[0])  # by start, as the writer sorts a stream (ties keep their order)
    start = np.array([s for s, _ in spans], dtype=np.int64)
    end = np.array([s + d for s, d in spans], dtype=np.int64)
    lanes = pack(start, end)
    for lane in set(lanes.tolist()):
        s, e = start[lanes == lane], end[lanes == lane]
        assert (s[1:] >= e[:-1]).all()
    # interval i needs a lane apart from every earlier interval still open at its start
    deepest = max((1 + sum(1 for j in range(i) if end[j] > start[i]) for i in range(len(spans))), default=0)
    assert (int(lanes.max()) + 1 if len(spans) else 0) == deepest
