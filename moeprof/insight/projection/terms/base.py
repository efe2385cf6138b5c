"""What every §9 term is: a parsed term (:class:`WhatIf`), the change terms make together (:class:`Change`),
and the interface each term's module implements (:class:`Term`: it parses its text, selects its activities
and applies its change)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ....core.analysis import Opportunity
from ....errors import InputError

if TYPE_CHECKING:
    from ..job import ReplayJob
    from ..selection import Filter


@dataclass(frozen=True)
class WhatIf:
    """One parsed term."""

    text: str
    action: str  # the term's name (the table's key): scale | balance | balance-router | tokens
    filters: tuple[Filter, ...] = ()
    factor: float = 1.0
    options: tuple[str, ...] = ()  # words the term takes beside its filters (tokens' ``routed``)


@dataclass
class Changing:
    """The job's changed values while terms apply, each on what the previous ones left: every row's duration
    (non-members), transfer ``τ`` (instance members) and trigger gap ``g_x`` (None: the measured gaps)."""

    duration: np.ndarray
    transfer: np.ndarray
    gap: np.ndarray | None = None
    note: str = ""  # what the terms that have one say they did or could not do, joined ("; ")
    found: list[dict[str, Any]] = field(default_factory=list)  # what a term says it selected (the JSON's)


@dataclass(frozen=True)
class Change:
    """What terms do to the job: every row's duration (non-members), transfer ``τ`` (instance members) and
    trigger gap ``g_x`` (None: the measured gaps), per term how many rows it changed, and what a term could
    not do (``note``)."""

    duration: np.ndarray
    transfer: np.ndarray
    gap: np.ndarray | None
    selected: tuple[int, ...]
    note: str = ""
    found: tuple[dict[str, Any], ...] = ()  # per term that says what it selected (tokens: time per class)


class Term(Protocol):
    """One §9 term: one module of :mod:`moeprof.insight.projection.terms`, one entry of its table."""

    name: str  # the word that starts the term
    forms: tuple[str, ...]  # how it is written, for the message that lists every term
    help: str  # what it changes, in one line: each command's --what-if help lists every term with it

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        """The term ``text`` (``name(body)=factor``, each part None where absent) parsed; a bad one raises
        :class:`InputError` naming it (:func:`bad`)."""
        ...

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        """Change ``state`` as ``term`` does (the activities it selects, changed); the rows it changed."""
        ...


def bad(term: str, why: str) -> InputError:
    """The one-line refusal of a term (exit 2)."""
    return InputError(None, f"--what-if {term!r}: {why}")


def factor_of(term: str, factor: str | None, needs: str) -> float:
    """A term's factor ``F``: a finite number >= 0; absent or bad, the one-line refusal (``needs``: the
    sentence that says how the term is written)."""
    if factor is None:
        raise bad(term, needs)
    try:
        value = float(factor)
    except ValueError:
        raise bad(term, f"factor {factor!r} is not a number") from None
    if not np.isfinite(value) or value < 0:
        raise bad(term, f"factor {factor!r} must be a finite number >= 0")
    return value
