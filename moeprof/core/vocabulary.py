"""The name patterns every reader and insight asks about, loaded once from ``taxonomy.toml``.

Readers never spell a pattern themselves: one vocabulary means the Kineto and
Nsight readers cannot drift apart on what counts as a communication range.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np


@dataclass(frozen=True)
class Vocabulary:
    copy_name: re.Pattern[str]
    memset_name: re.Pattern[str]
    copy_kinds: dict[str, str]
    comm_range: re.Pattern[str]
    not_comm_range: re.Pattern[str]
    p2p_range: re.Pattern[str]
    profiler_step: re.Pattern[str]
    step_range: re.Pattern[str]
    comm_capable: re.Pattern[str]
    gemm: re.Pattern[str]
    grouped_gemm: re.Pattern[str]
    deepep: re.Pattern[str]
    deepep_normal: re.Pattern[str]
    deepep_low_latency: re.Pattern[str]
    deepep_notify_dispatch: re.Pattern[str]
    deepep_rdma_ranks: re.Pattern[str]
    deepep_ll_fp8: re.Pattern[str]
    deepep_dispatch_start: re.Pattern[str]
    fp8_token_cast: re.Pattern[str]
    kernel_launch: re.Pattern[str]
    capture_begin: re.Pattern[str]
    capture_end: re.Pattern[str]
    nccl_ep: re.Pattern[str]
    training_range: re.Pattern[str]
    inference_range: re.Pattern[str]
    symm_mem: re.Pattern[str]
    sharded_embedding: re.Pattern[str]
    fsdp_range: re.Pattern[str]
    moe_scope: re.Pattern[str]
    expert_scope: re.Pattern[str]
    point_to_point: frozenset[str]
    ring_or_tree: frozenset[str]

    def copy_kind(self, name: str) -> str:
        """HtoD / DtoH / DtoD / PtoP / HtoH from a copy's name; "" when it names none."""
        m = self.copy_name.match(name)
        return self.copy_kinds[m.group(1).lower()] if m else ""

    def is_comm_range(self, name: str) -> bool:
        return bool(self.comm_range.search(name)) and not self.not_comm_range.search(name)

    def activity_of(self, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Activity (kernel | memcpy | memset) and copy kind of each of some distinct names."""
        activity = np.empty(len(names), dtype=object)
        copy_kind = np.empty(len(names), dtype=object)
        for i, name in enumerate(names):
            kind = self.copy_kind(str(name))
            copy_kind[i] = kind
            activity[i] = "memcpy" if kind else ("memset" if self.memset_name.match(str(name)) else "kernel")
        return activity, copy_kind


@cache
def _cased_twin(pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    """The case-sensitive twin of a case-insensitive pattern that spells no upper-case letter (None: there is
    none): on lower-case ASCII text it matches where the pattern does. Python's ``re`` skips ahead by a
    pattern's literal prefix or first characters only when matching case-sensitively: the twin searches a
    kernel name ~10x faster (13 µs a name for ``comm_capable``)."""
    text = pattern.pattern
    if not (pattern.flags & re.IGNORECASE) or not isinstance(text, str) or text != text.lower():
        return None
    body = text[len("(?i)") :] if text.startswith("(?i)") else text
    try:
        return re.compile(body, pattern.flags & ~re.IGNORECASE)
    except re.error:
        return None


def searches(pattern: re.Pattern[str], values: Iterable[str], folded: Sequence[str | None] | None = None) -> list[bool]:
    """Whether ``pattern`` is found in each of ``values``: ``bool(pattern.search(v))``, through its
    case-sensitive twin on the lower-cased value where the pattern ignores case and the value is ASCII (on ASCII
    text, case-insensitive matching reads every letter as its lower case; Unicode's wider case folding, the
    Kelvin sign for a k, is left to the pattern itself).

    ``folded``: :func:`folded_values` of ``values``, for strings searched by many patterns (lower-cased once, not once
    a pattern)."""
    twin = _cased_twin(pattern)
    values = values if isinstance(values, Sequence) else list(values)
    if twin is None:
        return _search_each(pattern, values)
    if folded is None:
        folded = folded_values(values)
    if None not in folded:  # all ASCII (kernel names, scopes): the twin on each
        return _search_each(twin, folded)  # type: ignore[arg-type]
    return [(twin.search(f) if f is not None else pattern.search(v)) is not None for v, f in zip(values, folded)]


def _search_each(pattern: re.Pattern[str], texts: Sequence[str]) -> list[bool]:
    """``[bool(pattern.search(t)) for t in texts]`` at C speed (a match is true, None false).

    (One search of the texts joined by newlines, the matches mapped back to their texts, measured slower: each
    pattern compiled again for it costs more than the searches it saves, ~0.1-0.4 µs a kernel name.)"""
    return list(map(bool, map(pattern.search, texts)))


def folded_values(values: Iterable[str]) -> list[str | None]:
    """Each value lower-cased where it is ASCII (what :func:`searches` searches with a pattern's case-sensitive
    twin), None where it is not."""
    return [v.lower() if v.isascii() else None for v in values]


@cache
def vocabulary() -> Vocabulary:
    text = resources.files("moeprof.core").joinpath("taxonomy.toml").read_text(encoding="utf-8")
    raw = tomllib.loads(text)["vocabulary"]
    patterns = raw.pop("patterns")
    kinds = raw.pop("copy_kinds")
    return Vocabulary(
        **{k: re.compile(v) for k, v in raw.items()},
        copy_kinds=dict(kinds),
        point_to_point=frozenset(patterns["point_to_point"]),
        ring_or_tree=frozenset(patterns["ring_or_tree"]),
    )
