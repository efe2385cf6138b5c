"""The Kineto columnar decoder against a plain ``json`` reading of the same documents.

The expected rows are computed here, event by event from ``json.loads``, with the
rules the format defines (category and phase
filters, ``str(name)``, ``np.asarray(ts, float)``, ``args.get("device", pid)``,
ints else -1...), sharing no code with the decoder.
"""

from __future__ import annotations

import gzip
import json
import math
import random
from pathlib import Path

import numpy as np
import orjson
import pytest

from moeprof.errors import InputError
from moeprof.readers import chrome, kineto_columns
from moeprof.readers.base import ReadContext
from moeprof.readers.kineto_columns import KinetoColumns, columns_of_document, decode_columns

from .helpers import shared_trace

GROUPS = {
    "device": (("kernel", "gpu_memcpy", "gpu_memset"), "X"),
    "launch": (("cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"), "X"),
    "cpu": (("cpu_op", "user_annotation", "python_function"), "X"),
    "flow": (("ac2g",), "s"),
}
COMM = ["Collective name", "Process Group Ranks", "Process Group Name", "Group size", "Global rank start",
        "Global rank stride", "In msg nelems", "Out msg nelems", "dtype"]  # fmt: skip


# ---- the expected reading, from dicts ---------------------------------------------------------------


def number(value: object) -> tuple[float, bool]:
    """(float, not-a-number) as np.asarray over the dict values converted them."""
    if value is None:
        return math.nan, False
    try:
        arr = np.asarray([value], dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return math.nan, True
    return (float(arr[0]), False) if arr.shape == (1,) else (math.nan, True)


def integer(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63 else -1


def label(value: object) -> str:
    return "\0none" if value is None else str(value)


def expected_row(group: str, e: dict) -> dict:
    a = e.get("args") if isinstance(e.get("args"), dict) else {}
    ts, ts_bad = number(e.get("ts"))
    row = {"pid": label(e.get("pid")), "tid": label(e.get("tid")), "ts": ts, "ts_bad": ts_bad}
    if group == "flow":
        row["id"] = integer(e.get("id"))
        return row
    if group == "launch":
        row["correlation"] = integer(a.get("correlation"))
        return row
    dur, dur_bad = number(e.get("dur", 0))
    row.update(name=str(e.get("name", "")), dur=dur, dur_bad=dur_bad, external=integer(a.get("External id")))
    comm_present = False
    if group == "device":
        b = a.get("bytes")
        row.update(
            device=label(a.get("device", e.get("pid"))),
            stream=label(a.get("stream", e.get("tid"))),
            correlation=integer(a.get("correlation")),
            bytes=float(b) if isinstance(b, (int, float)) and not isinstance(b, bool) else math.nan,
            own_comm="Collective name" in a or "Process Group Ranks" in a,
        )
        comm_present = row["own_comm"] or any(k in a for k in ("Seq", "seq", "Comms Id"))
    else:
        comm_present = row["name"] == "record_param_comms"
        row.update(sequence=integer(a.get("Sequence number")), fwd_thread=integer(a.get("Fwd thread id")))
    if comm_present:
        seq = a["Seq"] if "Seq" in a else a.get("seq")
        cid = a.get("Comms Id")
        row.update(
            comm={k: a[k] for k in COMM if k in a},
            seq=integer(seq),
            comms_id=cid if isinstance(cid, int) and not isinstance(cid, bool) and 0 <= cid < 2**64 else None,
            rank=integer(a.get("Rank")),
            src=integer(a.get("Src Rank")),
            dst=integer(a.get("Dst Rank")),
            in_split=str(a["In split size"]) if "In split size" in a else None,
            out_split=str(a["Out split size"]) if "Out split size" in a else None,
        )
    return row


def expected(doc: object) -> dict[str, list[dict]]:
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    return {
        group: [expected_row(group, e) for cat in cats for e in events if e.get("cat") == cat and e.get("ph") == ph]
        for group, (cats, ph) in GROUPS.items()
    }


# ---- the decoded reading, as the same rows ----------------------------------------------------------


def decoded(cols: KinetoColumns) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for group in GROUPS:
        g = getattr(cols, group)
        rows = []
        for i in range(len(g)):
            row = {
                "pid": label(cols.values[g.pid[i]]),
                "tid": label(cols.values[g.tid[i]]),
                "ts": float(g.ts[i]),
                "ts_bad": bool(g.bad[i] & 1),
            }
            if group == "flow":
                row["id"] = int(g.id[i])
            elif group == "launch":
                row["correlation"] = int(g.correlation[i])
            else:
                row.update(
                    name=cols.names[g.name[i]],
                    dur=float(g.dur[i]),
                    dur_bad=bool(g.bad[i] & 2),
                    external=int(g.external[i]),
                )
                if group == "cpu":
                    row.update(sequence=int(g.sequence[i]), fwd_thread=int(g.fwd_thread[i]))
                if group == "device":
                    row.update(
                        device=label(cols.values[g.device[i]]),
                        stream=label(cols.values[g.stream[i]]),
                        correlation=int(g.correlation[i]),
                        bytes=float(g.bytes[i]),
                        own_comm=bool(g.own_comm[i]),
                    )
                if g.comm[i] >= 0:
                    row.update(
                        comm=cols.comm_args[g.comm[i]],
                        seq=int(g.seq[i]),
                        comms_id=int(g.comms_id[i]) if g.has_comms_id[i] else None,
                        rank=int(g.group_rank[i]),
                        src=int(g.src_rank[i]),
                        dst=int(g.dst_rank[i]),
                        in_split=cols.strings[g.in_split[i]] if g.in_split[i] >= 0 else None,
                        out_split=cols.strings[g.out_split[i]] if g.out_split[i] >= 0 else None,
                    )
            rows.append(row)
        out[group] = rows
    return out


def same(a: object, b: object) -> bool:
    """Equality where NaN equals NaN and 1 is not True."""
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def assert_columns_match(text: bytes, cols: KinetoColumns | None = None) -> KinetoColumns:
    cols = cols or decode_columns(text, Path("t.json"))
    want, got = expected(json.loads(text)), decoded(cols)
    for group in GROUPS:
        assert len(got[group]) == len(want[group]), group
        for i, (g, w) in enumerate(zip(got[group], want[group])):
            assert same(g, w), (group, i, g, w)
    return cols


# ---- documents ----------------------------------------------------------------------------------


NAMES = ["aten::mm", "record_param_comms", "nccl:all_to_all", "ProfilerStep#3", "ключ", "名前 \"quoted\"", "emoji 🚀",
         "back\\slash", "tab\tand\nnewline", "brace },{ inside", "", "void k<{1},{2}>()"]  # fmt: skip


def random_event(rng: random.Random) -> object:
    """An event as Kineto writes it, or bent the ways valid JSON can bend it."""
    cat = rng.choice(["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "hip_runtime", "cpu_op",
                      "user_annotation", "ac2g", "fwdbwd", "python_function", "gpu_user_annotation", None])  # fmt: skip
    ph = rng.choice(["X"] * 6 + ["s", "f", "M", "i"]) if cat != "ac2g" else rng.choice(["s", "f", "X"])
    e: dict = {"ph": ph}
    if cat is not None:
        e["cat"] = cat
    e["name"] = rng.choice(NAMES)
    e["pid"] = rng.choice([0, 1, 4242, "Spans", "1"])
    e["tid"] = rng.choice([7, 20, 4242, "PyTorch Profiler"])
    ts = rng.choice([rng.randint(0, 2**52), round(rng.uniform(0, 5e12), 3), rng.uniform(0, 1e6)])
    e["ts"] = ts
    if rng.random() < 0.9:
        e["dur"] = rng.choice([rng.randint(0, 10**6), round(rng.uniform(0, 1e4), 3), -1.5])
    if ph == "s" or ph == "f":
        e["id"] = rng.randint(0, 10**6)
    if rng.random() < 0.85:
        a: dict = {}
        if rng.random() < 0.8:
            a["correlation"] = rng.randint(0, 10**6)
        if rng.random() < 0.8:
            a["External id"] = rng.randint(0, 10**6)
        if rng.random() < 0.7:
            a["device"] = rng.choice([0, 1, 3])
        if rng.random() < 0.7:
            a["stream"] = rng.choice([7, 13, 20])
        if rng.random() < 0.3:
            a["bytes"] = rng.choice([4096, 1.5e9, 0])
        a["grid"] = [132, 1, 1]
        if rng.random() < 0.3:  # autograd's pairing of forward and backward ops, bent now and then
            a["Sequence number"] = rng.choice([rng.randint(0, 10**5), 2**63, "12", None])
            a["Fwd thread id"] = rng.choice([0, 1, 2, 1.5])
        if rng.random() < 0.2:
            a.update(
                {
                    "Collective name": rng.choice(["all_to_all", "allreduce", "send", "recv"]),
                    "Process Group Ranks": rng.choice(["[0, 1]", "[0, 1, 2, 3]", "[0, 2, ..., ...]"]),
                    "Process Group Name": rng.choice(["0", "3"]),
                    "Group size": rng.choice([2, 4]),
                    "In msg nelems": rng.randint(1, 10**6),
                    "Out msg nelems": rng.randint(1, 10**6),
                    "dtype": rng.choice(["BFloat16", "Float"]),
                    "In split size": "[]",
                    "Out split size": rng.choice(["[]", "[1, 2]"]),
                    rng.choice(["Seq", "seq"]): rng.randint(0, 1000),
                    "Comms Id": rng.randint(0, 2**64 - 1),
                    "Rank": rng.randint(0, 3),
                    rng.choice(["Src Rank", "Dst Rank"]): rng.randint(0, 3),
                }
            )
        e["args"] = a
    return e


def document(seed: int, events: int = 300, bare: bool = False) -> object:
    rng = random.Random(seed)
    evs = [random_event(rng) for _ in range(events)]
    if bare:
        return evs
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "H100"}],
        "distributedInfo": {"rank": 3, "world_size": 8},
        "traceName": "x",
        "traceEvents": evs,
    }


def text(doc: object, style: int) -> bytes:
    if style == 0:
        return orjson.dumps(doc)
    if style == 1:
        return json.dumps(doc, ensure_ascii=True).encode()  # \uXXXX escapes
    return json.dumps(doc, ensure_ascii=False, indent=1).encode()  # whitespace between events


@pytest.fixture(params=[None, 256], ids=["one-chunk", "many-chunks"])
def chunk_bytes(request, monkeypatch):
    if request.param:
        monkeypatch.setattr(kineto_columns, "CHUNK_BYTES", request.param)
    return request.param


# ---- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_random_documents_match_a_plain_json_reading(seed, chunk_bytes):
    doc = document(seed, bare=seed == 5)
    cols = assert_columns_match(text(doc, seed % 3))
    assert cols.events == (len(doc) if isinstance(doc, list) else len(doc["traceEvents"]))
    if isinstance(doc, dict):
        assert cols.meta == {k: doc[k] for k in ("schemaVersion", "deviceProperties", "distributedInfo")}
        assert cols.is_kineto


def test_odd_but_valid_values_take_the_permissive_path(chunk_bytes):
    odd = [
        {"ph": "X", "cat": "kernel", "name": 12, "pid": 1.0, "tid": True, "ts": "12.5", "dur": None},  # no args
        {"ph": "X", "cat": "kernel", "name": None, "pid": None, "ts": 3, "args": [1, 2]},  # args not an object
        {"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": [1], "args": {"device": None, "stream": 1.5}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "ts": 1e-7, "dur": 2**70,
         "args": {"External id": "7", "Collective name": 5, "Group size": True, "Seq": -3, "Comms Id": -1}},
        {"ph": "X", "cat": "cuda_runtime", "ts": 5, "args": {"correlation": 2**64, "External id": None}},
        {"ph": "s", "cat": "ac2g", "id": "0x1f", "ts": 1, "pid": {"a": 1}, "tid": [1]},
        {"ph": "s", "cat": "ac2g", "id": True, "ts": 2},
        {"ph": "Z", "cat": "kernel", "name": "unknown phase"},
        {"cat": "kernel", "name": "no phase"},
        {"ph": 1, "cat": "kernel"},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 4, "dur": 1, "args": {"bytes": "64"}},
        {"ph": "X", "cat": "kernel", "name": "ok", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2},
    ]  # fmt: skip
    for doc in ({"traceEvents": odd}, odd):
        assert_columns_match(json.dumps(doc).encode())  # (orjson cannot write 2**70)
    assert same(decoded(columns_of_document({"traceEvents": odd})), expected({"traceEvents": odd}))


def test_repeated_keys_keep_the_last_as_json_does():
    raw = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "name": "b", "ts": 1, "ts": 2}]}'
    cols = assert_columns_match(raw)
    assert cols.names == ["b"] and cols.device.ts.tolist() == [2.0]


def test_ints_and_floats_give_the_same_doubles():
    # integers (as dsv3 writes µs) and floats with 3 decimals (as recent Kineto does), near 2**53 too
    values = [0, 1, 2**53 - 1, 2**53 + 1, 4458676524648.797, 1740461679471346.25, 1e-320, 123456789.123456789]
    evs = [{"ph": "X", "cat": "kernel", "name": "k", "ts": v, "dur": v} for v in values]
    cols = assert_columns_match(orjson.dumps({"traceEvents": evs}))
    assert cols.device.ts.tolist() == [float(v) for v in values]


def test_names_repeat_into_one_table_entry():
    evs = [{"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "ts": i} for i in range(1000)]
    cols = decode_columns(orjson.dumps({"traceEvents": evs}))
    assert sorted(cols.names) == ["k0", "k1", "k2"] and cols.device.name.dtype == np.int32


class CountingDecoder:
    def __init__(self, decoder) -> None:
        self.decoder, self.calls = decoder, 0

    def decode(self, buf):
        self.calls += 1
        return self.decoder.decode(buf)


def test_chunks_are_cut_from_the_text_and_a_wrong_cut_is_undone(monkeypatch):
    monkeypatch.setattr(kineto_columns, "CHUNK_BYTES", 16)
    fallback = CountingDecoder(kineto_columns._RAW_LIST)
    monkeypatch.setattr(kineto_columns, "_RAW_LIST", fallback)
    for style in range(3):
        assert_columns_match(text(document(style, events=80), style))
    assert fallback.calls == 0  # every event its own chunk, cut by byte range
    # "},{" inside a nested array of objects (and inside a string) is no place to cut
    nested = {"ph": "X", "cat": "kernel", "name": "n", "ts": 1, "args": {"list": [{"a": 1}, {"b": 2}, {"c": "},{"}]}}
    doc = {"traceEvents": [nested, *(dict(nested, ts=i) for i in range(2, 40))]}
    for style in range(3):
        assert_columns_match(text(doc, style))
    assert fallback.calls == 3


def test_dict_documents_read_like_their_text():
    doc = document(7)
    via_dict, via_text = decoded(columns_of_document(doc)), decoded(decode_columns(orjson.dumps(doc)))
    assert same(via_dict, via_text)


def test_without_metadata_a_device_category_in_any_phase_makes_it_kineto():
    assert decode_columns(b'{"traceEvents": [{"ph": "i", "cat": "kernel"}]}').is_kineto
    assert decode_columns(b'[{"ph": "X", "cat": "kernel", "ts": 1}]').is_kineto
    assert not decode_columns(b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 1}]}').is_kineto
    assert not decode_columns(b'{"traceEvents": [], "displayTimeUnit": "ns"}').is_kineto
    assert decode_columns(b'{"traceEvents": [], "schemaVersion": 1}').is_kineto


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b'{"traceEvents": [{"ph": "X", "name": ', "not valid JSON"),
        (b'[{"ph": "X"}', "not valid JSON"),
        (b'[{"a": 1}}', "not valid JSON"),  # a closing brace where the array should end
        (b'[{"a": 1}] x', "not valid JSON"),
        (b'{"traceEvents": [{"ts": 1e400}]}', "not valid JSON"),
        (b"not json", "not valid JSON"),
        (b'{"traceEvents": {"a": 1}}', "without a traceEvents list"),
        (b'{"hello": 1}', "without a traceEvents list"),
        (b"5", "without a traceEvents list"),
        (b'{"traceEvents": [1, 2]}', "not an event object"),
        (b'[{"ph": "X", "cat": ["kernel"]}]', "not an event object"),
    ],
)
def test_bad_documents_are_one_line_errors(raw, problem, chunk_bytes):
    with pytest.raises(InputError, match=problem) as err:
        decode_columns(raw, Path("bad.json"))
    assert "bad.json" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.parametrize(
    "rel",
    ["kineto/deepseek_v3_ep64_h800_rank0.json.gz", "kineto/vllm_tp8_b200_rank0.json.gz",
     "kineto/ddp_2rank_a100_rank0.json.gz", "kineto/torchrec_128rank_sampled/rank-0.json.gz"],
)  # fmt: skip
def test_real_traces_match_a_plain_json_reading(rel):
    raw = gzip.decompress(shared_trace(rel).read_bytes())
    assert_columns_match(raw)


# ---- reading the file: gzip under a cap, out of memory said as such ------------------------------


@pytest.mark.slow
def test_a_gzip_that_would_not_fit_is_refused_before_it_is_inflated(tmp_path, monkeypatch):
    import moeprof.readers.base as readers

    monkeypatch.delenv("MOEPROF_IGNORE_MEMORY_CHECK", raising=False)
    path = tmp_path / "bomb.pt.trace.json.gz"
    # 64 MiB of spaces inflate from ~64 KiB; pretend 64 MiB is free, so the text may take 16 MiB
    path.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (64 << 20) + b"]}", 9))
    monkeypatch.setattr(readers, "available_memory", lambda: 64 << 20)
    with pytest.raises(InputError) as err:
        chrome.read_bytes(path)
    line = str(err.value)
    assert str(path) in line and "too large" in line and "0.1 GiB" in line and "\n" not in line
    monkeypatch.setenv("MOEPROF_IGNORE_MEMORY_CHECK", "1")
    assert len(chrome.read_bytes(path)) == (64 << 20) + 19


def test_gzip_members_truncation_and_trailing_data(tmp_path):
    body = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]}).encode()
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(body[:20]) + gzip.compress(body[20:]))  # two members, as `cat a.gz b.gz`
    assert bytes(chrome.read_bytes(path)) == body
    path.write_bytes(gzip.compress(body)[:-12])
    with pytest.raises(InputError, match="truncated or corrupt gzip data"):
        chrome.read_bytes(path)
    path.write_bytes(gzip.compress(body) + b"junk")
    with pytest.raises(InputError, match="truncated or corrupt gzip data"):
        chrome.read_bytes(path)
    raw = bytearray(gzip.compress(body))
    raw[30] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="truncated or corrupt gzip data"):
        chrome.read_bytes(path)


def test_out_of_memory_while_decoding_is_not_called_invalid_json(tmp_path, monkeypatch):
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]}))

    def exhausted(*_args, **_kw):
        raise MemoryError

    monkeypatch.setattr(kineto_columns, "decode_columns", exhausted)
    with pytest.raises(InputError, match="out of memory decoding") as err:
        chrome.read(path, ReadContext())
    assert "not valid JSON" not in str(err.value) and str(path) in str(err.value)
    # orjson (xprof path) reports a failed allocation as a decode error: said as memory too
    monkeypatch.setattr(chrome.orjson, "loads", lambda _raw: (_ for _ in ()).throw(
        orjson.JSONDecodeError("Not enough memory to allocate buffer for parsing", "", 0)))  # fmt: skip
    with pytest.raises(InputError, match="out of memory decoding"):
        chrome.read_json(path)
