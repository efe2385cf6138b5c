"""The reduce step: per-file results into one :class:`Analysis` of the job.

Everything merged is a sum or a group-by over compact per-file tables, so the
merge of a 1,000-file job costs what its results weigh, not what its events do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, TypeVar, cast

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
from ..core.events import concat as concat_tables
from ..core.expert_load import RoutedLoad, expert_load_figures
from ..core.identity import FileIdentity, decide_files
from ..core.ledger import RECORD_COLUMNS, Ledger, build_ledger
from ..core.metrics import collectives_table
from ..core.roofline import (
    ROLE_COLUMNS,
    ROOFLINE_COLUMNS,
    above_roof_notes,
    role_rows,
    roofline_section,
    token_movement,
)
from ..core.scopes import OP_FLOP_COLUMNS, SCOPE_COLUMNS, STEP_FLOP_COLUMNS, scope_rows
from ..core.sections import LedgerTotals, RoleRow, Roofline
from ..core.steps import job_step_windows
from ..core.traffic import SPLIT_COLUMNS, traffic_instances
from ..insight.bandwidth import annotate, bus_factor, job_hardware
from ..insight.edges import capture_edges
from ..insight.levers import on_chip_levers
from ..insight.opportunities import (
    comm_opportunities,
    expert_exchange_opportunity,
    merge_same_time,
    named_fabrics,
    rank,
    signal_opportunities,
)
from ..insight.projection import REPLAY_COLUMNS, SYNC_COLUMNS, Projector, ReplayJob, joined_job, project_analysis
from ..insight.stack import Stack, launch_summary
from ..insight.utilization import (
    job_hbm_peak,
    job_peak,
    job_precision,
    peaks_source,
    precision_note,
    utilization,
    with_useful_work,
)
from ..insight.waiting import op_stragglers, straggler_opportunity
from .per_file import COMM_AGG_COLUMNS, EXPERT_ROW_COLUMNS, FileResult

K = TypeVar("K")
V = TypeVar("V")


def spread(
    devices: Sequence[DeviceFigures],
    steps: Sequence[StepFigures],
    positions: Mapping[int, int] | None = None,
    offsets: Mapping[str, int] | None = None,
) -> Spread:
    """How figures vary across devices and steps: a straggler device or a slow step shows here. A step's span is
    the job's (§5/§9: its devices' windows from the earliest start to the latest end, aligned by ``offsets``,
    device -> its host's clock offset δ), the step time every screen shows."""
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
            exposed_comm_ns=("exposed_comm_ns", "mean"),
            comm_ns=("comm_ns", "sum"),
            accumulated_ns=("accumulated_ns", "sum"),
        )
        windows = job_step_windows(
            pd.DataFrame(
                {
                    "step": [s.step for s in steps],
                    "device": [s.device for s in steps],
                    "start_ns": np.array([s.start_ns for s in steps], dtype=np.int64),
                    "end_ns": np.array([s.end_ns for s in steps], dtype=np.int64),
                }
            ),
            offsets,
        ).set_index("step")
        per_step["span_ns"] = (windows["end_ns"] - windows["start_ns"]).reindex(per_step.index).to_numpy()
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
            position=(positions or {}).get(int(numbers[slow])),
            span_ns=int(slow_span),
            over_median=round(slow_span / median, 4) if median else None,
            flagged=bool(median and slow_span > 1.2 * median),
        )
    return Spread(device_spread, straggler, tuple(summaries), slowest)


@dataclass
class _FileTake:
    """What the coordinator keeps of one file until the job is decided (all small)."""

    who: FileIdentity
    inputs: list[str]
    warnings: list[str]
    devices: list[DeviceFigures]
    steps: list[StepFigures]
    signals: list[dict]
    rules: dict[str, int]
    facts: dict
    device_ids: dict[str, int]
    hosts: set[str]
    clocks: dict[str, str]  # device -> its clock domain (the ledger's host)
    rank: int | None
    world: int | None
    timeline: list
    step_positions: dict[int, int]  # step number -> position as --steps counts it
    models: dict[str, str]  # device -> GPU model its file names
    dropped_activities: int  # device activities the reader dropped (unplaceable or outliers)
    peaks: dict[str, dict[str, float]] = field(default_factory=dict)  # device -> the peaks its plane states
    launches: dict = field(default_factory=dict)  # the file's launch facts (Trace.launches), summed per job


def _first_seen(maps: Iterable[Mapping[K, V]]) -> dict[K, V]:
    """Each key with its value in the first map that holds it (the files in their order)."""
    out: dict[K, V] = {}
    for m in maps:
        for k, v in m.items():
            out.setdefault(k, v)
    return out


class JobResults:
    """What the coordinator keeps of a job: the per-file results' contents, merged as they arrive.

    Only compact tables are kept (figures per device and step, comm sums per op and device,
    the ledger's comm records, each device's window and exposed segments); the small tables
    of many files are concatenated every ``COMPACT_EVERY`` files, so a 1,000-file job holds a
    few large tables rather than thousands of small ones. Results may arrive in any order:
    ``index`` is the file's place in the inputs, and every output is sorted or summed so the
    order of arrival never shows.

    Which files make the job is decided once every result is in (:meth:`decide`), from the files'
    fingerprints and identities alone, in input order: one capture in two formats is read once (the
    richest format, :data:`FORMAT_RICHNESS`; the file holding more devices first), files that cannot be
    one job are refused naming both and the field that disagrees (``core.identity``), and two files that
    claim one device are refused. Table rows carry their file's index until then, so a file set aside
    leaves nothing behind.
    """

    COMPACT_EVERY = 64
    _TABLES = (
        "comm",
        "group_sizes",
        "independent",
        "records",
        "windows",
        "exposed",
        "replay",
        "syncs",
        "scopes",
        "op_flops",
        "step_flops",
        "roofline",
        "roles",
        "expert_rows",
        "splits",
    )
    _FILE = "_file_index"

    def __init__(self) -> None:
        self.files: dict[int, _FileTake] = {}
        self.tables: dict[str, list[pd.DataFrame]] = {name: [] for name in self._TABLES}
        self.added = 0
        self.dropped: set[int] = set()
        self.notes: list[str] = []
        self.decided = False

    def add(self, index: int, part: FileResult) -> None:
        """Take in one file's result (then the caller can drop it)."""
        self.files[index] = _FileTake(
            who=part.who,
            inputs=list(part.inputs),
            warnings=list(part.warnings),
            devices=list(part.devices),
            steps=list(part.steps),
            signals=list(part.signals),
            rules=dict(part.rules),
            facts=part.facts,
            device_ids=dict(part.device_ids),
            hosts=set(part.clocks.values()),
            clocks=dict(part.clocks),
            rank=part.job.get("rank"),
            world=part.job.get("world_size"),
            timeline=list(part.timeline),
            step_positions=dict(part.step_positions),
            models=dict(part.models),
            dropped_activities=part.dropped_activities,
            launches=dict(part.launches),
            peaks=dict(part.peaks),
        )
        for name in self._TABLES:
            frame = getattr(part, name)
            if not frame.empty:
                self.tables[name].append(frame.assign(**{self._FILE: np.int64(index)}))
        self.added += 1
        self.decided = False
        if self.added % self.COMPACT_EVERY == 0:
            self.compact()

    def decide(self) -> list[str]:
        """Set aside the second format of a capture, refuse what cannot be one job; the notes to show."""
        if not self.decided:
            self.dropped, self.notes = decide_files({i: f.who for i, f in self.files.items()})
            self.decided = True
        return self.notes

    def _kept(self) -> list[_FileTake]:
        self.decide()
        return [self.files[i] for i in sorted(self.files) if i not in self.dropped]

    @property
    def inputs(self) -> dict[int, list[str]]:
        self.decide()
        return {i: f.inputs for i, f in self.files.items() if i not in self.dropped}

    @property
    def warnings(self) -> dict[int, list[str]]:
        self.decide()
        return {i: f.warnings for i, f in self.files.items() if i not in self.dropped}

    @property
    def devices(self) -> list[DeviceFigures]:
        return [d for f in self._kept() for d in f.devices]

    @property
    def steps(self) -> list[StepFigures]:
        return [s for f in self._kept() for s in f.steps]

    @property
    def signals(self) -> list[dict]:
        return [s for f in self._kept() for s in f.signals]

    @property
    def timeline(self) -> list:
        return [v for f in self._kept() for v in f.timeline]

    @property
    def rules(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self._kept():
            for k, v in f.rules.items():
                out[k] = out.get(k, 0) + v
        return out

    @property
    def facts(self) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for f in self._kept():
            out.setdefault(repr(sorted(f.facts.items())), f.facts)
        return out

    @property
    def device_ids(self) -> dict[str, int]:
        return _first_seen(f.device_ids for f in self._kept())

    @property
    def step_positions(self) -> dict[int, int]:
        return _first_seen(f.step_positions for f in self._kept())

    @property
    def models(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for f in self._kept():
            out.update(f.models)
        return out

    @property
    def peaks(self) -> dict[str, dict[str, float]]:
        """Device -> the peaks its plane states (TPU planes)."""
        out: dict[str, dict[str, float]] = {}
        for f in self._kept():
            out.update(f.peaks)
        return out

    @property
    def dropped_activities(self) -> int:
        return sum(f.dropped_activities for f in self._kept())

    def clock_offsets(self, ledger: Ledger | None) -> dict[str, int]:
        """Device -> the clock offset δ of its host (§8; 0 without a ledger or an aligned host)."""
        if ledger is None:
            return {}
        offsets = ledger.clock_offsets_ns
        return {d: int(offsets.get(c, 0)) for f in self._kept() for d, c in f.clocks.items()}

    @property
    def launches(self) -> list[dict]:
        """Each kept file's launch facts (files that read none give {})."""
        return [f.launches for f in self._kept()]

    @property
    def hosts(self) -> set[str]:
        return {h for f in self._kept() for h in f.hosts}

    @property
    def formats(self) -> set[str]:
        return {f.who.format for f in self._kept()}

    @property
    def ranks(self) -> set[int | None]:
        return {f.rank for f in self._kept()}

    @property
    def worlds(self) -> set[int | None]:
        return {f.world for f in self._kept()}

    def compact(self) -> None:
        for name, frames in self.tables.items():
            if len(frames) > 1:
                self.tables[name] = [self._concat(name, frames)]

    @staticmethod
    def _concat(name: str, frames: list[pd.DataFrame]) -> pd.DataFrame:
        # the replay columns are one row per activity: their strings stay categorical across files
        return concat_tables(frames) if name == "replay" else pd.concat(frames, ignore_index=True)

    def table(self, name: str, columns: Sequence[str]) -> pd.DataFrame:
        self.decide()
        frames = self.tables[name]
        if not frames:
            return pd.DataFrame(columns=list(columns))
        whole = self._concat(name, frames)
        if self.dropped:
            whole = whole[~whole[self._FILE].isin(sorted(self.dropped))].reset_index(drop=True)
        return whole.drop(columns=self._FILE)

    def whole_job(self) -> bool:
        """Spec §8 rule 4: the inputs hold the whole job (every rank of the world, or one host's whole trace)."""
        if len(self.worlds) == 1 and None not in self.worlds and None not in self.ranks:
            (world,) = self.worlds
            # every rank 0..world-1 is here, counted without spelling the world out (it may be huge)
            ranks = {r for r in self.ranks if r is not None}
            return len(ranks) == world and min(ranks) == 0 and max(ranks) == int(world) - 1
        host_scoped = self.formats <= {"xplane", "chrome", "nsys", "nsys-parquet"}
        return host_scoped and len(self.hosts) == 1

    def ledger(self) -> tuple[pd.DataFrame | None, Ledger | None]:
        """The comm records and cross-rank ledger of the job (spec §8), wherever a device communicates.

        With one rank of a group (or members' traces missing) nothing matches: every comm activity is
        unmatched, as §8 counts it, and no split between waiting and transfer is made up."""
        records = self.table("records", RECORD_COLUMNS).reset_index(drop=True)
        if records.empty:
            return None, None
        # the device column categorical, its categories in name order: the files' tables hold it as strings (each
        # device's records its own category), and the ledger, the stragglers and the instances group and match on
        # it (a hash of 10^5-10^6 strings each time); name order keeps every group-by's order and tie that strings
        # gave
        device = records["device"]
        if not isinstance(device.dtype, pd.CategoricalDtype):
            records["device"] = pd.Categorical(device)
        elif not device.cat.categories.is_monotonic_increasing:
            records["device"] = device.cat.reorder_categories(sorted(device.cat.categories))
        device_ids = {gid: device for device, gid in sorted(self.device_ids.items()) if gid >= 0}
        windows = self.table("windows", ("device", "start_ns", "end_ns"))
        exposed = self.table("exposed", ("device", "start_ns", "end_ns"))
        return records, build_ledger(records, windows, exposed, self.whole_job(), device_ids)


def ledger_summary(ledger: Ledger) -> LedgerTotals:
    """The JSON ``ledger`` object (§8) with the straggler table."""
    rows = sorted(ledger.stragglers, key=lambda r: (-r.caused_wait_ns, r.device))
    summary = {**ledger.summary(), "stragglers": [asdict(r) for r in rows if r.straggler_count]}
    return cast("LedgerTotals", summary)


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
    parts: Sequence[FileResult],
    link_peaks: dict[str, float] | None = None,
    notes: Sequence[str] = (),
    what_if: Sequence[str] = (),
) -> Merged:
    """:func:`merge`, the comm records with their ledger view (instance, wait, straggler), the projector."""
    job = JobResults()
    for i, part in enumerate(parts):
        job.add(i, part)
    return finish_job(job, link_peaks, notes, what_if)


def replay_job(
    job: JobResults,
    records: pd.DataFrame | None,
    ledger: Ledger | None,
    peaks: tuple[float | None, float | None] = (None, None),
) -> ReplayJob | None:
    """The §9 job graph of the whole job (:func:`moeprof.insight.projection.joined_job`) from what the
    coordinator kept: the files' replay columns, steps and windows, joined with the §8 instances; ``peaks``:
    the chip's FLOP/s and HBM bytes/s (spec §10's roofs)."""
    return joined_job(
        job.table("replay", tuple(REPLAY_COLUMNS)),
        records,
        ledger,
        job.steps,
        job.table("windows", ("device", "start_ns", "end_ns")),
        job.table("syncs", SYNC_COLUMNS),
        job.whole_job(),
        {gid: device for device, gid in sorted(job.device_ids.items()) if gid >= 0},
        {d.device: d.host for d in job.devices},
        {d.device: d.kind for d in job.devices},
        peaks,
    )


Merged = tuple[Analysis, pd.DataFrame | None, Projector | None]


def with_precision(stack: Stack, precision: str) -> Stack:
    """``stack`` with the run's compute precision where its run folder says f32: a chip whose matrix units are
    bf16 runs each f32 matmul as several passes (a remedy names it)."""
    if precision != "f32":
        return stack
    return replace(
        stack,
        in_use=stack.in_use | {"f32_compute"},
        evidence={**stack.evidence, "f32_compute": "the run's manifest says its step computes in float32"},
    )


def finish_job(
    job: JobResults,
    link_peaks: dict[str, float] | None = None,
    notes: Sequence[str] = (),
    what_if: Sequence[str] = (),
    projections: str = "full",
    load: RoutedLoad | None = None,
    manifest: Mapping[str, Any] | None = None,
) -> Merged:
    """The analysis of everything ``job`` took in, the comm records with their ledger view (instance, wait,
    straggler), and the projector of its §9 projections (``projections``: what of them to compute,
    :func:`moeprof.insight.projection.project_analysis`'s ``detail``); ``load``: the tokens the run routed per
    layer and expert (spec §11), its figures in the analysis, its rows in the router projection and the useful
    rows of its expert GEMMs (spec §10); ``manifest``: the run folder's, where the inputs are one (its
    precision)."""
    notes = [*notes, *job.decide()]
    records, ledger = job.ledger()
    devices = sorted(job.devices, key=lambda d: d.device)
    if ledger is not None:
        per_device = {d.device: d.figures() for d in ledger.devices}
        devices = [replace(d, ledger=per_device.get(d.device, dict.fromkeys(LEDGER_KEYS, 0))) for d in devices]
    # a fixed row order: float sums (bytes, IB shares) never depend on the order results arrived in
    comm = job.table("comm", COMM_AGG_COLUMNS).sort_values(["key", "kind", "device"], ignore_index=True)
    sizes = job.table("group_sizes", ("key", "kind", "group_size", "n"))
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
    facts = [job.facts[k] for k in sorted(job.facts)]
    stack = replace(Stack.of(facts), device_kinds={d.device: d.kind for d in devices})
    hardware = job_hardware(job.models, link_peaks, stack.vendor, [d.kind for d in devices])
    collectives = annotate(collectives_table(comm), mode, hardware.peaks, hardware.scale_up)
    if ledger is not None and ledger.instances:  # nothing matched: each row's split is unknown, not 0 / 0
        collectives = with_wait_split(collectives, ledger)
    independent = job.table("independent", ("device", "key", "independent_ns"))
    steps = sorted(job.steps, key=lambda s: (s.step, s.device))
    matched = records.join(ledger.records) if ledger is not None and records is not None else None
    hide = comm_opportunities(
        comm, collectives, independent, stack, op_stragglers(matched) if matched is not None else None
    )
    waiting = (
        straggler_opportunity(matched, {d.device: d.exposed_wait_ns for d in ledger.devices}, stack)
        if matched is not None and ledger is not None
        else []
    )
    signals = sorted(job.signals, key=lambda s: (s["type"], s["device"]))
    traffic, traffic_notes = traffic_instances(job.table("splits", tuple(SPLIT_COLUMNS)), matched, bool(devices))
    order = sorted(job.inputs)
    # the JAX scopes and the FLOPs the trace's ops state, against the chip's own peak first
    scope_frame = job.table("scopes", SCOPE_COLUMNS)
    preset_from = (hardware.summary or {}).get("preset_from")
    peak, peak_from = job_peak(job.peaks, hardware.preset, preset_from)
    hbm, hbm_from = job_hbm_peak(job.peaks, hardware.preset, preset_from)
    replay = replay_job(job, records, ledger, (peak * 1e12 if peak else None, hbm * 1e9 if hbm else None))
    # spec §10: the on-chip work below the chip's roof, as opportunities (their remedies on what they show)
    levers, stack = on_chip_levers(replay, with_precision(stack, job_precision(manifest)))
    used, flop_notes = utilization(
        scope_frame,
        job.table("op_flops", OP_FLOP_COLUMNS),
        job.table("step_flops", STEP_FLOP_COLUMNS),
        steps,
        devices,
        peak,
        peak_from,
    )
    roofline, roles = _on_chip(job, devices, steps, hardware, (peak, peak_from), (hbm, hbm_from), manifest)
    above_roof = above_roof_notes(roofline)
    used = with_useful_work(used, roles, load, _rows(job))
    analysis = Analysis(
        inputs=tuple(i for k in order for i in job.inputs[k]),
        devices=tuple(devices),
        total=sum_figures(devices),
        collectives=tuple(collectives),
        steps=tuple(steps),
        opportunities=named_fabrics(
            merge_same_time(
                rank(
                    hide
                    + expert_exchange_opportunity(comm, hide, stack, collectives)
                    + waiting
                    + signal_opportunities(signals, stack)
                    + levers
                ),
                comm,
                matched,
            ),
            hardware.summary,
        ),
        rules=dict(sorted(job.rules.items(), key=lambda kv: (-kv[1], kv[0]))),
        warnings=(
            *notes,
            *(w for k in order for w in job.warnings[k]),
            *hardware.warnings,
            *flop_notes,
            *traffic_notes,
            *above_roof,
        ),
        dropped_activities=job.dropped_activities,
        spread=spread(devices, steps, job.step_positions, job.clock_offsets(ledger)),
        ledger=ledger_summary(ledger) if ledger is not None else None,
        hardware=hardware.summary,
        scopes=scope_rows(scope_frame, sum(d.accumulated_ns for d in devices), peak),
        utilization=used,
        edges=capture_edges(
            matched if matched is not None else records,
            job.table("windows", ("device", "start_ns", "end_ns")),
            job.table("exposed", ("device", "start_ns", "end_ns")),
        ),
        launches=launch_summary(job.launches),
        roles=roles,
        roofline=roofline,
        expert_load=expert_load_figures(load) if load is not None else None,
        traffic=tuple(traffic),
    )
    projected, projector = project_analysis(analysis, replay, what_if, projections, load)
    return projected, matched, projector


def _on_chip(
    job: JobResults,
    devices: Sequence[DeviceFigures],
    steps: Sequence[StepFigures],
    hardware: Any,
    flops_peak: tuple[float | None, str],
    hbm_peak: tuple[float | None, str],
    manifest: Mapping[str, Any] | None,
) -> tuple[Roofline | None, tuple[RoleRow, ...]]:
    """Spec §10: the roofline per op, scope and role against the job's one peak (TFLOP/s and HBM GB/s, each with
    where it comes from), and the roles per step."""
    (peak_tflops, peak_from), (hbm, hbm_from) = flops_peak, hbm_peak
    frame = job.table("roofline", ROOFLINE_COLUMNS)
    n_steps = len({s.step for s in steps})
    section = roofline_section(
        frame,
        peak_tflops * 1e12 if peak_tflops else None,
        hbm * 1e9 if hbm else None,
        peaks_source(peak_from, hbm_from),
        sum(d.busy_ns for d in devices),
        n_steps,
        len(devices),
    )
    rows = role_rows(job.table("roles", ROLE_COLUMNS), section, len(devices))
    if section is not None:
        section["glue"] = token_movement(rows, section)
        precision = job_precision(manifest)
        if precision:
            section["precision"] = precision
            note = precision_note(precision, hardware.preset, peak_from)
            if note:
                section["note"] = note
    return cast("Roofline | None", section), tuple(cast("RoleRow", r) for r in rows)


def _rows(job: JobResults) -> dict[int, int]:
    """The rows the job's expert GEMMs compute -> how many ops compute that many (core.padding)."""
    table = job.table("expert_rows", EXPERT_ROW_COLUMNS)
    if table.empty:
        return {}
    summed = table.groupby("rows")["ops"].sum()
    return dict(zip(summed.index.astype(np.int64).tolist(), summed.astype(np.int64).tolist(), strict=True))


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
    # an instance of one member has no straggler (§8): "" rather than a missing value
    return table.assign(straggler=table["instance"].map(last).astype(object).fillna("").astype(str))
