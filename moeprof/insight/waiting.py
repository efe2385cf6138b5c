"""What the cross-rank ledger (spec §8) says to do: wait-dominated vs transfer-dominated collectives,
and the device that makes the others wait."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.analysis import Collective, Opportunity
from .remedies import Situation, choose, devices_kind
from .stack import Stack

DOMINANT = 0.5  # a part above half of a collective's matched time decides what it is bound by
STRAGGLER_SHARE = 0.5  # last in at least half of its instances: a straggler, not chance


@dataclass(frozen=True)
class OpStraggler:
    device: str
    share: float  # of the op's complete instances where this device arrived last
    instances: int


def op_stragglers(records: pd.DataFrame) -> dict[tuple[str, str], OpStraggler]:
    """Per (op, kind): the device that arrives last most often. ``records``: the ledger's per-record view
    joined with the comm records (op, kind, device, instance, straggler)."""
    last = records[records["straggler"] & (records["instance"] >= 0)]
    if last.empty:
        return {}
    counts = last.groupby(["op", "kind", "device"], observed=True).size().rename("n").reset_index()
    totals = counts.groupby(["op", "kind"], observed=True)["n"].transform("sum")
    counts = counts.assign(total=totals).sort_values(["op", "kind", "n", "device"], ascending=[True, True, False, True])
    top = counts.drop_duplicates(["op", "kind"])
    return {
        (str(o), str(k)): OpStraggler(str(d), float(n / t), int(t))
        for o, k, d, n, t in top[["op", "kind", "device", "n", "total"]].itertuples(index=False)
    }


def bound_by(collective: Collective) -> str | None:
    """wait | transfer | None: which part dominates the collective's matched time."""
    if collective.wait_ns is None or collective.transfer_ns is None:
        return None
    matched = collective.wait_ns + collective.transfer_ns
    if matched <= 0:
        return None
    if collective.wait_ns / matched > DOMINANT:
        return "wait"
    if collective.transfer_ns / matched > DOMINANT:
        return "transfer"
    return None


def why_exposed(collective: Collective, straggler: OpStraggler | None) -> tuple[str, dict, str] | None:
    """(wait | transfer, evidence, the sentence it adds to the remedy) from the ledger for an exposed
    collective, or None without a ledger split."""
    bound = bound_by(collective)
    if bound is None:
        return None
    matched = (collective.wait_ns or 0) + (collective.transfer_ns or 0)
    evidence: dict = {"wait_share": round((collective.wait_ns or 0) / matched, 4)}
    note = ""
    if bound == "wait":
        if straggler is not None:
            evidence.update(straggler=straggler.device, straggler_share=round(straggler.share, 4))
            note = f"Here {straggler.device} arrives last in {straggler.share:.0%} of its {straggler.instances} calls."
        return bound, evidence, note
    if collective.transfer_bus_bandwidth_gbps is not None:
        evidence["transfer_bus_bandwidth_gbps"] = collective.transfer_bus_bandwidth_gbps
        achieved = f"{collective.transfer_bus_bandwidth_gbps:,.1f} GB/s bus bandwidth while data moves"
        if collective.link_peak_gbps:
            achieved += f", {collective.transfer_bus_bandwidth_gbps / collective.link_peak_gbps:.0%} of the link's peak"
        note = f"It achieves {achieved}."
    return bound, evidence, note


def _victims(complete: pd.DataFrame, device: str) -> pd.DataFrame:
    """The records of ``complete`` (members of complete instances) that waited for ``device``: the other members
    of the instances where it arrived last."""
    instance = complete["instance"].to_numpy(np.int64)
    is_device = (complete["device"] == device).to_numpy(bool)
    # per instance (numbered 0..N-1): whether ``device`` was its straggler (one straggler per instance)
    its_last = np.zeros(int(instance.max(initial=-1)) + 1, dtype=bool)
    its_last[instance[is_device & complete["straggler"].to_numpy(bool)]] = True
    return complete[its_last[instance] & ~is_device]


def caused_wait_by_op(records: pd.DataFrame, device: str) -> dict[tuple[str, str], float]:
    """Per (op, kind): the waiting ``device`` caused on the other members of the instances where it
    arrived last (``records`` as for :func:`straggler_opportunity`): the time a straggler finding counts."""
    victims = _victims(records[records["instance"] >= 0], device)
    waits = victims.groupby(["op", "kind"], observed=True)["wait_ns"].sum().reset_index()
    return {(str(o), str(k)): float(w) for o, k, w in waits[["op", "kind", "wait_ns"]].itertuples(index=False) if w > 0}


def straggler_opportunity(records: pd.DataFrame, exposed_wait: dict[str, int], stack: Stack) -> list[Opportunity]:
    """A device that arrives last in most collectives and makes the others wait is a finding of its own.

    The bound is, over the other devices, the most exposed waiting that device caused on one of them.
    """
    complete = records[records["instance"] >= 0]
    last = complete[complete["straggler"]]
    if last.empty:
        return []
    instances = complete.groupby("device", observed=True)["instance"].nunique()
    counts = last.groupby("device", observed=True).size()
    share = (counts / instances.reindex(counts.index)).sort_values(ascending=False)
    device = str(share.index[0])
    if share.iloc[0] < STRAGGLER_SHARE or counts[device] < 2:
        return []
    victims = _victims(complete, device)
    caused = victims.groupby("device", observed=True)["wait_ns"].sum()
    if caused.empty or caused.max() <= 0:
        return []
    per_victim = {str(d): min(int(w), int(exposed_wait.get(str(d), 0))) for d, w in caused.items()}
    worst = max(per_victim, key=lambda d: (per_victim[d], d))
    situation = Situation("straggler", devices=devices_kind([device], stack.device_kinds))
    fix = choose(situation, stack)
    return [
        Opportunity(
            title=f"{device} arrives last in {share.iloc[0]:.0%} of collectives: the others wait for it",
            kind="straggler",
            name=device,
            link=None,
            exposed_ns=int(sum(per_victim.values())),
            saving_bound_ns=per_victim[worst],
            bound_from="ledger",
            evidence={
                "count": int(counts[device]),
                "devices": int(len(per_victim)),
                "total_ns": int(caused.sum()),
                "worst_device": worst,
                "detail": f"{device} is the last to arrive in {int(counts[device])} of "
                f"{int(instances[device])} collectives it takes part in; it made the others wait "
                f"{int(caused.sum()) / 1e6:,.3f} ms in all",
            },
            remedy=fix.said(stack),
            remedy_id=fix.id,
            remedy_family=fix.family,
            remedy_checked=fix.checked(situation, stack),
        )
    ]
