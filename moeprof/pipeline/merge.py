"""The reduce step: per-file results into one :class:`Analysis` of the job.

Everything merged is a sum or a group-by over compact per-file tables, so the
merge of a 1,000-file job costs what its results weigh, not what its events do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace

import numpy as np
import pandas as pd

from ..core.analysis import (
    LEDGER_KEYS,
    Analysis,
    Collective,
    ComputeStraggler,
    DeviceFigures,
    FigureSpread,
    SlowestStep,
    Spread,
    StepFigures,
    StepSummary,
    ratio,
    sum_figures,
)
from ..core.ledger import RECORD_COLUMNS, Ledger, build_ledger
from ..core.metrics import collectives_table
from ..errors import InputError
from ..insight.bandwidth import annotate, bus_factor
from ..insight.opportunities import (
    comm_opportunities,
    expert_exchange_opportunity,
    rank,
    signal_opportunities,
)
from ..insight.stack import Stack
from ..insight.waiting import op_stragglers, straggler_opportunity
from .per_file import FileResult


def spread(devices: Sequence[DeviceFigures], steps: Sequence[StepFigures]) -> Spread:
    """How figures vary across devices and steps: a straggler device or a slow step shows here."""
    device_spread: dict[str, FigureSpread] = {}
    straggler = None
    if devices:
        names = [d.device for d in devices]
        for key in ("busy_ns", "compute_ns", "comm_ns", "exposed_comm_ns", "comm_share", "idle_ns"):
            values = np.array([d.value(key) for d in devices], dtype=np.float64)
            device_spread[key] = FigureSpread(
                min=float(values.min()),
                median=float(np.median(values)),
                max=float(values.max()),
                max_device=names[int(np.argmax(values))],
            )
        compute = np.array([d.compute_ns for d in devices], dtype=np.float64)
        # the device that computes longest makes the others wait in their collectives
        if len(devices) > 1 and np.median(compute) > 0:
            over = float(compute.max() / np.median(compute))
            straggler = ComputeStraggler(names[int(np.argmax(compute))], round(over, 4), over > 1.1)
    summaries: list[StepSummary] = []
    slowest = None
    if steps:
        frame = pd.DataFrame(
            {
                "step": [s.step for s in steps],
                "span_ns": [s.span_ns for s in steps],
                "exposed_comm_ns": [s.exposed_comm_ns for s in steps],
                "comm_ns": [s.comm_ns for s in steps],
                "accumulated_ns": [s.accumulated_ns for s in steps],
            }
        )
        per_step = frame.groupby("step").agg(
            span_ns=("span_ns", "max"),
            exposed_comm_ns=("exposed_comm_ns", "mean"),
            comm_ns=("comm_ns", "sum"),
            accumulated_ns=("accumulated_ns", "sum"),
        )
        median = float(per_step["span_ns"].median())
        numbers = per_step.index.to_numpy(dtype=np.int64)
        col = {c: per_step[c].to_numpy() for c in per_step.columns}
        summaries = [
            StepSummary(
                step=int(numbers[i]),
                span_ns=int(col["span_ns"][i]),
                exposed_comm_ns=round(float(col["exposed_comm_ns"][i])),
                comm_share=ratio(col["comm_ns"][i], col["accumulated_ns"][i]),
            )
            for i in range(len(numbers))
        ]
        slow = int(np.argmax(col["span_ns"]))
        slow_span = float(col["span_ns"][slow])
        slowest = SlowestStep(
            step=int(numbers[slow]),
            span_ns=int(slow_span),
            over_median=round(slow_span / median, 4) if median else None,
            flagged=bool(median and slow_span > 1.2 * median),
        )
    return Spread(device_spread, straggler, tuple(summaries), slowest)


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def check_distinct_devices(parts: Sequence[FileResult]) -> None:
    """Two inputs that claim the same device are two jobs (or one job twice): refuse, naming both files."""
    owner: dict[str, str] = {}
    for p in parts:
        for device in p.device_ids or {d.device: -1 for d in p.devices}:
            first = owner.setdefault(device, p.inputs[0])
            if first != p.inputs[0]:
                raise InputError(
                    p.inputs[0],
                    f"claims device {device}, which {first} holds too: traces of different jobs, or one job "
                    "twice? Analyze them separately (moeprof report --compare shows them side by side)",
                )


def whole_job(parts: Sequence[FileResult]) -> bool:
    """Spec §8 rule 4: the inputs hold the whole job (every rank of the world, or one host's whole trace)."""
    ranks = {p.job.get("rank") for p in parts}
    worlds = {p.job.get("world_size") for p in parts}
    if len(worlds) == 1 and None not in worlds and None not in ranks:
        (world,) = worlds
        return ranks == set(range(int(world)))  # type: ignore[arg-type]
    hosts = {host for p in parts for host in p.clocks.values()}
    host_scoped = all(p.format in ("xplane", "chrome", "nsys", "nsys-parquet") for p in parts)
    return host_scoped and len(hosts) == 1


def job_ledger(parts: Sequence[FileResult]) -> tuple[pd.DataFrame | None, Ledger | None]:
    """The comm records and cross-rank ledger of the job (spec §8), where at least two devices communicate."""
    records = _concat([p.records for p in parts], list(RECORD_COLUMNS)).reset_index(drop=True)
    if records.empty or records["device"].nunique() < 2:
        return None, None
    device_ids: dict[int, str] = {}
    for p in parts:
        for device, gid in p.device_ids.items():
            if gid >= 0:
                device_ids.setdefault(gid, device)
    windows = _concat([p.windows for p in parts], ["device", "start_ns", "end_ns"])
    exposed = _concat([p.exposed for p in parts], ["device", "start_ns", "end_ns"])
    return records, build_ledger(records, windows, exposed, whole_job(parts), device_ids)


def ledger_summary(ledger: Ledger) -> dict:
    """The JSON ``ledger`` object (§8) with the straggler table."""
    rows = sorted(ledger.stragglers, key=lambda r: (-r.caused_wait_ns, r.device))
    return {**ledger.summary(), "stragglers": [asdict(r) for r in rows if r.straggler_count]}


def with_wait_split(collectives: list[Collective], ledger: Ledger) -> list[Collective]:
    """Each collectives row with the wait and transfer parts of its time, and the transfer's bus bandwidth."""
    split = {(c.op, c.kind): c for c in ledger.collectives}
    out = []
    for c in collectives:
        s = split.get((c.name, c.kind))
        if s is None:
            out.append(replace(c, wait_ns=0, transfer_ns=0))
            continue
        busbw = None
        if c.bytes_per_call and c.count and s.transfer_ns > 0 and c.group_size:
            # bytes over the transfer part alone: what the link carried while data actually moved
            per_call = s.transfer_ns / c.count
            busbw = round(c.bytes_per_call / per_call * bus_factor(c.kind, c.group_size), 3)
        out.append(replace(c, wait_ns=s.wait_ns, transfer_ns=s.transfer_ns, transfer_bus_bandwidth_gbps=busbw))
    return out


def merge(
    parts: Sequence[FileResult], link_peaks: dict[str, float] | None = None, notes: Sequence[str] = ()
) -> Analysis:
    """Concatenate devices, sum totals, regroup collectives, rank opportunities.

    ``notes`` are warnings from before the map (what discovery left out).
    """
    return merge_job(parts, link_peaks, notes)[0]


def merge_job(
    parts: Sequence[FileResult], link_peaks: dict[str, float] | None = None, notes: Sequence[str] = ()
) -> tuple[Analysis, pd.DataFrame | None]:
    """:func:`merge`, and the comm records with their ledger view (instance, wait, straggler) for timelines."""
    check_distinct_devices(parts)
    records, ledger = job_ledger(parts)
    devices = sorted((d for p in parts for d in p.devices), key=lambda d: d.device)
    if ledger is not None:
        per_device = {d.device: d.figures() for d in ledger.devices}
        devices = [replace(d, ledger=per_device.get(d.device, dict.fromkeys(LEDGER_KEYS, 0))) for d in devices]
    comm = _concat([p.comm for p in parts], list(parts[0].comm.columns) if parts else [])
    rules: dict[str, int] = {}
    for p in parts:
        for k, v in p.rules.items():
            rules[k] = rules.get(k, 0) + v
    sizes = _concat([p.group_sizes for p in parts], ["key", "kind", "group_size", "n"])
    sized = sizes[sizes["group_size"] > 0] if not sizes.empty else sizes
    mode: dict[tuple[str, str], int] = {}
    if not sized.empty:
        # the most common group size of each op (ties: the smallest), over all files
        counts = sized.groupby(["key", "kind", "group_size"], observed=True)["n"].sum().reset_index()
        counts = counts.sort_values(["key", "kind", "n", "group_size"], ascending=[True, True, False, True])
        for key, kind, size in counts.drop_duplicates(["key", "kind"])[["key", "kind", "group_size"]].itertuples(
            index=False
        ):
            mode[(str(key), str(kind))] = int(size)
    collectives = annotate(collectives_table(comm), mode, link_peaks or {})
    if ledger is not None:
        collectives = with_wait_split(collectives, ledger)
    independent = _concat([p.independent for p in parts], ["device", "key", "independent_ns"])
    steps = sorted((s for p in parts for s in p.steps), key=lambda s: (s.step, s.device))
    stack = Stack.of(p.facts for p in parts)
    matched = records.join(ledger.records) if ledger is not None and records is not None else None
    hide = comm_opportunities(
        comm, collectives, independent, stack, op_stragglers(matched) if matched is not None else None
    )
    waiting = (
        straggler_opportunity(matched, {d.device: d.exposed_wait_ns for d in ledger.devices}, stack)
        if matched is not None and ledger is not None
        else []
    )
    signals = [s for p in parts for s in p.signals]
    return Analysis(
        inputs=tuple(i for p in parts for i in p.inputs),
        devices=tuple(devices),
        total=sum_figures(devices),
        collectives=tuple(collectives),
        steps=tuple(steps),
        opportunities=tuple(
            rank(
                hide
                + expert_exchange_opportunity(comm, hide, stack, collectives)
                + waiting
                + signal_opportunities(signals, stack)
            )
        ),
        rules=dict(sorted(rules.items(), key=lambda kv: -kv[1])),
        warnings=(*notes, *(w for p in parts for w in p.warnings)),
        spread=spread(devices, steps),
        ledger=ledger_summary(ledger) if ledger is not None else None,
    ), matched


def instance_table(matched: pd.DataFrame) -> pd.DataFrame:
    """Per complete instance: op, kind, members, first and last aligned arrival, the straggler (§8)."""
    complete = matched[matched["instance"] >= 0]
    if complete.empty:
        return pd.DataFrame(columns=["instance", "op", "kind", "members", "first_ns", "last_ns", "straggler"])
    grouped = complete.groupby("instance", sort=True)
    table = grouped.agg(
        op=("op", "first"),
        kind=("kind", "first"),
        members=("device", "size"),
        first_ns=("aligned_start_ns", "min"),
        last_ns=("aligned_start_ns", "max"),
    ).reset_index()
    last = complete[complete["straggler"]].drop_duplicates("instance").set_index("instance")["device"]
    return table.assign(straggler=table["instance"].map(last).astype(str))
