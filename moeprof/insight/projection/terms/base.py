"""What every §9 term is: a parsed term (:class:`WhatIf`), the change terms make together (:class:`Change`),
and the interface each term's module implements (:class:`Term`: it parses its text, selects its activities
and applies its change)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

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
    action: str  # the term's name (the table's key): scale | balance | balance-router
    filters: tuple[Filter, ...] = ()
    factor: float = 1.0


@dataclass
class Changing:
    """The job's changed values while terms apply, each on what the previous ones left: every row's duration
    (non-members), transfer ``τ`` (instance members) and trigger gap ``g_x`` (None: the measured gaps)."""

    duration: np.ndarray
    transfer: np.ndarray
    gap: np.ndarray | None = None
    note: str = ""  # what the last term that has one could not do (the router term without expert work found)


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


class Term(Protocol):
    """One §9 term: one module of :mod:`moeprof.insight.projection.terms`, one entry of its table."""

    name: str  # the word that starts the term
    forms: tuple[str, ...]  # how it is written, for the message that lists every term

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
