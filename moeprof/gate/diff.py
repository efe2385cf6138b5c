"""Side-by-side comparison of analyses: ``moeprof diff`` as a library.

Times are normalized to **one device and one step** (totals divided by devices x
measured steps), so a 2-step capture compares with a 5-step one and an 8-device
run with a 16-device run; ratios need no normalization. Deltas are given against
the first run and against the previous one. When every input is a run folder the
comparison also carries an ablation table (throughput and the gain each run
contributed), and runs that differ in device count or topology are flagged.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from ..core.analysis import Analysis, Collective, Opportunity
from .check import Source, measure, step_count, step_time_ns

DIFF_SCHEMA = "moeprof.diff/1"

BUCKETS = (
    ("compute", "compute_ns"),
    ("comm NVLink", "comm_nvlink_ns"),
    ("comm IB", "comm_ib_ns"),
    ("comm unknown link", "comm_unknown_link_ns"),
    ("memcpy", "memcpy_ns"),
    ("other", "other_ns"),
    ("idle", "idle_ns"),
)


@dataclass
class RunInfo:
    label: str
    path: str
    kind: str
    devices: int
    hosts: int | None
    devices_per_host: int | None
    nvlink_domain: str | None
    steps: int
    throughput: dict | None

    @property
    def topology(self) -> str:
        domain = f", NVLink domain {self.nvlink_domain}" if self.nvlink_domain else ""
        return f"{self.devices} devices, {self.hosts} host(s) x {self.devices_per_host}{domain}"


def labels(n: int) -> list[str]:
    return [chr(ord("A") + i) if i < 26 else f"R{i}" for i in range(n)]


def run_info(label: str, source: Source) -> RunInfo:
    """Devices and topology: the manifest's record where there is one, else what the trace shows."""
    a = source.analysis
    devices = a.devices
    per_host: dict[str, int] = {}
    for d in devices:
        per_host[d.host] = per_host.get(d.host, 0) + 1
    topo = (a.manifest or {}).get("topology") or {}
    domain = topo.get("nvlink_domain")
    return RunInfo(
        label=label,
        path=str(source.path),
        kind=source.kind,
        devices=len(devices),
        hosts=topo.get("hosts") or len(per_host),
        devices_per_host=topo.get("devices_per_host") or (max(per_host.values()) if per_host else 0),
        nvlink_domain=None if domain is None else str(domain),
        steps=step_count(a),
        throughput=dict(a.throughput) if a.throughput else None,
    )


def topology_warning(runs: list[RunInfo]) -> str | None:
    """One line when runs differ in device count, hosts, devices per host or NVLink domain."""
    keys = {(r.devices, r.hosts, r.devices_per_host) for r in runs}
    domains = {r.nvlink_domain for r in runs if r.nvlink_domain is not None}
    if len(keys) <= 1 and len(domains) <= 1:
        return None
    what = "; ".join(f"{r.label}: {r.topology}" for r in runs)
    return f"runs differ in device count or topology ({what}): a single-node win can vanish across racks"


def _row(section: str, name: str, unit: str, values: list[float | None]) -> dict:
    def delta(v: float | None, ref: float | None) -> float | None:
        return None if v is None or ref is None else v - ref

    def change(v: float | None, ref: float | None) -> float | None:
        # relative change only for amounts; a ratio's change is its delta in points
        return None if unit == "ratio" or v is None or not ref else v / ref - 1

    first = values[0]
    return {
        "section": section,
        "name": name,
        "unit": unit,
        "values": values,
        "delta_first": [delta(v, first) for v in values],
        "change_first": [change(v, first) for v in values],
        "delta_previous": [None] + [delta(v, p) for p, v in pairwise(values)],
        "change_previous": [None] + [change(v, p) for p, v in pairwise(values)],
    }


def _kinds(items: list[Collective] | list[Opportunity]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        seen.setdefault(item.kind, None)
    return list(seen)


def _by_kind(rows: tuple[Collective, ...] | tuple[Opportunity, ...], kind: str, key: str) -> float:
    return float(sum(getattr(r, key) or 0 for r in rows if r.kind == kind))


def _bytes_per_call(rows: tuple[Collective, ...], kind: str) -> float | None:
    sized = [r for r in rows if r.kind == kind and r.bytes is not None and r.count]
    calls = sum(r.count for r in sized)
    return float(sum(r.bytes or 0 for r in sized)) / calls if calls else None


def compare(sources: list[Source]) -> dict:
    """The ``moeprof.diff/1`` object for two or more analyses, in the order given."""
    if len(sources) < 2:
        raise ValueError("diff needs two or more inputs")
    runs = [run_info(label, s) for label, s in zip(labels(len(sources)), sources)]
    analyses = [s.analysis for s in sources]
    # totals over devices and steps -> one device-step, in ms
    norms = [max(r.devices, 1) * r.steps for r in runs]

    def per_device_step(values: list[float]) -> list[float | None]:
        return [v / n / 1e6 for v, n in zip(values, norms)]

    def total(key: str) -> list[float]:
        return [a.total.value(key) for a in analyses]

    rows = [_row("buckets", name, "ms", per_device_step(total(key))) for name, key in BUCKETS]
    rows += [
        _row("comm", "accumulated", "ms", per_device_step(total("accumulated_ns"))),
        _row("comm", "comm share", "ratio", [measure(a, "comm_share").value for a in analyses]),
        _row("comm", "exposed comm", "ms", per_device_step(total("exposed_comm_ns"))),
        # §8 split, where a run had the traces of several members of a group (None elsewhere)
        _row(
            "comm",
            "exposed: waiting for the last rank",
            "ms",
            [v if a.ledger is not None else None for v, a in zip(per_device_step(total("exposed_wait_ns")), analyses)],
        ),
        _row(
            "comm",
            "exposed: moving bytes",
            "ms",
            [
                v if a.ledger is not None else None
                for v, a in zip(per_device_step(total("exposed_transfer_ns")), analyses)
            ],
        ),
        _row("comm", "exposed comm / span", "ratio", [measure(a, "exposed_comm_fraction").value for a in analyses]),
        _row("comm", "step time", "ms", [step_time_ns(a) / 1e6 for a in analyses]),
    ]
    collectives = [a.collectives for a in analyses]
    for kind in _kinds([c for cs in collectives for c in cs]):
        rows.append(
            _row(
                "collectives",
                f"{kind} total",
                "ms",
                per_device_step([_by_kind(cs, kind, "total_ns") for cs in collectives]),
            )
        )
        rows.append(
            _row(
                "collectives",
                f"{kind} exposed",
                "ms",
                per_device_step([_by_kind(cs, kind, "exposed_ns") for cs in collectives]),
            )
        )
        rows.append(
            _row("collectives", f"{kind} bytes/call", "bytes", [_bytes_per_call(cs, kind) for cs in collectives])
        )
    opportunities = [a.opportunities for a in analyses]
    for kind in _kinds([o for os_ in opportunities for o in os_]):
        # a saving bound is already one (the worst) device's time: divide by steps only
        rows.append(
            _row(
                "opportunities",
                f"{kind} saving bound",
                "ms",
                [_by_kind(os_, kind, "saving_bound_ns") / r.steps / 1e6 for os_, r in zip(opportunities, runs)],
            )
        )
    warnings = [w for w in [topology_warning(runs)] if w]
    return {
        "schema": DIFF_SCHEMA,
        "normalization": "times in ms per device and step (totals / (devices x steps)); saving bounds per step",
        "runs": [
            {
                "label": r.label,
                "path": r.path,
                "kind": r.kind,
                "devices": r.devices,
                "hosts": r.hosts,
                "devices_per_host": r.devices_per_host,
                "nvlink_domain": r.nvlink_domain,
                "steps": r.steps,
                "throughput": r.throughput,
            }
            for r in runs
        ],
        "rows": rows,
        "ablation": ablation(runs, analyses) if all(s.kind == "run" for s in sources) else None,
        "warnings": warnings,
    }


def ablation(runs: list[RunInfo], analyses: list[Analysis]) -> dict:
    """Per run in order: throughput, comm figures and the gain over the previous run and over the first.

    The gain is the ratio of tokens/s when every run reports it, else the inverse
    ratio of step times (a shorter step is a gain).
    """
    tokens = [(r.throughput or {}).get("tokens_per_second") for r in runs]
    step_ms = [step_time_ns(a) / 1e6 for a in analyses]
    use_tokens = all(t for t in tokens)
    speed: list[float | None] = (
        [float(t) for t in tokens if t is not None] if use_tokens else [1 / s if s else None for s in step_ms]
    )

    def ratio(v: float | None, ref: float | None) -> float | None:
        return v / ref if v is not None and ref else None

    rows = []
    for i, (r, a) in enumerate(zip(runs, analyses)):
        rows.append(
            {
                "label": r.label,
                "path": r.path,
                "tokens_per_second": tokens[i],
                "tflops_per_device": (r.throughput or {}).get("tflops_per_device"),
                "step_ms": step_ms[i],
                "comm_share": measure(a, "comm_share").value,
                "exposed_comm_ms": a.total.exposed_comm_ns / max(r.devices, 1) / r.steps / 1e6,
                "gain_vs_previous": ratio(speed[i], speed[i - 1]) if i else None,
                "gain_vs_first": ratio(speed[i], speed[0]) if i else None,
            }
        )
    return {"metric": "tokens_per_second" if use_tokens else "1/step_time", "runs": rows}
