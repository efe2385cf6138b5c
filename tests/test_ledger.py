"""Spec §8, the cross-rank ledger: hand-computed cases, clock recovery, and a per-nanosecond oracle."""

from __future__ import annotations

import random
import statistics
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moeprof.core.ledger import DEVICE_KEYS, _median_offset, build_ledger

FAR = 10**6


def rec(
    device: str,
    start: int,
    end: int,
    *,
    kind: str = "all-reduce",
    key: str = "pg",
    members: str = "0,1",
    counted: bool = True,
    name: str = "ncclDevKernel_AllReduce",
    op: str | None = None,
    fallback: bool = True,
    gid: int = -1,
    clock: str | None = None,
) -> dict:
    return {
        "device": device,
        "clock": clock if clock is not None else device.split("/")[0],
        "global_id": gid,
        "start_ns": start,
        "end_ns": end,
        "kind": kind,
        "name": name,
        "op": op if op is not None else name,
        "key": key,
        "counted": counted,
        "members": members,
        "fallback": fallback,
    }


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(rec("a/GPU:0", 0, 0)))


def segments(by_device: dict[str, list[tuple[int, int]]]) -> pd.DataFrame:
    rows = [(d, s, e) for d, segs in by_device.items() for s, e in segs]
    return pd.DataFrame(rows, columns=["device", "start_ns", "end_ns"])


def exposed_of(records: pd.DataFrame, windows: dict, compute: dict | None = None) -> pd.DataFrame:
    """E = U(comm) − U(compute) within the window, by counting nanoseconds (small cases only)."""
    compute = compute or {}
    out = {}
    for device, win in windows.items():
        top = max([e for _, e in win] + [int(records["end_ns"].max()) if len(records) else 0]) + 1
        mask = np.zeros(top, dtype=bool)
        for r in records[records["device"] == device].itertuples():
            mask[r.start_ns : r.end_ns] = True
        for s, e in compute.get(device, []):
            mask[s:e] = False
        in_window = np.zeros(top, dtype=bool)
        for s, e in win:
            in_window[s:e] = True
        out[device] = runs(mask & in_window)
    return segments(out)


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    out, start = [], None
    for i, v in enumerate([*mask.tolist(), False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start, i))
            start = None
    return out


def ledger_of(rows, windows, compute=None, whole_job=False, device_ids=None):
    records = frame(rows)
    return build_ledger(records, segments(windows), exposed_of(records, windows, compute), whole_job, device_ids or {})


def everywhere(*devices: str) -> dict:
    return {d: [(0, FAR)] for d in devices}


# ---------------------------------------------------------------- hand-computed cases

D0, D1, D2, D3 = "a/GPU:0", "a/GPU:1", "a/GPU:2", "a/GPU:3"
IDS4 = {0: D0, 1: D1, 2: D2, 3: D3}


def test_two_devices_one_straggler():
    # D0 arrives at 100, D1 at 150, both end at 200: D0 waits 50, D1 is the straggler
    led = ledger_of([rec(D0, 100, 200), rec(D1, 150, 200)], everywhere(D0, D1), device_ids={0: D0, 1: D1})
    d0, d1 = led.device(D0), led.device(D1)
    assert (d0.comm_wait_ns, d0.comm_transfer_ns, d0.comm_unmatched_ns) == (50, 50, 0)
    assert (d1.comm_wait_ns, d1.comm_transfer_ns, d1.comm_unmatched_ns) == (0, 50, 0)
    assert (d0.exposed_wait_ns, d0.exposed_transfer_ns) == (50, 50)
    assert (d1.straggler_count, d1.caused_wait_ns, d0.straggler_count) == (1, 50, 0)
    assert (led.instances, led.incomplete, led.desynchronized) == (1, 0, 0)
    assert led.records["wait_ns"].tolist() == [50, 0]
    assert led.records["straggler"].tolist() == [False, True]
    assert led.records["instance"].tolist() == [0, 0]
    top = led.stragglers[0]
    assert (top.device, top.straggler_count, top.caused_wait_ns, top.instances, top.last_share) == (D1, 1, 50, 1, 1.0)
    assert led.total()["comm_wait_ns"] == 50


def test_four_devices_uneven_ends_and_tie_for_last():
    # all-to-all-v: ends differ. a = 40 (D2 and D3 tie: the straggler is the first name, D2)
    rows = [
        rec(D0, 10, 100, kind="all-to-all", members="0,1,2,3"),
        rec(D1, 30, 35, kind="all-to-all", members="0,1,2,3"),  # wait capped at its duration (5)
        rec(D2, 40, 90, kind="all-to-all", members="0,1,2,3"),
        rec(D3, 40, 80, kind="all-to-all", members="0,1,2,3"),
    ]
    led = ledger_of(rows, everywhere(D0, D1, D2, D3), device_ids=IDS4)
    assert led.records["wait_ns"].tolist() == [30, 5, 0, 0]
    assert led.records["straggler"].tolist() == [False, False, True, False]
    assert led.device(D2).straggler_count == 1 and led.device(D3).straggler_count == 0
    assert led.device(D2).caused_wait_ns == 35
    assert (led.device(D1).comm_wait_ns, led.device(D1).comm_transfer_ns) == (5, 0)


def test_skewed_clocks_on_two_hosts():
    # host b's clock reads 1000 more than a's. True arrivals: a0 at 100, b0 at 130, both end at 200
    a0, b0 = "a/GPU:0", "b/GPU:0"
    rows = [rec(a0, 100, 200, members="0,1"), rec(b0, 1130, 1200, members="0,1")]
    led = ledger_of(rows, {a0: [(0, FAR)], b0: [(0, FAR)]}, device_ids={0: a0, 1: b0})
    assert led.clock_offsets_ns == {"a": 0, "b": 1000}
    assert led.unaligned == []
    assert led.records["aligned_start_ns"].tolist() == [100, 130]
    assert led.records["wait_ns"].tolist() == [30, 0]
    assert led.device(b0).straggler_count == 1 and led.device(b0).caused_wait_ns == 30


@pytest.mark.slow
def test_clock_median_of_even_count_rounds_half_to_even():
    # host b has two members; per instance (mean end on b) − (mean end on a):
    #   inst 0: (1010 + 1011)/2 − 10 = 1000.5   inst 1: 1001   -> median 1000.75 -> 1001
    a0, b0, b1 = "a/GPU:0", "b/GPU:0", "b/GPU:1"
    ids = {0: a0, 1: b0, 2: b1}
    rows = [
        rec(a0, 0, 10, key="s0", counted=False, members="0,1,2"),
        rec(b0, 1000, 1010, key="s0", counted=False, members="0,1,2"),
        rec(b1, 1000, 1011, key="s0", counted=False, members="0,1,2"),
        rec(a0, 20, 30, key="s1", counted=False, members="0,1,2"),
        rec(b0, 1020, 1031, key="s1", counted=False, members="0,1,2"),
        rec(b1, 1020, 1031, key="s1", counted=False, members="0,1,2"),
    ]
    assert ledger_of(rows, everywhere(a0, b0, b1), device_ids=ids).clock_offsets_ns["b"] == 1001
    # two instances at 1000.5 and 1000.5: median 1000.5, tie -> even 1000
    rows[4] = rec(b0, 1020, 1030, key="s1", counted=False, members="0,1,2")
    assert ledger_of(rows, everywhere(a0, b0, b1), device_ids=ids).clock_offsets_ns["b"] == 1000
    # 1001.5 twice -> 1002 (even)
    rows = [dict(r, end_ns=r["end_ns"] + 1) if r["device"] != a0 else r for r in rows]
    assert ledger_of(rows, everywhere(a0, b0, b1), device_ids=ids).clock_offsets_ns["b"] == 1002


def test_host_without_aligning_instance_is_unaligned():
    # only a send/recv crosses hosts: it does not align clocks
    a0, b0 = "a/GPU:0", "b/GPU:0"
    rows = [rec(a0, 100, 200, kind="send-recv", members="0,1"), rec(b0, 5000, 5100, kind="send-recv", members="0,1")]
    led = ledger_of(rows, everywhere(a0, b0), device_ids={0: a0, 1: b0})
    assert led.clock_offsets_ns == {"a": 0, "b": 0}
    assert led.unaligned == ["b"]
    assert led.instances == 1
    assert led.records["wait_ns"].tolist() == [100, 0]  # raw clocks: a0 waits its whole duration


def test_incomplete_and_desynchronized_keys():
    rows = [
        rec(D0, 0, 10, members="0,1,2"),  # D2 never ran it: incomplete
        rec(D1, 0, 10, members="0,1,2"),
        rec(D0, 20, 30, key="seq7", counted=False),  # members disagree on kind: desynchronized
        rec(D1, 20, 30, key="seq7", counted=False, kind="all-gather"),
        rec(D0, 40, 50, key="q", members="0,9"),  # member 9 has no device in the inputs
        rec(D0, 60, 70, key="dup", counted=False),  # D0 has it twice: not complete
        rec(D0, 61, 70, key="dup", counted=False),
        rec(D1, 60, 70, key="dup", counted=False),
        rec(D2, 80, 90, key="out", members="0,1"),  # D2 is no member of 0,1
        rec(D0, 80, 90, key="out", members="0,1"),
        rec(D1, 80, 90, key="out", members="0,1"),
    ]
    led = ledger_of(rows, everywhere(D0, D1, D2), device_ids={0: D0, 1: D1, 2: D2})
    assert (led.instances, led.incomplete, led.desynchronized) == (0, 4, 1)
    assert led.records["status"].tolist() == ["incomplete"] * 2 + ["desynchronized"] * 2 + ["incomplete"] * 7
    assert led.device(D0).comm_unmatched_ns == 10 + 10 + 10 + 10 + 9 + 10
    assert led.device(D0).comm_wait_ns == led.device(D0).comm_transfer_ns == 0
    assert (led.records["instance"] == -1).all()


def test_send_recv_pairs_share_a_key_but_not_a_group():
    # a pipeline 0 -> 1 -> 2 and a pair 2 <-> 3 in one process group "pg", counted per pair
    rows = [
        rec(D0, 0, 50, kind="send-recv", members="0,1"),
        rec(D1, 20, 50, kind="send-recv", members="1,0"),  # order of members does not matter
        rec(D1, 60, 100, kind="send-recv", members="1,2"),
        rec(D2, 90, 100, kind="send-recv", members="1,2"),
        rec(D2, 110, 120, kind="send-recv", members="2,3"),
        rec(D3, 105, 120, kind="send-recv", members="2,3"),
    ]
    led = ledger_of(rows, everywhere(D0, D1, D2, D3), device_ids=IDS4)
    assert (led.instances, led.incomplete) == (3, 0)
    assert led.records["wait_ns"].tolist() == [20, 0, 30, 0, 0, 5]
    assert led.records["instance"].tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.slow
def test_rule4_fallback_on_and_off():
    rows = [
        rec(D0, 0, 40, key="", members="", name="ncclKernel_AllGather", kind="all-gather"),
        rec(D1, 10, 40, key="", members="", name="ncclKernel_AllGather", kind="all-gather"),
        rec(D0, 50, 60, key="", members="", name="ncclKernel_AllGather", kind="all-gather"),
        rec(D1, 52, 60, key="", members="", name="ncclKernel_AllGather", kind="all-gather"),
        # a peer memcpy: never NCCL's, stays unmatched
        rec(D0, 70, 80, key="", members="", name="Memcpy PtoP", kind="send-recv", fallback=False),
        rec(D1, 70, 80, key="", members="", name="Memcpy PtoP", kind="send-recv", fallback=False),
    ]
    off = ledger_of(rows, everywhere(D0, D1))
    assert (off.instances, off.incomplete, off.desynchronized) == (0, 0, 0)
    assert off.device(D0).comm_unmatched_ns == 60
    on = ledger_of(rows, everywhere(D0, D1), whole_job=True)
    assert (on.instances, on.incomplete) == (2, 0)
    assert on.records["wait_ns"].tolist() == [10, 0, 2, 0, 0, 0]
    assert on.records["status"].tolist()[-2:] == ["unmatched", "unmatched"]
    # rule 4's group is every device of the inputs: a third device without the kernel makes it incomplete
    three = ledger_of(rows, everywhere(D0, D1, D2), whole_job=True)
    assert (three.instances, three.incomplete) == (0, 2)


def test_window_cuts_a_wait_interval_and_hides_a_straggler():
    # D0 waits on [100, 150), transfers on [150, 200); its window starts at 120
    # D1's activity starts at 150, outside its window [160, ...): not counted as a straggler
    led = ledger_of(
        [rec(D0, 100, 200), rec(D1, 150, 200)],
        {D0: [(120, FAR)], D1: [(160, FAR)]},
        device_ids={0: D0, 1: D1},
    )
    assert (led.device(D0).comm_wait_ns, led.device(D0).comm_transfer_ns) == (30, 50)
    assert (led.device(D1).comm_transfer_ns, led.device(D1).straggler_count, led.device(D1).caused_wait_ns) == (
        40,
        0,
        0,
    )
    assert led.records["wait_ns"].tolist() == [50, 0]  # unclipped W_r
    # two window segments cutting the wait in two: [100, 110) and [130, 140) of it are inside
    led = ledger_of(
        [rec(D0, 100, 200), rec(D1, 150, 200)], {D0: [(90, 110), (130, 140)], D1: [(0, FAR)]}, device_ids={0: D0, 1: D1}
    )
    assert led.device(D0).comm_wait_ns == 20 and led.device(D0).comm_transfer_ns == 0


def test_comm_overlapping_comm_and_compute():
    # instance X: D0 [100, 200) waits 50; an unmatched comm B on D0 [120, 180); compute on D0 [100, 110)
    rows = [rec(D0, 100, 200), rec(D1, 150, 200), rec(D0, 120, 180, key="", members="", fallback=False)]
    led = ledger_of(rows, everywhere(D0, D1), compute={D0: [(100, 110)]}, device_ids={0: D0, 1: D1})
    d0 = led.device(D0)
    assert (d0.comm_wait_ns, d0.comm_transfer_ns, d0.comm_unmatched_ns) == (50, 50, 60)
    # E = [110, 200); transfer [150, 200) = 50; unmatched minus transfer [120, 150) = 30; wait left [110, 120) = 10
    assert (d0.exposed_transfer_ns, d0.exposed_unmatched_ns, d0.exposed_wait_ns) == (50, 30, 10)


def test_collectives_rows_and_devices_without_comm():
    rows = [rec(D0, 100, 200, op="all-reduce.1"), rec(D1, 150, 200, op="all-reduce.1")]
    led = ledger_of(rows, {D0: [(0, FAR)], D1: [(0, 170)], D2: [(0, FAR)]}, device_ids={0: D0, 1: D1})
    (row,) = led.collectives
    assert (row.op, row.kind, row.wait_ns, row.transfer_ns) == ("all-reduce.1", "all-reduce", 50, 50 + 20)
    assert led.device(D2).figures() == dict.fromkeys(DEVICE_KEYS, 0)


def test_occurrence_index_follows_start_order():
    # D1's rows are listed out of order; n follows start order, so 0<->0 and 1<->1 pair up
    rows = [rec(D0, 0, 20), rec(D0, 100, 120), rec(D1, 105, 120), rec(D1, 5, 20)]
    led = ledger_of(rows, everywhere(D0, D1), device_ids={0: D0, 1: D1})
    assert led.records["wait_ns"].tolist() == [5, 5, 0, 0]
    assert led.records["instance"].tolist() == [0, 1, 1, 0]


def test_exposed_outside_the_comm_records_is_refused():
    records = frame([rec(D0, 100, 200), rec(D1, 150, 200)])
    bad = segments({D0: [(50, 150)]})
    with pytest.raises(AssertionError, match="exposed"):
        build_ledger(records, segments(everywhere(D0, D1)), bad, False, {0: D0, 1: D1})


def test_no_records():
    led = build_ledger(frame([]), segments(everywhere(D0)), segments({}), True, {})
    assert led.instances == 0 and led.device(D0).figures() == dict.fromkeys(DEVICE_KEYS, 0)
    assert led.collectives == [] and led.clock_offsets_ns == {}


# ---------------------------------------------------------------- clock recovery


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clock_offsets_are_recovered(seed):
    rng = random.Random(seed)
    hosts = ["n0", "n1", "n2", "n3"]
    truth = {"n0": 0} | {h: rng.randrange(-(10**9), 10**9) for h in hosts[1:]}
    devices = [f"{h}/GPU:{g}" for h in hosts for g in range(2)]
    ids = dict(enumerate(devices))
    members = ",".join(map(str, ids))
    rows, true_wait = [], []
    t = 10**12
    for i in range(41):
        starts = [t + rng.randrange(0, 5000) for _ in devices]
        end = max(starts) + rng.randrange(1, 3000)  # ring: every member ends together
        kind = rng.choice(["all-reduce", "all-to-all", "all-gather", "reduce-scatter"])
        for d, s in zip(devices, starts):
            shift = truth[d.split("/")[0]]
            # a third of the instances end raggedly on n3 (noise the median must ignore)
            e = end + (rng.randrange(-900, 900) if (i % 3 == 0 and d.startswith("n3")) else 0)
            rows.append(rec(d, s + shift, e + shift, kind=kind, members=members, key=f"s{i}", counted=False))
            true_wait.append(min(max(max(starts) - s, 0), max(e - s, 0)))
        t = end + 10_000
    windows = {d: [(-(10**13), 10**13)] for d in devices}
    records = frame(rows)
    led = build_ledger(records, segments(windows), segments({}), False, ids)
    assert led.clock_offsets_ns == truth
    assert led.records["wait_ns"].tolist() == true_wait


def test_clock_median_is_exact_with_large_timestamps():
    # epoch-like ns (beyond float precision) and fractional means on both sides
    a0, a1, b0, b1, b2 = "a/GPU:0", "a/GPU:1", "b/GPU:0", "b/GPU:1", "b/GPU:2"
    ids = dict(enumerate([a0, a1, b0, b1, b2]))
    base = 1_700_000_000_123_456_789
    rows, diffs = [], []
    rng = random.Random(5)
    for i in range(6):
        ends = {d: base + i * 10_000 + rng.randrange(0, 7) for d in ids.values()}
        for d, e in ends.items():
            rows.append(rec(d, e - 100, e, key=f"k{i}", counted=False, members="0,1,2,3,4"))
        diffs.append(Fraction(ends[b0] + ends[b1] + ends[b2], 3) - Fraction(ends[a0] + ends[a1], 2))
    expected = round(statistics.median(diffs))
    windows = segments({d: [(base - FAR, base + FAR)] for d in ids.values()})
    led = build_ledger(frame(rows), windows, segments({}), False, ids)
    assert led.clock_offsets_ns["b"] == expected


# ---------------------------------------------------------------- brute force


def oracle(rows: list[dict], windows: dict, compute: dict, whole_job: bool, device_ids: dict) -> dict:
    """§8 from the spec's words, one record and one nanosecond at a time (no interval code)."""
    gid_dev = dict(device_ids)
    for r in rows:
        if r["global_id"] >= 0:
            gid_dev.setdefault(r["global_id"], r["device"])
    everyone = sorted(set(windows) | set(device_ids.values()) | {r["device"] for r in rows})

    # keys
    base = []
    for r in rows:
        ids = frozenset(int(x) for x in r["members"].split(",")) if r["members"] else None
        if r["key"] and ids is not None:
            base.append((("key", r["key"]), ids, r["counted"]))
        elif whole_job and r["fallback"]:
            base.append((("rule4", r["kind"], r["name"]), "all", True))
        else:
            base.append(None)
    full = [None] * len(rows)
    seen: dict = {}
    for i in sorted(range(len(rows)), key=lambda i: (rows[i]["start_ns"], rows[i]["end_ns"], i)):
        if base[i] is None:
            continue
        b, group, counted = base[i]
        slot = (rows[i]["device"], b, group)
        n = seen.get(slot, 0) if counted else None
        if counted:
            seen[slot] = n + 1
        full[i] = (b, group, n)
    keys: dict = {}
    for i, k in enumerate(full):
        if k is not None:
            keys.setdefault(k, []).append(i)
    complete = {}
    n_incomplete = n_desync = 0
    for k, idx in keys.items():
        group = k[1]
        member_devs = everyone if group == "all" else [gid_dev.get(g) for g in group]
        if len({rows[i]["kind"] for i in idx}) > 1:
            n_desync += 1
        elif None not in member_devs and sorted(rows[i]["device"] for i in idx) == sorted(member_devs):
            complete[k] = idx
        else:
            n_incomplete += 1

    # clocks
    hosts = sorted({r["clock"] for r in rows})
    delta = dict.fromkeys(hosts, 0)
    unaligned = []
    for h in hosts[1:]:
        values = []
        for idx in complete.values():
            if rows[idx[0]]["kind"] not in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
                continue
            on_h = [rows[i]["end_ns"] for i in idx if rows[i]["clock"] == h]
            on_ref = [rows[i]["end_ns"] for i in idx if rows[i]["clock"] == hosts[0]]
            if on_h and on_ref:
                values.append(Fraction(sum(on_h), len(on_h)) - Fraction(sum(on_ref), len(on_ref)))
        if values:
            delta[h] = round(statistics.median(values))
        else:
            unaligned.append(h)

    # decomposition
    wait = [0] * len(rows)
    strag: dict = {}
    for k, idx in complete.items():
        aligned = {i: rows[i]["start_ns"] - delta[rows[i]["clock"]] for i in idx}
        a = max(aligned.values())
        for i in idx:
            wait[i] = min(max(a - aligned[i], 0), max(rows[i]["end_ns"] - rows[i]["start_ns"], 0))
        last = min(idx, key=lambda i: (-aligned[i], rows[i]["device"]))
        strag[k] = (last, sum(wait[i] for i in idx if i != last))
    in_complete = {i for idx in complete.values() for i in idx}

    out = {}
    for device, win in windows.items():
        top = 2 * FAR_ORACLE

        def mask(intervals, top=top):
            m = np.zeros(top, dtype=bool)
            for s, e in intervals:
                m[max(s, 0) : max(e, 0)] = True
            return m

        w = mask(win)
        mine = [i for i, r in enumerate(rows) if r["device"] == device]
        waits = [(rows[i]["start_ns"], rows[i]["start_ns"] + wait[i]) for i in mine if i in in_complete]
        transfers = [(rows[i]["start_ns"] + wait[i], rows[i]["end_ns"]) for i in mine if i in in_complete]
        unmatched = [(rows[i]["start_ns"], rows[i]["end_ns"]) for i in mine if i not in in_complete]
        c, wm, tm, um = mask(compute.get(device, [])), mask(waits), mask(transfers), mask(unmatched)
        fig = {
            "comm_wait_ns": sum(int(mask([iv])[w].sum()) for iv in waits),
            "comm_transfer_ns": sum(int(mask([iv])[w].sum()) for iv in transfers),
            "comm_unmatched_ns": sum(int(mask([iv])[w].sum()) for iv in unmatched),
            "exposed_transfer_ns": int((tm & ~c & w).sum()),
            "exposed_unmatched_ns": int((um & ~c & ~tm & w).sum()),
            "exposed_wait_ns": int((wm & ~c & ~tm & ~um & w).sum()),
            "straggler_count": 0,
            "caused_wait_ns": 0,
        }
        for last, caused in strag.values():
            if rows[last]["device"] == device and w[rows[last]["start_ns"]]:
                fig["straggler_count"] += 1
                fig["caused_wait_ns"] += caused
        fig["_exposed_comm"] = int(((wm | tm | um) & ~c & w).sum())
        fig["_comm"] = sum(int(mask([(rows[i]["start_ns"], rows[i]["end_ns"])])[w].sum()) for i in mine)
        out[device] = fig
    return {
        "devices": out,
        "counts": (len(complete), n_incomplete, n_desync),
        "delta": delta,
        "unaligned": unaligned,
        "wait": wait,
    }


FAR_ORACLE = 300
KINDS = ["all-reduce", "all-to-all", "send-recv", "all-gather"]


@st.composite
def scenarios(draw):
    n_dev = draw(st.integers(2, 4))
    host_names = ["hb", "ha", "hc"]
    host_of = [draw(st.integers(0, 2)) for _ in range(n_dev)]
    offset = {h: draw(st.integers(-15, 15)) for h in host_names}
    devices = [f"{host_names[h]}/GPU:{d}" for d, h in enumerate(host_of)]
    hidden = draw(st.sets(st.integers(0, n_dev - 1), max_size=1))  # a device_ids entry left out
    device_ids = {g: d for g, d in enumerate(devices) if g not in hidden}
    rows = []
    for call in range(draw(st.integers(0, 7))):
        mode = draw(st.sampled_from(["seq", "count", "rule4"]))
        who = draw(st.lists(st.integers(0, n_dev - 1), min_size=2, max_size=n_dev, unique=True))
        if mode == "rule4":
            who = list(range(n_dev))
        kind = draw(st.sampled_from(KINDS))
        name = draw(st.sampled_from(["ncclA", "ncclB"]))
        members = ",".join(map(str, who)) + (",9" if draw(st.integers(0, 9)) == 0 else "")
        drop = draw(st.sampled_from([None, *who])) if draw(st.integers(0, 3)) == 0 else None
        flip = draw(st.sampled_from(who)) if draw(st.integers(0, 4)) == 0 else None
        for g in who:
            if g == drop:
                continue
            s = draw(st.integers(20, 150))
            d = draw(st.integers(0, 40))
            shift = offset[host_names[host_of[g]]]
            rows.append(
                rec(
                    devices[g],
                    s + shift,
                    s + d + shift,
                    kind="other" if g == flip else kind,
                    key={"seq": f"pg/{call}", "count": "pg", "rule4": ""}[mode],
                    counted=mode != "seq",
                    members="" if mode == "rule4" else members,
                    name=name,
                    op=f"op{call % 3}",
                    gid=g if draw(st.booleans()) else -1,
                )
            )
    for _ in range(draw(st.integers(0, 2))):  # peer copies, never matched
        g = draw(st.integers(0, n_dev - 1))
        s = draw(st.integers(5, 200))
        rows.append(rec(devices[g], s, s + draw(st.integers(0, 30)), key="", members="", fallback=False))
    windows, compute = {}, {}
    for d in devices:
        segs = draw(st.lists(st.tuples(st.integers(0, 240), st.integers(1, 80)), min_size=1, max_size=3))
        windows[d] = runs(np.isin(np.arange(FAR_ORACLE), [t for s, n in segs for t in range(s, s + n)]))
        cs = draw(st.lists(st.tuples(st.integers(0, 240), st.integers(1, 40)), max_size=3))
        compute[d] = [(s, s + n) for s, n in cs]
    if draw(st.booleans()):  # as the map step writes them: device by device in time order
        rows.sort(key=lambda r: (r["device"], r["start_ns"], r["end_ns"]))
    return rows, windows, compute, draw(st.booleans()), device_ids


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_matches_brute_force(case):
    rows, windows, compute, whole_job, device_ids = case
    records = frame(rows)
    exposed = exposed_of(records, {d: w for d, w in windows.items()}, compute)
    led = build_ledger(records, segments(windows), exposed, whole_job, device_ids)
    want = oracle(rows, windows, compute, whole_job, device_ids)
    assert (led.instances, led.incomplete, led.desynchronized) == want["counts"]
    assert led.clock_offsets_ns == want["delta"]
    assert led.unaligned == want["unaligned"]
    assert led.records["wait_ns"].tolist() == want["wait"]
    for device, fig in want["devices"].items():
        got = led.device(device).figures()
        assert got == {k: fig[k] for k in DEVICE_KEYS}, device
        assert got["comm_wait_ns"] + got["comm_transfer_ns"] + got["comm_unmatched_ns"] == fig["_comm"]
        assert got["exposed_wait_ns"] + got["exposed_transfer_ns"] + got["exposed_unmatched_ns"] == fig["_exposed_comm"]
    # the collectives rows add up to the devices' wait and transfer
    assert sum(c.wait_ns for c in led.collectives) == led.total()["comm_wait_ns"]
    assert sum(c.transfer_ns for c in led.collectives) == led.total()["comm_transfer_ns"]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**12), st.integers(1, 60), st.integers(0, 10**12), st.integers(1, 60)),
        min_size=1,
        max_size=30,
    ),
    st.integers(-(10**18), 10**18),
)
def test_median_offset_is_exact(items, base):
    # counts up to 60 make the common denominator lcm(1..60) ~ 1e25: the Python-integer path
    h_sum, h_cnt, r_sum, r_cnt = (np.array(c, dtype=np.int64) for c in zip(*items))
    values = [base + Fraction(hs, hc) - Fraction(rs, rc) for hs, hc, rs, rc in items]
    assert _median_offset(h_sum, h_cnt, r_sum, r_cnt, base) == round(statistics.median(values))


def _ledger_figures(led) -> tuple:  # type: ignore[no-untyped-def]
    return (
        [d.figures() for d in led.devices],
        led.collectives,
        (led.instances, led.incomplete, led.desynchronized),
        led.stragglers,
        led.records.to_dict("list"),
    )


@pytest.mark.parametrize("swap", [False, True])
def test_a_ledger_of_the_same_records_at_other_times_matches_as_matching_again(swap: bool) -> None:
    """A replayed timeline's ledger takes the measured one's matching where the records keep their occurrence
    order (what matches depends on that order alone); where they do not (two calls of one collective on a device
    swap places), it matches again. Either way: the ledger that matching from scratch gives."""
    rows = [
        rec(D0, 0, 50, gid=0), rec(D1, 10, 60, gid=1), rec(D0, 100, 150, gid=0), rec(D1, 120, 170, gid=1),
        rec(D0, 200, 240, gid=0, kind="all-gather", name="ncclDevKernel_AllGather"), rec(D1, 205, 260, gid=1,
        kind="all-gather", name="ncclDevKernel_AllGather"),
    ]  # fmt: skip
    windows = segments(everywhere(D0, D1))
    measured = build_ledger(frame(rows), windows, segments({}), True, {0: D0, 1: D1})
    later = frame(rows)
    later["start_ns"] += 7
    later["end_ns"] += 9
    if swap:  # D0's two all-reduces change places: their occurrences number the other way
        later.loc[[0, 2], "start_ns"] = later.loc[[2, 0], "start_ns"].to_numpy()
        later.loc[[0, 2], "end_ns"] = later.loc[[2, 0], "end_ns"].to_numpy()
    assert measured.matching is not None
    assert measured.matching.holds_for(
        later["start_ns"].to_numpy(), later["end_ns"].to_numpy(), measured.matching.device_names
    ) is (not swap)
    fresh = build_ledger(later, windows, segments({}), True, {0: D0, 1: D1})
    taken = build_ledger(later, windows, segments({}), True, {0: D0, 1: D1}, measured.matching)
    assert _ledger_figures(taken) == _ledger_figures(fresh)
    assert (taken.matching is measured.matching) is (not swap)
