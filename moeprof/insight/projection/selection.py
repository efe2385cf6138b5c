"""Spec §9: which activities a term's FILTERS select (all must hold, comma-separated).

``bucket=``, ``kind=``, ``link=``, ``device=``, ``host=``, ``name~REGEX``, ``scope~REGEX`` (a search in the
activity's JAX name scope path, ``jit(step)/jvp(layer0)/experts/dot_general``: what ``tf_op`` and the HLO
``op_name`` say, and in the scope of the component it serves, ``layer0/experts``: its backward and its
parameters' updates run outside the scope, core.components), ``role=ROLE`` (spec §10's role the activity
serves, ``role=permute|unpermute`` for either), ``pass=forward|backward``, ``bound=compute|memory`` (spec §10's
bound of the op: its FLOPs or its HBM bytes take longer at the chip's peak), ``op~REGEX`` (a search in what
the op is: its name, its HLO opcode, and the last part of its scope path, the JAX primitive that made it:
``scatter-add``, ``gather``, ``ragged_all_to_all``), ``opportunity=N`` (the N-th opportunity of the
analysis, from 1; launch gaps and small GEMMs select the gaps they are made of, an on-chip lever the
activities its terms select). The terms that take filters
(:mod:`.terms`) parse them here (:func:`parse_filters`) and select with them (:func:`select`); the
opportunities' savings select each opportunity's activities here too (:func:`opportunity_rows`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ...core.analysis import Opportunity
from ...core.events import BUCKETS, KINDS, lookup
from ...core.patterns import user_pattern
from ...core.roofline import ON_CHIP, ROLES
from ...core.trace import GPU
from ..opportunities import SMALL_GAP_NS, name_flags, small_gemms
from .job import ReplayJob
from .terms.base import bad, named

if TYPE_CHECKING:
    from .terms.base import WhatIf

LINKS = ("nvlink", "ib", "unknown")
FILTER_KEYS = (
    "bucket", "kind", "link", "device", "host", "name", "scope", "op", "role", "pass", "bound", "opportunity",
)  # fmt: skip
PATTERN_KEYS = ("name", "scope", "op")  # the filters that take a pattern (KEY~REGEX)
PASSES = ("forward", "backward")
BOUNDS = ("compute", "memory")  # spec §10: compute where f/P >= b/B, else memory


@dataclass(frozen=True)
class Filter:
    key: str  # one of FILTER_KEYS
    value: str


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


def parse_filters(term: str, body: str) -> tuple[Filter, ...]:
    """The filters of ``term`` (its text between the parentheses); a bad one raises :class:`InputError`
    naming the term (exit 2)."""
    filters: list[Filter] = []
    for part in _split_filters(body or ""):
        if "~" in part and ("=" not in part or part.index("~") < part.index("=")):
            key, _, value = part.partition("~")
            key = key.strip()
            if key not in PATTERN_KEYS:
                raise bad(
                    term, f"only name, scope and op take a pattern (name~REGEX, scope~REGEX, op~REGEX), not {key!r}"
                )
            filter_pattern(term, key, value)
        else:
            key, sep, value = part.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not value:
                raise bad(term, f"filter {part!r} is not KEY=VALUE")
            if key in PATTERN_KEYS:
                raise bad(term, f"{key} takes a pattern: {key}~REGEX")
            if key not in FILTER_KEYS:
                raise bad(term, f"unknown filter {key!r} (known: {', '.join(FILTER_KEYS)})")
            if key == "bucket" and value not in BUCKETS:
                raise bad(term, f"bucket {value!r} is not one of {', '.join(BUCKETS)}")
            if key == "kind" and value not in KINDS:
                raise bad(term, f"kind {value!r} is not one of {', '.join(KINDS)}")
            if key == "link" and value not in LINKS:
                raise bad(term, f"link {value!r} is not one of {', '.join(LINKS)}")
            if key == "role" and not set(value.split("|")) <= set(ROLES):
                raise bad(term, f"role {value!r} is not one of {', '.join(ROLES)} (several: role=permute|unpermute)")
            if key == "pass" and value not in PASSES:
                raise bad(term, f"pass {value!r} is not one of {', '.join(PASSES)}")
            if key == "bound" and value not in BOUNDS:
                raise bad(term, f"bound {value!r} is not one of {', '.join(BOUNDS)}")
            if key == "opportunity" and (not value.isdigit() or int(value) < 1):
                raise bad(term, f"opportunity {value!r} is not a number from 1")
        filters.append(Filter(key, value))
    return tuple(filters)


def filter_pattern(term: str, key: str, value: str) -> re.Pattern[str]:
    """A ``name~``/``scope~`` filter's pattern compiled, or the term's one-line refusal (exit 2)."""
    return user_pattern(value, f"{named(term)}: {key}~")


# ---------------------------------------------------------------- selection


def _string_mask(job: ReplayJob, column: str, keep: Callable[[str], bool]) -> np.ndarray:
    """The rows whose ``column`` value passes ``keep`` (decided once per distinct value)."""
    codes, values = job.codes(column)
    return lookup(codes, np.array([bool(keep(str(v))) for v in values.tolist()], dtype=bool), False)


EXPERT_EXCHANGE_KINDS = ("all-to-all", "ep-dispatch", "ep-combine")


class _CommIndex:
    """The job's communication rows grouped by op and by kernel name (codes of ``job.codes``): an
    opportunity's rows gathered from the groups it names, in time proportional to them, so hundreds of
    opportunities cost one sort, not a pass over the table each."""

    def __init__(self, job: ReplayJob) -> None:
        self.rows = np.flatnonzero(job.bucket == BUCKETS.index("comm"))
        self.kind_codes, kind_values = job.codes("kind")
        self.kind_of = {str(v): i for i, v in enumerate(kind_values.tolist())}
        self.groups = {column: self._group(job, column) for column in ("op", "name")}

    def _group(self, job: ReplayJob, column: str) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
        codes, values = job.codes(column)
        mine = codes[self.rows]
        order = np.argsort(mine, kind="stable")
        bounds = np.searchsorted(mine[order], np.arange(len(values) + 1))
        return {str(v): i for i, v in enumerate(values.tolist())}, self.rows[order], bounds

    def named(self, names: set[str], kind: str) -> np.ndarray:
        """The communication rows of ``kind`` whose op or kernel name is one of ``names``."""
        parts = []
        for index, rows, bounds in self.groups.values():
            for name in names:
                code = index.get(name)
                if code is not None:
                    parts.append(rows[bounds[code] : bounds[code + 1]])
        if not parts:
            return np.zeros(0, dtype=np.int64)
        found = np.unique(np.concatenate(parts))
        code = self.kind_of.get(kind, -2)
        return found[self.kind_codes[found] == code]


def opportunity_rows(job: ReplayJob, opportunities: Sequence[Opportunity]) -> list[np.ndarray | None]:
    """Per opportunity, the rows of the activities it is about (None where they are not activities:
    launch gaps, or none of its activities are in the job)."""
    index: _CommIndex | None = None
    out: list[np.ndarray | None] = []
    for opportunity in opportunities:
        kind = opportunity.kind
        rows: np.ndarray | None = None
        if kind in KINDS:
            index = index or _CommIndex(job)
            names = {opportunity.name, *[str(n) for n in dict(opportunity.evidence or {}).get("ops", []) or []]}
            rows = index.named(names, kind)
        elif kind == "expert-exchange":  # the expert exchange: every all-to-all / EP dispatch and combine
            comm = job.bucket == BUCKETS.index("comm")
            rows = np.flatnonzero(comm & _string_mask(job, "kind", EXPERT_EXCHANGE_KINDS.__contains__))
        elif kind == "local-collectives":  # collectives over a group of one device: copies that keep their kind
            memcpy = job.bucket == BUCKETS.index("memcpy")
            rows = np.flatnonzero(memcpy & _string_mask(job, "kind", bool))
        elif kind == "d2h-sync" or kind == "host-copies":
            want = {"DtoH"} if kind == "d2h-sync" else {"DtoH", "HtoD"}
            memcpy = job.bucket == BUCKETS.index("memcpy")
            rows = np.flatnonzero(memcpy & _string_mask(job, "copy_kind", want.__contains__))
        out.append(rows if rows is not None and rows.size else None)
    return out


def lever_terms(opportunity: Opportunity) -> tuple[str, ...]:
    """The what-if terms an on-chip lever is (insight.levers: its evidence's ``terms``)."""
    terms = dict(opportunity.evidence or {}).get("terms") or ()
    return tuple(str(t) for t in terms)


def lever_mask(job: ReplayJob, opportunity: Opportunity) -> np.ndarray:
    """The activities an on-chip lever's terms select (any of them)."""
    from .terms import parse_terms  # the terms parse their filters here: imported when a lever is selected

    mask = np.zeros(job.size, dtype=bool)
    for term in parse_terms(lever_terms(opportunity)):
        mask |= select(job, term)
    return mask


def opportunity_mask(job: ReplayJob, opportunity: Opportunity) -> np.ndarray | None:
    """The activities an opportunity is about, as a mask over the job's rows (None: not activities)."""
    rows = opportunity_rows(job, [opportunity])[0]
    if rows is None:
        return None
    mask = np.zeros(job.size, dtype=bool)
    mask[rows] = True
    return mask


# made of the gaps before activities, not of activities
GAP_OPPORTUNITIES = ("launch-gaps", "small-gemms", "host-gaps")


def _gpu_devices(job: ReplayJob) -> np.ndarray:
    """Per row: on a GPU device (the device signals of §6 are GPU-only)."""
    return _string_mask(job, "device", lambda d: job.kinds.get(d) == GPU)


def _small_gemm_rows(job: ReplayJob) -> np.ndarray:
    """Per row: a small GEMM of a GPU device where the small-GEMM rule holds
    (:func:`moeprof.insight.opportunities.small_gemms`, the rule the opportunity was found by)."""
    codes, values = job.codes("name")
    gemm, grouped = name_flags(np.asarray(values, dtype=object))
    is_gemm, is_grouped = gemm[codes], grouped[codes]
    g = job.graph
    gpu = _gpu_devices(job) & (job.bucket == BUCKETS.index("compute"))
    steps = max(int(job.step_numbers.size), 1)
    out = np.zeros(job.size, dtype=bool)
    for d in np.unique(g.device[gpu & is_gemm]).tolist():
        mine = np.flatnonzero(gpu & (g.device == d))
        small = small_gemms(g.duration[mine], is_gemm[mine], is_grouped[mine], steps)
        if small is not None:
            out[mine[small]] = True
    return out


def opportunity_gaps(job: ReplayJob, opportunity: Opportunity) -> np.ndarray | None:
    """Per row, whether the trigger gap before it belongs to the opportunity (None: not a gap opportunity).
    ``launch-gaps``: gaps under ``SMALL_GAP_NS`` before an activity of a GPU device (the launch overhead a
    CUDA graph removes); ``small-gemms``: the gap between two small GEMMs of one device (grouped, they are one
    kernel: the same FLOPs at the rate they ran, launched once); ``host-gaps``: the gap before the first
    activity of a TPU program's execution that follows idle between executions (the host's late dispatch)."""
    g = job.graph
    has = g.trigger >= 0
    if opportunity.kind == "launch-gaps":
        return has & _gpu_devices(job) & (g.gap > 0) & (g.gap < SMALL_GAP_NS)
    if opportunity.kind == "host-gaps":  # a TPU's idle between its programs: the gap before each one's first op
        return has & (job.table["host_gap_ns"].to_numpy(np.int64) > 0)
    if opportunity.kind == "small-gemms":
        small = _small_gemm_rows(job)
        out = small & has
        out[out] = small[g.trigger[out]]
        return out
    return None


def bound_of_rows(job: ReplayJob) -> np.ndarray:
    """Per row, spec §10's bound as an index into BOUNDS (-1: no counts, or no peak to take them against):
    compute where its FLOPs take at least as long at the peak as its HBM bytes, else memory."""
    f = job.table["flops"].to_numpy(np.float64) if "flops" in job.table.columns else np.full(job.size, np.nan)
    b = job.table["hbm_bytes"].to_numpy(np.float64) if "hbm_bytes" in job.table.columns else np.full(job.size, np.nan)
    peak_f, peak_b = job.peak_flops_per_s, job.peak_hbm_bytes_per_s
    compute = f / peak_f if peak_f else np.full(job.size, np.nan)
    memory = b / peak_b if peak_b else np.full(job.size, np.nan)
    known = ~np.isnan(compute) | ~np.isnan(memory)
    is_compute = np.nan_to_num(compute, nan=-1.0) >= np.nan_to_num(memory, nan=-1.0)
    return np.where(known, np.where(is_compute, 0, 1), -1)


def _on_host(host: str) -> Callable[[str], bool]:
    return lambda device: device.split("/")[0] == host


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda name: pattern.search(name) is not None


def _last_part(found: Callable[[str], bool]) -> Callable[[str], bool]:
    """``found`` of a scope path's last part (the JAX primitive that made the op)."""
    return lambda path: found(path.rsplit("/", 1)[-1])


def select(job: ReplayJob, term: WhatIf, opportunities: Sequence[Opportunity] = ()) -> np.ndarray:
    """The rows a term's filters select (all filters hold)."""
    table = job.table
    mask = np.ones(job.size, dtype=bool)
    for f in term.filters:
        if f.key == "bucket":
            mask &= job.bucket == BUCKETS.index(f.value)
        elif f.key == "kind":
            mask &= _string_mask(job, "kind", f.value.__eq__)
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
            mask &= _string_mask(job, "device", f.value.__eq__)
        elif f.key == "host":
            mask &= _string_mask(job, "device", _on_host(f.value))
        elif f.key == "scope":  # the activity's own scope path, or the component it serves (core.components)
            found = _matches(filter_pattern(term.text, f.key, f.value))
            mask &= _string_mask(job, "scope", found) | _string_mask(job, "component", found)
        elif f.key == "op":  # what the op is: its name, HLO opcode, and the primitive that ends its scope path
            found = _matches(filter_pattern(term.text, f.key, f.value))
            mask &= (
                _string_mask(job, "name", found)
                | _string_mask(job, "opcode", found)
                | _string_mask(job, "scope", _last_part(found))
            )
        elif f.key in PATTERN_KEYS:
            mask &= _string_mask(job, f.key, _matches(filter_pattern(term.text, f.key, f.value)))
        elif f.key == "role":
            mask &= _string_mask(job, "role", set(f.value.split("|")).__contains__)
        elif f.key == "pass":
            backward = job.table["backward"].to_numpy(bool)
            mask &= backward if f.value == "backward" else ~backward
        elif f.key == "bound":
            mask &= bound_of_rows(job) == BOUNDS.index(f.value)
        elif f.key == "opportunity":
            index = int(f.value) - 1
            if index >= len(opportunities):
                raise bad(term.text, f"the analysis has {len(opportunities)} opportunities, not {index + 1}")
            opportunity = opportunities[index]
            chosen: np.ndarray | None
            if opportunity.kind == "straggler":  # the device the others wait for: its work
                chosen = _string_mask(job, "device", opportunity.name.__eq__)
            elif opportunity.kind == ON_CHIP:  # a lever: what its own terms select
                chosen = lever_mask(job, opportunity)
            else:
                gaps = opportunity_gaps(job, opportunity)
                chosen = gaps if gaps is not None else opportunity_mask(job, opportunity)
            if chosen is None:
                raise bad(term.text, f"opportunity {index + 1} ({opportunity.title}) names no activities")
            mask &= chosen
    return mask


def is_gap_term(term: WhatIf, opportunities: Sequence[Opportunity]) -> bool:
    for f in term.filters:
        if f.key == "opportunity" and 0 < int(f.value) <= len(opportunities):
            if opportunities[int(f.value) - 1].kind in GAP_OPPORTUNITIES:
                return True
    return False
