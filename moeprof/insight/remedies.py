"""Concrete next steps, chosen to fit the trace (spec §6): its framework, workload and what already runs.

The texts live in ``remedies.toml``, ordered rules per topic, first match wins; each text is
written once and opportunities reference it by id. XLA flag names were checked against the
jaxlib this project is tested with (they are compiled into ``libjax_common.so``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from .stack import Stack

# collective kind -> remedy topic
KIND_TOPICS = {
    "all-to-all": "all-to-all",
    "ep-dispatch": "ep-exchange",
    "ep-combine": "ep-exchange",
    "all-gather": "all-gather",
    "reduce-scatter": "reduce-scatter",
    "all-reduce": "all-reduce",
    "send-recv": "send-recv",
    "broadcast": "broadcast",
    "other": "other",
}
# kinds whose InfiniBand share a better parallelism layout can move onto NVLink
_LAYOUT_KINDS = ("all-to-all", "ep-dispatch", "ep-combine", "all-gather", "reduce-scatter")


@dataclass(frozen=True)
class Remedy:
    id: str
    topic: str
    text: str
    framework: str | None = None
    workload: str | None = None
    requires: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()

    def fits(self, stack: Stack) -> bool:
        if self.framework is not None and self.framework != stack.framework:
            return False
        if self.workload is not None and self.workload != stack.workload:
            return False
        return all(stack.uses(flag) for flag in self.requires) and not any(stack.uses(f) for f in self.excludes)


@cache
def catalogue() -> tuple[tuple[Remedy, ...], dict[str, str]]:
    raw = tomllib.loads(resources.files("moeprof.insight").joinpath("remedies.toml").read_text(encoding="utf-8"))
    rules = tuple(
        Remedy(
            id=r["id"],
            topic=r["topic"],
            text=r["text"],
            framework=r.get("framework"),
            workload=r.get("workload"),
            requires=tuple(r.get("requires", ())),
            excludes=tuple(r.get("excludes", ())),
        )
        for r in raw["remedy"]
    )
    return rules, dict(raw["addendum"])


def choose(topic: str, stack: Stack) -> Remedy:
    """The first remedy of ``topic`` that fits the stack (every topic ends with an unconditional one)."""
    rules, _ = catalogue()
    return next(r for r in rules if r.topic == topic and r.fits(stack))


def for_collective(kind: str, link: str | None, stack: Stack, bandwidth_verdict: str | None = None) -> tuple[str, str]:
    """(remedy id, full text) for exposed communication of this kind on this link."""
    base = choose(KIND_TOPICS.get(kind, "other"), stack)
    _, addenda = catalogue()
    text = base.text
    if bandwidth_verdict in addenda:
        text += " " + addenda[bandwidth_verdict]
    if link in ("ib", "mixed") and kind in _LAYOUT_KINDS:
        text += " " + addenda["crosses-ib"]
    return base.id, text
