"""The map step: one classified :class:`Trace` into a compact :class:`FileResult`.

A ``FileResult`` holds what the merge needs and nothing per event: per-device and
per-step figures, communication aggregated per (op, kind, device), the HLO bound
of each collective, device signals, the comm records the ledger matches across
files, and (when asked) each device's timeline view. It is small and picklable,
so a 1,000-file job's results fit one coordinator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.analysis import DeviceFigures, StepFigures
from ..core.events import column_codes, combine_codes, first_rows, lookup
from ..core.hlo import HloModule
from ..core.identity import DeviceFingerprint, FileIdentity, JobIdentity, device_fingerprint, identify
from ..core.ledger_records import clock_domains, comm_records, empty_records
from ..core.metrics import COMM, COMM_SUMS, COMPUTE, DeviceTimeline, EventColumns
from ..core.padding import expert_gemm_rows
from ..core.roles import role_table
from ..core.roofline import ROLE_COLUMNS, ROOFLINE_COLUMNS, device_roles, device_roofline, roles_of
from ..core.scopes import (
    OP_FLOP_COLUMNS,
    SCOPE_COLUMNS,
    STEP_FLOP_COLUMNS,
    device_op_flops,
    device_scopes,
    device_step_flops,
)
from ..core.steps import fallback_note, find_steps, select_steps
from ..core.timeline import TimelineOptions, TimelineView, device_view
from ..core.trace import TPU, Trace
from ..core.traffic import empty_splits
from ..errors import InputError
from ..insight.dependency import independent_ops
from ..insight.opportunities import device_signals, host_gap_signal
from ..insight.projection import empty_replay_table, empty_syncs, replay_table
from ..insight.stack import stack_facts
from ..options import StepOptions
from ..words import plural

# per (op, kind, device): the sums the merge adds up across files (collectives, opportunities, bandwidth), the
# largest IB fraction, and whether any activity is XLA's
COMM_AGG_COLUMNS = ["key", "kind", "device", *COMM_SUMS, "ib_max", "xla"]
EXPERT_ROW_COLUMNS = ["rows", "ops"]


@dataclass
class FileResult:
    """What one trace file contributes to the analysis of its job."""

    inputs: list[str]
    format: str
    devices: list[DeviceFigures]
    steps: list[StepFigures]
    comm: pd.DataFrame  # COMM_AGG_COLUMNS
    group_sizes: pd.DataFrame  # key, kind, group_size, n: how many activities saw each group size
    independent: pd.DataFrame  # device, key, independent_ns (HLO dependency bound)
    signals: list[dict]  # non-collective opportunities per device
    rules: dict[str, int]  # activities per deciding rule
    warnings: list[str]
    facts: dict  # framework, workload, libraries in use (remedies fit the trace)
    device_ids: dict[str, int]  # device -> global id (-1 unknown)
    clocks: dict[str, str]  # device -> clock domain (host) for the ledger
    records: pd.DataFrame  # per comm activity, for the cross-rank ledger (core.ledger_records)
    windows: pd.DataFrame  # device, start_ns, end_ns: each device's measured window
    exposed: pd.DataFrame  # device, start_ns, end_ns: exposed comm segments inside the window
    job: dict = field(default_factory=dict)  # world_size, rank: what the ledger's whole-job rule needs
    timeline: list[TimelineView] = field(default_factory=list)
    step_count: int = 0  # steps found in the file (selected or not)
    # what decides whether the file joins the job (core.identity), made beside its figures: what it says of its
    # job, its activities as any format of its capture shows them, the devices it claims; the merge compares
    who: FileIdentity = field(default_factory=lambda: FileIdentity("", "", JobIdentity(), (), ()))
    # §9: per device activity, the replay's columns (insight.projection.REPLAY_COLUMNS), comm rows in the
    # order of ``records``; and the host synchronizations that launches move with
    replay: pd.DataFrame = field(default_factory=empty_replay_table)
    syncs: pd.DataFrame = field(default_factory=empty_syncs)
    models: dict[str, str] = field(default_factory=dict)  # device -> GPU model, where the file names it
    # step number (as the trace numbers it, what the JSON says) -> its position as --steps counts it
    # (0-based among the file's steps after --skip-first), for the measured steps
    step_positions: dict[int, int] = field(default_factory=dict)
    dropped_activities: int = 0  # device activities the reader dropped as unplaceable
    launches: dict = field(default_factory=dict)  # what the host's kernel launches say (Trace.launches)
    # per (device, JAX scope, pass): time and the FLOPs its ops state (core.scopes.SCOPE_COLUMNS)
    scopes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SCOPE_COLUMNS))
    # per (device, op) whose FLOPs the trace states, and per (step, device) their FLOPs
    op_flops: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=OP_FLOP_COLUMNS))
    step_flops: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STEP_FLOP_COLUMNS))
    peaks: dict[str, dict[str, float]] = field(default_factory=dict)  # device -> the peaks its plane states
    # §10: per (device, op, scope, role, arithmetic intensity) the time, FLOPs and HBM bytes of the activities, and
    # per (device, role) the time, exposed time and one-device exchanges (core.roofline)
    roofline: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ROOFLINE_COLUMNS))
    roles: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ROLE_COLUMNS))
    # rows the experts' ragged dots compute -> how many ops compute that many (core.padding)
    expert_rows: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=EXPERT_ROW_COLUMNS))
    # spec §11: the all-to-all calls whose split sizes the file records (core.traffic.SPLIT_COLUMNS)
    splits: pd.DataFrame = field(default_factory=empty_splits)


def _independent_compute(
    device: str, rows: DeviceTimeline, clipped: np.ndarray, hlo: dict[tuple[str, int], HloModule]
) -> list[dict]:
    """Per collective op of this device: compute time on ops the HLO graph shows independent of it.

    On the columns' codes: a name's first op and each op's time are array passes, the HLO is looked up
    once per distinct (module, program, op) of the device's collectives.
    """
    op, op_values = rows.strings("hlo_op")
    names, name_values = rows.strings("name")
    # an event names its op unless the op is "" (a missing op names one that is nowhere in the HLO)
    named = (op < 0) | lookup(op, rows.columns.nonempty("hlo_op"), True)
    # compute kernels whose stats were read once per name: their op is the name's first op
    first_op = np.full(len(name_values) + 1, -2, dtype=np.int64)  # by name code + 1; -2: no op
    at = np.flatnonzero(named)
    distinct, first = np.unique(names[at] + 1, return_index=True)
    first_op[distinct] = op[at[first]]
    compute = (rows.code == COMPUTE) & (clipped > 0)
    compute_op = np.where(named, op, first_op[names + 1])[compute]
    known = compute_op >= 0
    summed = pd.Series(clipped[compute][known]).groupby(compute_op[known]).sum()
    op_time = dict(zip(op_values[summed.index.to_numpy()].tolist(), summed.tolist(), strict=True))
    comm = np.flatnonzero((rows.code == COMM) & named & (op >= 0))
    if not comm.size:
        return []
    modules, module_values = rows.strings("hlo_module")
    programs = rows.numbers("program_id")
    triples = comm[first_rows(combine_codes(modules[comm], programs[comm], op[comm]))]
    out = []
    for mod, pid, key in zip(
        lookup(modules[triples], module_values, np.nan).tolist(),
        programs[triples].tolist(),
        op_values[op[triples]].tolist(),
        strict=True,
    ):
        module = hlo.get((mod, pid)) or hlo.get((mod, -1))
        if module is None or key not in module.instructions:
            continue
        free = independent_ops(module, key)
        out.append({"device": device, "key": key, "independent_ns": int(sum(op_time.get(o, 0) for o in free))})
    return out


@dataclass
class _CommRows:
    """The comm activities of one device inside its window: rows of the event table, clipped and exposed ns."""

    device: str
    rows: np.ndarray
    clipped: np.ndarray
    exposed: np.ndarray


def _op_keys(columns: EventColumns, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, distinct values) of each row's op (its HLO op where known, else the kernel name), as strings:
    an op and a kernel spelled alike share a code."""
    op_c, op_v = columns.codes("hlo_op")
    name_c, name_v = columns.codes("name")
    # widened: a name's code plus the count of ops would wrap in a narrow code
    op_c, name_c = op_c[rows].astype(np.int64), name_c[rows].astype(np.int64)
    op_known = lookup(op_c, columns.nonempty("hlo_op"), True)
    code = np.where(op_known, op_c, np.where(name_c >= 0, name_c + len(op_v), -1))
    merged, values = pd.factorize(np.concatenate([op_v, name_v]).astype(object), use_na_sentinel=False)
    return lookup(code, merged, -1), np.asarray(values, dtype=object)


def _comm_tables(columns: EventColumns, parts: list[_CommRows]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The devices' comm activities summed per (op, kind, device) (what collectives and opportunities
    need), and how many activities saw each group size per (op, kind)."""
    if not parts:
        return _empty_comm(), pd.DataFrame(columns=["key", "kind", "group_size", "n"])
    rows = np.concatenate([p.rows for p in parts])
    device_index = np.repeat(np.arange(len(parts)), [p.rows.size for p in parts])
    total = np.concatenate([p.clipped for p in parts]).astype(np.int64)
    exp = np.concatenate([p.exposed for p in parts]).astype(np.int64)
    key_c, key_v = _op_keys(columns, rows)
    kind_c, kind_v = columns.codes("kind")
    kind_c = kind_c[rows]
    group_c, group_v = columns.codes("group")
    # one code per (device, op, kind), numbered in order of first appearance (rows go device by device)
    group_id = combine_codes(device_index, key_c, kind_c)
    first = first_rows(group_id)  # group ids count from 0 in order of appearance
    size = first.size
    ib = columns.numbers("ib_fraction", np.float64)[rows]
    nbytes = columns.numbers("bytes", np.float64)[rows]
    op_c = columns.codes("hlo_op")[0]
    source_c, source_v = columns.codes("source")
    known = ~np.isnan(ib)

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(group_id[mask], minlength=size).astype(np.int64)

    def int_sum(values: np.ndarray) -> np.ndarray:
        # float64 sums of non-negative ints are exact while the total is below 2**53
        if int(values.min(initial=0)) >= 0 and int(values.sum()) < 1 << 53:
            return np.bincount(group_id, weights=values, minlength=size).astype(np.int64)
        out = np.zeros(size, dtype=np.int64)
        np.add.at(out, group_id, values)
        return out

    # the integer sums and counts by bincount; the float sums through pandas' group sum (its compensated sum:
    # the same last bits), only for a column that is not all zeros. No IB fraction known (a trace without links):
    # every activity's link unknown, its IB sums zeros
    total_sum, exposed_sum = int_sum(total), int_sum(exp)
    sums = {"count": np.bincount(group_id, minlength=size).astype(np.int64), "total_ns": total_sum,
            "exposed_ns": exposed_sum}  # fmt: skip
    floats: dict[str, np.ndarray] = {}
    bytes_known = ~np.isnan(nbytes)
    if bytes_known.any():
        floats["bytes_sum"] = np.nan_to_num(nbytes)
    zeros = np.zeros(size, dtype=np.int64)
    if known.any():
        ib_or_0 = np.nan_to_num(ib)
        floats.update(ib_ns=total * ib_or_0, exposed_ib_ns=exp * ib_or_0, ib_sum=ib_or_0)
        sums.update(unknown_ns=int_sum(np.where(known, 0, total)), exposed_unknown_ns=int_sum(np.where(known, 0, exp)),
                    ib_known=count(known), ib_zero=count(ib == 0), ib_one=count(ib == 1))  # fmt: skip
        largest = np.full(size, -np.inf)  # a max is exact in any order
        np.maximum.at(largest, group_id, np.where(known, ib, -1.0))
    else:
        sums.update(unknown_ns=total_sum, exposed_unknown_ns=exposed_sum, ib_known=zeros, ib_zero=zeros,
                    ib_one=zeros)  # fmt: skip
        largest = np.full(size, -1.0)
    sums["bytes_known"] = count(bytes_known)
    for c in ("bytes_sum", "ib_ns", "exposed_ib_ns", "ib_sum"):
        sums[c] = np.zeros(size)
    summed = [c for c, v in floats.items() if v.any()]
    if summed:
        by_group = pd.DataFrame({"group": group_id, **{c: floats[c] for c in summed}}).groupby("group", sort=True)
        agg_floats = by_group.sum()
        for c in summed:
            sums[c] = agg_floats[c].to_numpy()
    xla = lookup(op_c[rows], columns.nonempty("hlo_op"), True) | lookup(source_c[rows], source_v == "xplane", False)
    devices = np.array([p.device for p in parts], dtype=object)
    # one frame in COMM_AGG_COLUMNS order
    agg = pd.DataFrame(
        {
            "key": lookup(key_c[first], key_v, np.nan),
            "kind": lookup(kind_c[first], kind_v, np.nan),
            "device": devices[device_index[first]],
            **{c: sums[c] for c in COMM_SUMS},
            "ib_max": largest,
            "xla": np.bincount(group_id[xla], minlength=size) > 0,
        }
    )
    # group sizes: members of each distinct group string, counted per (op, kind, size) over the devices
    sizes = lookup(group_c[rows], np.array([len(str(g).split(",")) if g else 0 for g in group_v.tolist()], np.int64), 0)
    combo = combine_codes(key_c, kind_c, sizes)
    at = first_rows(combo)
    counted = pd.DataFrame(
        {
            "key": lookup(key_c[at], key_v, np.nan),
            "kind": lookup(kind_c[at], kind_v, np.nan),
            "group_size": sizes[at],
            "n": np.bincount(combo, minlength=at.size).astype(np.int64),
        }
    )
    return agg, counted


def _empty_comm() -> pd.DataFrame:
    return pd.DataFrame(
        {c: pd.Series(dtype=object if c in ("key", "kind", "device") else float) for c in COMM_AGG_COLUMNS}
    )


def _segments_frame(parts: list[tuple[str, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame(
            {
                "device": pd.Series(dtype=object),
                "start_ns": pd.Series(dtype=np.int64),
                "end_ns": pd.Series(dtype=np.int64),
            }
        )
    sizes = [s.size for _, s, _ in parts]
    # the device of each segment: a string column built from the few device names, not one object per row
    device = (
        pd.array([d for d, _, _ in parts], dtype="str").take(np.repeat(np.arange(len(parts)), sizes))
        if sum(sizes)
        else np.zeros(0, dtype=object)
    )
    return pd.DataFrame(
        {
            "device": device,
            "start_ns": np.concatenate([s for _, s, _ in parts]).astype(np.int64),
            "end_ns": np.concatenate([e for _, _, e in parts]).astype(np.int64),
        }
    )


def _group_numbers(host: pd.Series, device: pd.Series) -> np.ndarray:
    """Each row's group in a sorted group-by on (host, device) (``ngroup``): for two categorical columns without
    missing values, the rank of each row's pair of codes among the pairs present (pandas sorts categorical
    groups by their codes), not a group-by of every row (28 ms at 1M kernels)."""
    if isinstance(host.dtype, pd.CategoricalDtype) and isinstance(device.dtype, pd.CategoricalDtype) and len(host):
        host_c, device_c = host.cat.codes.to_numpy(), device.cat.codes.to_numpy()
        if int(host_c.min()) >= 0 and int(device_c.min()) >= 0:
            packed = host_c.astype(np.int64) * len(device.cat.categories) + device_c
            present = np.zeros(int(packed.max()) + 1, dtype=bool)
            present[packed] = True
            return (np.cumsum(present) - 1)[packed]
    frame = pd.DataFrame({"host": host, "device": device})
    return frame.groupby(["host", "device"], sort=True, observed=True).ngroup().to_numpy()


def _device_groups(activity: pd.DataFrame) -> list[tuple[str, str, np.ndarray]]:
    """(host, device, rows) of every device, in the order a sorted group-by on (host, device) gives."""
    number = _group_numbers(activity["host"], activity["device"])
    order = np.argsort(number, kind="stable")
    bounds = np.searchsorted(number[order], np.arange(int(number.max(initial=-1)) + 2))
    host_c, host_v = column_codes(activity["host"])
    device_c, device_v = column_codes(activity["device"])
    out = []
    for g in range(len(bounds) - 1):
        # a copy, not a view of ``order``: a device's rows kept (the loop's last) do not keep all the table's
        rows = order[bounds[g] : bounds[g + 1]].copy()
        if rows.size:
            out.append((str(host_v[host_c[rows[0]]]), str(device_v[device_c[rows[0]]]), rows))
    return out


def _value_counts(column: pd.Series) -> dict[str, int]:
    """How many rows hold each value of a string column (values present only)."""
    codes, values = column_codes(column)
    counts = np.bincount(codes + 1, minlength=len(values) + 1)
    out = {str(v): int(c) for v, c in zip(values.tolist(), counts[1:].tolist()) if c}
    if counts[0]:
        out["nan"] = int(counts[0])
    return out


def measure_file(
    trace: Trace, step_options: StepOptions | None = None, timeline: TimelineOptions | None = None
) -> FileResult:
    """Spec §4-§6 figures of every device of one classified, link-attributed trace (the map step)."""
    step_options = step_options or StepOptions()
    warnings: list[str] = list(trace.warnings)
    all_steps = find_steps(trace, step_options.marker)
    note = fallback_note(all_steps)
    if note:
        warnings.append(note)
    selecting = bool(step_options.selection or step_options.skip_first)
    selected = select_steps(all_steps, step_options.selection, step_options.skip_first)
    if selecting and selected.empty:
        raise InputError(trace.path, no_step_matches(step_options, all_steps))
    activity = trace.events
    columns = EventColumns(activity)
    devices: list[DeviceFigures] = []
    steps: list[StepFigures] = []
    comm_parts: list[_CommRows] = []
    independent: list[dict] = []
    signals: list[dict] = []
    record_parts: list[pd.DataFrame] = []
    windows: list[tuple[str, np.ndarray, np.ndarray]] = []
    exposed_parts: list[tuple[str, np.ndarray, np.ndarray]] = []
    views: list[TimelineView] = []
    replay_rows: list[np.ndarray] = []
    scope_parts: list[pd.DataFrame] = []
    op_flop_parts: list[pd.DataFrame] = []
    step_flop_parts: list[pd.DataFrame] = []
    roofline_parts: list[pd.DataFrame] = []
    role_parts: list[pd.DataFrame] = []
    steps_by_device = {str(k): g for k, g in selected.groupby("device", sort=False)} if len(selected) else {}
    all_by_device = all_steps["device"].value_counts().to_dict() if len(all_steps) else {}
    prints: list[DeviceFingerprint] = []
    modules = trace.markers[trace.markers["kind"] == "module"]
    modules_by_device = {
        str(d): (g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
        for d, g in modules.groupby("device", sort=False, observed=True)
    }
    for host, device, positions in _device_groups(activity) if len(activity) else []:
        timeline_rows = DeviceTimeline(activity, positions, columns)
        prints.append(device_fingerprint(timeline_rows.start, timeline_rows.end, by_start=True))
        device_steps = steps_by_device.get(device)
        if selecting:
            if device_steps is None:
                continue  # this device ran nothing in the selected steps
            win_s, win_e = iv.union(device_steps["start_ns"].to_numpy(), device_steps["end_ns"].to_numpy())
        else:
            lo, hi = timeline_rows.bounds
            win_s, win_e = np.array([lo], np.int64), np.array([hi], np.int64)
        whole = timeline_rows.measure(win_s, win_e)
        replay_rows.append(timeline_rows.positions)
        kind = trace.kind_of(device)
        devices.append(DeviceFigures(device=device, host=host, kind=kind, **_fields(whole.figures)))
        windows.append((device, win_s, win_e))
        exposed_parts.append((device, *whole.exposed_segments))
        if device_steps is not None:
            numbers = device_steps["step"].to_numpy()
            starts = device_steps["start_ns"].to_numpy(dtype=np.int64)
            ends = device_steps["end_ns"].to_numpy(dtype=np.int64)
            each = timeline_rows.measure_each(starts, ends, whole)
            for step, s, e, figures in zip(numbers.tolist(), starts.tolist(), ends.tolist(), each, strict=True):
                steps.append(
                    StepFigures(step=int(step), device=device, host=host, start_ns=s, end_ns=e, **_fields(figures))
                )
            step_flop_parts.append(device_step_flops(device, timeline_rows, whole.clipped, numbers, starts, ends))
        scope_parts.append(device_scopes(device, timeline_rows, whole.clipped))
        op_flop_parts.append(device_op_flops(device, timeline_rows, whole.clipped))
        n_steps = len(device_steps) if (selecting and device_steps is not None) else int(all_by_device.get(device, 0))
        roofline_parts.append(device_roofline(device, timeline_rows, whole.clipped))
        role_parts.append(device_roles(device, timeline_rows, whole.clipped, win_s, win_e, max(n_steps, 1), whole))
        signals.extend(device_signals(timeline_rows, whole, max(n_steps, 1), device, kind))
        if kind == TPU:  # one program per step: its idle time between programs is the host's
            runs = modules_by_device.get(device)
            if runs is not None:
                starts_m, ends_m = runs
                signals.extend(host_gap_signal(device, starts_m, ends_m, win_s, win_e, max(n_steps, 1)))
        if trace.hlo:
            independent.extend(_independent_compute(device, timeline_rows, whole.clipped, dict(trace.hlo)))
        comm = timeline_rows.is_comm & (whole.clipped > 0)
        if comm.any():
            comm_parts.append(
                _CommRows(device, timeline_rows.positions[comm], whole.clipped[comm], whole.exposed[comm])
            )
        if timeline_rows.is_comm.any():
            record_parts.append(comm_records(trace, timeline_rows, timeline_rows.is_comm))
        if timeline is not None:
            views.append(device_view(device, timeline_rows, whole, win_s, win_e, device_steps, timeline))
    rules = _value_counts(activity["rule"]) if len(activity) else {}
    if "unmatched" in rules:
        warnings.append(f"{rules['unmatched']} activities matched no taxonomy rule and count as 'other'")
    comm_table, group_sizes = _comm_tables(columns, comm_parts)
    records = pd.concat(record_parts, ignore_index=True) if record_parts else empty_records()
    # the devices' comm rows and record frames are summed and stacked: freed before the replay's columns are built
    comm_parts.clear()
    record_parts.clear()
    return FileResult(
        inputs=[trace.path],
        format=trace.format,
        devices=devices,
        steps=steps,
        comm=comm_table,
        group_sizes=group_sizes,
        independent=pd.DataFrame(independent, columns=["device", "key", "independent_ns"]),
        signals=signals,
        rules=rules,
        warnings=warnings,
        dropped_activities=trace.dropped_activities,
        launches=dict(trace.launches),
        facts=stack_facts(trace),
        device_ids={str(d): int(g) for d, g in trace.devices.items()} or _device_ids(activity),
        clocks=clock_domains(trace),
        records=records,
        windows=_segments_frame(windows),
        exposed=_segments_frame(exposed_parts),
        job={"world_size": trace.job.world_size, "rank": trace.job.rank, "format": trace.format},
        timeline=views,
        step_count=int(all_steps["step"].nunique()) if len(all_steps) else 0,
        replay=replay_table(trace, columns, replay_rows),
        syncs=trace.host_syncs if len(trace.host_syncs) else empty_syncs(),
        models=dict(trace.device_models),
        step_positions=step_positions(all_steps, selected, step_options.skip_first),
        who=identify(trace, prints),
        scopes=_stacked(scope_parts, SCOPE_COLUMNS),
        op_flops=_stacked(op_flop_parts, OP_FLOP_COLUMNS),
        step_flops=_stacked(step_flop_parts, STEP_FLOP_COLUMNS),
        peaks={d: dict(p) for d, p in trace.device_peaks.items()},
        roofline=_stacked(roofline_parts, ROOFLINE_COLUMNS),
        roles=_stacked(role_parts, ROLE_COLUMNS),
        expert_rows=_expert_rows(trace, columns),
        splits=trace.alltoall_splits,
    )


def _expert_rows(trace: Trace, columns: EventColumns) -> pd.DataFrame:
    """The rows the file's expert GEMMs compute (core.padding.expert_gemm_rows) as EXPERT_ROW_COLUMNS."""
    if not trace.hlo or not len(trace.events):
        return pd.DataFrame(columns=EXPERT_ROW_COLUMNS)
    roles = roles_of(columns)
    found = expert_gemm_rows(trace, roles == role_table().index["experts"])
    return pd.DataFrame({"rows": list(found), "ops": list(found.values())}, columns=EXPERT_ROW_COLUMNS)


def _stacked(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def step_positions(all_steps: pd.DataFrame, selected: pd.DataFrame, skip_first: int) -> dict[int, int]:
    """Each measured step's position as ``--steps`` counts it: 0-based among the steps after --skip-first."""
    if not len(selected):
        return {}
    numbers = np.sort(all_steps["step"].unique())[skip_first:]
    wanted = set(selected["step"].unique().tolist())
    return {int(n): i for i, n in enumerate(numbers.tolist()) if n in wanted}


def no_step_matches(options: StepOptions, steps: pd.DataFrame) -> str:
    """The refusal of a step selection that selects nothing, naming what the trace has."""
    asked = " ".join(
        part
        for part in (
            f"--skip-first {options.skip_first}" if options.skip_first else "",
            f"--steps {options.selection}" if options.selection else "",
        )
        if part
    )
    numbers = sorted({int(s) for s in steps["step"].unique()}) if len(steps) else []
    if not numbers:
        return f"{asked} selects steps, but the trace marks none (no step markers, no XLA module executions)"
    shown = ", ".join(map(str, numbers[:12])) + (", ..." if len(numbers) > 12 else "")
    # --steps counts positions, the trace its own numbers: say both, so "step 6" and "--steps 2" meet
    left = len(numbers) - options.skip_first
    if left <= 0:
        positions = f"--skip-first {options.skip_first} leaves none"
    else:
        after = f" after --skip-first {options.skip_first}" if options.skip_first else ""
        positions = "--steps takes position 0" if left == 1 else f"--steps takes positions 0 to {left - 1}"
        positions += after
    return (
        f"{asked} matches no step: the trace has {plural(len(numbers), 'step')} "
        f"(numbered {shown} by the trace; {positions})"
    )


def _fields(figures: object) -> dict:
    from ..core.analysis import NS_KEYS

    return {k: getattr(figures, k) for k in NS_KEYS}


def _device_ids(activity: pd.DataFrame) -> dict[str, int]:
    if not len(activity):
        return {}
    pairs = activity[["device", "global_id"]].drop_duplicates("device")
    return dict(zip(pairs["device"].astype(str), pairs["global_id"].astype(int), strict=True))
