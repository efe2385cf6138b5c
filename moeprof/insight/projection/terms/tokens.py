"""The ``tokens`` term (moeprof's own; docs/metrics.md, "Projection"): the step with ``F`` times the tokens.

``tokens=F`` (or ``tokens(FILTERS)=F``) scales each op by how its cost depends on the token count, decided
from the program's HLO shapes: an op whose operands or result carry the token dimension (activations, the
experts' and the weights' gradients' matmuls, the exchanges that move tokens) takes ``F`` times its time
(an instance member its transfer ``τ``); an op that carries none (weight updates, optimizer work, parameter
casts, fixed overheads) keeps its time. ``tokens(routed)=F`` scales only the ops that carry the *routed
rows* (``k·T``: the rows the routed experts see, ``k`` copies of each token): top-k 2 → 1 is
``tokens(routed)=0.5``.

What an op is to the batch is decided once per HLO op in the per-file map (:func:`token_classes`, the
replay's ``tokens`` column) from:

* **the token count** ``T``: the leading dimension (past leading 1s) of the program's batch inputs, its
  entry parameters whose shape is not among what the program returns (the state it returns, weights and
  optimizer moments updated, is not the batch); the most common where they differ (ties: the largest);
* **an array carries the tokens** where it is not shaped as a state parameter (its dimensions in any
  order) and one of its dimensions, or the product of consecutive dimensions short of all of them (XLA
  splits a token dimension: ``[4096, 8, 2, 1024]`` holds 32,768 rows), is a positive multiple of ``T``;
* **the class** of an op (:data:`CLASSES`), from its result's and its operands' arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ....core.analysis import Opportunity
from ....core.events import combine_codes, first_rows, lookup
from ....core.hlo import HloInstruction, HloModule, shape_dims
from ....core.metrics import EventColumns
from ....core.trace import Trace
from ..job import NO_STEP, ReplayJob
from ..selection import PATTERN_KEYS, parse_filters, select
from .base import Changing, WhatIf, factor_of
from .program import Batch, batch_of, is_matmul, token_rows
from .resize import Resize, resize_job
from .scale import scale_rows

NAME = "tokens"
ROUTED = "routed"  # the word in the parentheses that scales only the routed rows
# what an op scales with: its cost carries the token dimension, in one of four ways (``routed ...``: it
# carries the routed rows, k·T)
SCALED = ("matmul", "weight-gradient", "activations", "communication")
ROUTED_CLASSES = tuple(f"{ROUTED} {c}" for c in SCALED)
# what an op held fixed is: work on the program's state (weight updates, optimizer, parameter casts), or
# anything else that carries no token dimension
FIXED = ("weights", "other")
CLASSES = ("", *FIXED, *SCALED, *ROUTED_CLASSES)  # "": no HLO op known (a GPU kernel, an XLA op not in the HLO)


@dataclass(frozen=True)
class _Op:
    """One HLO op's arrays as the batch sees them."""

    rows: frozenset[int]  # the token rows its result and operands carry
    result_rows: bool  # its result carries some
    state: bool  # one of its arrays is shaped as a state parameter
    matmul: bool
    collective: bool


def _op(module: HloModule, inst: HloInstruction, batch: Batch) -> _Op:
    result = shape_dims(inst.shape)
    operands = [d for o in inst.operands if o in module.instructions for d in shape_dims(module.instructions[o].shape)]

    def rows_of(arrays: list[tuple[int, ...]]) -> set[int]:
        out: set[int] = set()
        for dims in arrays:
            if tuple(sorted(dims)) not in batch.state:
                out |= token_rows(dims, batch.tokens)
        return out

    result_rows = rows_of(result)
    state = any(dims and tuple(sorted(dims)) in batch.state for dims in (*result, *operands))
    return _Op(
        frozenset(result_rows | rows_of(operands)),
        bool(result_rows),
        state,
        is_matmul(module, inst),
        inst.is_collective,
    )


def _class(op: _Op, routed: frozenset[int]) -> str:
    if not op.rows:
        return "weights" if op.state else "other"
    if op.collective:
        kind = "communication"
    elif op.matmul:
        kind = "matmul" if op.result_rows else "weight-gradient"  # a product over the tokens: its FLOPs scale too
    else:
        kind = "activations"
    return f"{ROUTED} {kind}" if op.rows & routed else kind


def op_classes(module: HloModule, ops: Sequence[str], expert: Sequence[bool], batch: Batch | None = None) -> list[str]:
    """The class (:data:`CLASSES`) of each op of ``module`` named in ``ops`` ("" where the module has no such
    op); ``expert``: per op, whether it is the routed experts' compute, whose token rows above ``T`` are the
    routed rows (``k·T``); ``batch``: the module's (:func:`batch_of`, made here where not given)."""
    batch = batch_of(module) if batch is None else batch
    if not batch.tokens:
        return ["" if op not in module.instructions else "other" for op in ops]
    found = [_op(module, module.instructions[op], batch) if op in module.instructions else None for op in ops]
    routed = frozenset(
        r for op, e in zip(found, expert, strict=True) if op is not None and e for r in op.rows if r > batch.tokens
    )
    return ["" if op is None else _class(op, routed) for op in found]


def token_classes(
    trace: Trace, columns: EventColumns, expert: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row, what its op is to the batch (codes into :data:`CLASSES`, and those values) and its program's
    batch in words (codes, values): decided once per distinct (HLO module, program, op) of the rows
    (:func:`op_classes`, one call per program). ``expert``: the rows of the routed experts' compute
    (``moe_role``)."""
    n = len(columns)
    classes = np.array(CLASSES, dtype=object)
    unknown = (np.zeros(n, dtype=np.int64), classes, np.full(n, -1, dtype=np.int64), np.zeros(0, dtype=object))
    if not n or not trace.hlo or "hlo_op" not in columns.table.columns:
        return unknown
    mod_c, mod_v = columns.strings("hlo_module")
    op_c, op_v = columns.strings("hlo_op")
    program = columns.numbers("program_id") if "program_id" in columns.table.columns else np.full(n, -1)
    key = combine_codes(mod_c, program, op_c)
    first = first_rows(key)
    is_expert = np.zeros(first.size, dtype=bool)
    np.logical_or.at(is_expert, key, np.asarray(expert, dtype=bool))
    mods = lookup(mod_c[first], mod_v, "").tolist()
    ops = [str(op) for op in lookup(op_c[first], op_v, "").tolist()]
    # the distinct ops of each program, classified together (the routed rows are a program's)
    by_module: dict[int, tuple[HloModule, list[int]]] = {}
    for i, (mod, prog, op) in enumerate(zip(mods, program[first].tolist(), ops, strict=True)):
        module = (trace.hlo.get((str(mod), int(prog))) or trace.hlo.get((str(mod), -1))) if op else None
        if module is not None:
            by_module.setdefault(id(module), (module, []))[1].append(i)
    index = {c: i for i, c in enumerate(CLASSES)}
    code = np.zeros(first.size, dtype=np.int64)
    texts = np.full(first.size, "", dtype=object)
    for module, at in by_module.values():
        batch = batch_of(module)
        decided = op_classes(module, [ops[i] for i in at], is_expert[at].tolist(), batch)
        code[at] = [index[c] for c in decided]
        texts[at] = batch.text
    text_code, text_values = pd.factorize(texts)
    return code[key], classes, text_code[key].astype(np.int64), np.asarray(text_values, dtype=object)


# ---------------------------------------------------------------- the term


@dataclass(frozen=True)
class TokenScaling:
    """What the term scaled and what it held: measured time per step by class (its note and the JSON's
    ``selection``)."""

    factor: float
    routed: bool  # tokens(routed): only the routed rows scale
    batches: tuple[str, ...]  # the programs' batches in words
    scaled_ns: dict[str, int]  # per class (SCALED)
    routed_ns: int  # of the scaled time, the ops that carry the routed rows
    fixed_ns: dict[str, int]  # per class: FIXED, "unknown" (no HLO op), "<class> (not routed)"
    projected_ns: int = 0  # the scaled ops' time after (resize: each op by its shapes and where its arrays sit)
    on_chip_ns: int = 0  # of the scaled time, ops whose arrays change place between HBM and chip memory
    unselected: tuple[str, ...] = ()  # the term's filters where they select no activity ("scope~nomatch")

    def to_json(self) -> dict[str, Any]:
        return {
            "term": NAME,
            "factor": self.factor,
            "rows": ROUTED if self.routed else "tokens",
            "batch": list(self.batches),
            "scaled_ns": dict(self.scaled_ns),
            "routed_ns": self.routed_ns,
            "fixed_ns": dict(self.fixed_ns),
            "projected_ns": self.projected_ns,
            "on_chip_ns": self.on_chip_ns,
        }

    @property
    def note(self) -> str:
        """What it scaled and held, in a sentence; or why it scaled nothing."""
        if self.unselected:  # not the HLO's fault: the filters chose nothing for it to scale
            if len(self.unselected) == 1:
                return f"tokens' filter {self.unselected[0]} selects no activity: nothing scaled"
            return f"tokens' filters {', '.join(self.unselected)} select no activity together: nothing scaled"
        if not self.batches and set(self.fixed_ns) <= {"unknown"}:
            return (
                "no op of an XLA program whose HLO the capture holds (an XPlane's /host:metadata): the token "
                "dimension is read from the HLO shapes, nothing scaled"
            )
        if not self.batches:
            return "no batch input in the HLO (every entry parameter is returned, as state): nothing scaled"
        if not self.scaled_ns and self.routed:
            return "no routed rows found (the routed experts' ops carry no multiple of T above T): nothing scaled"
        scaled = sum(self.scaled_ns.values())
        of_it = f"; {_ms(self.routed_ns)} of it carries the routed rows" if self.routed_ns and not self.routed else ""
        placed = (
            f" ({_ms(self.on_chip_ns)} ms of the {_ms(scaled)} in ops whose arrays move between HBM and chip memory)"
            if self.on_chip_ns >= 1_000
            else ""
        )
        return (
            f"{'routed rows' if self.routed else 'tokens'} x{self.factor:g}, {'; '.join(self.batches)}: scaled "
            f"{_ms(scaled)} ms per step ({_listing(self.scaled_ns)}{of_it}) to {_ms(self.projected_ns)} ms{placed}, "
            f"held {_ms(sum(self.fixed_ns.values()))} ms ({_listing(self.fixed_ns)})"
        )


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3g}"


def _listing(parts: dict[str, int]) -> str:
    """``class ms, ...``, the most first (classes under 1 µs per step left out)."""
    shown = sorted(((ns, c) for c, ns in parts.items() if ns >= 1_000), key=lambda x: (-x[0], x[1]))
    return ", ".join(f"{c} {_ms(ns)}" for ns, c in shown) or "nothing"


class Tokens:
    name: str = NAME
    forms: tuple[str, ...] = ("tokens=F", "tokens(FILTERS)=F", "tokens(routed)=F")
    help: str = (
        "F times the tokens per step, each op scaled by how its HLO shapes carry them, the weights' updates held;"
        " routed: the routed rows only (top-k 4 -> 2: 0.5)"
    )

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        value = factor_of(text, factor, "tokens needs a factor: tokens=F (F times the tokens per step)")
        parts = [p.strip() for p in (body or "").split(",")]
        routed = ROUTED in parts
        rest = ",".join(p for p in parts if p != ROUTED) if routed else (body or "")
        return WhatIf(text.strip(), NAME, parse_filters(text, rest), value, (ROUTED,) if routed else ())

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        routed = ROUTED in term.options
        chosen = select(job, term, opportunities)
        if "tokens" in job.table.columns:
            codes, values = job.codes("tokens")
        else:
            codes, values = np.full(job.size, -1, dtype=np.int64), np.zeros(0, dtype=object)
        # per distinct class: whether it scales, and its label in the listing of what was scaled or held
        names = [str(v) for v in values.tolist()]
        plain = [c.removeprefix(f"{ROUTED} ") for c in names]
        carries_routed = np.array([c in ROUTED_CLASSES for c in names], dtype=bool)
        scales = carries_routed if routed else np.array([c in SCALED or c in ROUTED_CLASSES for c in names], bool)
        held = [c if c in FIXED else "unknown" if not c else f"{b} (not routed)" for c, b in zip(names, plain)]
        scaled = chosen & lookup(codes, scales, False)
        # each op as its shapes and the placement of its arrays say (resize); an op without them (no program
        # facts: a GPU kernel, a capture without HLO) by the factor
        sized = Resize(routed=term.factor) if routed else Resize(tokens=term.factor)
        resized = resize_job(job, state, scaled, lambda program: sized if program.tokens else None)
        described = _described(job)
        state.duration, state.transfer = resized.duration, resized.transfer
        scale_rows(job, state, scaled & ~described, term)
        inside = scaled & (job.step != NO_STEP)
        steps = max(int(job.step_numbers.size), 1)
        found = TokenScaling(
            term.factor,
            routed,
            _batches(job, chosen),
            _per_class(job, scaled, codes, plain),
            sum(_per_class(job, scaled & lookup(codes, carries_routed, False), codes, plain).values()),
            _per_class(job, chosen & ~scaled, codes, held),
            int(round(float(state.duration[inside].sum()) / steps)),
            resized.placed_ns,
            () if chosen.any() else _filters_text(term),
        )
        state.found.append(found.to_json())
        state.note = "; ".join(n for n in (state.note, found.note) if n)
        return int(scaled.sum())


TERM = Tokens()


def _described(job: ReplayJob) -> np.ndarray:
    """The rows whose program and op the HLO describes (the resize times them)."""
    if "program" not in job.table.columns or "shapes" not in job.table.columns:
        return np.zeros(job.size, dtype=bool)
    prog_c, prog_v = job.codes("program")
    op_c, op_v = job.codes("shapes")
    has_tokens = np.array(['"tokens":0,' not in str(v) and bool(v) for v in prog_v.tolist()], dtype=bool)
    return lookup(prog_c, has_tokens, False) & lookup(
        op_c, np.array([bool(v) for v in op_v.tolist()], dtype=bool), False
    )


def _filters_text(term: WhatIf) -> tuple[str, ...]:
    """The term's filters as written (``scope~layer0``, ``bucket=comm``)."""
    return tuple(f"{f.key}{'~' if f.key in PATTERN_KEYS else '='}{f.value}" for f in term.filters)


def _batches(job: ReplayJob, rows: np.ndarray) -> tuple[str, ...]:
    if "batch" not in job.table.columns:
        return ()
    codes, values = job.codes("batch")
    used = np.unique(codes[rows & (codes >= 0)])
    return tuple(t for t in (str(values[c]) for c in used.tolist()) if t)


def _per_class(job: ReplayJob, rows: np.ndarray, codes: np.ndarray, labels: Sequence[str]) -> dict[str, int]:
    """Measured time per step of ``rows`` (those in §5 steps, over the steps) by the label of their class code
    (-1, no class: ``unknown``)."""
    inside = rows & (job.step != NO_STEP)
    steps = max(int(job.step_numbers.size), 1)
    at = codes[inside]
    ns = np.bincount(np.where(at < 0, len(labels), at), job.graph.duration[inside], minlength=len(labels) + 1)
    out: dict[str, float] = {}
    for label, total in zip([*labels, "unknown"], ns.tolist(), strict=True):
        if total:
            out[label] = out.get(label, 0.0) + total
    return {label: int(round(total / steps)) for label, total in out.items()}
