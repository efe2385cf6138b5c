"""Spec §9 for a measured job: which projections it gets and what each buys (:func:`project_analysis`).

The pipeline calls :func:`project_analysis` once per job; it returns the analysis carrying its
projections as plain data (``Analysis.projections``, each with the question it answers: its ``role``)
and, beside it, the :class:`.projector.Projector` that made them, which serves the further projections a
renderer draws (the HTML report's projected timeline, ``annotate --what-if``, ``diff``). Renderers never
project: they print what the analysis carries.

The projections a job gets ("what would it buy"):

* ``straggler``: ``balance``, every rank as fast as the median rank (spec §9's term), for a job of
  several devices;
* ``router``: ``balance-router``, what a balanced router does (the routed experts' work spread evenly
  over each EP group, work conserved: :func:`.terms.balance_router.router_balanced`), where the job
  shows routed-expert work;
* ``asked``: the terms ``--what-if`` asked for;
* ``opportunity``: each of the top opportunities made free (``scale(opportunity=N)=0``; a straggler
  finding: ``balance(opportunity=N)``; an on-chip lever at its roof: ``roof(opportunity=N)``), at the
  opportunity's own ``projected_saving_ns``;
* ``kind``: each collective kind at half its transfer (``scale(kind=K)=0.5``).

The JSON lists them in that order (spec §9: the balance projection first, then the one asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ...core.analysis import Analysis, Opportunity, Projection
from ...core.expert_load import RoutedLoad
from ...core.roofline import ON_CHIP
from ...errors import InputError
from ..opportunities import PROJECTED_SIGNIFICANT, rank_by_projection
from .job import ReplayJob
from .projector import Projector, too_large
from .savings import opportunity_savings
from .selection import GAP_OPPORTUNITIES
from .terms import BALANCE, BALANCE_ROUTER, parse_terms

TOP_OPPORTUNITIES = 3  # opportunities in "what would it buy"
LABELS = {
    "straggler": "every rank as fast as the median rank (the straggler fix)",
    "router": "balance the router: expert work spread evenly over the devices, work conserved",
    "asked": "asked for (--what-if)",
}
ROLE_ORDER = ("straggler", "asked", "router", "opportunity", "kind")  # the JSON's order (spec §9: balance first)
DETAILS = ("full", "screen", "none")  # what project_analysis computes: every figure, what the terminal shows, none


def _end_saving(projector: Projector, e: np.ndarray) -> int:
    job = projector.job
    if not job.step_rows.size:
        return 0
    return job.steps_end_saving_of(int(e[job.step_rows].max()))


def opportunity_term(index: int, opportunity: Opportunity) -> str:
    """The what-if term of opportunity ``index`` (from 1) made free; a straggler's: its work balanced; an on-chip
    lever's: its activities at the chip's roof (its own terms)."""
    if opportunity.kind == "straggler":
        return f"balance(opportunity={index})"
    if opportunity.kind == ON_CHIP:
        return f"roof(opportunity={index})"
    return f"scale(opportunity={index})=0"


def opportunity_label(index: int, opportunity: Opportunity) -> str:
    """The "what would it buy" row of opportunity ``index`` (from 1), in words."""
    if opportunity.kind == "straggler":
        return f"opportunity {index} balanced (below)"
    if opportunity.kind == ON_CHIP:
        return f"opportunity {index} at its roof (below)"
    return f"opportunity {index} at 0 (below)"


def with_savings(projector: Projector, opportunities: Sequence[Opportunity], step_ns: float) -> list[Opportunity]:
    """Every opportunity with its ``projected_saving_ns``: activities made free (the replay's savings,
    :func:`.savings.opportunity_savings`), launch gaps and a TPU's host gaps closed, small GEMMs grouped, a
    straggler's work balanced, an on-chip lever's activities at their roof; ranked by it."""
    job = projector.job
    savings = opportunity_savings(job, opportunities, PROJECTED_SIGNIFICANT * step_ns)
    out = [
        replace(o, projected_saving_ns=s.ns, projected_saving_max_ns=s.max_ns)
        for o, s in zip(opportunities, savings, strict=True)
    ]
    projector.opportunities = tuple(out)
    for i, o in enumerate(out):
        if o.kind in GAP_OPPORTUNITIES or o.kind in ("straggler", ON_CHIP):
            _, _, e = projector._replay([opportunity_term(i + 1, o)])
            # a straggler's work balanced to the median of its counterparts can end the steps later (the
            # median is not the mean): that buys nothing, a saving of 0, never a negative one
            saving = max(_end_saving(projector, e), 0)
            out[i] = replace(o, projected_saving_ns=saving, projected_saving_max_ns=None)
    return rank_by_projection(out, step_ns, max(int(job.step_numbers.size), 1))


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
    analysis: Analysis,
    job: ReplayJob | None,
    what_if: Sequence[str] = (),
    detail: str = "full",
    routed: RoutedLoad | None = None,
) -> tuple[Analysis, Projector | None]:
    """§9 for a measured job: its step time, what bounds it, the opportunities' projected savings (ranked by
    them), and the projections of "what would it buy"; with the :class:`Projector` beside it.

    ``detail`` (:data:`DETAILS`): ``full``, every figure (the JSON, the report, the gates); ``screen``, what the
    terminal shows (every projection's step times, saving and bound, without the projected timeline's
    figures per device or the critical path's segments); ``none``, the measured step time alone
    (``--no-projection``: no replay, no graph). ``routed``: the tokens the run routed per layer and expert
    (spec §11), where measured: ``balance-router`` spreads those rows (:attr:`ReplayJob.routed`)."""
    if detail not in DETAILS:
        raise ValueError(f"detail {detail!r} is not one of {', '.join(DETAILS)}")
    parsed = parse_terms(what_if)  # a bad term fails before any work
    if job is None:
        if parsed:
            raise InputError(None, f"--what-if {what_if[0]!r}: the analysis has no device activity to project")
        return analysis, None
    if routed is not None:
        job.routed = routed
    projector = Projector(job, analysis.opportunities, analysis.throughput)
    step_ns = projector.measured_step_ns()
    analysis = analysis.with_(step_ns=step_ns)
    if detail == "none":
        if parsed:
            raise InputError(None, f"--what-if {what_if[0]!r}: projections are off (--no-projection)")
        return analysis, projector
    if not projector.affordable:
        note = f"projections skipped: {too_large(job.size)}"
        if parsed:
            raise InputError(None, f"--what-if {what_if[0]!r}: {note}")
        return analysis.with_warnings(note), projector
    # the savings first: the opportunities are then in the order the user sees, which opportunity=N counts
    opportunities = with_savings(projector, analysis.opportunities, float(step_ns))
    projector.opportunities = tuple(opportunities)
    several = len(job.device_names) > 1
    full = detail == "full"
    projections: list[Projection] = []
    if several:
        projections.append(projector.project([BALANCE], full, role="straggler", label=LABELS["straggler"], path=full))
    if parsed:
        projections.append(projector.project(list(what_if), full, role="asked", label=LABELS["asked"], path=full))
    # no expert work found: no row (asked for, its own row says why), and no replay to make it
    if several and any(n > 0 for n in projector.change([BALANCE_ROUTER]).selected):
        projections.append(projector.project([BALANCE_ROUTER], full, role="router", label=LABELS["router"], path=full))
    for i, o in enumerate(opportunities[:TOP_OPPORTUNITIES], 1):
        if o.projected_saving_ns is None:
            continue  # bounded only: under 1% of the step, not replayed
        projections.append(
            _row("opportunity", opportunity_label(i, o), (opportunity_term(i, o),), step_ns, o.projected_saving_ns)
        )
    for kind in comm_kinds(analysis):
        terms = [f"scale(kind={kind})=0.5"]
        label = f"{kind} at half its transfer"
        projections.append(projector.project(terms, figures=False, role="kind", label=label, path=full))
    bound = projector.measured_bound()
    return (
        analysis.with_(projections=tuple(projections), opportunities=tuple(opportunities), step_bound=bound),
        projector,
    )
