"""Spec §9 changes: the ``--what-if`` grammar, which activities a term selects, their new durations.

``scale(FILTERS)=F`` scales the selected activities' durations (an instance member's
transfer ``τ``) by ``F``, rounded half to even; ``balance`` / ``balance(FILTERS)``
gives each selected compute activity the median duration of its counterparts (the
straggler fix); ``balance-router`` spreads the routed experts' work evenly over each
EP group, work conserved (:func:`moeprof.core.projection.router_balanced`).
FILTERS (all must hold, comma-separated): ``bucket=``, ``kind=``, ``link=``,
``device=``, ``host=``, ``name~REGEX``, ``scope~REGEX`` (a search in the activity's JAX
name scope path, ``jit(step)/jvp(layer0)/experts/dot_general``: what ``tf_op`` and the HLO
``op_name`` say), ``opportunity=N`` (the N-th opportunity of the analysis, from 1; launch
gaps and small GEMMs select the gaps they are made of). Terms combine: applied in order,
each on the durations the previous ones left.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..core.analysis import Opportunity
from ..core.events import BUCKETS, KINDS, lookup
from ..core.projection import Projection, ReplayJob, RouterBalance, counterpart_durations, router_balanced
from ..core.replay import LANES
from ..core.trace import GPU
from ..errors import InputError
from .opportunities import MANY_GEMMS_PER_STEP, SMALL_GAP_NS, SMALL_GEMM_NS, name_flags

LINKS = ("nvlink", "ib", "unknown")
FILTER_KEYS = ("bucket", "kind", "link", "device", "host", "name", "scope", "opportunity")
PATTERN_KEYS = ("name", "scope")  # the filters that take a pattern (KEY~REGEX)
_TERM = re.compile(r"^\s*(scale|balance-router|balance)\s*(?:\((.*)\))?\s*(?:=\s*(\S+))?\s*$", re.DOTALL)
BALANCE = "balance"
BALANCE_ROUTER = "balance-router"


@dataclass(frozen=True)
class Filter:
    key: str  # one of FILTER_KEYS
    value: str


@dataclass(frozen=True)
class WhatIf:
    """One parsed term."""

    text: str
    action: str  # scale | balance | balance-router
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
            raise _bad(term, "expected scale(FILTERS)=F, scale()=F, balance, balance(FILTERS) or balance-router")
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
                raise _bad(term, f"{action} takes no factor")
            if action == BALANCE_ROUTER and (body or "").strip():
                raise _bad(term, "balance-router takes no filters: a router moves work between every device of a group")
            factor = 1.0
        filters = []
        for part in _split_filters(body or ""):
            if "~" in part and ("=" not in part or part.index("~") < part.index("=")):
                key, _, value = part.partition("~")
                key = key.strip()
                if key not in PATTERN_KEYS:
                    raise _bad(term, f"only name and scope take a pattern (name~REGEX, scope~REGEX), not {key!r}")
                try:
                    re.compile(value)
                except re.error as exc:
                    raise _bad(term, f"bad pattern {value!r}: {exc}") from None
            else:
                key, sep, value = part.partition("=")
                key, value = key.strip(), value.strip()
                if not sep or not value:
                    raise _bad(term, f"filter {part!r} is not KEY=VALUE")
                if key in PATTERN_KEYS:
                    raise _bad(term, f"{key} takes a pattern: {key}~REGEX")
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
        elif kind == "d2h-sync" or kind == "host-copies":
            want = {"DtoH"} if kind == "d2h-sync" else {"DtoH", "HtoD"}
            memcpy = job.bucket == BUCKETS.index("memcpy")
            rows = np.flatnonzero(memcpy & _string_mask(job, "copy_kind", want.__contains__))
        out.append(rows if rows is not None and rows.size else None)
    return out


def opportunity_mask(job: ReplayJob, opportunity: Opportunity) -> np.ndarray | None:
    """The activities an opportunity is about, as a mask over the job's rows (None: not activities)."""
    rows = opportunity_rows(job, [opportunity])[0]
    if rows is None:
        return None
    mask = np.zeros(job.size, dtype=bool)
    mask[rows] = True
    return mask


GAP_OPPORTUNITIES = ("launch-gaps", "small-gemms")  # made of the gaps before activities, not of activities


def _gpu_devices(job: ReplayJob) -> np.ndarray:
    """Per row: on a GPU device (the device signals of §6 are GPU-only)."""
    return _string_mask(job, "device", lambda d: job.kinds.get(d) == GPU)


def _small_gemm_rows(job: ReplayJob) -> np.ndarray:
    """Per row: a small GEMM (a GEMM kernel, not grouped, under ``SMALL_GEMM_NS``) on a GPU device where the
    small-GEMM signal holds (at least ``MANY_GEMMS_PER_STEP`` GEMMs per step, their median under
    ``SMALL_GEMM_NS``, no grouped GEMM on the device), as insight.opportunities.device_signals decides it."""
    codes, values = job.codes("name")
    gemm, grouped = name_flags(np.asarray(values, dtype=object))
    is_gemm, is_grouped = gemm[codes], grouped[codes]
    g = job.graph
    gpu = _gpu_devices(job) & (job.bucket == BUCKETS.index("compute"))
    steps = max(int(job.step_numbers.size), 1)
    out = np.zeros(job.size, dtype=bool)
    for d in np.unique(g.device[gpu & is_gemm]).tolist():
        mine = gpu & (g.device == d)
        plain = np.flatnonzero(mine & is_gemm & ~is_grouped)
        if (mine & is_grouped).any() or plain.size / steps < MANY_GEMMS_PER_STEP:
            continue
        if float(np.median(g.duration[plain])) >= SMALL_GEMM_NS:
            continue
        out[plain[g.duration[plain] < SMALL_GEMM_NS]] = True
    return out


def opportunity_gaps(job: ReplayJob, opportunity: Opportunity) -> np.ndarray | None:
    """Per row, whether the trigger gap before it belongs to the opportunity (None: not a gap opportunity).
    ``launch-gaps``: gaps under ``SMALL_GAP_NS`` before an activity of a GPU device (the launch overhead a
    CUDA graph removes); ``small-gemms``: the gap between two small GEMMs of one device (grouped, they are one
    kernel: the same FLOPs at the rate they ran, launched once)."""
    g = job.graph
    has = g.trigger >= 0
    if opportunity.kind == "launch-gaps":
        return has & _gpu_devices(job) & (g.gap > 0) & (g.gap < SMALL_GAP_NS)
    if opportunity.kind == "small-gemms":
        small = _small_gemm_rows(job)
        out = small & has
        out[out] = small[g.trigger[out]]
        return out
    return None


def _on_host(host: str) -> Callable[[str], bool]:
    return lambda device: device.split("/")[0] == host


def _matches(pattern: re.Pattern[str]) -> Callable[[str], bool]:
    return lambda name: pattern.search(name) is not None


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
        elif f.key in PATTERN_KEYS:
            mask &= _string_mask(job, f.key, _matches(re.compile(f.value)))
        elif f.key == "opportunity":
            index = int(f.value) - 1
            if index >= len(opportunities):
                raise _bad(term.text, f"the analysis has {len(opportunities)} opportunities, not {index + 1}")
            opportunity = opportunities[index]
            chosen: np.ndarray | None
            if opportunity.kind == "straggler":  # the device the others wait for: its work
                chosen = _string_mask(job, "device", opportunity.name.__eq__)
            else:
                gaps = opportunity_gaps(job, opportunity)
                chosen = gaps if gaps is not None else opportunity_mask(job, opportunity)
            if chosen is None:
                raise _bad(term.text, f"opportunity {index + 1} ({opportunity.title}) names no activities")
            mask &= chosen
    return mask


@dataclass(frozen=True)
class Change:
    """What terms do to the job: every row's duration (non-members), transfer ``τ`` (instance members) and
    trigger gap ``g_x`` (None: the measured gaps), and per term how many rows it changed."""

    duration: np.ndarray
    transfer: np.ndarray
    gap: np.ndarray | None
    selected: tuple[int, ...]
    router: RouterBalance | None = None


def _is_gap_term(term: WhatIf, opportunities: Sequence[Opportunity]) -> bool:
    for f in term.filters:
        if f.key == "opportunity" and 0 < int(f.value) <= len(opportunities):
            if opportunities[int(f.value) - 1].kind in GAP_OPPORTUNITIES:
                return True
    return False


def change_of(job: ReplayJob, terms: Sequence[WhatIf], opportunities: Sequence[Opportunity] = ()) -> Change:
    """The :class:`Change` of ``terms``, applied in order, each on what the previous ones left."""
    g = job.graph
    duration = g.duration.copy()
    transfer = g.transfer.copy()
    gap: np.ndarray | None = None
    member = g.is_member
    compute = job.bucket == BUCKETS.index("compute")
    selected: list[int] = []
    router: RouterBalance | None = None
    for term in terms:
        if term.action == BALANCE_ROUTER:
            new_d, new_t, new_g, router = router_balanced(job, duration, transfer, g.gap if gap is None else gap)
            selected.append(int((new_d != duration).sum() + (new_t != transfer).sum()))
            duration, transfer, gap = new_d, new_t, new_g
            continue
        mask = select(job, term, opportunities)
        if term.action == "scale" and _is_gap_term(term, opportunities):
            gap = (g.gap if gap is None else gap).copy()
            gap[mask] = np.rint(gap[mask].astype(np.float64) * term.factor).astype(np.int64)
            selected.append(int(mask.sum()))
        elif term.action == "scale":
            scaled_d = np.rint(duration.astype(np.float64) * term.factor).astype(np.int64)
            scaled_t = np.rint(transfer.astype(np.float64) * term.factor).astype(np.int64)
            duration = np.where(mask & ~member, scaled_d, duration)
            transfer = np.where(mask & member, scaled_t, transfer)
            selected.append(int(mask.sum()))
        else:
            balanced = counterpart_durations(job, mask)
            change = mask & ~member & compute
            duration = np.where(change, balanced, duration)
            selected.append(int(change.sum()))
    return Change(duration, transfer, gap, tuple(selected), router)


def apply_terms(
    job: ReplayJob, terms: Sequence[WhatIf], opportunities: Sequence[Opportunity] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """The changed (duration, transfer) of every row: durations for non-members, ``τ`` for instance members."""
    change = change_of(job, terms, opportunities)
    return change.duration, change.transfer


def replayed(
    job: ReplayJob, terms: Sequence[str], opportunities: Sequence[Opportunity] = ()
) -> tuple[list[WhatIf], Change, np.ndarray, np.ndarray]:
    """``terms`` parsed, their change, and the replay's projected (start, end) of every row."""
    parsed = parse_terms(terms)
    change = change_of(job, parsed, opportunities)
    s, e = job.run(change.duration, change.transfer, change.gap)
    return parsed, change, s, e


def project_job(
    job: ReplayJob,
    terms: Sequence[str],
    opportunities: Sequence[Opportunity] = (),
    throughput: dict | None = None,
    figures: bool = True,
) -> Projection:
    """The projection of ``terms`` over a built :class:`ReplayJob`."""
    parsed, change, s, e = replayed(job, terms, opportunities)
    projection = job.projection([t.text for t in parsed], s, e, figures=figures, throughput=throughput)
    return replace(projection, selected=sum(change.selected))


SPARE_REPLAYS = LANES  # opportunities replayed in all, at least, where fewer could be significant: one C pass


@dataclass(frozen=True)
class Saving:
    """One opportunity's projected saving: ``ns`` (None: not replayed, or no activities) and ``max_ns``,
    the most it can be (from the measured critical chain; None without activities)."""

    ns: int | None
    max_ns: int | None


def opportunity_savings(
    job: ReplayJob, opportunities: Sequence[Opportunity], significant_ns: float = 0.0, spare: int = SPARE_REPLAYS
) -> list[Saving]:
    """Per opportunity: the mean step saving if its activities took no time, end to end over the steps
    (:meth:`ReplayJob.steps_end_saving`).

    The measured chain behind the steps' end bounds every saving (:meth:`ReplayJob.steps_end_chain`):
    an opportunity with no work on it saves nothing, without a replay. The others are replayed (several
    per pass of the graph on the C route): every one that could reach ``significant_ns``, then more by
    decreasing bound up to ``spare`` in all (or until the C sweep's last pass is full). Past them an
    opportunity keeps its bound only (``ns`` None): a 1M-event job has hundreds of opportunities, most
    under 1% of the step (too little to rank by), and their exact savings would cost a replay each."""
    steps = int(job.step_numbers.size)
    chain, weight = job.steps_end_chain()
    rows = opportunity_rows(job, opportunities)
    on_chain = np.zeros(job.size, dtype=np.int64)
    on_chain[chain] = weight
    out: list[Saving] = [Saving(None, None)] * len(opportunities)
    todo: list[tuple[int, int]] = []
    for i, mine in enumerate(rows):
        if mine is None:
            continue
        bound = int(on_chain[mine].sum())
        most = round(bound / steps) if steps else 0
        if most == 0:
            out[i] = Saving(0, 0)  # no work on the chain: the end cannot move
        else:
            todo.append((i, most))
    todo.sort(key=lambda t: -t[1])
    most_of = dict(todo)
    chosen: list[int] = []
    significant = sum(most >= significant_ns for _, most in todo)
    # the significant ones, rounded up to whole passes of the C sweep, at least ``spare``: a pass has room
    spare = max(spare - significant, -significant % LANES)
    for i, most in todo:
        if most >= significant_ns or spare > 0:
            spare -= most < significant_ns
            chosen.append(i)
        else:
            out[i] = Saving(None, most)
    if chosen:
        latest = job.latest_end_without([rows[i] for i in chosen])  # type: ignore[misc]
        for i, end in zip(chosen, latest.tolist()):
            out[i] = Saving(job.steps_end_saving_of(end), most_of[i])
    return out
