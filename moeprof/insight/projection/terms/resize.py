"""What a change of the model's dimensions does to each op's time: the cost model of the routing terms.

A :class:`Resize` multiplies some of the dimensions an op's arrays carry (:data:`.program.ROLES`): the tokens,
the routed rows (``k·T``, top-k), the experts' buffers padded to capacity (``E·C``), the experts (``E``). Each
op's new duration follows what the op does (:data:`.program.KINDS`), from the shapes XLA compiled:

* **grouped GEMM** (the routed experts' ragged dot, its weight gradient): the tiles its kernel runs,
  ``ceil(R/tm) + E − 1`` (each group boundary starts a tile), where the kernel takes its tile schedule; else
  its rows;
* **matmul**: its FLOPs, the factor of the dimension it carries (the array whose size changes the most);
* **row gather** (a gather and nothing else): the time it measured beyond writing its result at the chip's HBM
  bandwidth is its table's reads; the result's writes follow its bytes, the reads its rows, and a table that
  will sit on chip costs no HBM reads (one that leaves chip memory reads at the HBM bandwidth);
* **data movement** (copies, slices, a collective within one chip): its HBM bytes; on-chip arrays cost none;
* **the memory-space assignment's own copies** (copy-start/-done): their bytes; none for an array that will
  no longer fit on chip;
* **anything else**: its bytes, each array's weighed by its size.

**On chip.** XLA places an array in on-chip memory (a TPU's VMEM, layout ``S(1)``) or HBM. An array whose size
the change leaves alone keeps its place; one resized sits on chip with the share of the measured program's
arrays of its new size that XLA placed there (none above the largest it placed there), and a gather's table
no larger than one the program held on chip is held on chip.

Each op gets ``d' = max(q·d + c, floor)`` (:class:`OpChange`), per activity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ....core.analysis import Opportunity
from ....core.events import lookup
from ..job import NO_STEP, ReplayJob
from ..selection import select
from .base import Changing, WhatIf, ns_of
from .program import OpArray, OpFacts, Program


@dataclass(frozen=True)
class Resize:
    """Factors on what the arrays carry; ``single_copy``: from k copies per token to one (the ops that only
    relayout or sum the copies go)."""

    tokens: float = 1.0  # T (and the capacity buffers, C ∝ T)
    routed: float = 1.0  # the routed rows k·T and the [T, k, ..] copies (and the capacity buffers, C ∝ k)
    capacity: float = 1.0  # C
    experts: float = 1.0  # E
    single_copy: bool = False

    def of(self, array: OpArray) -> float:
        """The factor on an array's size."""
        roles = array.roles
        if "s" in roles:
            return self.experts if "e" in roles else 1.0
        factor = 1.0
        if "t" in roles or "c" in roles:
            factor *= self.tokens
        if "r" in roles or "k" in roles or "c" in roles:
            factor *= self.routed
        if "c" in roles:
            factor *= self.capacity
        if "e" in roles:
            factor *= self.experts
        return factor

    def rows(self, program: Program) -> float:
        """The grouped GEMM's rows after: ``k·T`` dropless, ``E·C`` padded (C ∝ k·T / E at a capacity factor)."""
        return program.rows * self.tokens * self.routed * (self.capacity if program.capacity else 1.0)


@dataclass(frozen=True)
class OpChange:
    """An op's new duration: ``max(q·d + c, floor)`` (ns), and what the change was (``why``: the term's note)."""

    q: float
    c: float = 0.0
    floor: float = 0.0
    changed: bool = True  # some array of the op is resized (else q = 1)
    gone: bool = False
    placed: bool = False  # the on-chip placement of an array changed the estimate


UNCHANGED = OpChange(1.0, changed=False)


def tiles(rows: float, groups: float, tile_rows: float) -> float:
    return math.ceil(rows / tile_rows - 1e-9) + groups - 1


def op_change(
    program: Program, op: OpFacts | None, resize: Resize, row_ns: Mapping[int, float] | None = None
) -> OpChange:
    """What ``resize`` does to one op of ``program``; ``row_ns``: what a random row access in HBM costs, per
    row size (bytes), as the program's scatters into HBM measured it (:func:`random_row_ns`)."""
    if op is None or not program.tokens:
        return UNCHANGED
    if resize.single_copy and op.single_copy == "gone":
        return OpChange(0.0, gone=True)
    factors = [resize.of(a) for a in op.arrays]
    groups = resize.experts != 1.0
    changed = any(f != 1.0 for f in factors) or (
        op.kind == "grouped" and (groups or resize.rows(program) != program.rows)
    )
    if not changed:
        return UNCHANGED
    if op.kind == "grouped" and program.rows:
        rows = resize.rows(program)
        if program.tile_rows:
            before = tiles(program.rows, program.experts, program.tile_rows)
            return OpChange(tiles(rows, program.experts * resize.experts, program.tile_rows) / before)
        return OpChange(rows / program.rows)
    if op.kind in ("matmul", "grouped"):
        return OpChange(max(factors, key=lambda f: abs(math.log(f)) if f > 0 else math.inf))
    bandwidth = program.hbm_bytes_per_s
    if op.kind == "gather" and bandwidth and 0 <= op.table < len(op.arrays):
        return _gather(program, op, factors, bandwidth, (row_ns or {}).get(op.row_bytes, 0.0))
    if op.kind == "move":
        return _move(program, op, factors, bandwidth)
    if op.kind == "async":
        if any(a.on_chip and a.bytes * f > program.largest_on_chip for a, f in zip(op.arrays, factors, strict=True)):
            return OpChange(0.0, placed=True)  # no prefetch into chip memory of an array that does not fit
    return OpChange(_weighted(op.arrays, factors))


def _weighted(arrays: Sequence[OpArray], factors: Sequence[float]) -> float:
    total = sum(a.bytes for a in arrays)
    return sum(a.bytes * f for a, f in zip(arrays, factors, strict=True)) / total if total else 1.0


def _off_chip(program: Program, array: OpArray, factor: float) -> tuple[float, bool]:
    """An array's expected HBM bytes after the change, and whether its placement moved the estimate."""
    if factor == 1.0:
        return (0.0 if array.on_chip else float(array.bytes)), False
    share = program.on_chip_share(array.bytes * factor)
    return array.bytes * factor * (1.0 - share), share != (1.0 if array.on_chip else 0.0)


def _move(program: Program, op: OpFacts, factors: Sequence[float], bandwidth: float) -> OpChange:
    """Data movement: its time follows its HBM bytes (the rate it measured); where it measured mostly on chip,
    its bytes, plus what leaves chip memory at the HBM bandwidth."""
    total = sum(a.bytes for a in op.arrays)
    total_after = sum(a.bytes * f for a, f in zip(op.arrays, factors, strict=True))
    hbm = sum(a.bytes for a in op.arrays if not a.on_chip)
    after = [_off_chip(program, a, f) for a, f in zip(op.arrays, factors, strict=True)]
    hbm_after = sum(b for b, _ in after)
    placed = any(p for _, p in after)
    if not total:
        return UNCHANGED
    if hbm >= total / 2:
        return OpChange(hbm_after / hbm, placed=placed)
    linear = total_after / total
    extra = max(0.0, hbm_after - hbm * linear) / bandwidth * 1e9 if bandwidth else 0.0
    return OpChange(linear, extra, placed=placed)


def _gather(program: Program, op: OpFacts, factors: Sequence[float], bandwidth: float, row_ns: float) -> OpChange:
    """A row gather: writing its result runs at the HBM bandwidth where it is in HBM; the rest of the time it
    measured is its table's reads, which follow its rows while the table stays where it was and cost none from
    chip memory. A table that leaves chip memory is read a row at a time from HBM: at what a random row access
    costs there (``row_ns``, the program's scatters' evidence), else at the HBM bandwidth."""
    results = [(a, f) for a, f in zip(op.arrays, factors, strict=True) if a.result]
    rows = sum(a.bytes * f for a, f in results) / max(sum(a.bytes for a, _ in results), 1)
    write = sum(0 if a.on_chip else a.bytes for a, _ in results) / bandwidth * 1e9
    write_after = sum(_off_chip(program, a, f)[0] for a, f in results) / bandwidth * 1e9
    table, factor = op.arrays[op.table], factors[op.table]
    size = table.bytes * factor
    if factor == 1.0:
        stays = 1.0 if table.on_chip else 0.0
    elif program.gather_table_on_chip and size <= program.gather_table_on_chip:
        stays = 1.0  # a table no larger than one the program held on chip is held on chip
    else:
        stays = program.on_chip_share(size)
    placed = stays != (1.0 if table.on_chip else 0.0) or any(_off_chip(program, a, f)[1] for a, f in results)
    if table.on_chip:
        q = rows * stays
        gathered = sum(a.dims[0] * f for a, f in results if a.dims)
        reads = gathered * row_ns if row_ns else size / bandwidth * 1e9
        c = write_after - write * q + (1.0 - stays) * reads
    else:
        q = rows * (1.0 - stays)
        c = write_after - write * q
    return OpChange(q, c, floor=write_after, placed=placed)


def durations(duration: np.ndarray, changes: Sequence[OpChange], codes: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``duration`` with each row of ``rows`` changed as its op's change (``codes``: per row, its index into
    ``changes``, -1 none), rounded half to even, never below 0."""
    out = duration.copy()
    at = np.flatnonzero(rows & (codes >= 0))
    if not at.size:
        return out
    q = np.array([c.q for c in changes], dtype=np.float64)
    add = np.array([c.c for c in changes], dtype=np.float64)
    floor = np.array([c.floor for c in changes], dtype=np.float64)
    code = codes[at]
    new = np.maximum(duration[at].astype(np.float64) * q[code] + add[code], floor[code])
    out[at] = ns_of(np.maximum(new, 0.0))
    return out


# ---------------------------------------------------------------- on a job

KIND_WORDS = {
    "grouped": "experts' grouped GEMMs",
    "matmul": "matmuls",
    "gather": "row gathers",
    "move": "data movement",
    "async": "async copies",
    "other": "elementwise/scatter/reduce",
}


@dataclass(frozen=True)
class Resized:
    """What a resize did to a job's selected rows, per step (measured time): by op kind, what it changed (and
    that time projected), what it removed, what it held; the programs it read."""

    changed_ns: dict[str, int]
    projected_ns: int  # the changed ops' time after
    removed_ns: int
    held_ns: dict[str, int]
    placed_ns: int  # of the changed time, ops whose estimate moved with an array's on-chip placement
    programs: tuple[Program, ...]
    duration: np.ndarray
    transfer: np.ndarray
    rows: int  # rows changed

    def to_json(self) -> dict[str, object]:
        return {
            "changed_ns": dict(self.changed_ns),
            "projected_ns": self.projected_ns,
            "removed_ns": self.removed_ns,
            "held_ns": dict(self.held_ns),
            "on_chip_ns": self.placed_ns,
        }


def resize_job(
    job: ReplayJob, state: Changing, chosen: np.ndarray, resize: Callable[[Program], Resize | None]
) -> Resized:
    """The rows of ``chosen`` resized (durations; an instance member's transfer ``τ`` by ``q``), from the
    ``program`` and ``shapes`` columns of ``job``, on the durations the previous terms left (``state``);
    ``resize``: what the term does to a program (None: nothing, its rows are held)."""
    n = job.size
    if "program" in job.table.columns and "shapes" in job.table.columns:
        prog_c, prog_v = job.codes("program")
        op_c, op_v = job.codes("shapes")
    else:
        prog_c = op_c = np.full(n, -1, dtype=np.int64)
        prog_v = op_v = np.zeros(0, dtype=object)
    known = (prog_c >= 0) & (op_c >= 0)
    key = np.where(known, prog_c * (len(op_v) + 1) + op_c, -1)
    distinct, inverse = np.unique(key, return_inverse=True)
    programs = [Program.from_json(str(v)) for v in prog_v.tolist()]
    resizes = [resize(p) for p in programs]
    ops = [OpFacts.from_json(str(v)) for v in op_v.tolist()]
    row_ns = random_row_ns(job, prog_c, op_c, ops, len(programs))
    changes: list[OpChange] = []
    labels: list[str] = []
    for k in distinct.tolist():
        if k < 0:
            changes.append(UNCHANGED)
            labels.append("unknown")
            continue
        which, op = k // (len(op_v) + 1), ops[k % (len(op_v) + 1)]
        sized = resizes[which]
        change = UNCHANGED if sized is None else op_change(programs[which], op, sized, row_ns[which])
        changes.append(change)
        labels.append(_label(op, change, sized))
    codes = inverse.reshape(-1).astype(np.int64)
    rows = chosen.copy()
    member = job.graph.is_member
    duration = durations(state.duration, changes, codes, rows & ~member)
    transfer = state.transfer.copy()
    at = np.flatnonzero(rows & member)
    if at.size:
        q = np.array([c.q for c in changes], dtype=np.float64)
        transfer[at] = ns_of(transfer[at].astype(np.float64) * q[codes[at]])
    is_changed = np.array([c.changed and not c.gone for c in changes], dtype=bool)
    is_gone = np.array([c.gone for c in changes], dtype=bool)
    is_placed = np.array([c.placed for c in changes], dtype=bool)
    inside = chosen & (job.step != NO_STEP)
    steps = max(int(job.step_numbers.size), 1)
    before = job.graph.duration

    def per_step(mask: np.ndarray, values: np.ndarray = before) -> int:
        return int(round(float(values[inside & mask].sum()) / steps))

    changed_rows = is_changed[codes]
    label_of = np.array(labels, dtype=object)[codes]
    changed_ns = {w: per_step(changed_rows & (label_of == w)) for w in sorted(set(label_of[changed_rows].tolist()))}
    held_rows = ~is_changed[codes] & ~is_gone[codes]
    held_ns = {w: per_step(held_rows & (label_of == w)) for w in sorted(set(label_of[held_rows & inside].tolist()))}
    used = {int(c) for c in np.unique(prog_c[chosen & (prog_c >= 0)]).tolist() if resizes[int(c)] is not None}
    return Resized(
        {w: ns for w, ns in changed_ns.items() if ns},
        per_step(changed_rows, duration),
        per_step(is_gone[codes]),
        {w: ns for w, ns in held_ns.items() if ns},
        per_step(changed_rows & is_placed[codes]),
        tuple(programs[c] for c in sorted(used)),
        duration,
        transfer,
        int((rows & (changed_rows | is_gone[codes])).sum()),
    )


def random_row_ns(
    job: ReplayJob, prog_c: np.ndarray, op_c: np.ndarray, ops: Sequence[OpFacts | None], programs: int
) -> list[dict[int, float]]:
    """Per program, what a random row access in HBM cost, per row size: its scatters into HBM buffers, each
    update a read and a write of one buffer row at random, over their measured time: Σ time / Σ 2·rows."""
    out: list[dict[int, float]] = [{} for _ in range(programs)]
    scatter = np.array([op is not None and op.scatter_rows > 0 for op in ops], dtype=bool)
    rows = (prog_c >= 0) & lookup(op_c, scatter, False)
    if not rows.any():
        return out
    frame = pd.DataFrame({"program": prog_c[rows], "op": op_c[rows], "ns": job.graph.duration[rows]})
    per_op = frame.groupby(["program", "op"], sort=False)["ns"].agg(["sum", "size"]).reset_index()
    totals: dict[tuple[int, int], list[float]] = {}
    for program, op_code, ns, count in per_op.itertuples(index=False):
        facts = ops[int(op_code)]
        assert facts is not None
        tally = totals.setdefault((int(program), facts.row_bytes), [0.0, 0.0])
        tally[0] += float(ns)
        tally[1] += 2.0 * facts.scatter_rows * int(count)
    for (program, row), (ns, accesses) in totals.items():
        out[program][row] = ns / accesses
    return out


def _label(op: OpFacts | None, change: OpChange, resize: Resize | None) -> str:
    """What an op is in a term's note: what the change resized in it where that says more than its kind (the
    experts' weights and optimizer, the router's width, the k copies), else its kind; what it held: the
    weights' and optimizer's work, or other."""
    if op is None:
        return "unknown"
    if change.gone:
        return "k-copy relayouts and sums"
    if change.changed and resize is not None:
        resized = [a.roles for a in op.arrays if resize.of(a) != 1.0]
        if op.kind == "grouped":
            return "experts' grouped GEMMs"
        words = []
        if resize.experts != 1.0:
            words += [("s", "expert weights and optimizer"), ("e", "router and per-expert arrays")]
        if resize.routed != 1.0:
            words += [("k", "the k copies ([T, k, ..])")]
        for role, word in words:
            if any(role in r for r in resized):
                return word
        return KIND_WORDS[op.kind]
    return "weights and optimizer" if any("s" in a.roles for a in op.arrays) else "other"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3g}"


def listing(parts: dict[str, int]) -> str:
    """``what ms, ...``, the most first (under 1 µs per step left out)."""
    shown = sorted(((ns, w) for w, ns in parts.items() if ns >= 1_000), key=lambda x: (-x[0], x[1]))
    return ", ".join(f"{w} {ms(ns)}" for ns, w in shown) or "nothing"


def said(head: str, resized: Resized, removed: str = "") -> str:
    """A routing term's note: what it changed (and to what), removed, held, per step."""
    changed = sum(resized.changed_ns.values())
    placed = (
        f" ({ms(resized.placed_ns)} ms of the {ms(changed)} in ops whose arrays move between HBM and chip memory)"
        if resized.placed_ns >= 1_000
        else ""
    )
    gone = f", removed {ms(resized.removed_ns)} ms ({removed})" if resized.removed_ns else ""
    return (
        f"{head}: changed {ms(changed)} ms per step ({listing(resized.changed_ns)}) to {ms(resized.projected_ns)} ms"
        f"{placed}{gone}, held {ms(sum(resized.held_ns.values()))} ms ({listing(resized.held_ns)})"
    )


def resize_term(
    job: ReplayJob,
    term: WhatIf,
    state: Changing,
    opportunities: Sequence[Opportunity],
    resize: Callable[[Program], Resize | None],
    told: Callable[[Program, Resized], tuple[str, dict[str, object]]],
    why_not: Callable[[Sequence[Program]], str],
) -> int:
    """A routing term applied (``top_k``, ``capacity``, ``experts``: one shape, their own cost in ``resize``):
    the rows its filters select resized program by program (``resize``: None holds a program's rows), the
    state's durations and transfers replaced; its note and its ``found`` entry from the first program resized
    (``told``: the note and the entry's own fields, ``term``, before them and the resize's figures after), or,
    where none was, why not (no program with a grouped GEMM, else ``why_not`` of the programs held). The
    rows changed."""
    held: list[Program] = []

    def attempt(program: Program) -> Resize | None:
        change = resize(program)
        if change is None:
            held.append(program)
        return change

    resized = resize_job(job, state, select(job, term, opportunities), attempt)
    state.duration, state.transfer = resized.duration, resized.transfer
    if resized.programs:
        note, found = told(resized.programs[0], resized)
        state.found.append({"term": term.action, **found, **resized.to_json()})
    elif not any(p.ok() for p in held):
        note = (
            f"{term.action}={term.factor:g}: no routed experts' grouped GEMM (a ragged dot) in an XLA program "
            "whose HLO the capture holds: nothing changed"
        )
    else:
        note = why_not(held)
    state.note = "; ".join(n for n in (state.note, note) if n)
    return resized.rows
