"""Spec §8: the cross-rank collective ledger, as pure functions over compact comm records.

The map step over trace files reduces every communication activity to one
record (see ``RECORD_COLUMNS``); :func:`build_ledger` is the reduce. It is a
group-by over those records plus, per device, its window and its exposed-comm
segments ``E = U(comm) − U(compute)``: wait, transfer and unmatched intervals all
lie inside ``U(comm)``, so ``U(T) − U(C) = U(T) ∩ E`` and compute intervals are
never needed here.

Readings of §8 where the spec leaves room (the tests hold these):

* **Match key.** An instance is identified by (key, group, n). ``key`` holds the
  rule 1-3 parts; ``group`` is the set of member global ids (order and repeats in
  ``members`` do not matter). Records of one key that name different groups are
  different instances: send/recv pairs of one process group share the group's
  sequence counter, and only the group tells the pair 0-1 from the pair 2-3.
* **Occurrence index n** (keys with ``counted``): per device, among its records
  with the same (key, group) — for rule 4 the same (kind, kernel name) among its
  rule-4 records — numbered from 0 in order of start, then end, then input row.
  Keys without ``counted`` carry no n (their sequence number is in ``key``).
* **Group unknown.** ``key == ""``, or ``members`` empty or not a list of
  integers: rule 4 applies when ``whole_job`` and the record's ``fallback``;
  otherwise the record is unmatched and counted nowhere.
* **Rule 4 group** = every device of the inputs: the devices of ``windows``,
  of ``device_ids`` and of ``records``; key = (kind, kernel name, n).
* **Member global ids** map to devices through ``device_ids``, completed by the
  records' own (global_id, device) pairs; ``device_ids`` wins a conflict.
* **Complete**: every record of the key agrees on kind, lies on a member, every
  member id maps to a device of the inputs, and every member has exactly one
  record. **Desynchronized**: the records disagree on kind (whatever else is
  wrong). **Incomplete**: every other key — some members missing, a member id
  with no device, a member with two records, a record on a non-member.
* **Clocks.** Clock domains are the records' ``clock`` values, sorted by Python
  string order; the first is the reference. Only complete instances of kind
  all-reduce, all-gather, reduce-scatter or all-to-all with records on both
  domains count. Means, the median and the rounding (nearest, ties to even) are
  exact rational arithmetic, never floats.
* **Device order** for straggler ties is Python string order of device names
  ("h/GPU:10" sorts before "h/GPU:2").
* **Duration** ``d_r = max(end − start, 0)``.
* **Windows.** "Starts in its window" means ``start`` lies in one of the
  device's half-open window segments. ``instances`` of the straggler table are
  the complete instances whose activity on the device starts in the device's
  window, ``last_share = straggler_count / instances`` (0 without instances).
  ``caused_wait_ns`` sums the other members' unclipped ``W_r`` (as the spec
  writes it; the straggler's own ``W_r`` is 0).
* **Collectives rows**: one per (op, kind) present in the records, with the
  clipped wait and transfer of its records in complete instances.
* Records on a device that ``windows`` lacks take part in matching and clocks
  but get no figures (they have no window to clip to).
* **Instance ids** number complete instances 0.. in order of the aligned last
  arrival ``a``, then key; -1 on a record of no complete instance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction

import numpy as np
import pandas as pd

from . import intervals as iv

RECORD_COLUMNS = (
    "device",
    "clock",
    "global_id",
    "start_ns",
    "end_ns",
    "kind",
    "name",
    "op",
    "key",
    "counted",
    "members",
    "fallback",
)
SEGMENT_COLUMNS = ("device", "start_ns", "end_ns")
ALIGNING_KINDS = frozenset({"all-reduce", "all-gather", "reduce-scatter", "all-to-all"})
STATUSES = ("complete", "incomplete", "desynchronized", "unmatched")
DEVICE_KEYS: tuple[str, ...] = (  # a device's §8 figures: DeviceLedger's fields, Analysis's LEDGER_KEYS
    "comm_wait_ns",
    "comm_transfer_ns",
    "comm_unmatched_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "exposed_unmatched_ns",
    "straggler_count",
    "caused_wait_ns",
)
COMPLETE, INCOMPLETE, DESYNCHRONIZED, UNMATCHED = range(4)


@dataclass(frozen=True)
class DeviceLedger:
    """§8 per-device figures over the device's window."""

    device: str
    comm_wait_ns: int
    comm_transfer_ns: int
    comm_unmatched_ns: int
    exposed_wait_ns: int
    exposed_transfer_ns: int
    exposed_unmatched_ns: int
    straggler_count: int
    caused_wait_ns: int

    def figures(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in DEVICE_KEYS}


@dataclass(frozen=True)
class CollectiveSplit:
    """Clipped wait and transfer of one ``collectives`` row (op, kind)."""

    op: str
    kind: str
    wait_ns: int
    transfer_ns: int


@dataclass(frozen=True)
class StragglerRow:
    device: str
    straggler_count: int
    caused_wait_ns: int
    instances: int
    last_share: float


@dataclass
class Ledger:
    devices: list[DeviceLedger]
    collectives: list[CollectiveSplit]
    instances: int
    incomplete: int
    desynchronized: int
    clock_offsets_ns: dict[str, int]
    unaligned: list[str]
    stragglers: list[StragglerRow]
    # one row per input record, same index: instance (-1 = none), status, wait_ns (W_r),
    # aligned_start_ns (ŝ), straggler (the instance's last arrival)
    records: pd.DataFrame
    # how the records matched (:func:`build_ledger` takes it back for the same records at other times: a replay's)
    matching: _Matching | None = field(default=None, repr=False, compare=False)

    def total(self) -> dict[str, int]:
        return {k: int(sum(getattr(d, k) for d in self.devices)) for k in DEVICE_KEYS}

    def summary(self) -> dict:
        """The JSON ``ledger`` object of §8."""
        return {
            "instances": self.instances,
            "incomplete": self.incomplete,
            "desynchronized": self.desynchronized,
            "clock_offsets_ns": dict(self.clock_offsets_ns),
            "unaligned_hosts": list(self.unaligned),
        }

    def device(self, name: str) -> DeviceLedger:
        return next(d for d in self.devices if d.device == name)

    def straggler_table(self) -> pd.DataFrame:
        return pd.DataFrame([asdict(r) for r in self.stragglers], columns=list(StragglerRow.__dataclass_fields__))


# ---------------------------------------------------------------- helpers


def _codes(values: pd.Series | np.ndarray, order: Mapping[str, int] | None = None) -> tuple[np.ndarray, list]:
    """Integer codes of a string column (categorical or object), each distinct value handled once.

    With ``order``, codes are the positions that ``order`` gives (-1 where absent).
    """
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    names = [None if pd.isna(u) else str(u) for u in uniques]
    codes = codes.astype(np.int64)
    if order is None:
        return codes, names
    lut = np.array([order.get(n, -1) if n is not None else -1 for n in names] + [-1], dtype=np.int64)
    return lut[codes], names  # codes of -1 (NA) index the trailing -1


def _order_codes(values: pd.Series, order: Mapping[str, int]) -> np.ndarray:
    """:func:`_codes` with ``order``, the codes alone: a categorical's read off its own codes (a lookup per
    category, not a hash of every row)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        cat = values.array
        lut = np.array([order.get(str(c), -1) for c in cat.categories.tolist()] + [-1], dtype=np.int64)
        return lut[np.asarray(cat.codes)]  # -1 (missing) reads the trailing -1
    return _codes(values, order)[0]


def _distinct(values: pd.Series) -> set[str]:
    """The column's distinct values as strings, as ``pd.unique`` gives them (a missing one: "nan"); a
    categorical's read off its codes."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        cat = values.array
        seen = np.zeros(len(cat.categories) + 1, dtype=bool)
        seen[np.asarray(cat.codes)] = True  # -1 (missing) marks the last slot
        out = {str(v) for v in np.asarray(cat.categories, dtype=object)[seen[:-1]].tolist()}
        if seen[-1]:
            out.add(str(np.nan))
        return out
    return {str(d) for d in pd.unique(values)}


def _run_starts(*keys: np.ndarray) -> np.ndarray:
    """Positions where a run of equal key tuples begins, in arrays already sorted by those keys."""
    n = keys[0].size
    new = np.ones(n, dtype=bool)
    if n > 1:
        change = np.zeros(n - 1, dtype=bool)
        for k in keys:
            change |= k[1:] != k[:-1]
        new[1:] = change
    return np.flatnonzero(new)


def _parse_members(text: str | None) -> tuple[int, ...] | None:
    """Sorted distinct global ids of a members string; None when unknown or malformed."""
    if text is None or not text.strip():
        return None
    try:
        ids = {int(p) for p in text.split(",") if p.strip()}
    except ValueError:
        return None
    return tuple(sorted(ids)) if ids else None


def _median_offset(h_sum: np.ndarray, h_cnt: np.ndarray, r_sum: np.ndarray, r_cnt: np.ndarray, base: int) -> int:
    """``round(base + median_i(h_sum/h_cnt − r_sum/r_cnt))``, nearest, ties to even, exactly.

    Every value is scaled by L = lcm of the counts so that it is an integer;
    int64 where that cannot overflow, Python integers otherwise.
    """
    counts = np.unique(np.r_[h_cnt, r_cnt]).tolist()
    scale = math.lcm(*counts)
    bound = (int(np.abs(h_sum).max()) + int(np.abs(r_sum).max())) * scale
    if bound < 2**62 and scale < 2**62:
        v = h_sum * (scale // h_cnt) - r_sum * (scale // r_cnt)
    else:
        obj = np.frompyfunc(int, 1, 1)
        v = obj(h_sum) * (scale // obj(h_cnt)) - obj(r_sum) * (scale // obj(r_cnt))
    v = np.sort(v)
    m = v.size
    if m % 2:
        num, den = int(v[m // 2]), scale
    else:
        num, den = int(v[m // 2 - 1]) + int(v[m // 2]), 2 * scale
    return round(Fraction(num + base * den, den))


def _segments(frame: pd.DataFrame, devices: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(device code, start, end) sorted by device then start; rows of unknown devices dropped."""
    dev = _order_codes(frame["device"], devices)
    s = frame["start_ns"].to_numpy(dtype=np.int64)
    e = frame["end_ns"].to_numpy(dtype=np.int64)
    keep = dev >= 0
    dev, s, e = dev[keep], s[keep], e[keep]
    if np.all((dev[1:] > dev[:-1]) | ((dev[1:] == dev[:-1]) & (s[1:] >= s[:-1]))):
        return dev, s, e  # the usual case: written device by device in time order
    order = np.lexsort((s, dev))
    return dev[order], s[order], e[order]


def _slices(sorted_codes: np.ndarray, size: int) -> np.ndarray:
    """Boundaries: rows of code c are ``[b[c], b[c+1])`` in an array sorted by code."""
    return np.searchsorted(sorted_codes, np.arange(size + 1), side="left")


# ---------------------------------------------------------------- matching


@dataclass
class _Matching:
    dev: np.ndarray  # device code per record
    inst: np.ndarray  # key code per record, -1 = no key
    by_key: np.ndarray  # records with a key, sorted by (key code, device code)
    status: np.ndarray  # per record, one of COMPLETE..UNMATCHED
    key_status: np.ndarray  # per key
    kind: np.ndarray  # kind code per record
    kind_names: list
    # the records numbered into occurrences, by (device, op pair, start, end, row), and the device names the codes
    # index: a timeline whose records keep that order (a replay's, mostly) matches the same way
    occurrence_order: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    pair_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    device_names: tuple[str, ...] = ()

    def holds_for(self, start: np.ndarray, end: np.ndarray, device_names: Sequence[str]) -> bool:
        """Whether records at these times (the same records, in the same row order, over the same devices) number
        their occurrences as these did: then they match the same way (§8's occurrence index is their order)."""
        if tuple(device_names) != self.device_names or start.size != self.dev.size:
            return False
        o = self.occurrence_order
        if o.size < 2:
            return True
        s0, s1, e0, e1 = start[o[:-1]], start[o[1:]], end[o[:-1]], end[o[1:]]
        in_order = (s1 > s0) | ((s1 == s0) & ((e1 > e0) | ((e1 == e0) & (o[1:] > o[:-1]))))
        return bool(np.all(in_order | (self.pair_of[o[1:]] != self.pair_of[o[:-1]])))


def _match(
    records: pd.DataFrame, whole_job: bool, gid_device: dict[int, int], n_devices: int, dev: np.ndarray
) -> _Matching:
    n = len(records)
    start = records["start_ns"].to_numpy(dtype=np.int64)
    end = records["end_ns"].to_numpy(dtype=np.int64)
    kind, kind_names = _codes(records["kind"])
    key_code, key_names = _codes(records["key"])
    counted = records["counted"].to_numpy(dtype=bool)
    fallback = records["fallback"].to_numpy(dtype=bool)

    # groups: one per distinct set of member ids; the last one is rule 4's "all devices"
    mem_code, mem_names = _codes(records["members"])
    group_ids: dict[tuple[int, ...], int] = {}
    for text in mem_names:
        ids = _parse_members(text)
        if ids is not None:
            group_ids.setdefault(ids, len(group_ids))
    group_of_text = np.array(
        [group_ids.get(ids, -1) if (ids := _parse_members(t)) is not None else -1 for t in mem_names] + [-1],
        dtype=np.int64,
    )
    rec_group = group_of_text[mem_code]
    all_group = len(group_ids)
    group_size = np.array([len(ids) for ids in group_ids] + [n_devices], dtype=np.int64)
    group_unknown = np.array([any(g not in gid_device for g in ids) for ids in group_ids] + [False], dtype=bool)
    # (group, member device) pairs, sorted, for a vectorized membership test
    member_pairs = np.unique(
        np.array(
            [gi * n_devices + gid_device[g] for ids, gi in group_ids.items() for g in ids if g in gid_device],
            dtype=np.int64,
        )
    )

    empty_key = np.array([k is None or k == "" for k in key_names] + [True], dtype=bool)[key_code]
    keyed = ~empty_key & (rec_group >= 0)
    rule4 = ~keyed & fallback & bool(whole_job)
    candidate = keyed | rule4

    # base key: the rule 1-3 key, or (kind, kernel name) in a namespace of its own
    name_code, name_names = _codes(records["name"])
    n_keys = len(key_names)
    r4_pair = (kind + 1) * (len(name_names) + 1) + (name_code + 1)
    r4_code = pd.factorize(r4_pair[rule4])[0].astype(np.int64)
    base = np.full(n, -1, dtype=np.int64)
    base[keyed] = key_code[keyed]
    base[rule4] = n_keys + r4_code
    group = np.where(rule4, all_group, rec_group)
    counted = counted | rule4
    pair = np.full(n, -1, dtype=np.int64)
    pair[candidate] = pd.factorize(base[candidate] * (all_group + 1) + group[candidate])[0]

    # occurrence index: per (device, pair) in order of start, end, input row
    occ = np.full(n, -1, dtype=np.int64)
    idx = np.flatnonzero(candidate & counted)
    occurrence_order = np.zeros(0, dtype=np.int64)
    dev_pair = np.zeros(0, dtype=np.int64)
    if idx.size:
        dev_pair = dev * (int(pair.max()) + 1) + pair
        d, s, e = dev[idx], start[idx], end[idx]
        if np.all(
            (d[1:] > d[:-1]) | ((d[1:] == d[:-1]) & ((s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (e[1:] >= e[:-1]))))
        ):
            # records written device by device in time order (what the map step does): one stable sort
            occurrence_order = idx[np.argsort(dev_pair[idx], kind="stable")]
        else:
            occurrence_order = idx[np.lexsort((e, s, dev_pair[idx]))]
        firsts = _run_starts(dev_pair[occurrence_order])
        run = np.zeros(occurrence_order.size, dtype=np.int64)
        run[firsts] = firsts
        occ[occurrence_order] = np.arange(occurrence_order.size) - np.maximum.accumulate(run)

    inst = np.full(n, -1, dtype=np.int64)
    cand = np.flatnonzero(candidate)
    if cand.size:
        inst[cand] = pd.factorize(pair[cand] * (int(occ.max()) + 2) + (occ[cand] + 1))[0]
    n_inst = int(inst.max(initial=-1)) + 1

    key_status = np.empty(n_inst, dtype=np.int64)
    order = np.empty(0, dtype=np.int64)
    if n_inst:
        order = cand[np.argsort(inst[cand] * n_devices + dev[cand], kind="stable")]
        o_inst, o_dev = inst[order], dev[order]
        firsts = _run_starts(o_inst)
        count = np.diff(np.r_[firsts, order.size])
        kind_lo = np.minimum.reduceat(kind[order], firsts)
        kind_hi = np.maximum.reduceat(kind[order], firsts)
        same_dev = np.zeros(order.size, dtype=np.int64)
        same_dev[1:] = (o_inst[1:] == o_inst[:-1]) & (o_dev[1:] == o_dev[:-1])
        repeated = np.add.reduceat(same_dev, firsts) > 0
        o_group = group[order]
        if member_pairs.size:
            pos = np.minimum(np.searchsorted(member_pairs, o_group * n_devices + o_dev), member_pairs.size - 1)
            is_member = (o_group == all_group) | (member_pairs[pos] == o_group * n_devices + o_dev)
        else:
            is_member = o_group == all_group
        outsiders = np.add.reduceat((~is_member).astype(np.int64), firsts) > 0
        k_group = o_group[firsts]
        desync = kind_lo != kind_hi
        complete = ~desync & ~repeated & ~outsiders & ~group_unknown[k_group] & (count == group_size[k_group])
        key_status[:] = INCOMPLETE
        key_status[complete] = COMPLETE
        key_status[desync] = DESYNCHRONIZED

    status = np.full(n, UNMATCHED, dtype=np.int64)
    status[cand] = key_status[inst[cand]]
    return _Matching(
        dev=dev, inst=inst, by_key=order, status=status, key_status=key_status, kind=kind, kind_names=kind_names,
        occurrence_order=occurrence_order, pair_of=dev_pair,
    )  # fmt: skip


# ---------------------------------------------------------------- clocks


def _clock_offsets(
    records: pd.DataFrame, m: _Matching, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """Per record clock code, per clock δ, clock names (sorted), unaligned clock names."""
    names = sorted(_distinct(records["clock"])) if len(records) else []
    n_clocks = len(names)
    clock = _order_codes(records["clock"], {c: i for i, c in enumerate(names)})
    delta = np.zeros(n_clocks, dtype=np.int64)
    aligning = np.array([k in ALIGNING_KINDS for k in m.kind_names] + [False], dtype=bool)
    sel = np.flatnonzero((m.status == COMPLETE) & aligning[m.kind])
    if n_clocks < 2 or sel.size == 0:
        return clock, delta, names, names[1:]

    # per (instance, clock): count and sum of ends, relative to a per-clock base so sums stay small
    c_sel = clock[sel]
    base = np.zeros(n_clocks, dtype=np.int64)
    lowest = pd.Series(end[sel]).groupby(c_sel).min()
    base[lowest.index.to_numpy()] = lowest.to_numpy()
    code = m.inst[sel] * n_clocks + c_sel
    order = np.argsort(code, kind="stable")
    code_sorted = code[order]
    firsts = _run_starts(code_sorted)
    agg_inst, agg_clock = code_sorted[firsts] // n_clocks, code_sorted[firsts] % n_clocks
    agg_cnt = np.diff(np.r_[firsts, order.size])
    agg_sum = np.add.reduceat((end[sel] - base[c_sel])[order], firsts)
    ref_cnt = np.zeros(m.key_status.size, dtype=np.int64)
    ref_sum = np.zeros(m.key_status.size, dtype=np.int64)
    is_ref = agg_clock == 0
    ref_cnt[agg_inst[is_ref]] = agg_cnt[is_ref]
    ref_sum[agg_inst[is_ref]] = agg_sum[is_ref]

    by_clock = np.argsort(agg_clock, kind="stable")
    bounds = _slices(agg_clock[by_clock], n_clocks)
    unaligned = []
    for h in range(1, n_clocks):
        rows = by_clock[bounds[h] : bounds[h + 1]]
        rows = rows[ref_cnt[agg_inst[rows]] > 0]  # instances with members on the reference too
        if rows.size == 0:
            unaligned.append(names[h])
            continue
        i = agg_inst[rows]
        delta[h] = _median_offset(agg_sum[rows], agg_cnt[rows], ref_sum[i], ref_cnt[i], int(base[h]) - int(base[0]))
    return clock, delta, names, unaligned


def _collective_splits(
    records: pd.DataFrame, m: _Matching, clipped_wait: np.ndarray, clipped_transfer: np.ndarray
) -> list[CollectiveSplit]:
    """Clipped wait and transfer per (op, kind), grouped on integer codes."""
    if not len(records):
        return []
    op, op_names = _codes(records["op"])
    n_kinds = len(m.kind_names) + 1
    code, uniques = pd.factorize((op + 1) * n_kinds + (m.kind + 1))
    size = len(uniques)
    waits = iv.sum_by_index(clipped_wait, code, size)
    transfers = iv.sum_by_index(clipped_transfer, code, size)
    op_of = [""] + [o or "" for o in op_names]
    kind_of = [""] + [k or "" for k in m.kind_names]
    rows = [
        CollectiveSplit(op_of[u // n_kinds], kind_of[u % n_kinds], int(w), int(t))
        for u, w, t in zip(uniques.tolist(), waits, transfers)
    ]
    rows.sort(key=lambda r: (r.op, r.kind))
    return rows


# ---------------------------------------------------------------- the reduce


def build_ledger(
    records: pd.DataFrame,
    windows: pd.DataFrame,
    exposed: pd.DataFrame,
    whole_job: bool,
    device_ids: Mapping[int, str],
    matching: _Matching | None = None,
) -> Ledger:
    """Spec §8 over compact comm records; see the module docstring for the readings. ``matching``: a ledger's of the
    same records (its :attr:`Ledger.matching`) at other times, taken where their occurrences keep its order (what
    matches is decided by that order alone; a replayed timeline's records mostly keep it), else matched again."""
    missing = [c for c in RECORD_COLUMNS if c not in records.columns]
    if missing:
        raise ValueError(f"ledger records lack columns {missing}")
    for column in ("device", "clock", "start_ns", "end_ns"):
        if records[column].isna().any():
            raise ValueError(f"ledger records have no {column} on some rows")
    n = len(records)
    start = records["start_ns"].to_numpy(dtype=np.int64)
    end = records["end_ns"].to_numpy(dtype=np.int64)

    device_names = sorted(
        _distinct(windows["device"])
        | {str(d) for d in device_ids.values()}
        | (_distinct(records["device"]) if n else set())
    )
    dev_order = {d: i for i, d in enumerate(device_names)}
    n_dev = len(device_names)
    if matching is not None and matching.holds_for(start, end, device_names):
        m = matching
    else:
        dev = _order_codes(records["device"], dev_order)

        # member ids -> device codes: the caller's map, completed by the records' own ids
        gid_device = {int(g): dev_order[str(d)] for g, d in device_ids.items()}
        gids = records["global_id"].to_numpy(dtype=np.int64)
        known = gids >= 0
        if known.any():
            pairs = np.unique(gids[known] * n_dev + dev[known])
            for p in pairs.tolist():
                gid_device.setdefault(p // n_dev, p % n_dev)

        m = _match(records, whole_job, gid_device, n_dev, dev)
        m.device_names = tuple(device_names)
    dev = m.dev
    clock, delta, clock_names, unaligned = _clock_offsets(records, m, end)
    aligned = start - delta[clock] if n else start.copy()

    # decomposition of complete instances: a = last aligned arrival, W_r = min(max(a − ŝ, 0), d)
    duration = np.maximum(end - start, 0)
    wait = np.zeros(n, dtype=np.int64)
    straggler = np.zeros(n, dtype=bool)
    instance = np.full(n, -1, dtype=np.int64)
    # complete records, sorted by (instance, device name): no sort needed, _match made that order
    comp = m.by_key[m.status[m.by_key] == COMPLETE]
    strag_rec = np.empty(0, dtype=np.int64)
    if comp.size:
        firsts = _run_starts(m.inst[comp])
        member = np.repeat(np.arange(firsts.size), np.diff(np.r_[firsts, comp.size]))
        a = np.maximum.reduceat(aligned[comp], firsts)[member]
        # the straggler: the largest ŝ, ties: the first device name (the first such row of its instance)
        last = np.flatnonzero(aligned[comp] == a)
        strag_rec = comp[last[_run_starts(member[last])]]
        wait[comp] = np.minimum(np.maximum(a - aligned[comp], 0), duration[comp])
        straggler[strag_rec] = True
        numbering = np.full(m.key_status.size, -1, dtype=np.int64)
        by_arrival = np.lexsort((m.inst[strag_rec], aligned[strag_rec]))
        numbering[m.inst[strag_rec][by_arrival]] = np.arange(strag_rec.size)
        instance[comp] = numbering[m.inst[comp]]

    # per device over its window
    w_dev, w_s, w_e = _segments(windows, dev_order)
    e_dev, e_s, e_e = _segments(exposed, dev_order)
    w_bounds, e_bounds = _slices(w_dev, n_dev), _slices(e_dev, n_dev)
    by_dev = np.argsort(dev, kind="stable")
    r_bounds = _slices(dev[by_dev], n_dev)
    in_window = np.zeros(n, dtype=bool)
    clipped_wait = np.zeros(n, dtype=np.int64)
    clipped_transfer = np.zeros(n, dtype=np.int64)
    is_complete = m.status == COMPLETE
    window_devices = _distinct(windows["device"])
    figures: dict[int, dict[str, int]] = {}
    for d in range(n_dev):
        if device_names[d] not in window_devices:
            continue
        ws, we = iv.union(w_s[w_bounds[d] : w_bounds[d + 1]], w_e[w_bounds[d] : w_bounds[d + 1]])
        es, ee = iv.union(e_s[e_bounds[d] : e_bounds[d + 1]], e_e[e_bounds[d] : e_bounds[d + 1]])
        rows = by_dev[r_bounds[d] : r_bounds[d + 1]]
        s, e, w, c = start[rows], np.maximum(end[rows], start[rows]), wait[rows], is_complete[rows]
        in_window[rows] = iv.inside(s, ws, we)
        wait_s, wait_e, wait_i = iv.clip(s[c], s[c] + w[c], ws, we)
        tran_s, tran_e, tran_i = iv.clip(s[c] + w[c], e[c], ws, we)
        unm_s, unm_e, _ = iv.clip(s[~c], e[~c], ws, we)
        rows_c = rows[c]
        clipped_wait[rows_c] = iv.sum_by_index(wait_e - wait_s, wait_i, rows_c.size)
        clipped_transfer[rows_c] = iv.sum_by_index(tran_e - tran_s, tran_i, rows_c.size)
        transfer_u = iv.union(tran_s, tran_e)
        tu = iv.union(np.r_[tran_s, unm_s], np.r_[tran_e, unm_e])
        every = iv.union(np.r_[tu[0], wait_s], np.r_[tu[1], wait_e])
        on_transfer = iv.overlap_length(*transfer_u, es, ee)
        on_tu = iv.overlap_length(*tu, es, ee)
        on_every = iv.overlap_length(*every, es, ee)
        e_len = iv.length(es, ee)
        if on_every != e_len:
            raise AssertionError(
                f"{device_names[d]}: exposed comm ({e_len} ns) is not inside the clipped comm records "
                f"({on_every} ns of it is): records and exposed segments disagree"
            )
        figures[d] = {
            "comm_wait_ns": int(np.sum(wait_e - wait_s)),
            "comm_transfer_ns": int(np.sum(tran_e - tran_s)),
            "comm_unmatched_ns": int(np.sum(unm_e - unm_s)),
            "exposed_wait_ns": on_every - on_tu,
            "exposed_transfer_ns": on_transfer,
            "exposed_unmatched_ns": on_tu - on_transfer,
        }

    # stragglers: instances whose straggler activity starts in the straggler's window
    counted_strag = strag_rec[in_window[strag_rec]]
    straggler_count = np.bincount(dev[counted_strag], minlength=n_dev)
    caused_per_inst = np.zeros(m.key_status.size, dtype=np.int64)
    if comp.size:
        caused_per_inst = iv.sum_by_index(wait[comp], m.inst[comp], m.key_status.size)
    caused = iv.sum_by_index(caused_per_inst[m.inst[counted_strag]], dev[counted_strag], n_dev)
    took_part = np.bincount(dev[comp[in_window[comp]]], minlength=n_dev)

    devices_out, stragglers_out = [], []
    for d in range(n_dev):
        if d not in figures:
            continue
        name = device_names[d]
        devices_out.append(
            DeviceLedger(
                device=name, straggler_count=int(straggler_count[d]), caused_wait_ns=int(caused[d]), **figures[d]
            )
        )
        share = float(straggler_count[d] / took_part[d]) if took_part[d] else 0.0
        stragglers_out.append(StragglerRow(name, int(straggler_count[d]), int(caused[d]), int(took_part[d]), share))
    stragglers_out.sort(key=lambda r: (-r.caused_wait_ns, -r.straggler_count, r.device))

    collectives = _collective_splits(records, m, clipped_wait, clipped_transfer)

    per_record = pd.DataFrame(
        {
            "instance": instance,
            "status": pd.Categorical.from_codes(m.status, categories=pd.Index(list(STATUSES))),
            "wait_ns": wait,
            "aligned_start_ns": aligned,
            "straggler": straggler,
        },
        index=records.index,
    )
    ks = m.key_status
    return Ledger(
        devices=devices_out,
        collectives=collectives,
        instances=int(np.sum(ks == COMPLETE)),
        incomplete=int(np.sum(ks == INCOMPLETE)),
        desynchronized=int(np.sum(ks == DESYNCHRONIZED)),
        clock_offsets_ns={c: int(x) for c, x in zip(clock_names, delta)},
        unaligned=unaligned,
        stragglers=stragglers_out,
        records=per_record,
        matching=m,
    )
