"""Spec §9 in one place: which projections a job gets, when a replay is affordable, and what each buys.

The pipeline calls :func:`project_analysis` once per job; it returns the analysis carrying its
projections as plain data (``Analysis.projections``, each with the question it answers: its ``role``)
and, beside it, the :class:`Projector` that made them (the replay columns and graph), which serves the
further projections a renderer draws (the HTML report's projected timeline, ``annotate --what-if``,
``diff``). Renderers never project: they print what the analysis carries.

The projections a job gets ("what would it buy"):

* ``straggler``: ``balance``, every rank as fast as the median rank (spec §9's term), for a job of
  several devices;
* ``router``: ``balance-router``, what a balanced router does (the routed experts' work spread evenly
  over each EP group, work conserved: :func:`moeprof.core.projection.router_balanced`), where the job
  shows routed-expert work;
* ``asked``: the terms ``--what-if`` asked for;
* ``opportunity``: each of the top opportunities made free (``scale(opportunity=N)=0``; a straggler
  finding: ``balance(opportunity=N)``), at the opportunity's own ``projected_saving_ns``;
* ``kind``: each collective kind at half its transfer (``scale(kind=K)=0.5``).

The JSON lists them in that order (spec §9: the balance projection first, then the one asked for).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from ..core.analysis import (
    SIGNIFICANT_SAVING,
    Analysis,
    Opportunity,
    PathSegment,
    Projection,
    StepBound,
)
from ..core.projection import ReplayJob
from ..core.replay import has_compiled
from ..errors import InputError
from .opportunities import PROJECTED_SIGNIFICANT, rank_by_projection
from .whatif import (
    BALANCE,
    BALANCE_ROUTER,
    GAP_OPPORTUNITIES,
    Change,
    change_of,
    opportunity_savings,
    parse_terms,
)

# the replay's size limits, here only
NUMPY_REPLAY_LIMIT = 50_000  # activities the numpy replay projects in seconds (without the C sweep or numba)
DRAWN_UNASKED_LIMIT = 100_000  # activities up to which the HTML report draws the balance projection unasked
TOP_OPPORTUNITIES = 3  # opportunities in "what would it buy"

LABELS = {
    "straggler": "every rank as fast as the median rank (the straggler fix)",
    "router": "balance the router: expert work spread evenly over the devices, work conserved",
    "asked": "asked for (--what-if)",
}
ROLE_ORDER = ("straggler", "asked", "router", "opportunity", "kind")  # the JSON's order (spec §9: balance first)


def affordable(size: int) -> bool:
    """Whether a job of ``size`` activities is projected in seconds: the compiled replay (C, numba) at any
    size, the numpy one up to ``NUMPY_REPLAY_LIMIT`` (its relaxation takes one pass per edge of the longest
    chain: hours at a million activities)."""
    return size <= NUMPY_REPLAY_LIMIT or has_compiled()


def too_large(size: int) -> str:
    """Why a job of ``size`` activities is not projected (one sentence)."""
    return (
        f"{size:,} activities need the compiled replay (pip install 'moeprof[fast]' installs numba); without it "
        f"only jobs up to {NUMPY_REPLAY_LIMIT:,} activities are projected"
    )


def step_bound(path: Sequence[PathSegment]) -> StepBound | None:
    """What sets a step's end: the cause with the most time on its critical path, its share of the path,
    and the devices that time lies on (the most first, at most 4)."""
    by_device: dict[str, dict[str, int]] = {}
    for device, _, _, cause, _, start_ns, end_ns in path:  # (tens of thousands of segments: no attribute look-ups)
        per = by_device.setdefault(cause, {})
        per[device] = per.get(device, 0) + end_ns - start_ns
    return bound_of(by_device)


def bound_of(by_device: Mapping[str, Mapping[str, int]]) -> StepBound | None:
    """:func:`step_bound` from a path's time per cause, per device."""
    by_cause = {c: sum(per.values()) for c, per in by_device.items()}
    total = sum(by_cause.values())
    if total <= 0:
        return None
    cause = max(by_cause, key=lambda c: (by_cause[c], c))
    devices = sorted(by_device[cause], key=lambda d: (-by_device[cause][d], d))[:4]
    return StepBound(cause, by_cause[cause] / total, tuple(devices))


@dataclass
class Projector:
    """The engine of a job's projections: its replay columns and graph (built once), the opportunities the
    ``opportunity=N`` filter counts, the throughput projections scale. Kept beside the analysis (never in it)."""

    job: ReplayJob
    opportunities: tuple[Opportunity, ...] = ()
    throughput: Mapping[str, Any] | None = None
    _last: tuple[tuple[str, ...], tuple[Change, np.ndarray, np.ndarray]] | None = field(default=None, repr=False)
    _change: tuple[tuple[str, ...], tuple[Opportunity, ...], Change] | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return self.job.size

    @property
    def affordable(self) -> bool:
        return affordable(self.job.size)

    def check(self, terms: Sequence[str]) -> None:
        """Refuse (exit 2) terms this install cannot project in seconds."""
        if not self.affordable:
            raise InputError(None, f"--what-if {' '.join(terms)}: {too_large(self.job.size)}")

    def change(self, terms: Sequence[str]) -> Change:
        """The change of ``terms`` without its replay (kept for the replay that may follow): what a term
        selects is known before the replay is paid for."""
        key = tuple(terms)
        kept = self._change
        if kept is None or kept[0] != key or kept[1] is not self.opportunities:
            kept = self._change = (key, self.opportunities, change_of(self.job, parse_terms(terms), self.opportunities))
        return kept[2]

    def _replay(self, terms: Sequence[str]) -> tuple[Change, np.ndarray, np.ndarray]:
        """The change of ``terms`` and its replay; the last one is kept (a projection and its timeline are
        drawn from one replay)."""
        key = tuple(terms)
        if self._last is None or self._last[0] != key:
            change = self.change(terms)
            s, e = self.job.run(change.duration, change.transfer, change.gap)
            self._last = (key, (change, s, e))
        return self._last[1]

    def project(self, terms: Sequence[str], figures: bool = True, role: str = "", label: str = "") -> Projection:
        """The projection of ``terms``: step times, critical path, what bounds it, and (``figures``) the
        projected timeline's §4/§8 figures per device."""
        parsed = parse_terms(terms)
        change, s, e = self._replay([t.text for t in parsed])
        throughput = dict(self.throughput) if self.throughput else None
        projection = self.job.projection([t.text for t in parsed], s, e, figures=figures, throughput=throughput)
        note = ""
        if change.router is not None and not change.router.expert_rows:
            note = (
                "no routed-expert work found (no experts scope in the HLO op names, no grouped-GEMM, megablox "
                "or fused-MoE kernel): the router term changes nothing"
            )
        elif change.router is not None and not change.router.exchange_rows:
            note = "no dispatch/combine found: the expert work is spread evenly per step"
        elif change.router is not None and change.router.unplaced_ns:
            note = f"{change.router.unplaced_ns / 1e6:.3f} ms of expert work had no activity to carry it"
        return replace(
            projection,
            role=role,
            label=label,
            selected=sum(change.selected),
            bound=step_bound(projection.critical_path),
            note=note,
        )

    def events(self, terms: Sequence[str]) -> pd.DataFrame:
        """The job's activities (the replay's columns) with the projected ``start_ns``/``end_ns`` on each
        device's own clock (the measured ones kept as ``measured_*``), ``step``, and ``critical`` marking the
        critical path's activities: what the HTML timeline and ``annotate --what-if`` draw."""
        job = self.job
        _, s, e = self._replay([t.text for t in parse_terms(terms)])
        out = job.table.copy()
        out["measured_start_ns"] = out["start_ns"]
        out["measured_end_ns"] = out["end_ns"]
        out["start_ns"] = s + job.delta
        out["end_ns"] = e + job.delta
        out["step"] = job.step
        critical = np.zeros(job.size, dtype=bool)
        spans = job.step_spans(s, e)
        if spans.size:
            worst = int(job.step_numbers[int(np.argmax(spans))])
            critical[job.critical_rows(s, e, worst)] = True
        out["critical"] = critical
        return out

    def step_windows(self, terms: Sequence[str]) -> pd.DataFrame:
        """Each device's §5 step windows on the timeline ``terms`` project (device, step, start_ns, end_ns, on
        the device's own clock): the projected timeline's step markers."""
        _, s, e = self._replay([t.text for t in parse_terms(terms)])
        return self.job.step_windows(s, e)

    def measured_bound(self) -> StepBound | None:
        """What sets the end of the measured job's longest step (its critical path without any change)."""
        g = self.job.graph
        spans = self.job.measured_spans
        if not spans.size:
            return None
        worst = int(self.job.step_numbers[int(np.argmax(spans))])
        return bound_of(self.job.critical_time(g.start, g.end, worst))

    def measured_step_ns(self) -> int:
        """§9's step time, measured: the mean over steps of the job's §5 window (aligned)."""
        spans = self.job.measured_spans
        return int(round(float(spans.mean()))) if spans.size else 0


def _end_saving(projector: Projector, e: np.ndarray) -> int:
    job = projector.job
    if not job.step_rows.size:
        return 0
    return job.steps_end_saving_of(int(e[job.step_rows].max()))


def opportunity_term(index: int, opportunity: Opportunity) -> str:
    """The what-if term of opportunity ``index`` (from 1) made free; a straggler's: its work balanced."""
    if opportunity.kind == "straggler":
        return f"balance(opportunity={index})"
    return f"scale(opportunity={index})=0"


def with_savings(projector: Projector, opportunities: Sequence[Opportunity], step_ns: float) -> list[Opportunity]:
    """Every opportunity with its ``projected_saving_ns``: activities made free (the replay's savings,
    :func:`moeprof.insight.whatif.opportunity_savings`), launch gaps closed, small GEMMs grouped, a
    straggler's work balanced; ranked by it."""
    job = projector.job
    savings = opportunity_savings(job, opportunities, PROJECTED_SIGNIFICANT * step_ns)
    out = [
        replace(o, projected_saving_ns=s.ns, projected_saving_max_ns=s.max_ns)
        for o, s in zip(opportunities, savings, strict=True)
    ]
    projector.opportunities = tuple(out)
    for i, o in enumerate(out):
        if o.kind in GAP_OPPORTUNITIES or o.kind == "straggler":
            _, _, e = projector._replay([opportunity_term(i + 1, o)])
            # a straggler's work balanced to the median of its counterparts can end the steps later (the
            # median is not the mean): that buys nothing, a saving of 0, never a negative one
            saving = max(_end_saving(projector, e), 0)
            out[i] = replace(o, projected_saving_ns=saving, projected_saving_max_ns=None)
    return rank_by_projection(out, step_ns)


def _row(role: str, label: str, terms: tuple[str, ...], step_ns: int, saving: int) -> Projection:
    """A table row from a saving computed end to end (an opportunity's): the step, projected, and the saving."""
    return Projection(
        what_if=terms,
        measured_step_ns=step_ns,
        projected_step_ns=step_ns - saving,
        saving_ns=saving,
        role=role,
        label=label,
    )


def comm_kinds(analysis: Analysis) -> list[str]:
    """Collective kinds, most exposed time first (ties: most time)."""
    exposed: dict[str, tuple[int, int]] = {}
    for c in analysis.collectives:
        e, t = exposed.get(c.kind, (0, 0))
        exposed[c.kind] = (e + c.exposed_ns, t + c.total_ns)
    return sorted(exposed, key=lambda k: (-exposed[k][0], -exposed[k][1], k))


def project_analysis(
    analysis: Analysis, job: ReplayJob | None, what_if: Sequence[str] = ()
) -> tuple[Analysis, Projector | None]:
    """§9 for a measured job: its step time, what bounds it, the opportunities' projected savings (ranked by
    them), and the projections of "what would it buy"; with the :class:`Projector` beside it."""
    parsed = parse_terms(what_if)  # a bad term fails before any work
    if job is None:
        if parsed:
            raise InputError(None, f"--what-if {what_if[0]!r}: the analysis has no device activity to project")
        return analysis, None
    projector = Projector(job, analysis.opportunities, analysis.throughput)
    step_ns = projector.measured_step_ns()
    analysis = analysis.with_(step_ns=step_ns)
    if not projector.affordable:
        note = f"projections skipped: {too_large(job.size)}"
        if parsed:
            raise InputError(None, f"--what-if {what_if[0]!r}: {note}")
        return analysis.with_warnings(note), projector
    # the savings first: the opportunities are then in the order the user sees, which opportunity=N counts
    opportunities = with_savings(projector, analysis.opportunities, float(step_ns))
    projector.opportunities = tuple(opportunities)
    several = len(job.device_names) > 1
    projections: list[Projection] = []
    if several:
        projections.append(projector.project([BALANCE], role="straggler", label=LABELS["straggler"]))
    if parsed:
        projections.append(projector.project(list(what_if), role="asked", label=LABELS["asked"]))
    # no expert work found: no row (asked for, its own row says why), and no replay to make it
    if several and any(n > 0 for n in projector.change([BALANCE_ROUTER]).selected):
        projections.append(projector.project([BALANCE_ROUTER], role="router", label=LABELS["router"]))
    for i, o in enumerate(opportunities[:TOP_OPPORTUNITIES], 1):
        if o.projected_saving_ns is None:
            continue  # bounded only: under 1% of the step, not replayed
        label = f"opportunity {i} at 0 (below)" if o.kind != "straggler" else f"opportunity {i} balanced (below)"
        projections.append(_row("opportunity", label, (opportunity_term(i, o),), step_ns, o.projected_saving_ns))
    for kind in comm_kinds(analysis):
        terms = [f"scale(kind={kind})=0.5"]
        projections.append(projector.project(terms, figures=False, role="kind", label=f"{kind} at half its transfer"))
    bound = projector.measured_bound()
    return (
        analysis.with_(projections=tuple(projections), opportunities=tuple(opportunities), step_bound=bound),
        projector,
    )


__all__ = [
    "DRAWN_UNASKED_LIMIT",
    "NUMPY_REPLAY_LIMIT",
    "SIGNIFICANT_SAVING",
    "Projector",
    "affordable",
    "comm_kinds",
    "project_analysis",
    "step_bound",
    "too_large",
]
