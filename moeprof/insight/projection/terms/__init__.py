"""The §9 terms of ``--what-if``, one module each, and their table (:data:`TERMS`).

A term is written ``NAME``, ``NAME(FILTERS)`` or ``NAME(FILTERS)=F``; its module parses the rest of it,
selects the activities it changes and applies its change (:class:`.base.Term`). Terms combine: applied in
order, each on the durations the previous ones left (:func:`change_of`). To add a term: a module with its
``TERM`` (its ``name``, ``forms`` and one line of ``help``), and a line in :data:`TERMS`.

* ``scale(FILTERS)=F`` (:mod:`.scale`): the selected activities' durations times ``F``;
* ``balance``, ``balance(FILTERS)`` (:mod:`.balance`): every rank as fast as the median rank;
* ``balance-router`` (:mod:`.balance_router`): the routed experts' work spread evenly over each EP group;
* ``tokens=F``, ``tokens(FILTERS)=F``, ``tokens(routed)=F`` (:mod:`.tokens`): F times the tokens per step, each
  op scaled by how its HLO shapes carry them (the routed rows only: top-k);
* ``top_k=K`` (:mod:`.top_k`), ``capacity=F`` (:mod:`.capacity`), ``experts=F`` (:mod:`.experts`): the routing
  changed, each op resized from its program's HLO shapes (:mod:`.program`, :mod:`.resize`).
* ``roof(FILTERS)`` (:mod:`.roof`): the selected activities at the chip's roof (spec §10's levers, a bound).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ....core.analysis import Opportunity
from ....core.events import BUCKETS
from ..job import ReplayJob
from ..selection import select
from . import balance, balance_router, capacity, experts, roof, scale, tokens, top_k
from .base import Change, Changing, Term, WhatIf, bad, check_within_range

TERMS: tuple[Term, ...] = (
    scale.TERM,
    balance.TERM,
    balance_router.TERM,
    tokens.TERM,
    top_k.TERM,
    capacity.TERM,
    experts.TERM,
    roof.TERM,
)
BY_NAME: dict[str, Term] = {t.name: t for t in TERMS}
BALANCE = balance.NAME
BALANCE_ROUTER = balance_router.NAME
# NAME, then (FILTERS), then =F; the longer names first (balance-router before balance)
_WORDS = "|".join(re.escape(n) for n in sorted(BY_NAME, key=len, reverse=True))
_TERM = re.compile(rf"^\s*({_WORDS})\s*(?:\((.*)\))?\s*(?:=\s*(\S+))?\s*$", re.DOTALL)
_FORMS = [form for t in TERMS for form in t.forms]
EXPECTED = f"expected {', '.join(_FORMS[:-1])} or {_FORMS[-1]}"


def term_help() -> list[str]:
    """One line per term of the table, its forms and what it changes: the ``--what-if`` help of every command
    that takes the option (``analyze``, ``report``, ``annotate``) is made of them, so a term added to the table
    is listed there."""
    return [f"{', '.join(t.forms)}: {t.help}" for t in TERMS]


def parse_terms(terms: Sequence[str]) -> list[WhatIf]:
    """Parse ``--what-if`` terms; a bad term raises :class:`InputError` naming it (exit 2)."""
    out = []
    for term in terms:
        m = _TERM.match(term or "")
        if not m:
            raise bad(term, EXPECTED)
        out.append(BY_NAME[m.group(1)].parse(term, m.group(2), m.group(3)))
    return out


def change_of(job: ReplayJob, terms: Sequence[WhatIf], opportunities: Sequence[Opportunity] = ()) -> Change:
    """The :class:`Change` of ``terms``, applied in order, each on what the previous ones left."""
    state = Changing(job.graph.duration.copy(), job.graph.transfer.copy())
    selected = [BY_NAME[term.action].apply(job, term, state, opportunities) for term in terms]
    check_within_range(job, state, terms)  # the terms together: no projected time past int64's range
    return Change(state.duration, state.transfer, state.gap, tuple(selected), state.note, tuple(state.found))


def taken_away(job: ReplayJob, terms: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """What ``terms`` take from each activity's measured time without a replay (an on-chip lever's §6 bound:
    the most its change could save were nothing else to move), per row in ns, applied in order, each on what
    the previous ones left; and the rows any of the terms selects. Only the terms that shorten activities one
    by one have such a bound: ``roof`` (a counted activity to its roof, never longer; a transfer between
    devices keeps its time, as the term does) and ``scale`` with a factor up to 1; the graph is not built.
    Raises ValueError for any other term."""
    duration = (job.end - job.start).astype(np.int64)
    left = duration.copy()
    comm = job.bucket == BUCKETS.index("comm")
    roof_ns = job.roof_ns
    selected = np.zeros(job.size, dtype=bool)
    for term in parse_terms(terms):
        mask = select(job, term)
        selected |= mask
        if term.action == roof.NAME:
            rows = np.flatnonzero(mask & ~comm & ~np.isnan(roof_ns))
            left[rows] = np.minimum(left[rows], np.rint(roof_ns[rows]).astype(np.int64))
        elif term.action == scale.NAME and term.factor <= 1:
            rows = np.flatnonzero(mask)
            left[rows] = np.rint(left[rows].astype(np.float64) * term.factor).astype(np.int64)
        else:
            raise ValueError(f"{term.text}: no bound without a replay")
    return duration - left, selected


__all__ = [
    "BALANCE",
    "BALANCE_ROUTER",
    "BY_NAME",
    "TERMS",
    "Change",
    "WhatIf",
    "change_of",
    "parse_terms",
    "taken_away",
    "term_help",
]
