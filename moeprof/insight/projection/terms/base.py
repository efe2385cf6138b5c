"""What every §9 term is: a parsed term (:class:`WhatIf`), the change terms make together (:class:`Change`),
and the interface each term's module implements (:class:`Term`: it parses its text, selects its activities
and applies its change).

Every term's values pass through here: its factor (:func:`factor_of`, a finite number from 0 to
:data:`MAX_FACTOR`), the times it scales (:func:`scaled_ns`, each within :data:`TIME_LIMIT_NS`) or computes
(:func:`ns_of`, held just past it), and the change of all the terms together (:func:`check_within_range`: no
projected time past :data:`TIME_LIMIT_NS`). A filter's pattern is compiled by
:func:`moeprof.core.patterns.user_pattern` (``selection.filter_pattern``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ....core.analysis import Opportunity
from ....core.patterns import shown
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


# The largest factor a term takes. The projection replays this step's dependency graph with some of its
# activities changed; a factor of a million turns a 1 µs kernel into a second and a 100 ms step into 28 hours:
# no change to this step that its replay can speak for (and 5e13 or 1e300 would take the replay's int64
# nanoseconds past their range: negative steps, events written at -8e15).
MAX_FACTOR = 1e6
# The largest time a projection holds: a quarter of int64's range (2.3e18 ns, 73 years), so that the replay's
# "no value yet" (replay.NEG, int64's least / 4) and a gap added to any time never overflow.
TIME_LIMIT_NS = int(np.iinfo(np.int64).max // 4)
_YEAR_NS = 365.25 * 86_400e9


def named(term: str) -> str:
    """The option and the term, as a refusal names them (a term of thousands of characters by its start)."""
    return f"--what-if {shown(term, 120)}"


def bad(term: str, why: str) -> InputError:
    """The one-line refusal of a term (exit 2)."""
    return InputError(None, f"{named(term)}: {why}")


def factor_of(term: str, factor: str | None, needs: str, what: str = "factor") -> float:
    """A term's factor ``F``: a finite number from 0 to :data:`MAX_FACTOR`; absent or bad, the one-line
    refusal (``needs``: the sentence that says how the term is written; ``what``: what the value is called,
    "top-k" for a number of experts)."""
    if factor is None:
        raise bad(term, needs)
    try:
        value = float(factor)
    except ValueError:
        raise bad(term, f"{what} {shown(factor)} is not a number") from None
    if not np.isfinite(value) or value < 0:
        raise bad(term, f"{what} {shown(factor)} must be a finite number >= 0")
    if value > MAX_FACTOR:
        raise bad(
            term,
            f"{what} {shown(factor)} is past {MAX_FACTOR:,.0f}, the most a term takes: a million times a time is "
            "no change to this step that its replay can speak for",
        )
    return value


def _past_range(term: str, ns: float) -> InputError:
    return bad(
        term,
        f"the changed times reach {ns / _YEAR_NS:,.3g} years, past the {TIME_LIMIT_NS / _YEAR_NS:.0f} years "
        "(int64 nanoseconds) a projected time holds: a smaller factor",
    )


def scaled_ns(term: str, values: np.ndarray, factor: float) -> np.ndarray:
    """``values`` (ns) times ``factor``, rounded half to even, as int64 ns; a time past :data:`TIME_LIMIT_NS`
    is the term's refusal (exit 2), never a wrapped int64. Every term that scales times scales them here."""
    out = np.rint(np.asarray(values, dtype=np.float64) * factor)
    if out.size:
        largest = float(np.abs(out).max())
        if largest > TIME_LIMIT_NS:
            raise _past_range(term, largest)
    return out.astype(np.int64)


def ns_of(values: np.ndarray) -> np.ndarray:
    """Float times as int64 ns, rounded half to even, held to just past :data:`TIME_LIMIT_NS` either way (a term
    that computes its own times, as the resize does, casts here): never a wrapped int64, and a time held there
    is past the limit, so :func:`check_within_range` refuses the terms."""
    bound = float(TIME_LIMIT_NS + 1)
    return np.clip(np.rint(np.asarray(values, dtype=np.float64)), -bound, bound).astype(np.int64)


def check_within_range(job: ReplayJob, state: Changing, terms: Sequence[WhatIf]) -> None:
    """Refuse (exit 2) terms whose change could take a projected time past :data:`TIME_LIMIT_NS`.

    Every projected end is at most the latest measured end plus what the terms added to the times (durations,
    transfers, trigger gaps) in all: the replay's longest path runs through each activity once, and unchanged it
    gives back the measured times. So that sum within the limit is the replay within int64, whatever the
    graph."""
    g = job.graph
    olds = (g.duration, g.transfer, g.gap)
    changed = [
        (i, new, old)
        for i, (new, old) in enumerate(zip((state.duration, state.transfer, state.gap), olds))
        if new is not None and new.size
    ]

    def measured() -> tuple[float, tuple[int, ...]]:
        """The graph's latest end and each of its arrays' least value (the job's own: one reduction each)."""
        latest = float(max(int(g.end.max()), 0)) if g.end.size else 0.0
        return latest, tuple(int(old.min()) if old is not None and old.size else 0 for old in olds)

    latest, least = job.kept("range:measured", measured)
    # a bound first, from one reduction of each array: what every row can add is at most its array's largest new
    # value less the smallest old one (a replay of terms that scale a few times is far inside it); with a margin
    # for the float sums' rounding, so that the bound never passes where the exact sum below would not
    bound = sum(max(int(new.max()) - least[i], 0) * float(new.size) for i, new, _ in changed)
    if (latest + bound) * (1 + 1e-9) <= TIME_LIMIT_NS:
        return
    added = 0.0
    for _, new, old in changed:
        grown = np.subtract(new, old)  # int64: both are within a quarter of its range
        np.maximum(grown, 0, out=grown)
        added += float(grown.sum(dtype=np.float64))  # summed as floats: a million of them may pass int64
    if latest + added > TIME_LIMIT_NS:
        raise _past_range(" ".join(t.text for t in terms), latest + added)
