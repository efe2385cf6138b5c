"""Opportunities (spec §6 and the insight issue): what to attack first, how much it can save, and how.

Collectives: exposed communication per (op, kind), bounded by the independent
compute the HLO dependency graph allows. Device signals: launch gaps,
device-to-host syncs, exposed host copies, many small GEMMs. Each carries the
evidence to find it in a trace viewer and a concrete remedy.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.analysis import SIGNIFICANT_SAVING, Collective, Opportunity
from ..core.events import lookup
from ..core.hardware import fabric_text
from ..core.metrics import MEMCPY, DeviceTimeline, WindowMeasure
from ..core.names import said
from ..core.sections import Hardware
from ..core.trace import GPU, TPU
from ..core.vocabulary import searches, vocabulary
from .remedies import EXPERT_KINDS, Situation, choose, devices_kind, for_collective, role_of
from .stack import Stack
from .waiting import OpStraggler, bound_by, caused_wait_by_op, why_exposed

SMALL_GAP_NS = 20_000  # gaps shorter than this between kernels are launch overhead, not waiting
SMALL_COPY_BYTES = 64 * 1024  # a DtoH copy this small is a sync of counts/flags, not data movement
SMALL_COPY_NS = 10_000  # ... when its bytes are unknown
SMALL_GEMM_NS = 15_000
MANY_GEMMS_PER_STEP = 32


def name_flags(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is a GEMM, is a grouped GEMM) of each distinct kernel name, each name matched once."""
    vocab = vocabulary()
    names = [str(n) for n in values.tolist()]
    gemm = np.array([*searches(vocab.gemm, names), False], dtype=bool)
    grouped = np.array([*searches(vocab.grouped_gemm, names), False], dtype=bool)
    return gemm, grouped  # a trailing False for the code -1 (a missing name)


def small_gemms(duration: np.ndarray, is_gemm: np.ndarray, is_grouped: np.ndarray, steps: int) -> np.ndarray | None:
    """The small-GEMM rule over one GPU device's activities (``duration`` each, whether a GEMM, a grouped one):
    where it holds (``MANY_GEMMS_PER_STEP`` or more GEMMs per step, their median under ``SMALL_GEMM_NS``, no
    grouped GEMM on the device), which activities are its small GEMMs (plain GEMMs under ``SMALL_GEMM_NS``);
    None where it does not hold. The opportunity and the projection's ``opportunity=N`` select by it."""
    plain = is_gemm & ~is_grouped
    count = int(plain.sum())
    if count / max(steps, 1) < MANY_GEMMS_PER_STEP or is_grouped.any():
        return None
    if float(np.median(duration[plain])) >= SMALL_GEMM_NS:
        return None
    return plain & (duration < SMALL_GEMM_NS)


def device_signals(
    timeline: DeviceTimeline, measured: WindowMeasure, steps: int, device: str, kind: str = GPU
) -> list[dict]:
    """Non-collective opportunities of one device over its window (one dict per signal found).

    ``measured``: the device's figures over its window, with the pieces of activity inside it
    (one per row and window segment) and the unions of all pieces and of the compute pieces.
    """
    out: list[dict] = []
    s, e, rows = measured.pieces
    if not s.size:
        return out
    dur = e - s
    is_gpu = kind == GPU
    # launch-bound: many short gaps between busy segments
    if is_gpu:
        b_s, b_e = measured.busy_union
        gaps = b_s[1:] - b_e[:-1]
        small = gaps[(gaps > 0) & (gaps < SMALL_GAP_NS)]
        if small.size:
            out.append(
                {
                    "type": "launch-gaps",
                    "device": device,
                    "time_ns": int(small.sum()),
                    "saving_ns": int(small.sum()),
                    "count": int(small.size),
                    "detail": f"{small.size} gaps under {SMALL_GAP_NS // 1000} µs between kernels",
                }
            )
    # each piece's row of the event table: columns read by a gather of the table's codes, only where needed
    table_rows = timeline.positions[rows]
    # copies: device-to-host syncs and exposed host copies (none where the column holds neither kind)
    kind_codes, kinds = timeline.columns.codes("copy_kind")
    to_host, to_device = kinds == "DtoH", kinds == "HtoD"
    kind_of = kind_codes[table_rows] if to_host.any() or to_device.any() else None
    host = lookup(kind_of, to_host | to_device, False) if kind_of is not None else np.zeros(0, dtype=bool)
    if kind_of is not None and host.any():
        k_s, k_e = measured.compute_union
        h_s, h_e, h_dur = s[host], e[host], dur[host]
        exposed = h_dur - iv.overlap_each(h_s, h_e, k_s, k_e)
        nbytes = timeline.columns.numbers("bytes", np.float64)[table_rows[host]]
        small_copy = np.where(np.isnan(nbytes), h_dur < SMALL_COPY_NS, nbytes < SMALL_COPY_BYTES)
        syncs = to_host[kind_of[host]] & small_copy  # a host copy's kind is known: its code indexes the kinds
        if syncs.any():
            out.append(
                {
                    "type": "d2h-sync",
                    "device": device,
                    "time_ns": int(h_dur[syncs].sum()),
                    "saving_ns": int(exposed[syncs].sum()),
                    "count": int(syncs.sum()),
                    "detail": f"{int(syncs.sum())} small device-to-host copies"
                    f" ({int(syncs.sum()) / max(steps, 1):.1f} per step)",
                }
            )
        bulk = ~syncs
        if bulk.any() and exposed[bulk].sum() > 0:
            known = nbytes[bulk][~np.isnan(nbytes[bulk])]
            # overlapping the copies with compute hides at most the compute that runs beside no copy yet
            c_s, c_e = iv.union(h_s[bulk], h_e[bulk])
            free_compute = iv.length(k_s, k_e) - iv.overlap_length(c_s, c_e, k_s, k_e)
            exposed_ns = int(exposed[bulk].sum())
            out.append(
                {
                    "type": "host-copies",
                    "device": device,
                    "time_ns": int(h_dur[bulk].sum()),
                    "exposed_ns": exposed_ns,
                    "saving_ns": min(exposed_ns, int(free_compute)),
                    "compute_ns": int(free_compute),
                    "bound_from": "compute",
                    "count": int(bulk.sum()),
                    "detail": f"{int(bulk.sum())} host<->device copies"
                    + (f", {known.sum() / 2**20:,.1f} MiB" if known.size else ""),
                }
            )
    out.extend(_local_collectives(timeline, measured, steps, device, kind))
    # many small GEMMs instead of one grouped GEMM
    if is_gpu:
        name_codes, names = timeline.columns.codes("name")
        gemm_of, grouped_of = timeline.columns.derived("name_flags", lambda: name_flags(names))
        codes = name_codes[table_rows]
        is_gemm, is_grouped = gemm_of[codes], grouped_of[codes]
        small = small_gemms(dur, is_gemm, is_grouped, steps)
        if small is not None:
            gemm_dur = dur[is_gemm & ~is_grouped]
            per_step = gemm_dur.size / max(steps, 1)
            out.append(
                {
                    "type": "small-gemms",
                    "device": device,
                    "time_ns": int(gemm_dur.sum()),
                    "saving_ns": int(dur[small].sum() // 2),
                    "count": int(gemm_dur.size),
                    "detail": f"{per_step:.0f} GEMM kernels per step, median {np.median(gemm_dur) / 1000:.1f} µs",
                }
            )
    return out


def _local_collectives(
    timeline: DeviceTimeline, measured: WindowMeasure, steps: int, device: str, kind: str = GPU
) -> list[dict]:
    """Collectives whose group is the device itself (``core.classify``: bucket memcpy, kind kept): copies
    inside the device, of which the part no compute hides is what skipping them could save."""
    s, e, rows = measured.pieces
    local = timeline.code[rows] == MEMCPY  # the bucket's code: a copy
    if not local.any():
        return []
    kind_codes, _ = timeline.columns.codes("kind")
    local[local] = lookup(kind_codes[timeline.positions[rows[local]]], timeline.columns.nonempty("kind"), False)
    if not local.any():
        return []
    k_s, k_e = measured.compute_union
    l_s, l_e = s[local], e[local]
    dur = l_e - l_s
    exposed = dur - iv.overlap_each(l_s, l_e, k_s, k_e)
    name_codes, names = timeline.columns.codes("name")
    used, counts = np.unique(name_codes[timeline.positions[rows[local]]], return_counts=True)
    ops = [str(names[c]) if c >= 0 else "?" for c in used[np.argsort(-counts, kind="stable")][:3]]
    count = int(local.sum())
    unit = "chip" if kind == TPU else "device"
    return [
        {
            "type": "local-collectives",
            "device": device,
            "time_ns": int(dur.sum()),
            "saving_ns": int(exposed.sum()),
            "count": count,
            "detail": f"{count} collectives whose group is this {unit} alone ({', '.join(ops)}"
            f"{', ...' if used.size > 3 else ''}), {dur.sum() / max(steps, 1) / 1e6:.3f} ms per step: copies "
            f"inside the {unit}, no byte crosses a link",
        }
    ]


def host_gap_signal(
    device: str, module_starts: np.ndarray, module_ends: np.ndarray, win_s: np.ndarray, win_e: np.ndarray, steps: int
) -> list[dict]:
    """A TPU runs one XLA program per step: its idle time between two executions of its programs (the
    ``XLA Modules`` line) inside its window is the host dispatching the next one late. One signal per
    device where there is any (for TPU chips: the caller asks; GPU launch gaps are :func:`device_signals`'
    own)."""
    if module_starts.size < 2:
        return []
    s, e = iv.union(module_starts, module_ends)
    gap_s, gap_e = e[:-1], s[1:]  # between consecutive executions
    gaps = iv.overlap_each(gap_s, gap_e, win_s, win_e)
    gaps = gaps[gaps > 0]
    if not gaps.size:
        return []
    return [
        {
            "type": "host-gaps",
            "device": device,
            "time_ns": int(gaps.sum()),
            "saving_ns": int(gaps.sum()),
            "count": int(gaps.size),
            "detail": f"{gaps.size} gaps between program executions, {gaps.sum() / max(steps, 1) / 1e6:.3f} ms per "
            "step: the chip waits for the host to dispatch the next step",
        }
    ]


SIGNAL_TITLES = {
    "host-gaps": "host-bound: the chip idles between its step programs",
    "launch-gaps": "launch-bound: the GPU idles in short gaps between kernels",
    "d2h-sync": "device-to-host syncs inside the step",
    "host-copies": "exposed host<->device copies",
    "small-gemms": "many small GEMMs instead of one grouped GEMM",
    "local-collectives": "collectives over a group of one device: local copies, not communication",
}


def signal_title(kind: str, stack: Stack, devices: str = "gpu", hideable: float | None = None) -> str:
    if kind == "host-copies" and hideable is not None and hideable < 1:
        # more copies than compute to hide them under: overlap cannot take them off the step
        return f"{SIGNAL_TITLES[kind]}, more than the compute beside them could hide"
    if kind == "small-gemms" and stack.uses("moe"):
        return "many small expert GEMMs instead of one grouped GEMM"
    if kind == "local-collectives" and devices == "tpu":
        return SIGNAL_TITLES[kind].replace("device", "chip")
    return SIGNAL_TITLES[kind]


def signal_opportunities(signals: list[dict], stack: Stack) -> list[Opportunity]:
    """One opportunity per signal type: summed over devices, bounded by the worst device."""
    out: list[Opportunity] = []
    frame = pd.DataFrame(signals)
    if frame.empty:
        return out
    for kind, g in frame.groupby("type", sort=False):
        # a signal's exposed time, and what hiding it could save where that is less (host copies: the compute
        # beside them, "compute_ns"); the worst device is the one whose saving is the largest
        exposed = g["exposed_ns"].fillna(g["saving_ns"]) if "exposed_ns" in g else g["saving_ns"]
        worst_at = int(np.argmax(g["saving_ns"].to_numpy()))
        worst = g.iloc[worst_at]
        if int(exposed.max()) <= 0:
            continue
        on = devices_kind(g["device"].unique(), stack.device_kinds)
        found = worst.get("compute_ns")
        compute = float(found) if found is not None and not pd.isna(found) else None
        hideable = None
        if compute is not None:
            hideable = min(compute / max(float(exposed.iloc[worst_at]), 1.0), 1.0)
        situation = Situation(str(kind), devices=on, hideable_share=hideable)
        fix = choose(situation, stack)
        evidence = {
            "count": int(g["count"].sum()),
            "devices": int(g["device"].nunique()),
            "total_ns": int(g["time_ns"].sum()),
            "worst_device": str(worst["device"]),
            "detail": str(worst["detail"]),
        }
        if hideable is not None:  # what the worst device has to hide its copies under, beside their exposed time
            evidence.update(exposed_ns=int(exposed.iloc[worst_at]), compute_to_hide_under_ns=int(compute or 0))
        from_compute = hideable is not None and str(worst.get("bound_from")) == "compute"
        out.append(
            Opportunity(
                title=signal_title(str(kind), stack, on, hideable),
                kind=str(kind),
                name=str(kind),
                link=None,
                exposed_ns=int(exposed.sum()),
                saving_bound_ns=int(worst["saving_ns"]),
                bound_from="compute" if from_compute else "exposed",
                evidence=evidence,
                remedy=fix.said(stack),
                remedy_id=fix.id,
                remedy_family=fix.family,
                remedy_checked=fix.checked(situation, stack),
            )
        )
    return out


ROLES = {"ep-dispatch": "EP dispatch", "ep-combine": "EP combine"}


def role(kind: str, stack: Stack) -> str:
    """What an exposed collective is, in the words the evidence allows (expert only where MoE is shown)."""
    if kind == "all-to-all" and stack.uses("moe"):
        return "expert all-to-all"
    return ROLES.get(kind, kind)


def comm_opportunities(
    comm: pd.DataFrame,
    collectives: list[Collective],
    independent: pd.DataFrame,
    stack: Stack,
    stragglers: dict[tuple[str, str], OpStraggler] | None = None,
) -> list[Opportunity]:
    """Spec §6: exposed comm grouped by (op, kind), ranked by what hiding it could save.

    ``comm``: per (op ``key``, kind, device) sums (``pipeline.per_file.COMM_AGG_COLUMNS``).
    ``exposed_ns`` sums over devices. Per device the bound is its exposed time,
    capped by the compute the HLO graph shows to be independent of the op
    (``independent``: device, key, independent_ns) where the HLO is known;
    ``saving_bound_ns`` is the largest per-device bound, since devices run side
    by side and a step shrinks by at most what its worst device loses.
    """
    exposed = comm[comm["exposed_ns"] > 0]
    if exposed.empty:
        return []
    per_device = exposed.groupby(["key", "kind", "device"], sort=False, observed=True)["exposed_ns"].sum().reset_index()
    if not independent.empty:
        per_device = per_device.merge(independent, on=["key", "device"], how="left")
    else:
        per_device["independent_ns"] = np.nan
    known = per_device["independent_ns"].notna()
    per_device["bound_ns"] = np.where(
        known, np.minimum(per_device["exposed_ns"], per_device["independent_ns"].fillna(0)), per_device["exposed_ns"]
    )
    by_op = {(c.name, c.kind): c for c in collectives}
    keys = per_device["key"].to_numpy(dtype=object)
    kinds = per_device["kind"].to_numpy(dtype=object)
    devices = per_device["device"].to_numpy(dtype=object)
    bound = per_device["bound_ns"].to_numpy()
    independent_ns = per_device["independent_ns"].to_numpy(dtype=np.float64)
    # one group per (op, kind) in order of first appearance; its worst device is its first row of the
    # largest bound (rows in table order)
    key_codes, _ = pd.factorize(keys)
    kind_codes, _ = pd.factorize(kinds)
    group, _ = pd.factorize(key_codes * (int(kind_codes.max(initial=0)) + 1) + kind_codes)
    n_groups = int(group.max(initial=-1)) + 1
    by_worst = np.lexsort((np.arange(len(group)), -bound, group))
    firsts = np.searchsorted(group[by_worst], np.arange(n_groups))
    worst_rows = by_worst[firsts]
    members = np.bincount(group, minlength=n_groups)
    all_known = np.bincount(group, weights=~np.isnan(independent_ns), minlength=n_groups) == members
    out = []
    for g in range(n_groups):
        row = int(worst_rows[g])
        key, kind = keys[row], kinds[row]
        c = by_op[(str(key), str(kind))]
        from_hlo = bool(all_known[g])
        worst = {"device": devices[row], "bound_ns": bound[row], "independent_ns": independent_ns[row]}
        evidence: dict = {
            "count": c.count,
            "devices": int(members[g]),
            "total_ns": c.total_ns,
            "worst_device": str(worst["device"]),
            "exposed_share_of_its_time": round(c.exposed_ns / max(c.total_ns, 1), 4),
        }
        if from_hlo:
            evidence["independent_compute_ns"] = int(worst["independent_ns"])
        if c.bus_bandwidth_gbps is not None:
            evidence["bus_bandwidth_gbps"] = c.bus_bandwidth_gbps
        on = devices_kind(devices[group == g], stack.device_kinds)
        title = f"exposed {role(str(kind), stack)} {said(str(key))}"  # the op as one says it (its name: ``name``)
        why = why_exposed(c, (stragglers or {}).get((str(key), str(kind))))
        note = ""
        if why is not None:
            # the ledger says what binds it: waiting for the last rank, or moving bytes
            bound_kind, found, note = why
            evidence.update(found)
            if on == "cpu" and bound_kind == "transfer":
                note = ""  # a bus bandwidth between threads of one host says nothing of a fabric
            title += " (waiting for the last rank)" if bound_kind == "wait" else " (moving bytes)"
        situation = Situation(
            kind=str(kind),
            role=role_of(str(kind), stack),
            link=c.link,
            devices=on,
            bound=bound_by(c) or "unknown",
            hidden_share=1 - c.exposed_ns / c.total_ns if c.total_ns > 0 else None,
        )
        fix, remedy = for_collective(situation, stack, c.bandwidth_verdict)
        out.append(
            Opportunity(
                title=title,
                kind=str(kind),
                name=str(key),
                link=c.link,
                exposed_ns=c.exposed_ns,
                saving_bound_ns=int(worst["bound_ns"]),
                bound_from="hlo" if from_hlo else "exposed",
                evidence=evidence,
                remedy=f"{remedy} {note}" if note else remedy,
                remedy_id=fix.id,
                remedy_family=fix.family,
                remedy_checked=fix.checked(situation, stack),
            )
        )
    return out


DOMINANT_SHARE = 0.3


def expert_exchange_opportunity(
    comm: pd.DataFrame, hide: list[Opportunity], stack: Stack, collectives: list[Collective] | None = None
) -> list[Opportunity]:
    """When the all-to-all exchange (expert dispatch/combine where the trace shows MoE) dominates
    communication, hiding it is rarely enough; moving fewer bytes is the lever."""
    if comm.empty:
        return []
    a2a = comm[comm["kind"].isin(EXPERT_KINDS)]
    total = float(comm["total_ns"].sum())
    if a2a.empty or total <= 0 or a2a["total_ns"].sum() / total < DOMINANT_SHARE:
        return []
    per_device = a2a.groupby("device", observed=True)["exposed_ns"].sum()
    if per_device.max() <= 0:
        return []
    worst = str(per_device.idxmax())
    ops = a2a.groupby(["key", "kind"], observed=True)["total_ns"].sum().sort_values(ascending=False)
    hide_bound = sum(o.saving_bound_ns for o in hide if o.kind in EXPERT_KINDS and o.bound_from == "hlo")
    ib_max = a2a["ib_max"].to_numpy(dtype=np.float64)
    link = "ib" if (ib_max > 0).any() else ("nvlink" if (ib_max >= 0).any() else "unknown")
    share = float(a2a["total_ns"].sum()) / total
    moe = stack.uses("moe")
    what = "expert all-to-all" if moe else "all-to-all"
    if stack.hlo:
        # a sum of the op-level bounds over the capture (their worst devices'): said so, not per step
        bound = f"the HLO leaves {hide_bound / 1e6:.3f} ms of independent compute over the capture to hide it behind"
    else:
        bound = "the trace has no HLO, so how much compute could hide it is not known"
    # where the ledger ran: an exchange that is mostly waiting is not helped by moving fewer bytes
    exchange = [c for c in collectives or () if c.kind in EXPERT_KINDS and c.wait_ns is not None]
    wait = sum(c.wait_ns or 0 for c in exchange)
    transfer = sum(c.transfer_ns or 0 for c in exchange)
    ledger: dict = {}
    waiting = False
    exchange_bound = "unknown"
    if wait + transfer > 0:
        ledger["wait_share"] = round(wait / (wait + transfer), 4)
        if wait / (wait + transfer) > 0.5:
            exchange_bound, waiting = "wait", True
            bound += f"; {wait / (wait + transfer):.0%} of it is waiting for the last rank, not moving bytes"
        elif transfer / (wait + transfer) > 0.5:
            exchange_bound = "transfer"
    exposed = int(a2a["exposed_ns"].sum())
    hidden = 1 - exposed / float(a2a["total_ns"].sum())
    situation = Situation(
        kind="expert-exchange",
        role=role_of("expert-exchange", stack),
        link=link,
        devices=devices_kind(a2a.loc[a2a["exposed_ns"] > 0, "device"].unique(), stack.device_kinds),
        bound=exchange_bound,
        hidden_share=hidden,
    )
    fix = choose(situation, stack)
    return [
        Opportunity(
            title=(
                "expert dispatch/combine exchange dominates communication"
                if moe
                else "all-to-all exchange dominates communication"
            )
            + (", mostly waiting for the last rank" if waiting else ""),
            kind="expert-exchange",
            name=", ".join(str(k) for k, _ in ops.index[:6]),
            link=link,
            exposed_ns=exposed,
            saving_bound_ns=int(per_device.max()),
            bound_from="exposed",
            evidence={
                "count": int(a2a["count"].sum()),
                "devices": int(a2a["device"].nunique()),
                "total_ns": int(a2a["total_ns"].sum()),
                "worst_device": worst,
                "share_of_comm": round(share, 4),
                "hidden_share": round(hidden, 4),
                **({"hide_bound_from_hlo_ns": int(hide_bound)} if stack.hlo else {}),
                **ledger,
                "detail": f"{share:.0%} of communication time is {what}, {hidden:.0%} of it hidden under compute;"
                f" {bound}",
            },
            remedy=fix.said(stack),
            remedy_id=fix.id,
            remedy_family=fix.family,
            remedy_checked=fix.checked(situation, stack),
        )
    ]


# among opportunities of equal bound, the one that counts more of the job's time first: merging
# (:func:`merge_same_time`) keeps the first of those that count the same time
_BREADTH = {"expert-exchange": 0, "straggler": 1}


def rank(opportunities: list[Opportunity]) -> list[Opportunity]:
    """The order opportunities are merged in: the largest saving bound first."""
    return sorted(opportunities, key=lambda o: (-o.saving_bound_ns, _BREADTH.get(o.kind, 2), o.title))


PROJECTED_SIGNIFICANT = SIGNIFICANT_SAVING  # of the mean step: a projected saving below it ranks as none (replay noise)


def rank_by_projection(opportunities: list[Opportunity], step_ns: float = 0.0, steps: int = 1) -> list[Opportunity]:
    """The order opportunities are shown in: the §9 projected saving first (what taking their activities
    away buys the step; under 1% of the mean step ``step_ns`` counts as 0), then :func:`rank`'s order.
    An opportunity no replay can take away (not activities: a TPU's host gaps between programs, neither
    projected nor bounded) counts by its §6 bound per step (``steps`` in the job): else a 15 µs copy the
    replay can remove outranks 876 µs of host-bound idle per step (the one-chip TPU demo). Without the floor
    a 2 µs host copy would outrank a 9 ms exchange whose removal the replay says buys nothing either (the
    real DLRM: its step waits on the hosts)."""
    order = {id(o): i for i, o in enumerate(rank(opportunities))}
    floor = PROJECTED_SIGNIFICANT * step_ns

    def projected(o: Opportunity) -> int:
        s = o.projected_saving_ns
        if s is None and o.projected_saving_max_ns is None:
            s = o.saving_bound_ns // max(steps, 1)
        s = s or 0
        return s if s >= floor else 0

    return sorted(opportunities, key=lambda o: (-projected(o), order[id(o)]))


SAME_TIME_SHARE = 0.5  # more than half of an opportunity's time counted by one ranked above it: one finding


def counted_time(o: Opportunity, comm: pd.DataFrame, matched: pd.DataFrame | None) -> dict[tuple[str, str], float]:
    """The time an opportunity counts, per (op, kind): its own exposed time for one op, the exposed time
    of every op of the exchange it names, the waiting a straggler caused in each op; none for a device
    signal (launch gaps, copies, GEMMs count time of no collective)."""
    if o.kind == "expert-exchange":
        a2a = comm[comm["kind"].isin(EXPERT_KINDS) & (comm["exposed_ns"] > 0)]
        sums = a2a.groupby(["key", "kind"], observed=True)["exposed_ns"].sum().reset_index()
        return {(str(k), str(t)): float(v) for k, t, v in sums[["key", "kind", "exposed_ns"]].itertuples(index=False)}
    if o.kind == "straggler":
        return caused_wait_by_op(matched, o.name) if matched is not None else {}
    if o.link is None:  # a device signal
        return {}
    return {(o.name, o.kind): float(o.exposed_ns)}


def _summary(o: Opportunity) -> dict:
    """What an opportunity merged into another keeps: its identity, figures, remedy and evidence."""
    return {
        "title": o.title,
        "kind": o.kind,
        "name": o.name,
        "exposed_ns": o.exposed_ns,
        "saving_bound_ns": o.saving_bound_ns,
        "bound_from": o.bound_from,
        "remedy_id": o.remedy_id,
        "remedy_family": o.remedy_family,
        "evidence": dict(o.evidence),
    }


def _straggler_note(merged: list[Opportunity]) -> str:
    """The sentence that names the device a merged-in finding shows the others waiting for."""
    for m in merged:
        if m.kind == "straggler":
            return f"{m.title}."
    for m in merged:
        if "straggler" in m.evidence:
            share = float(m.evidence.get("straggler_share", 0))
            return f"In {m.name}, {m.evidence['straggler']} arrives last in {share:.0%} of the calls."
    return ""


def merge_same_time(
    ranked: list[Opportunity], comm: pd.DataFrame, matched: pd.DataFrame | None = None
) -> list[Opportunity]:
    """One finding per piece of time: an opportunity more than half of whose time one ranked above it
    already counts (an op inside the exchange that names it, a straggler whose caused waiting is that
    exchange's waiting) is dropped from the list and kept, with its evidence, in the first one's
    ``evidence.same_time_as``. ``ranked``: in :func:`rank` order (the first of a group is kept)."""
    times = [counted_time(o, comm, matched) for o in ranked]
    kept: list[int] = []
    kept_with: dict[tuple[str, str], list[int]] = {}  # per (op, kind): the kept ones that count its time
    merged: dict[int, list[Opportunity]] = {}
    for i, time in enumerate(times):
        total = sum(time.values())
        # only a kept one that counts some of the same ops can count more than half of this one's time (the
        # first such in rank order takes it): hundreds of findings are not each held against every one kept
        into = None
        if total > 0:
            into = next(
                (
                    k
                    for k in sorted({k for op in time for k in kept_with.get(op, ())})
                    if sum(min(v, times[k][op]) for op, v in time.items() if op in times[k]) > SAME_TIME_SHARE * total
                ),
                None,
            )
        if into is None:
            kept.append(i)
            for op in time:
                kept_with.setdefault(op, []).append(i)
        else:
            merged.setdefault(into, []).append(ranked[i])
    out = []
    for k in kept:
        o = ranked[k]
        if k in merged:
            evidence = {**o.evidence, "same_time_as": [_summary(m) for m in merged[k]]}
            remedy = o.remedy
            # a waiting finding that absorbed a straggler's (or an op's that names the device it waits for):
            # name that device here
            if o.remedy_family in ("balance-work", "balance-experts") and "straggler" not in o.evidence:
                note = _straggler_note(merged[k])
                if note:
                    remedy = f"{remedy} {note}"
            o = replace(o, evidence=evidence, remedy=remedy)
        out.append(o)
    return out


def named_fabrics(opportunities: list[Opportunity], hardware: Hardware | None) -> tuple[Opportunity, ...]:
    """The opportunities with their remedies (and those of the findings they absorbed) written in the job's own
    fabric names where they are not NVLink and InfiniBand: ICI and DCN on TPUs (an ICI slice is the domain)."""
    hw = hardware or {}
    up, out, domain = hw.get("scale_up") or "NVLink", hw.get("scale_out") or "InfiniBand", hw.get("scale_up_domain")
    if out == "InfiniBand":  # GPU jobs: renderers name xGMI on screen; the JSON keeps the catalogue's words
        return tuple(opportunities)

    def words(text: str) -> str:
        return fabric_text(text, up, out, domain or "domain")

    named = []
    for o in opportunities:
        evidence = dict(o.evidence)
        if isinstance(evidence.get("same_time_as"), list):
            evidence["same_time_as"] = [
                {**m, "remedy": words(m["remedy"])} if isinstance(m, dict) and isinstance(m.get("remedy"), str) else m
                for m in evidence["same_time_as"]
            ]
        named.append(replace(o, remedy=words(o.remedy), evidence=evidence))
    return tuple(named)
