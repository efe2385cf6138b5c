"""Spec §9 changes: the ``--what-if`` grammar, which activities a term selects, their new durations.

``scale(FILTERS)=F`` scales the selected activities' durations (an instance member's
transfer ``τ``) by ``F``, rounded half to even; ``balance`` / ``balance(FILTERS)``
gives each selected compute activity the median duration of its counterparts.
FILTERS (all must hold, comma-separated): ``bucket=``, ``kind=``, ``link=``,
``device=``, ``host=``, ``name~REGEX``, ``opportunity=N`` (the N-th opportunity of
the analysis, from 1). Terms combine: applied in order, each on the durations the
previous ones left.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..core.analysis import Analysis, Opportunity
from ..core.events import BUCKETS, KINDS, column_codes, lookup
from ..core.projection import Projection, ReplayJob, counterpart_durations
from ..errors import InputError

if TYPE_CHECKING:
    from ..core.trace import Trace

LINKS = ("nvlink", "ib", "unknown")
FILTER_KEYS = ("bucket", "kind", "link", "device", "host", "name", "opportunity")
_TERM = re.compile(r"^\s*(scale|balance)\s*(?:\((.*)\))?\s*(?:=\s*(\S+))?\s*$", re.DOTALL)
BALANCE = "balance"


@dataclass(frozen=True)
class Filter:
    key: str  # one of FILTER_KEYS
    value: str


@dataclass(frozen=True)
class WhatIf:
    """One parsed term."""

    text: str
    action: str  # scale | balance
    filters: tuple[Filter, ...] = ()
    factor: float = 1.0


def _bad(term: str, why: str) -> InputError:
    return InputError(None, f"--what-if {term!r}: {why}")


def _split_filters(body: str) -> list[str]:
    """Filters separated by commas; a comma inside a name~REGEX's brackets or braces stays in it."""
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in body:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_terms(terms: Sequence[str]) -> list[WhatIf]:
    """Parse ``--what-if`` terms; a bad term raises :class:`InputError` naming it (exit 2)."""
    out = []
    for term in terms:
        m = _TERM.match(term or "")
        if not m:
            raise _bad(term, "expected scale(FILTERS)=F, scale()=F, balance or balance(FILTERS)")
        action, body, factor_text = m.group(1), m.group(2), m.group(3)
        if action == "scale":
            if body is None:
                raise _bad(term, "scale needs its filters in parentheses: scale(FILTERS)=F, or scale()=F for all")
            if factor_text is None:
                raise _bad(term, "scale needs a factor: scale(FILTERS)=F")
            try:
                factor = float(factor_text)
            except ValueError:
                raise _bad(term, f"factor {factor_text!r} is not a number") from None
            if not np.isfinite(factor) or factor < 0:
                raise _bad(term, f"factor {factor_text!r} must be a finite number >= 0")
        else:
            if factor_text is not None:
                raise _bad(term, "balance takes no factor")
            factor = 1.0
        filters = []
        for part in _split_filters(body or ""):
            if "~" in part and ("=" not in part or part.index("~") < part.index("=")):
                key, _, value = part.partition("~")
                key = key.strip()
                if key != "name":
                    raise _bad(term, f"only name takes a pattern (name~REGEX), not {key!r}")
                try:
                    re.compile(value)
                except re.error as exc:
                    raise _bad(term, f"bad pattern {value!r}: {exc}") from None
            else:
                key, sep, value = part.partition("=")
                key, value = key.strip(), value.strip()
                if not sep or not value:
                    raise _bad(term, f"filter {part!r} is not KEY=VALUE")
                if key == "name":
                    raise _bad(term, "name takes a pattern: name~REGEX")
                if key not in FILTER_KEYS:
                    raise _bad(term, f"unknown filter {key!r} (known: {', '.join(FILTER_KEYS)})")
                if key == "bucket" and value not in BUCKETS:
                    raise _bad(term, f"bucket {value!r} is not one of {', '.join(BUCKETS)}")
                if key == "kind" and value not in KINDS:
                    raise _bad(term, f"kind {value!r} is not one of {', '.join(KINDS)}")
                if key == "link" and value not in LINKS:
                    raise _bad(term, f"link {value!r} is not one of {', '.join(LINKS)}")
                if key == "opportunity" and (not value.isdigit() or int(value) < 1):
                    raise _bad(term, f"opportunity {value!r} is not a number from 1")
            filters.append(Filter(key, value))
        out.append(WhatIf(term.strip(), action, tuple(filters), factor))
    return out


# ---------------------------------------------------------------- selection


def _string_mask(column: pd.Series, keep: np.ndarray | list) -> np.ndarray:
    codes, _values = column_codes(column)
    return lookup(codes, np.asarray(keep, dtype=bool), False)


def opportunity_mask(job: ReplayJob, opportunity: Opportunity) -> np.ndarray | None:
    """The activities an opportunity is about (None where they are not activities: launch gaps)."""
    table = job.table
    comm = job.bucket == BUCKETS.index("comm")
    ev = dict(opportunity.evidence or {})
    kind = opportunity.kind
    if kind in KINDS:
        names = {opportunity.name, *[str(n) for n in ev.get("ops", []) or []]}
        _, ops = column_codes(table["op"])
        _, kernel = column_codes(table["name"])
        by_op = _string_mask(table["op"], [str(v) in names for v in ops.tolist()])
        by_name = _string_mask(table["name"], [str(v) in names for v in kernel.tolist()])
        kinds = _string_mask(table["kind"], [str(v) == kind for v in column_codes(table["kind"])[1].tolist()])
        mask = comm & (by_op | by_name) & kinds
        return mask if mask.any() else None
    if kind == "expert-exchange":  # the expert exchange: every all-to-all / EP dispatch and combine
        expert = ("all-to-all", "ep-dispatch", "ep-combine")
        kinds = _string_mask(table["kind"], [str(v) in expert for v in column_codes(table["kind"])[1].tolist()])
        mask = comm & kinds
        return mask if mask.any() else None
    copy_codes, copy_values = column_codes(table["copy_kind"])
    memcpy = job.bucket == BUCKETS.index("memcpy")
    if kind == "d2h-sync" or kind == "host-copies":
        want = {"DtoH"} if kind == "d2h-sync" else {"DtoH", "HtoD"}
        mask = memcpy & lookup(copy_codes, np.array([str(v) in want for v in copy_values.tolist()], bool), False)
        return mask if mask.any() else None
    return None


def select(job: ReplayJob, term: WhatIf, opportunities: Sequence[Opportunity] = ()) -> np.ndarray:
    """The rows a term's filters select (all filters hold)."""
    table = job.table
    mask = np.ones(job.size, dtype=bool)
    for f in term.filters:
        if f.key == "bucket":
            mask &= job.bucket == BUCKETS.index(f.value)
        elif f.key == "kind":
            _, values = column_codes(table["kind"])
            mask &= _string_mask(table["kind"], [str(v) == f.value for v in values.tolist()])
        elif f.key == "link":
            ib = table["ib_fraction"].to_numpy(np.float64)
            comm = job.bucket == BUCKETS.index("comm")
            if f.value == "unknown":
                mask &= comm & np.isnan(ib)
            elif f.value == "ib":
                mask &= comm & (ib > 0)
            else:
                mask &= comm & (ib < 1)
        elif f.key == "device":
            _, values = column_codes(table["device"])
            mask &= _string_mask(table["device"], [str(v) == f.value for v in values.tolist()])
        elif f.key == "host":
            _, values = column_codes(table["device"])
            mask &= _string_mask(table["device"], [str(v).split("/")[0] == f.value for v in values.tolist()])
        elif f.key == "name":
            pattern = re.compile(f.value)
            _, values = column_codes(table["name"])
            mask &= _string_mask(table["name"], [bool(pattern.search(str(v))) for v in values.tolist()])
        elif f.key == "opportunity":
            index = int(f.value) - 1
            if index >= len(opportunities):
                raise _bad(term.text, f"the analysis has {len(opportunities)} opportunities, not {index + 1}")
            chosen = opportunity_mask(job, opportunities[index])
            if chosen is None:
                raise _bad(term.text, f"opportunity {index + 1} ({opportunities[index].title}) names no activities")
            mask &= chosen
    return mask


def apply_terms(
    job: ReplayJob, terms: Sequence[WhatIf], opportunities: Sequence[Opportunity] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """The changed (duration, transfer) of every row: durations for non-members, ``τ`` for instance members."""
    g = job.graph
    duration = g.duration.copy()
    transfer = g.transfer.copy()
    member = g.is_member
    for term in terms:
        mask = select(job, term, opportunities)
        if term.action == "scale":
            scaled_d = np.rint(duration.astype(np.float64) * term.factor).astype(np.int64)
            scaled_t = np.rint(transfer.astype(np.float64) * term.factor).astype(np.int64)
            duration = np.where(mask & ~member, scaled_d, duration)
            transfer = np.where(mask & member, scaled_t, transfer)
        else:
            balanced = counterpart_durations(job, mask)
            change = mask & ~member & (job.bucket == BUCKETS.index("compute"))
            duration = np.where(change, balanced, duration)
    return duration, transfer


def project_job(
    job: ReplayJob,
    terms: Sequence[str],
    opportunities: Sequence[Opportunity] = (),
    throughput: dict | None = None,
    figures: bool = True,
) -> Projection:
    """The projection of ``terms`` over a built :class:`ReplayJob`."""
    parsed = parse_terms(terms)
    duration, transfer = apply_terms(job, parsed, opportunities)
    s, e = job.run(duration, transfer)
    return job.projection([t.text for t in parsed], s, e, figures=figures, throughput=throughput)


def opportunity_savings(job: ReplayJob, opportunities: Sequence[Opportunity]) -> list[int | None]:
    """Per opportunity: the mean step saving if its activities took no time, end to end over the steps
    (:meth:`ReplayJob.steps_end_saving`; None: not activities)."""
    out: list[int | None] = []
    for opp in opportunities:
        mask = opportunity_mask(job, opp)
        if mask is None:
            out.append(None)
            continue
        g = job.graph
        duration = np.where(mask & ~g.is_member, 0, g.duration)
        transfer = np.where(mask & g.is_member, 0, g.transfer)
        s, e = job.run(duration, transfer)
        # end to end over the steps: removing work never costs time (§9 monotonic), where a mean of
        # per-step spans can go negative when work moves between steps
        out.append(job.steps_end_saving(s, e))
    return out


# ---------------------------------------------------------------- from traces


def _job_of(traces: Sequence[Trace], analysis: Analysis | None) -> ReplayJob:
    """The replay columns ``analysis`` kept (``moeprof.analyze``, ``analyze_paths`` and ``analyze_job``
    keep them; an analysis read back from JSON has none)."""
    if analysis is not None and analysis.replay is not None:
        return analysis.replay
    names = ", ".join(t.path for t in traces[:3]) or "the traces"
    raise InputError(None, f"no replay columns for {names}: project over the analysis moeprof.analyze(traces) returns")


def project(traces: Sequence[Trace], analysis: Analysis | None, terms: Sequence[str]) -> Projection:
    """``terms`` projected over the job of ``traces`` (the analysis's replay columns, when it has them)."""
    job = _job_of(traces, analysis)
    opps = analysis.opportunities if analysis is not None else ()
    return project_job(job, terms, opps, dict(analysis.throughput) if analysis and analysis.throughput else None)


def projected_events(traces: Sequence[Trace], analysis: Analysis | None, terms: Sequence[str]) -> pd.DataFrame:
    """The job's activities (the replay's columns) with ``projected_start_ns``/``projected_end_ns`` on each
    device's own clock, ``critical`` marking the critical path's activities, and ``start_ns``/``end_ns``
    replaced by the projected times (what the HTML timeline and ``annotate --what-if`` draw)."""
    job = _job_of(traces, analysis)
    opps = analysis.opportunities if analysis is not None else ()
    parsed = parse_terms(terms)
    duration, transfer = apply_terms(job, parsed, opps)
    s, e = job.run(duration, transfer)
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
