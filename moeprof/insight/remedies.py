"""Concrete next steps, chosen to fit the opportunity and the trace (spec §6).

The remedies are data (``remedies.toml``): each row states its preconditions (the opportunity's kind,
the collective's role, the framework and workload, the link and the devices, whether the §8 ledger
finds it waiting or moving bytes, what already runs, how much of it is already hidden) and the first
row whose conditions all hold is the one used. Each text is written once; opportunities reference it
by id, and ``family`` names what kind of fix a row is across its framework variants. XLA flag names
were checked against the jaxlib this project is tested with (they are compiled into
``libjax_common.so``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from ..core.trace import CPU, TPU
from .stack import Stack

# kinds whose InfiniBand share a better parallelism layout can move onto NVLink
_LAYOUT_KINDS = ("all-to-all", "ep-dispatch", "ep-combine", "all-gather", "reduce-scatter")
EXPERT_KINDS = ("all-to-all", "ep-dispatch", "ep-combine")
UNNAMED_DEVICES = ("gpu", "cpu")  # what a row that names no devices fits: the rows written before TPUs


@dataclass(frozen=True)
class Situation:
    """What an opportunity is, in the terms the remedy table's conditions are written in."""

    kind: str  # a collective kind, expert-exchange, straggler, or a device signal
    role: str = "none"  # expert | exchange | data-parallel | tensor-parallel | point-to-point | broadcast | other
    link: str = "none"  # nvlink | ib | mixed | unknown | none (CPU devices, signals)
    devices: str = "gpu"  # gpu | cpu | tpu
    bound: str = "unknown"  # wait | transfer | unknown (spec §8 ledger)
    hidden_share: float | None = None  # of its comm time, the share already overlapped by compute
    # of its exposed time, the share the compute beside it could hide at most (host copies: None elsewhere)
    hideable_share: float | None = None


def role_of(kind: str, stack: Stack) -> str:
    """The role a collective of ``kind`` plays in this job, as far as the trace's evidence tells it."""
    if kind in ("ep-dispatch", "ep-combine") or (kind in ("all-to-all", "expert-exchange") and stack.uses("moe")):
        return "expert"
    if kind in ("all-to-all", "expert-exchange"):
        return "exchange"  # an all-to-all with no MoE evidence: embeddings (DLRM, TorchRec) or a plain exchange
    if kind in ("all-gather", "reduce-scatter", "all-reduce"):
        return "tensor-parallel" if stack.workload == "inference" else "data-parallel"
    return {"send-recv": "point-to-point", "broadcast": "broadcast", "other": "other"}.get(kind, "none")


def devices_kind(devices: Iterable[str], kinds: Mapping[str, str]) -> str:
    """cpu when every device named is a CPU device, tpu when every one is a TPU chip, else gpu: each device's
    kind as its reader recorded it (``kinds``: device -> GPU | TPU | CPU, the job's ``Stack.device_kinds``)."""
    named = {str(kinds.get(str(d), "")) for d in devices}
    return {TPU: "tpu", CPU: "cpu"}.get(named.pop(), "gpu") if len(named) == 1 else "gpu"


@dataclass(frozen=True)
class Remedy:
    id: str
    family: str
    kinds: tuple[str, ...]
    text: str
    roles: tuple[str, ...] = ()
    framework: str | None = None
    vendor: str | None = None  # AMD | NVIDIA: the GPUs' vendor (HIP graphs, not CUDA graphs, on AMD)
    workload: str | None = None
    links: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()  # empty: GPUs and CPUs (UNNAMED_DEVICES)
    bound: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    hidden_at_least: float | None = None
    hidden_below: float | None = None
    hideable_below: float | None = None  # fits where the compute beside it could hide less than this share
    sources: tuple[str, ...] = ()  # where the flags and options it names come from
    # facts of insight/stack.py its text says something about: where the trace shows one in use, the text
    # names that evidence (what is already done is said as done)
    checks: tuple[str, ...] = ()

    def fits(self, situation: Situation, stack: Stack) -> bool:
        s = situation
        hidden = s.hidden_share
        return (
            s.kind in self.kinds
            and (not self.roles or s.role in self.roles)
            and (self.framework is None or self.framework == stack.framework)
            and (self.vendor is None or self.vendor == stack.vendor)
            and (self.workload is None or self.workload == stack.workload)
            and (not self.links or s.link in self.links)
            and s.devices in (self.devices or UNNAMED_DEVICES)
            and (not self.bound or s.bound in self.bound)
            and all(stack.uses(flag) for flag in self.requires)
            and not any(stack.uses(flag) for flag in self.excludes)
            and (self.hidden_at_least is None or (hidden is not None and hidden >= self.hidden_at_least))
            and (self.hidden_below is None or (hidden is not None and hidden < self.hidden_below))
            and (
                self.hideable_below is None or (s.hideable_share is not None and s.hideable_share < self.hideable_below)
            )
        )

    def said(self, stack: Stack) -> str:
        """The remedy's text, with the evidence of the facts it was checked against (``requires`` and
        ``checks``) that the trace shows in use (the others the text proposes)."""
        facts = dict.fromkeys((*self.requires, *self.checks))  # in order, once
        seen = [stack.evidence[f] for f in facts if stack.uses(f) and stack.evidence.get(f)]
        return f"{self.text} Seen in the trace: {'; '.join(seen)}." if seen else self.text

    def checked(self, situation: Situation, stack: Stack) -> tuple[dict[str, Any], ...]:
        """What the remedy was chosen on: each condition of its row, with what the trace showed (JSON
        ``remedy_checked``); the facts its text depends on with their evidence, where the trace shows it."""
        s = situation
        out: list[dict[str, Any]] = [{"check": "kind", "seen": s.kind}]
        for check, wanted, seen in (
            ("role", self.roles, s.role),
            ("framework", self.framework, stack.framework),
            ("vendor", self.vendor, stack.vendor),
            ("workload", self.workload, stack.workload),
            ("link", self.links, s.link),
            ("devices", self.devices, s.devices),
            ("bound", self.bound, s.bound),
        ):
            if wanted:
                out.append({"check": check, "wants": list(wanted) if isinstance(wanted, tuple) else wanted,
                            "seen": seen})  # fmt: skip
        if self.hidden_at_least is not None or self.hidden_below is not None:
            bounds = {"at_least": self.hidden_at_least, "below": self.hidden_below}
            out.append({"check": "hidden_share", "wants": {k: v for k, v in bounds.items() if v is not None},
                        "seen": s.hidden_share})  # fmt: skip
        if self.hideable_below is not None:
            out.append({"check": "hideable_share", "wants": {"below": self.hideable_below}, "seen": s.hideable_share})
        for flags, want in ((self.requires, "in use"), (self.excludes, "not in use"), (self.checks, None)):
            for flag in flags:
                if want is None and flag in (*self.requires, *self.excludes):
                    continue
                entry: dict[str, Any] = {"check": flag, "seen": "in use" if stack.uses(flag) else "not seen"}
                if want is not None:
                    entry["wants"] = want
                if stack.uses(flag) and stack.evidence.get(flag):
                    entry["evidence"] = stack.evidence[flag]
                out.append(entry)
        return tuple(out)


def _tuple(value: object) -> tuple[str, ...]:
    return tuple(value) if isinstance(value, list) else ((str(value),) if value else ())


@cache
def actions() -> dict[str, str]:
    """Each remedy family's fix as one action (``[action]`` of remedies.toml): what a report's first try says."""
    raw = tomllib.loads(resources.files("moeprof.insight").joinpath("remedies.toml").read_text(encoding="utf-8"))
    return dict(raw["action"])


def action_of(family: str) -> str | None:
    return actions().get(family)


@cache
def catalogue() -> tuple[tuple[Remedy, ...], dict[str, dict[str, str]]]:
    """The remedy rows, and the sentences added to a collective's remedy: by device kind ("gpu", "tpu")."""
    raw = tomllib.loads(resources.files("moeprof.insight").joinpath("remedies.toml").read_text(encoding="utf-8"))
    rules = tuple(
        Remedy(
            id=r["id"],
            family=r["family"],
            kinds=_tuple(r["kinds"]),
            text=r["text"],
            roles=_tuple(r.get("roles", ())),
            framework=r.get("framework"),
            vendor=r.get("vendor"),
            workload=r.get("workload"),
            links=_tuple(r.get("links", ())),
            devices=_tuple(r.get("devices", ())),
            bound=_tuple(r.get("bound", ())),
            requires=_tuple(r.get("requires", ())),
            excludes=_tuple(r.get("excludes", ())),
            hidden_at_least=r.get("hidden_at_least"),
            hidden_below=r.get("hidden_below"),
            hideable_below=r.get("hideable_below"),
            sources=_tuple(r.get("sources", ())),
            checks=_tuple(r.get("checks", ())),
        )
        for r in raw["remedy"]
    )
    return rules, {"gpu": dict(raw["addendum"]), "tpu": dict(raw["addendum_tpu"])}


def by_id(remedy_id: str) -> Remedy | None:
    return next((r for r in catalogue()[0] if r.id == remedy_id), None)


def choose(situation: Situation | str, stack: Stack) -> Remedy:
    """The first remedy of the table that fits (every kind ends with an unconditional one).

    A bare kind (a device signal, a straggler) is a situation with nothing else known."""
    s = Situation(situation) if isinstance(situation, str) else situation
    rules, _ = catalogue()
    return next(r for r in rules if r.fits(s, stack))


def for_collective(situation: Situation, stack: Stack, bandwidth_verdict: str | None = None) -> tuple[Remedy, str]:
    """(remedy, full text) for exposed communication in ``situation``: the chosen text, and what the
    collective's bandwidth and link add to it (not on CPU devices, which have no fabric, and not where it
    is mostly waiting, since its bus bandwidth then measures the wait)."""
    base = choose(situation, stack)
    addenda = catalogue()[1]["tpu" if situation.devices == "tpu" else "gpu"]
    text = base.said(stack)
    if situation.devices == "cpu" or situation.bound == "wait":
        return base, text
    if bandwidth_verdict in addenda:
        text += " " + addenda[bandwidth_verdict]
    if situation.link in ("ib", "mixed") and situation.kind in _LAYOUT_KINDS:
        text += " " + addenda["crosses-ib"]
    return base, text
