"""What each obvious fix would buy: the short list of projections the terminal shows (spec §9).

The list is fixed, not searched: ``balance`` (every rank as fast as the median rank) for a job of
several devices, each of the top opportunities at 0 (``scale(opportunity=N)=0``), and each
collective kind at half its transfer (``scale(kind=K)=0.5``). Each is the projection
:func:`moeprof.insight.whatif.project` makes of that term (without the projected timeline's §4
figures, which the table does not show), so the table's steps are exactly what ``analyze --what-if
TERM`` reports. The verdict adds the most a faster collective could buy: the kind with the most
exposed time at 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.analysis import Analysis
from ..core.projection import Projection
from ..core.trace import Trace
from .whatif import BALANCE, project, project_job

TOP_OPPORTUNITIES = 3
MATTERS = 0.05  # a balance saving below this fraction of the step is not worth a line of the verdict


@dataclass(frozen=True)
class Payoff:
    """One row of the table: what changes, in words and as the what-if terms, and its projection."""

    label: str
    terms: tuple[str, ...]
    projection: Projection

    @property
    def saving_fraction(self) -> float:
        p = self.projection
        return p.saving_ns / p.measured_step_ns if p.measured_step_ns else 0.0


def candidates(analysis: Analysis, top: int = TOP_OPPORTUNITIES) -> list[tuple[str, tuple[str, ...]]]:
    """The rows to project, in the order shown: (label, what-if terms). The projection ``--what-if``
    asked for leads; an opportunity that names no activities (``projected_saving_ns`` None) has no row."""
    out: list[tuple[str, tuple[str, ...]]] = []
    # what `analyze --what-if` asked for comes first: the analysis holds its projection
    out += [("asked for (--what-if)", tuple(p.what_if)) for p in analysis.projections if tuple(p.what_if) != (BALANCE,)]
    if len(analysis.devices) > 1:
        out.append(("balance the ranks (each as fast as the median)", (BALANCE,)))
    for i, o in enumerate(analysis.opportunities[:top], 1):
        if o.projected_saving_ns is None and o.projected_saving_max_ns is None:
            # not a set of activities (a job-wide pattern): nothing to make free
            continue
        out.append((f"opportunity {i} at 0 (below)", (f"scale(opportunity={i})=0",)))
    for kind in comm_kinds(analysis):
        out.append((f"{kind} at half its transfer", (f"scale(kind={kind})=0.5",)))
    return out


def comm_kinds(analysis: Analysis) -> list[str]:
    """Collective kinds, most exposed time first (ties: most time)."""
    exposed: dict[str, tuple[int, int]] = {}
    for c in analysis.collectives:
        e, t = exposed.get(c.kind, (0, 0))
        exposed[c.kind] = (e + c.exposed_ns, t + c.total_ns)
    return sorted(exposed, key=lambda k: (-exposed[k][0], -exposed[k][1], k))


def projected(traces: Sequence[Trace], analysis: Analysis, terms: Sequence[str]) -> Projection:
    """The projection of ``terms``: the analysis' own where it holds one (its balance projection), else a
    replay of its job (the analysis' replay columns, else the traces')."""
    held = next((p for p in analysis.projections if list(p.what_if) == list(terms)), None)
    if held is not None:
        return held
    if analysis.replay is not None:
        throughput = dict(analysis.throughput) if analysis.throughput else None
        return project_job(analysis.replay, terms, analysis.opportunities, throughput, figures=False)
    return project(list(traces), analysis, list(terms))


def payoffs(analysis: Analysis, top: int = TOP_OPPORTUNITIES, traces: Sequence[Trace] = ()) -> list[Payoff]:
    """Every candidate projected."""
    return [Payoff(label, terms, projected(traces, analysis, terms)) for label, terms in candidates(analysis, top)]


@dataclass(frozen=True)
class BalanceVerdict:
    """The balance saving and the most the costliest collective kind could buy, as fractions of the step."""

    balance: float
    kind: str | None
    kind_bound: float | None


def balance_verdict(
    analysis: Analysis, bought: Sequence[Payoff], traces: Sequence[Trace] = ()
) -> BalanceVerdict | None:
    """Where balancing the ranks saves at least ``MATTERS`` of the step: that saving, and beside it the
    most any one faster collective kind could buy: the kind whose transfer made free
    (``scale(kind=K)=0``) saves the most (ties: the more exposed kind)."""
    balance = next((b for b in bought if b.terms == (BALANCE,)), None)
    if balance is None or balance.saving_fraction < MATTERS:
        return None
    best: tuple[str, float] | None = None
    for kind in comm_kinds(analysis):
        free = projected(traces, analysis, [f"scale(kind={kind})=0"])
        bound = free.saving_ns / free.measured_step_ns if free.measured_step_ns else 0.0
        if best is None or bound > best[1]:
            best = (kind, bound)
    if best is None:
        return BalanceVerdict(balance.saving_fraction, None, None)
    return BalanceVerdict(balance.saving_fraction, best[0], best[1])
