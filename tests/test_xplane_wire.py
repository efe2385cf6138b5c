"""The XPlane wire decoder against two independent readings of the same bytes.

* the protobuf runtime's own parse (``moeprof.readers.xspace_proto`` classes,
  with string fields read as bytes so that only the strings the decoder decodes
  are checked), turned into per-event values in plain Python: exact integer
  times, tsl's stat semantics (the event's stat over its metadata's,
  references resolved);
* jaxlib's ``ProfileData``, whose times are ``float(timestamp_ns + trunc(offset_ps/1000))``
  and ``+ float(trunc(duration_ps/1000))`` (C++ integer division, then doubles):
  the decoder rounds half-to-even in integers instead, so the two agree exactly
  where offsets and durations are whole nanoseconds and the times below 2**53,
  and each is checked against its own formula everywhere.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import random
import sys
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from moeprof.readers import xspace_proto as xp
from moeprof.readers.xplane_wire import (
    STAT_ABSENT,
    STAT_BYTES,
    STAT_DOUBLE,
    STAT_INT64,
    STAT_REF,
    STAT_STR,
    STAT_UINT64,
    WireError,
    XSpaceColumns,
    read_xspace,
)

from .helpers import NATIVE_REQUIRED, ROOT, SAMPLES, SHARED_TRACES, shared_trace

STATS = ("hlo_op", "hlo_module", "program_id", "step_num", "device_ordinal", "run_id", "correlation_id", "flops")
T_EPOCH = 1_733_011_200_000_000_123  # an epoch timestamp in ns: ps since then overflow int64, doubles lose ns


# ------------------------------------------------------------------------------------------ reference readings


@cache
def _raw_messages() -> dict[str, type]:
    """The XSpace classes with every string field as bytes: parsing checks structure, never UTF-8."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="raw_xplane.proto", package="raw_xplane", syntax="proto3")
    for name, fields in xp._SCHEMA:
        xp._add_message(file, name, fields)
    for msg in file.message_type:
        for f in [*msg.field, *(g for nested in msg.nested_type for g in nested.field)]:
            if f.type == xp._F.TYPE_STRING:
                f.type = xp._F.TYPE_BYTES
            if f.type_name:
                f.type_name = f.type_name.replace(f".{xp._PACKAGE}.", ".raw_xplane.")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"raw_xplane.{n}")) for n, _ in xp._SCHEMA}


def _text(raw: bytes) -> str:
    return raw.decode("utf-8")  # raises on bad UTF-8: the decoder must then raise WireError


def _round_half_even_div(x: int, d: int = 1000) -> int:
    q, r = divmod(x, d)
    return q + (1 if r * 2 > d or (r * 2 == d and q % 2) else 0)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _stat_value(stat, stat_names: dict[int, str]):
    which = stat.WhichOneof("value")
    if which is None:
        return None
    if which == "ref_value":
        return stat_names.get(stat.ref_value, "")
    if which == "str_value":
        return _text(stat.str_value)
    if which == "uint64_value":
        return _signed(stat.uint64_value)
    return getattr(stat, which)


def _requested_stats(stats_of_one, stat_names: dict[int, str], requested: tuple[str, ...]) -> dict:
    """The requested stats of one event (or event metadata) by name: the last one with a value wins, and only its
    value is read (a string it replaces is never decoded, so never checked)."""
    last = {}
    for st in stats_of_one:
        name = stat_names.get(st.metadata_id)
        if name in requested and st.WhichOneof("value") is not None:
            last[name] = st
    return {name: _stat_value(st, stat_names) for name, st in last.items()}


def reference(data: bytes, stats: tuple[str, ...] = STATS) -> dict:
    """Per plane and line: header fields and each event's name, exact times and requested stats."""
    space = _raw_messages()["XSpace"]()
    space.ParseFromString(data)
    out = {"hostnames": [_text(h) for h in space.hostnames], "planes": []}
    for plane in space.planes:
        stat_names = {k: _text(v.name) for k, v in plane.stat_metadata.items()}
        meta_names = {k: _text(v.name) for k, v in plane.event_metadata.items()}
        meta_stats = {k: _requested_stats(v.stats, stat_names, stats) for k, v in plane.event_metadata.items()}
        lines = []
        for line in plane.lines:
            ts = line.timestamp_ns
            events = []
            for ev in line.events:
                off = ev.offset_ps if ev.WhichOneof("data") == "offset_ps" else 0
                own = _requested_stats(ev.stats, stat_names, stats)
                merged = {**meta_stats.get(ev.metadata_id, {}), **own}
                events.append(
                    (
                        meta_names.get(ev.metadata_id, ""),
                        ts + _round_half_even_div(off),
                        ts + _round_half_even_div(off + ev.duration_ps),
                        merged,
                    )
                )
            head = (line.id, line.display_id, _text(line.name), _text(line.display_name), ts, line.duration_ps)
            lines.append((head, events))
        out["planes"].append((plane.id, _text(plane.name), lines))
    return out


def decoded(space: XSpaceColumns, stats: tuple[str, ...] = STATS) -> dict:
    """The decoder's columns as the same plain values."""
    out = {"hostnames": space.hostnames, "planes": []}
    for plane in space.planes:
        lines = []
        for line in plane.lines:
            idx = plane.name_index(line)
            values = {}
            for s in stats:
                col = line.stats[s]
                vals: list = []
                for i, k in enumerate(col.kind.tolist()):
                    if k == STAT_ABSENT:
                        vals.append(None)
                    elif k in (STAT_INT64, STAT_UINT64):
                        vals.append(int(col.ints[i]))
                    elif k == STAT_DOUBLE:
                        vals.append(float(col.doubles[i]))
                    else:
                        assert k in (STAT_STR, STAT_BYTES, STAT_REF)
                        vals.append(col.categories[col.codes[i]])
                values[s] = vals
            events = []
            for i in range(len(line)):
                merged = {s: values[s][i] for s in stats if values[s][i] is not None}
                name = plane.event_names[idx[i]] if idx[i] >= 0 else ""
                events.append((name, int(line.start_ns[i]), int(line.end_ns[i]), merged))
            head = (line.id, line.display_id, line.name, line.display_name, line.timestamp_ns, line.duration_ps)
            lines.append((head, events))
        out["planes"].append((plane.id, plane.name, lines))
    return out


def assert_matches_jaxlib(path: Path, space: XSpaceColumns) -> None:
    """Names and stats equal ProfileData's; times equal its float formula, and ours the exact one."""
    from jaxlib._profile_data import ProfileData

    raw = _raw_messages()["XSpace"]()
    raw.ParseFromString(path.read_bytes())
    planes = list(ProfileData.from_file(str(path)).planes)
    assert [p.name for p in planes] == space.plane_names
    for plane, ours, raw_plane in zip(planes, space.planes, raw.planes, strict=True):
        meta_stat_names = {
            raw_plane.stat_metadata[st.metadata_id].name.decode()
            for m in raw_plane.event_metadata.values()
            for st in m.stats
            if st.metadata_id in raw_plane.stat_metadata
        }
        for line, mine, raw_line in zip(plane.lines, ours.lines, raw_plane.lines, strict=True):
            assert line.name == mine.name
            events = list(line.events)
            assert len(events) == len(mine)
            idx = ours.name_index(mine)
            ts = raw_line.timestamp_ns
            for i, (ev, raw_ev) in enumerate(zip(events, raw_line.events, strict=True)):
                assert ev.name == (ours.event_names[idx[i]] if idx[i] >= 0 else "")
                off, dur = raw_ev.offset_ps, raw_ev.duration_ps
                trunc_off = int(off / 1000) if abs(off) < 2**53 else -((-off) // 1000) if off < 0 else off // 1000
                trunc_dur = int(dur / 1000) if abs(dur) < 2**53 else dur // 1000
                jax_start = float(ts + trunc_off)
                assert ev.start_ns == jax_start
                assert ev.end_ns == jax_start + float(trunc_dur)
                exact_start = ts + _round_half_even_div(off)
                exact_end = ts + _round_half_even_div(off + dur)
                assert (int(mine.start_ns[i]), int(mine.end_ns[i])) == (exact_start, exact_end)
                if off % 1000 == 0 and dur % 1000 == 0 and abs(exact_end) < 2**53 and abs(exact_start) < 2**53:
                    assert (ev.start_ns, ev.end_ns) == (mine.start_ns[i], mine.end_ns[i])
                theirs = {k: v for k, v in ev.stats if k is not None}
                for s, col in mine.stats.items():
                    if s in meta_stat_names:
                        continue  # jaxlib reads the event's own stats only; the reference checks the merge
                    k = int(col.kind[i])
                    if s not in theirs:
                        assert k == STAT_ABSENT, (s, i)
                        continue
                    want = theirs[s]
                    if k in (STAT_INT64, STAT_UINT64):
                        assert int(col.ints[i]) & ((1 << 64) - 1) == want & ((1 << 64) - 1)
                    elif k == STAT_DOUBLE:
                        assert float(col.doubles[i]) == want or (math.isnan(want) and math.isnan(col.doubles[i]))
                    elif k == STAT_BYTES:  # jaxlib hands bytes stats over as str
                        assert col.categories[col.codes[i]].decode() == want
                    else:
                        assert col.categories[col.codes[i]] == want


# ------------------------------------------------------------------------------------------ inputs


def _all_xplanes() -> list[Path]:
    files = sorted(SAMPLES.rglob("*.xplane.pb"))
    files += sorted((SHARED_TRACES / "xplane").glob("*.xplane.pb")) if (SHARED_TRACES / "xplane").exists() else []
    return files


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, Path]:
    """Files written here: the synthetic generator's, a benchmark-shaped one, and hand-made edge cases."""
    out = tmp_path_factory.mktemp("xplane")
    sys.path.insert(0, str(ROOT))
    from benchmarks.bench_xplane import build
    from synthetic.gpu import build as build_scenario
    from synthetic.gpu import write_xplane

    scen = build_scenario("wire", 1, 4, steps=2, layers=2, seed=5)
    write_xplane(scen, 0, out / "synthetic.xplane.pb")
    build(out / "bench.xplane.pb", 24_000)
    (out / "edge.xplane.pb").write_bytes(_edge_case_bytes())
    return {p.stem.split(".")[0]: p for p in out.glob("*.pb")}


def _field(number: int, payload: bytes) -> bytes:
    return xp_varint(number << 3 | 2) + xp_varint(len(payload)) + payload


def xp_varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _edge_case_bytes() -> bytes:
    """Epoch timestamps, sub-ns offsets and ties, negatives, metadata stats, refs, odd field orders."""
    m = xp.messages()
    plane = m["XPlane"](id=3, name="/device:GPU:0")
    for i, name in enumerate(["hlo_op", "program_id", "flops", "ref_target", "hlo_module", "step_num"], 1):
        plane.stat_metadata[i].id = i
        plane.stat_metadata[i].name = name
    plane.stat_metadata[1].description = "the HLO op"
    plane.stat_metadata[2**40 + 3].name = "far id"  # ids too far apart for a table by id
    plane.stats.add(metadata_id=2).str_value = "a plane's own stat"
    plane.stats.add(metadata_id=1).int64_value = -5
    k = plane.event_metadata[10]
    k.id, k.name, k.display_name = 10, "kernel_with_metadata_stats", "kernel (display)"
    k.stats.add(metadata_id=1).str_value = "op_from_metadata"
    k.stats.add(metadata_id=2).uint64_value = 2**64 - 1
    k.stats.add(metadata_id=3).double_value = 1.5e12
    plane.event_metadata[11].id = 11
    plane.event_metadata[11].name = "plain"
    plane.event_metadata[2**40].name = "big id"
    line = m["XLine"](id=1, display_id=7, name="Stream #1(odd)", display_name="odd", timestamp_ns=T_EPOCH)
    offsets = [0, 1, 499, 500, 501, 1500, 2500, -1500, -500, 10**15 + 500, 999_999_999_999_999]
    for j, off in enumerate(offsets):
        ev = line.events.add(metadata_id=10 if j % 2 else 11, offset_ps=off, duration_ps=(j * 777) % 3001)
        if j % 3 == 0:
            ev.stats.add(metadata_id=1).ref_value = 4  # a reference: the name of stat metadata 4
        if j % 4 == 0:
            ev.stats.add(metadata_id=2).int64_value = -7 * j
        if j == 5:
            ev.stats.add(metadata_id=1).ref_value = 999  # unknown reference: ""
            ev.stats.add(metadata_id=3)  # no value: absent
            ev.stats.add(metadata_id=77).int64_value = 1  # unknown stat metadata: ignored
        if j == 7:
            ev.stats.add(metadata_id=3).double_value = -2.5  # a double on the event itself (fixed64)
        if j == 8:
            ev.stats.add(metadata_id=5).ref_value = 2**40 + 3
        if j == 6:
            ev.stats.add(metadata_id=5).bytes_value = b"\x00raw\x01"
            ev.stats.add(metadata_id=1).str_value = "first"
            ev.stats.add(metadata_id=1).str_value = "second wins"
    line.events.add(metadata_id=2**40, num_occurrences=3, duration_ps=5000)
    line.events.add(metadata_id=12345, offset_ps=3000, duration_ps=1000)  # no metadata: name ""
    head = line.SerializeToString()
    # the same line with fields out of order: events split around the header, each event's fields reversed
    events = []
    for ev in line.events:
        pieces = [m["XEvent"](metadata_id=ev.metadata_id).SerializeToString()]
        if ev.WhichOneof("data") == "offset_ps":
            pieces.append(m["XEvent"](offset_ps=ev.offset_ps).SerializeToString())
        else:  # an offset first, then num_occurrences: the oneof's last field wins, clearing the offset
            pieces.append(m["XEvent"](num_occurrences=ev.num_occurrences).SerializeToString())
            pieces.append(m["XEvent"](offset_ps=777_000).SerializeToString())
        pieces.append(m["XEvent"](duration_ps=ev.duration_ps).SerializeToString())
        for st in ev.stats:
            one = m["XEvent"]()
            one.stats.add().CopyFrom(st)
            pieces.append(one.SerializeToString())
        events.append(_field(4, b"".join(reversed(pieces))))  # protobuf merges concatenated pieces
    header = m["XLine"](id=2, name="Stream #2(reordered)", timestamp_ns=5_000).SerializeToString()
    tail = m["XLine"](duration_ps=123, display_name="tail").SerializeToString()
    unknown = xp_varint(15 << 3 | 0) + xp_varint(99) + _field(14, b"\x22\x22\x22")
    reordered_line = b"".join(events[:4]) + header + unknown + b"".join(events[4:]) + tail
    steps = m["XLine"](id=3, name="Steps", timestamp_ns=0)
    for s in range(3):
        e = steps.events.add(metadata_id=11, offset_ps=s * 10**9, duration_ps=10**9)
        e.stats.add(metadata_id=6).int64_value = s
    empty = m["XLine"](id=4, name="empty line")
    # plane fields set twice (the last wins) and a stat metadata entry whose key is not in its shortest form
    stale = m["XStatMetadata"](id=4, name="stale").SerializeToString()
    overlong = b"\x08\x07" + _field(2, _field(2, b"overlong key") + b"\x08\x07" + b"\x48\x01")  # name, id, unknown
    firsts = b"\x08" + xp_varint(-5) + _field(2, b"stale plane name") + _field(5, b"\x08\x04" + _field(2, stale))
    lines = b"".join(_field(3, x) for x in (head, reordered_line, steps.SerializeToString(), empty.SerializeToString()))
    body = firsts + plane.SerializeToString() + b"\xaa\x00" + xp_varint(len(overlong)) + overlong + lines
    other = m["XPlane"](id=9, name="/host:CPU").SerializeToString()
    return _field(1, body) + _field(4, b"edgehost") + _field(1, other) + _field(2, b"an error string")


# ------------------------------------------------------------------------------------------ tests


def _routes() -> list[str]:
    """The decoder routes to test: those installed, and native wherever CI requires it."""
    from moeprof.readers.xplane_wire import installed_routes

    found = installed_routes()
    return found if "native" in found or not NATIVE_REQUIRED else ["native", *found]


def _has_numba() -> bool:
    return "numba" in _routes()


needs_native = pytest.mark.skipif(
    "native" not in _routes(), reason="native kernels not built (no C compiler at install)"
)
ROUTES = [
    "numpy",
    pytest.param("numba", marks=pytest.mark.skipif(not _has_numba(), reason="numba not installed")),
    pytest.param("native", marks=needs_native),
]


@pytest.fixture(params=ROUTES)
def route(request, monkeypatch) -> str:
    """Each test below runs on every decoder route: numpy, numba and the native (C) kernels."""
    import moeprof.readers.xplane_wire as wire

    monkeypatch.setenv(wire.DECODER_ENV, request.param)
    assert wire._choose_route(0) == request.param, f"the {request.param} route did not load"
    return request.param


@pytest.mark.slow
@pytest.mark.parametrize("path", _all_xplanes(), ids=lambda p: p.name)
def test_sample_and_shared_traces_match_both_references(path, route):
    space = read_xspace(path, stats=STATS)
    assert decoded(space) == reference(path.read_bytes())
    assert_matches_jaxlib(path, space)


def test_real_shared_traces_are_present_or_skipped():
    shared_trace("xplane/tf_bert_8xv100_worker.xplane.pb")
    shared_trace("xplane/jax_conv_8xmi300.xplane.pb")


@pytest.mark.slow
@pytest.mark.parametrize("which", ["synthetic", "bench", "edge"])
def test_generated_files_match_both_references(generated, which, route):
    path = generated[which]
    space = read_xspace(path, stats=STATS)
    assert decoded(space) == reference(path.read_bytes())
    assert_matches_jaxlib(path, space)


def test_edge_case_values_by_hand(generated, route):
    space = read_xspace(generated["edge"], stats=STATS)
    plane = space.planes[0]
    assert space.hostnames == ["edgehost"] and space.plane_names == ["/device:GPU:0", "/host:CPU"]
    line = plane.lines[0]
    # offsets [0, 1, 499, 500, 501, 1500, 2500, -1500, -500, ...] ps from an epoch timestamp, half to even
    assert (line.start_ns[:9] - T_EPOCH).tolist() == [0, 0, 0, 0, 1, 2, 2, -2, 0]
    assert line.start_ns[9] - T_EPOCH == 10**12  # 10**15 + 500 ps: the tie goes to the even ns
    ops = line.stats["hlo_op"]
    names = [plane.event_names[i] if i >= 0 else "" for i in plane.name_index(line)]
    assert names[-1] == "" and names[-2] == "big id"
    # event 0: its own reference; event 1: the metadata's string; event 5: unknown reference -> ""
    assert ops.categories[ops.codes[0]] == "ref_target" and ops.categories[ops.codes[1]] == "op_from_metadata"
    assert ops.categories[ops.codes[5]] == ""
    assert ops.categories[ops.codes[6]] == "second wins"
    pid = line.stats["program_id"]
    assert pid.ints[1] == -1 and pid.kind[1] == STAT_UINT64  # 2**64-1 from the metadata, as its bit pattern
    assert pid.ints[4] == -28 and pid.kind[4] == STAT_INT64  # the event's own stat over the metadata's
    assert line.stats["flops"].doubles[1] == 1.5e12 and line.stats["flops"].kind[5] == STAT_DOUBLE  # no-value stat
    hlo_module = line.stats["hlo_module"]
    assert hlo_module.categories[hlo_module.codes[6]] == b"\x00raw\x01"
    assert hlo_module.categories[hlo_module.codes[8]] == "far id"
    odd = plane.lines[1]
    assert (odd.name, odd.display_name, odd.duration_ps, odd.id) == ("Stream #2(reordered)", "tail", 123, 2)
    assert len(odd) == len(line)
    assert line.stats["flops"].doubles[7] == -2.5 and odd.stats["flops"].doubles[7] == -2.5
    assert odd.start_ns[-2] == 5_000  # num_occurrences after an offset: the offset is cleared
    assert plane.lines[3].name == "empty line" and len(plane.lines[3]) == 0
    # the plane's fields: the last id and name win, the stale stat metadata entry is replaced
    assert (plane.id, plane.name) == (3, "/device:GPU:0")
    assert plane.stat_names == {1: "hlo_op", 2: "program_id", 3: "flops", 4: "ref_target", 5: "hlo_module",
                                6: "step_num", 7: "overlong key", 2**40 + 3: "far id"}  # fmt: skip


@pytest.mark.parametrize("which", ["edge", "bench"])
def test_no_column_depends_on_memory_left_uninitialized(generated, monkeypatch, which, route):
    """The stat slots are allocated without zeroing (values are read only where a stat was found): with
    every uninitialized array filled with garbage first, every column is the same."""
    want = read_xspace(generated[which], stats=STATS)
    real_empty = np.empty

    def garbage(*args, **kwargs):
        out = real_empty(*args, **kwargs)
        out.view(np.uint8).reshape(-1)[:] = 0xA5  # a NaN as a double, a large negative integer
        return out

    monkeypatch.setattr(np, "empty", garbage)
    got = read_xspace(generated[which], stats=STATS)
    for plane, plane_want in zip(got.planes, want.planes, strict=True):
        for line, line_want in zip(plane.lines, plane_want.lines, strict=True):
            for stat in STATS:
                a, b = line.stats[stat], line_want.stats[stat]
                assert np.array_equal(a.kind, b.kind) and a.categories == b.categories
                for x, y in ((a.ints, b.ints), (a.doubles, b.doubles), (a.codes, b.codes)):
                    assert (x is None and y is None) or np.array_equal(x, y, equal_nan=True), (line.name, stat)


def test_plane_and_line_filters(generated):
    path = generated["synthetic"]
    every = read_xspace(path, stats=("hlo_op",))
    gpus = read_xspace(path, planes=lambda n: n.startswith("/device:GPU"), stats=("hlo_op",))
    assert gpus.plane_names == every.plane_names
    assert [p.name for p in gpus.planes] == [p.name for p in every.planes if p.name.startswith("/device:GPU")]
    streams = read_xspace(path, stats=(), lines=lambda plane, line: line.startswith("Stream"))
    for plane, full in zip(streams.planes, every.planes, strict=True):
        for line, want in zip(plane.lines, full.lines, strict=True):
            assert line.name == want.name
            assert line.events_read == line.name.startswith("Stream")
            if line.events_read:
                assert np.array_equal(line.start_ns, want.start_ns) and np.array_equal(line.end_ns, want.end_ns)
            else:
                assert len(line) == 0


def _mutations(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    out = []
    for _ in range(count):
        kind = rng.randrange(5)
        b = bytearray(data)
        if kind == 0:
            b = b[: rng.randrange(len(b))]
        elif kind == 1:
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif kind == 2:
            i = rng.randrange(len(b))
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif kind == 3:
            i = rng.randrange(len(b))
            del b[i : i + rng.randint(1, 4)]
        else:  # a byte that matters to the event walk: an events tag or a length
            i = rng.choice([j for j in range(len(b)) if b[j] == 0x22] or [0])
            b[min(i + rng.randint(0, 1), len(b) - 1)] ^= 1 << rng.randrange(8)
        out.append(bytes(b))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("which", ["edge", "synthetic"])
def test_truncated_or_corrupted_input_raises_wire_error_or_reads_correctly(generated, tmp_path, which, route):
    data = generated[which].read_bytes()
    rng = random.Random(12)
    outcomes = {"error": 0, "correct": 0, "as jaxlib": 0}
    for i, bad in enumerate(_mutations(data, rng, 120 if which == "edge" else 60)):
        path = tmp_path / f"m{i}.xplane.pb"
        path.write_bytes(bad)
        try:
            space = read_xspace(path, stats=STATS)
        except WireError:
            outcomes["error"] += 1
            continue
        try:
            want = reference(bad)
        except Exception as exc:  # the protobuf runtime rejects it, or a name is not UTF-8
            pytest.fail(f"mutation {i}: decoded input the protobuf runtime rejects ({exc})")
        if decoded(space) != want:
            # Python's protobuf runtime (upb) and jaxlib's (C++) read some malformed files differently: a
            # metadata map entry holding an unknown field, upb keeps out of the map and C++ inserts (the
            # last entry of a key wins). The decoder reads them as jaxlib, its fallback, does.
            assert_matches_jaxlib(path, space)
            outcomes["as jaxlib"] += 1
            continue
        outcomes["correct"] += 1
    assert outcomes["error"] and outcomes["correct"]  # both paths were exercised
    assert outcomes["as jaxlib"] <= 2, outcomes  # rare: a mutation must make a line's bytes into map entries


@pytest.mark.slow
@pytest.mark.skipif(len(_routes()) < 2, reason="only the numpy route is here")
@pytest.mark.parametrize("which", ["edge", "synthetic"])
def test_every_route_gives_the_same_outcome_on_corrupted_input(generated, tmp_path, monkeypatch, which):
    """Differential: on each mutated file, the routes decode the same columns, or all refuse it; the
    compiled routes (which walk the bytes in the same order) refuse it with the same words."""
    import moeprof.readers.xplane_wire as wire

    data = generated[which].read_bytes()
    rng = random.Random(57)
    refused = 0
    for i, bad in enumerate(_mutations(data, rng, 150)):
        path = tmp_path / f"d{i}.xplane.pb"
        path.write_bytes(bad)
        outcomes = {}
        for route in _routes():
            monkeypatch.setenv(wire.DECODER_ENV, route)
            try:
                outcomes[route] = decoded(read_xspace(path, stats=STATS))
            except WireError as exc:
                outcomes[route] = f"WireError: {exc}"
        kinds = {r: isinstance(o, str) for r, o in outcomes.items()}
        assert len(set(kinds.values())) == 1, f"mutation {i}: {kinds}"
        if not kinds["numpy"]:
            assert all(o == outcomes["numpy"] for o in outcomes.values()), f"mutation {i}"
        else:
            refused += 1
            compiled = {o for r, o in outcomes.items() if r != "numpy"}
            assert len(compiled) <= 1, f"mutation {i}: {outcomes}"
    assert 0 < refused < 150


@pytest.mark.slow
@pytest.mark.parametrize("which", ["edge", "synthetic", "bench"])
def test_lines_decoded_on_threads_equal_one_thread(generated, tmp_path, monkeypatch, which, route):
    """Threads change when a line is decoded, never what comes out: the columns, and for a corrupted
    file the same error (the first bad line in file order), as with one thread."""
    import moeprof.readers.xplane_wire as wire

    monkeypatch.setattr(wire, "THREADED_FROM_BYTES", 0)  # every plane on threads, however small
    data = generated[which].read_bytes()
    assert decoded(read_xspace(generated[which], stats=STATS, threads=4)) == reference(data)
    rng = random.Random(31)
    # the benchmark-shaped file (24k events) is here for its planes' size, which every mutation keeps: 10 of
    # them (each decoded twice) where the small files take 40
    for i, bad in enumerate(_mutations(data, rng, 10 if which == "bench" else 40)):
        path = tmp_path / f"t{i}.xplane.pb"
        path.write_bytes(bad)
        outcomes = []
        for threads in (1, 4):
            try:
                outcomes.append(decoded(read_xspace(path, stats=STATS, threads=threads)))
            except WireError as exc:
                outcomes.append(f"WireError: {exc}")
        assert outcomes[0] == outcomes[1], f"mutation {i}"


def test_empty_and_garbage_files(tmp_path, route):
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    assert read_xspace(empty).planes == []
    for junk in (
        b"\x0a\xff",
        b"\x00\x01",
        b"\x0b",
        b"\x0a\x05\x1a\x10abc",
        b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80",
    ):
        path = tmp_path / "junk.xplane.pb"
        path.write_bytes(junk)
        with pytest.raises(WireError):
            read_xspace(path)


_BAD_UTF8 = b"\xff\xfe"


def _plane_with(extra: bytes) -> bytes:
    """An XSpace of one valid plane with ``extra`` appended to the plane's fields."""
    plane = xp.messages()["XPlane"](id=1, name="/device:GPU:0").SerializeToString()
    return _field(1, plane + extra)


@pytest.mark.parametrize(
    "what, extra",
    [
        ("a plane name", _field(2, _BAD_UTF8)),
        ("a stat name", _field(5, b"\x08\x01" + _field(2, b"\x08\x01" + _field(2, _BAD_UTF8)))),
        ("a stat description", _field(5, b"\x08\x01" + _field(2, _field(2, b"ok") + _field(3, _BAD_UTF8)))),
        ("a plane stat", _field(6, b"\x08\x01" + _field(5, _BAD_UTF8))),
        ("an event display name", _field(4, b"\x08\x01" + _field(2, _field(2, b"k") + _field(4, _BAD_UTF8)))),
    ],
)
def test_metadata_strings_that_are_not_utf8_are_refused_as_jaxlib_refuses_them(tmp_path, route, what, extra):
    """The plane's own fields and its metadata maps are decoded without the protobuf runtime: their string
    fields must still be refused where protobuf (and so jaxlib) refuses them."""
    from jaxlib._profile_data import ProfileData

    good, bad = tmp_path / "good.xplane.pb", tmp_path / "bad.xplane.pb"
    good.write_bytes(_plane_with(extra.replace(_BAD_UTF8, b"ok")))
    bad.write_bytes(_plane_with(extra))
    assert read_xspace(good).plane_names == [p.name for p in ProfileData.from_file(str(good)).planes]
    with pytest.raises(RuntimeError):
        ProfileData.from_file(str(bad))
    with pytest.raises(WireError, match=f"{what} is not valid UTF-8"):
        read_xspace(bad)


# ------------------------------------------------------------------------------------------ the reader on both routes


def _read(path: Path, reader: str, monkeypatch) -> object:
    from moeprof.readers.base import ReadContext
    from moeprof.readers.xplane import read

    monkeypatch.setenv("MOEPROF_XPLANE_READER", reader)
    return read(path, ReadContext())


def _as_jaxlib_times(table):
    """jaxlib's times from exact ones (whole-ns offsets): the start as a double, plus the duration as a double."""
    out = table.copy()
    start, end = table["start_ns"].to_numpy(), table["end_ns"].to_numpy()
    s = start.astype(np.float64)
    out["start_ns"] = np.rint(s).astype(np.int64)
    out["end_ns"] = np.rint(s + (end - start).astype(np.float64)).astype(np.int64)
    return out


def assert_same_trace(jax_trace, wire_trace, float_times: bool = False) -> None:
    import pandas as pd

    for table in ("events", "markers"):
        theirs, ours = getattr(jax_trace, table), getattr(wire_trace, table)
        if float_times and "launch_ns" in ours:
            # a launch is a host call's start or end: jaxlib's as a double sum (a few hundred ns off at
            # epoch times); known on the same rows
            a, b = theirs["launch_ns"].to_numpy(), ours["launch_ns"].to_numpy()
            assert np.array_equal(a < 0, b < 0) and np.abs(a - b).max(initial=0) <= 1024
            theirs, ours = theirs.drop(columns="launch_ns"), ours.drop(columns="launch_ns")
        pd.testing.assert_frame_equal(theirs, _as_jaxlib_times(ours) if float_times else ours)
    syncs_a, syncs_b = jax_trace.host_syncs, wire_trace.host_syncs
    assert len(syncs_a) == len(syncs_b)
    if not float_times:
        pd.testing.assert_frame_equal(syncs_a.reset_index(drop=True), syncs_b.reset_index(drop=True))
    for attr in ("devices", "framework", "job", "format", "path"):
        assert getattr(jax_trace, attr) == getattr(wire_trace, attr)
    assert set(jax_trace.hlo) == set(wire_trace.hlo)


@pytest.mark.slow
@pytest.mark.parametrize("path", _all_xplanes(), ids=lambda p: p.name)
def test_both_readers_give_equal_traces(path, route, monkeypatch):
    assert_same_trace(_read(path, "jaxlib", monkeypatch), _read(path, "wire", monkeypatch))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["synthetic", "bench"])
def test_both_readers_give_equal_traces_on_generated_files(generated, which, route, monkeypatch):
    """The benchmark file has epoch timestamps: jaxlib's doubles lose nanoseconds there, and only that differs."""
    jax_trace = _read(generated[which], "jaxlib", monkeypatch)
    wire_trace = _read(generated[which], "wire", monkeypatch)
    assert_same_trace(jax_trace, wire_trace, float_times=which == "bench")
    if which == "bench":
        # and the wire route's times are the exact ones: a kernel's start is a whole number of ns past T0
        assert (wire_trace.events["start_ns"].to_numpy() % 1000 == 0).mean() < 0.5  # not rounded to doubles
        assert len(wire_trace.events) and len(wire_trace.markers)


def test_every_kernel_stat_option_matches_too(route, monkeypatch):
    from moeprof.options import LoadOptions
    from moeprof.readers.base import ReadContext
    from moeprof.readers.xplane import read

    path = next(SAMPLES.glob("synthetic_1host_8gpu/*.xplane.pb"))
    context = ReadContext(options=LoadOptions(all_kernel_stats=True))
    monkeypatch.setenv("MOEPROF_XPLANE_READER", "jaxlib")
    jax_trace = read(path, context)
    monkeypatch.setenv("MOEPROF_XPLANE_READER", "wire")
    wire_trace = read(path, context)
    assert_same_trace(jax_trace, wire_trace)
    # every kernel's op is read: more rows carry one than with the sampling
    sampled = _read(path, "wire", monkeypatch)
    assert (wire_trace.events["hlo_op"] != "").sum() > (sampled.events["hlo_op"] != "").sum()


def test_the_jaxlib_route_takes_over_when_the_decoder_refuses(monkeypatch):
    import moeprof.readers.xplane_wire as wire

    path = next(SAMPLES.glob("synthetic_2host_4gpu/*.xplane.pb"))
    expected = _read(path, "jaxlib", monkeypatch)

    def refuse(*args, **kwargs):
        raise WireError("refused for the test")

    monkeypatch.setattr(wire, "read_xspace", refuse)
    assert_same_trace(expected, _read(path, "wire", monkeypatch))


def test_a_corrupt_file_is_one_input_error(tmp_path, monkeypatch):
    from moeprof.errors import InputError

    data = next(SAMPLES.glob("synthetic_2host_4gpu/*.xplane.pb")).read_bytes()
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError):
        _read(bad, "wire", monkeypatch)


def test_the_wire_decoder_loads_without_the_event_tables_libraries(tmp_path):
    """The decoder turns bytes into numpy columns: it imports numpy (and protobuf for the metadata), not
    pandas/pyarrow, whose ~110 MiB would otherwise be most of its peak memory on a trace of ~50 MB."""
    import subprocess

    probe = (
        "import sys\n"
        "from moeprof.readers.xplane_wire import read_xspace\n"
        f"space = read_xspace({str(SAMPLES / 'synthetic_1host_8gpu' / 'node0.xplane.pb')!r})\n"
        "assert sum(len(line) for plane in space.planes for line in plane.lines) > 0\n"
        "print(sorted(m for m in ('pandas', 'pyarrow', 'typer', 'rich') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


_NUMBA_PROBE = """
import sys
import numpy as np
from moeprof.workers import own_process
if sys.argv[1] == "owned":
    own_process()
import moeprof.readers.xplane_wire as wire
path = sys.argv[2]
def columns(route):
    import os
    os.environ[wire.DECODER_ENV] = route
    space = wire.read_xspace(path)
    assert space.route == route, route + " did not load"
    return [(line.name, line.start_ns.tolist(), line.end_ns.tolist()) for p in space.planes for line in p.lines]
assert columns("numba") == columns("numpy"), "the compiled route disagrees with numpy"
import numba.np.arraymath
blocked = sys.modules.get("scipy.linalg.cython_blas", 0) is None
print(numba.np.arraymath._HAVE_BLAS, "scipy.linalg" in sys.modules, blocked)
"""


@pytest.mark.slow
@pytest.mark.skipif(not _has_numba(), reason="numba not installed")
@pytest.mark.parametrize("process", ["owned", "library"])
def test_numba_skips_its_blas_check_only_in_moeprofs_own_processes(tmp_path, process):
    """numba's first dispatch imports scipy.linalg to learn whether BLAS is there (0.15-0.4 s). In the
    CLI and its workers the decoder blocks that probe while numba loads, and unblocks it after; called
    as a library, it leaves numba alone. Either way the compiled route decodes what numpy decodes."""
    import subprocess

    sample = SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb"
    out = subprocess.run(
        [sys.executable, "-c", _NUMBA_PROBE, process, str(sample)], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    have_blas, scipy_linalg_loaded, still_blocked = out.stdout.split()
    assert still_blocked == "False"  # the block never outlives the import
    if process == "owned":
        assert (have_blas, scipy_linalg_loaded) == ("False", "False")
    else:
        scipy = importlib.util.find_spec("scipy") is not None
        assert (have_blas, scipy_linalg_loaded) == (str(scipy), str(scipy))


@pytest.mark.parametrize("owned", [False, True])
@pytest.mark.parametrize("native", [False, True])
def test_the_route_by_size_and_setting(monkeypatch, owned, native):
    """Unset: the native kernels at any size where they are built; else numba from its threshold (lower
    in moeprof's own processes), numpy below. A setting names the route, or numpy where it does not load."""
    import moeprof.readers.xplane_wire as wire
    import moeprof.workers as workers

    monkeypatch.delenv(wire.DECODER_ENV, raising=False)
    monkeypatch.setattr(workers, "_OWNED", [owned])
    numba_module = object() if _has_numba() else None
    monkeypatch.setattr(wire, "_KERNELS", {"native": object() if native else None, "numba": numba_module})
    threshold = wire.JIT_FROM_BYTES_OWNED if owned else wire.JIT_FROM_BYTES
    assert wire.JIT_FROM_BYTES_OWNED < wire.JIT_FROM_BYTES
    large = "numba" if numba_module is not None else "numpy"
    for size, expected in ((0, "numpy"), (threshold - 1, "numpy"), (threshold, large)):
        assert wire._choose_route(size) == ("native" if native else expected)
    for setting in ("", "auto", "bogus"):
        monkeypatch.setenv(wire.DECODER_ENV, setting)
        assert wire._choose_route(threshold) == ("native" if native else large)
    for setting in wire.DECODER_ROUTES:
        monkeypatch.setenv(wire.DECODER_ENV, setting.upper())
        loads = setting == "numpy" or wire._KERNELS[setting] is not None
        assert wire._choose_route(0 if setting != "numpy" else threshold * 2) == (setting if loads else "numpy")


@needs_native
def test_files_read_on_threads_each_keep_their_own_route(monkeypatch):
    """The route is chosen per file and travels with its planes' buffers (issue 33: it was one module-level
    setting, which a file read on another thread could change mid-read): a small file on numpy and a large one
    on the native kernels, read side by side on threads, each come back with their own route and columns."""
    from concurrent.futures import ThreadPoolExecutor

    import moeprof.readers.xplane_wire as wire

    small = SAMPLES / "synthetic_2host_4gpu" / "node0.xplane.pb"
    large = SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb"
    cut = large.stat().st_size
    assert small.stat().st_size < cut
    monkeypatch.setattr(wire, "_choose_route", lambda size: "native" if size >= cut else "numpy")

    def read(path: Path) -> tuple[str, list]:
        space = wire.read_xspace(path, stats=("hlo_op", "correlation_id"))
        columns = [(ln.name, ln.start_ns.tolist(), ln.end_ns.tolist()) for p in space.planes for ln in p.lines]
        return space.route, columns

    alone = {small: read(small), large: read(large)}
    assert (alone[small][0], alone[large][0]) == ("numpy", "native")
    with ThreadPoolExecutor(4) as pool:
        paths = [small, large] * 8
        for path, got in zip(paths, pool.map(read, paths), strict=True):
            assert got == alone[path]


@needs_native
def test_native_kernels_share_the_readers_error_codes_and_check_their_arguments():
    import moeprof.readers._xplane_native as native
    import moeprof.readers.wire_status as wire

    for code in ("OK", "TRUNCATED_VARINT", "LONG_VARINT", "PAST_END", "FIELD_ZERO", "BAD_WIRE", "FULL"):
        assert getattr(native, code) == getattr(wire, code), code
    data = np.frombuffer(b"\x0a\x01\x00\x0a\x00", dtype=np.uint8)
    body, body_end = np.zeros(4, np.int64), np.zeros(4, np.int64)
    assert native.field_run(data, 0, 5, 0x0A, body, body_end) == (2, 5, wire.OK)
    assert (body[:2].tolist(), body_end[:2].tolist()) == ([2, 5], [3, 5])
    # wrong dtypes, shapes or ranges raise instead of reading or writing out of bounds
    with pytest.raises(TypeError):
        native.field_run(data, 0, 5, 0x0A, body.astype(np.int32), body_end)
    with pytest.raises(TypeError):
        native.field_run(data.astype(np.int64), 0, 5, 0x0A, body, body_end)
    with pytest.raises(ValueError):
        native.field_run(data, 0, 6, 0x0A, body, body_end)  # past the data
    with pytest.raises(ValueError):
        native.field_run(data, -1, 5, 0x0A, body, body_end)
    with pytest.raises(ValueError):
        native.field_run(data, 0, 5, 0x0A, body, body_end[:3])
    with pytest.raises((TypeError, ValueError)):
        native.field_run(data, 0, 5, 0x0A, body[::2], body_end[::2])  # not contiguous

    def call(body, body_end, req_slot, k=1, m=None):
        m = len(body) if m is None else m
        outs = [np.zeros(m, np.int64) for _ in range(3)]
        stats = [np.zeros((k, m), np.int8)] + [np.zeros((k, m), np.int64) for _ in range(3)]
        req_ids = np.array([1] * len(req_slot), np.int64)
        return native.events(data, body, body_end, req_ids, np.array(req_slot, np.int64), *outs, *stats)

    one = np.array([0], np.int64)
    assert call(one, one, [0]) == (wire.OK, 0)  # an empty event
    with pytest.raises(ValueError):
        call(one, np.array([6], np.int64), [0])  # a body past the data
    with pytest.raises(ValueError):
        call(np.array([3], np.int64), np.array([2], np.int64), [0])  # a body ending before it starts
    with pytest.raises(ValueError):
        call(one, one, [1])  # a slot outside the stat arrays
    with pytest.raises(ValueError):
        call(one, one, [0], m=0)  # outputs shorter than the events


@needs_native
def test_native_strings_decode_each_range_as_python_does():
    import moeprof.readers._xplane_native as native

    texts = ["", "ascii", "naïve", "日本語", "emoji 🙂", "\x00 a NUL inside"]
    encoded = [t.encode() for t in texts]
    data = np.frombuffer(b"".join(encoded) + b"\xff\xfe", dtype=np.uint8)
    ends = np.cumsum([len(e) for e in encoded])
    starts = ends - [len(e) for e in encoded]
    assert native.strings(data, starts, ends) == texts
    assert native.strings(data, starts[::-1].copy(), ends[::-1].copy()) == texts[::-1]  # any order
    bad = int(ends[-1])
    for a, b in ((bad, bad + 2), (int(starts[3]), int(starts[3]) + 1)):  # not UTF-8; a character cut
        with pytest.raises(UnicodeDecodeError):
            native.strings(data, np.array([0, a], np.int64), np.array([0, b], np.int64))
    for a, b in (([0], [len(data) + 1]), ([2], [1]), ([-1], [1]), ([0, 1], [1])):  # outside, reversed, unequal
        with pytest.raises(ValueError):
            native.strings(data, np.array(a, np.int64), np.array(b, np.int64))
    with pytest.raises(TypeError):
        native.strings(data, np.array([0], np.int32), np.array([1], np.int32))


@pytest.mark.slow
def test_analysis_is_the_same_on_any_number_of_decoding_threads(generated, monkeypatch):
    """End to end through the XPlane reader: the analysis JSON with one decoding thread and with four."""
    import moeprof.readers.xplane_wire as wire
    from moeprof.options import LoadOptions
    from moeprof.pipeline import analyze_paths

    monkeypatch.setattr(wire, "THREADED_FROM_BYTES", 0)
    docs = [analyze_paths([generated["bench"]], LoadOptions(decode_threads=n), jobs=1).to_json() for n in (1, 4)]
    assert docs[0] == docs[1]
    assert docs[0]["devices"]  # a real analysis, not two empty ones


@needs_native
def test_native_times_equal_numpys_rounding_at_every_edge():
    """The native ps -> ns conversion (one pass) against numpy's _ps_to_ns plus the line time: int64
    extremes, remainders around the half (negative offsets included), random values of every size."""
    import moeprof.readers._xplane_native as native
    from moeprof.readers.xplane_wire import _ps_to_ns

    rng = np.random.default_rng(5)
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    remainders = (-501, -500, -499, -1, 0, 1, 499, 500, 501)
    around = [q * 1000 + r for q in (-3, -2, -1, 0, 1, 2, 3, 10**12) for r in remainders]
    edges = np.array([lo, lo + 1, lo + 500, hi, hi - 500, hi - 1, *around], dtype=np.int64)
    randoms = [rng.integers(lo, hi, 4000, dtype=np.int64, endpoint=True)]
    randoms += [rng.integers(-(10**k), 10**k, 4000, dtype=np.int64) for k in (3, 6, 12, 15)]
    values = np.concatenate([edges, *randoms])
    offsets = np.concatenate([np.repeat(edges, len(edges)), *randoms, np.roll(values, 7)])
    durations = np.concatenate([np.tile(edges, len(edges)), *randoms[::-1], values])
    for ts in (0, -5, 1_733_011_200_000_000_123, 2**62 + 2**55 - 1, -(2**62) - 2**55 + 1):
        start, end = np.empty_like(offsets), np.empty_like(offsets)
        native.ps_to_ns(offsets, durations, ts, start, end)
        want_start, want_end = _ps_to_ns(offsets, durations)
        assert np.array_equal(start, want_start + ts) and np.array_equal(end, want_end + ts), ts
    with pytest.raises(ValueError):
        native.ps_to_ns(offsets, durations, 2**62 + 2**55, start, end)  # could wrap: the caller never asks
    with pytest.raises(ValueError):
        native.ps_to_ns(offsets, durations[:-1], 0, start, end)


@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["_xplane_jit", "_xplane_native"])
def test_compiled_varint_agrees_with_the_python_walk_byte_for_byte(kernels):
    """Every (start, end) of many short byte strings: the compiled varint (numba's, and the native one)
    gives the value and end the Python walk gives, and the same error (truncated, or longer than 10
    bytes) where that one raises."""
    route = "native" if kernels == "_xplane_native" else "numba"
    if route not in _routes():
        pytest.skip(f"no {route} kernels here")
    module = importlib.import_module(f"moeprof.readers.{kernels}")
    varint = module.varint if route == "native" else module._varint
    from moeprof.readers.xplane_wire import _py_varint

    rng = random.Random(7)
    # runs of continuation bytes around the 10-byte limit, ended or not, then random strings
    crafted = [bytes([c] * k + tail) for c in (0x80, 0xFF) for k in range(13) for tail in ([], [0x01], [0x7F, 0x05])]
    randoms = [
        bytes(rng.choice((0x00, 0x7F, 0x80, 0x81, 0xC3, 0xFF)) for _ in range(rng.randint(0, 13))) for _ in range(1500)
    ]
    checked = 0
    for raw in crafted + randoms:
        data = np.frombuffer(raw + bytes(16), dtype=np.uint8)  # padded as the decoder's buffers are
        for start in range(len(raw) + 1):
            for end in range(start, len(raw) + 1):
                value, after = varint(data, start, end)
                try:
                    want, want_after = _py_varint(raw, start, end)
                except WireError as exc:
                    assert after == (-1 if "truncated" in str(exc) else -2), (raw, start, end)
                else:
                    assert (value & (1 << 64) - 1, after) == (want, want_after), (raw, start, end)
                checked += 1
    assert checked > 50_000
