"""The ``balance-router`` term (spec §9, moeprof's own): what a balanced router does to the job, work
conserved (:func:`router_balanced`). It takes no filters: a router moves work between every device of a
group. What a row is to the router (:data:`MOE_ROLES`) is decided per file, in the map
(:func:`moe_roles`, the replay's ``moe_role`` column)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ....core.analysis import Opportunity
from ....core.events import BUCKETS, combine_codes, lookup
from ....core.expert_load import RoutedLoad, count_word, expert_load_figures
from ....core.metrics import EventColumns
from ....core.roles import EXCHANGES, role_and_rule, role_table, rule_index
from ....core.roofline import roles_of
from ....core.trace import TPU, Trace
from ..job import NO_STEP, ReplayJob
from .base import Changing, WhatIf, bad

NAME = "balance-router"
# what a row is to the router: the routed experts' compute, a dispatch/combine exchange whose bytes are fixed
# by shape (padded, capacity), one whose bytes follow the routing (ragged, EP kernels)
MOE_ROLES = ("expert", "exchange", "exchange-ragged")


class BalanceRouter:
    name: str = NAME
    forms: tuple[str, ...] = ("balance-router",)
    help: str = "the routed experts' work spread evenly over each EP group, work conserved"

    def parse(self, text: str, body: str | None, factor: str | None) -> WhatIf:
        if factor is not None:
            raise bad(text, f"{NAME} takes no factor")
        if (body or "").strip():
            raise bad(text, "balance-router takes no filters: a router moves work between every device of a group")
        return WhatIf(text.strip(), NAME)

    def apply(self, job: ReplayJob, term: WhatIf, state: Changing, opportunities: Sequence[Opportunity]) -> int:
        gap = job.graph.gap if state.gap is None else state.gap
        duration, transfer, state.gap, balance = router_balanced(job, state.duration, state.transfer, gap)
        changed = int((duration != state.duration).sum() + (transfer != state.transfer).sum())
        state.duration, state.transfer = duration, transfer
        state.note = "; ".join(n for n in (state.note, balance.note) if n)
        return changed


TERM = BalanceRouter()


def moe_roles(trace: Trace, columns: EventColumns) -> tuple[np.ndarray, np.ndarray]:
    """Each row's role to the router (codes into ``("", *MOE_ROLES)``), from its MoE role (core.roles, the
    event table's ``role`` column: one idea, one place):

    * ``expert``: compute of the routed experts (role ``experts``) by its own evidence: a ragged dot, a grouped
      GEMM or a kernel that names the experts, or a scope or range that does (the work each device does for the
      tokens routed to it); not the ops placed only by what they serve (core.components: casts of the experts'
      weights, their gradients' reductions without a name stack);
    * ``exchange-ragged``: a dispatch or combine whose bytes follow the routing (EP kernels, the ragged
      all-to-all);
    * ``exchange``: any other dispatch or combine (an all-to-all of a MoE scope, or of none): its bytes are
      fixed by its shape (padded, capacity-bound).

    The tests run once per distinct string of their column, then map over the rows."""
    n = len(columns)
    roles = np.array(("", *MOE_ROLES), dtype=object)
    if not n:
        return np.zeros(0, dtype=np.int64), roles
    del trace

    def per_value(column: str, test: Callable[[str], bool]) -> np.ndarray:
        """Per row: ``test`` of its string ("" where missing), evaluated once per distinct string."""
        codes, values = columns.codes(column)  # the table's own narrow codes: a lookup, no int64 copy
        flags = np.array([test(str(v)) for v in values.tolist()], dtype=bool)
        return lookup(codes, flags, test(""))

    index = role_table().index
    role = roles_of(columns)  # decided once per table
    compute, comm = per_value("bucket", "compute".__eq__), per_value("bucket", "comm".__eq__)
    expert = compute & (role == index["experts"])
    if expert.any():  # which rule placed them, decided again over the experts' rows only
        rows = np.flatnonzero(expert)
        expert[rows] = role_and_rule(columns.table.take(rows))[1] != rule_index("served")
    exchange = comm & np.isin(role, [index[r] for r in EXCHANGES])
    ragged = (
        per_value("kind", lambda s: s in ("ep-dispatch", "ep-combine"))
        | per_value("opcode", lambda s: s.startswith("ragged-all-to-all"))
        | per_value("name", lambda s: "RaggedAllToAll" in s)
    )
    out = np.zeros(n, dtype=np.int64)
    out[expert] = 1 + MOE_ROLES.index("expert")
    out[exchange & ~ragged] = 1 + MOE_ROLES.index("exchange")
    out[exchange & ragged] = 1 + MOE_ROLES.index("exchange-ragged")
    return out, roles


@dataclass(frozen=True)
class RouterBalance:
    """What the balance-router change found and did (the projection's line says it)."""

    expert_rows: int  # the routed experts' activities found
    exchange_rows: int  # the dispatch/combine activities found
    ragged_rows: int  # of those, the ones whose bytes follow the routing (their transfer changed)
    regions: int  # (step, region between exchanges, EP group) cells whose expert work was spread evenly
    moved_ns: int  # expert work taken from the devices above their group's mean, summed over cells
    unplaced_ns: int  # work due to a device with no activity to carry it in its region (left out)
    one_device: str = ""  # the job's only device: every expert runs there, no work moves between devices
    routed: str = ""  # what the run's routed load says (spec §11), where measured: the note's evidence
    measured: bool = False  # the measured rows per device set each device's share (not the work's durations)

    @property
    def note(self) -> str:
        """What the change could not do, in a sentence ("": it did what it says)."""
        if self.one_device:
            said = (
                f"{self.one_device} runs every expert: a balanced router moves no work between devices, it computes "
                "the same routed rows whatever their spread over its experts"
            )
            return said + (f"; {self.routed}" if self.routed else "")
        if not self.expert_rows:
            return (
                "no routed-expert work found (no experts scope in the HLO op names, no grouped-GEMM, megablox "
                "or fused-MoE kernel): the router term changes nothing"
            )
        if not self.exchange_rows:
            return "no dispatch/combine found: the expert work is spread evenly per step"
        parts = []
        if self.measured:
            parts.append(
                "each device's expert work follows the run's routed rows (its own time per row times the group's "
                "mean rows)"
            )
        if self.unplaced_ns:
            parts.append(f"{self.unplaced_ns / 1e6:.3f} ms of expert work had no activity to carry it")
        return "; ".join(parts)


def _role_mask(job: ReplayJob, role: str) -> np.ndarray:
    """The rows of one MOE_ROLES role (none where the table has no role column)."""
    if "moe_role" not in job.table.columns:
        return np.zeros(job.size, dtype=bool)
    codes, values = job.codes("moe_role")
    return lookup(codes, np.array([str(v) == role for v in values.tolist()], dtype=bool), False)


def router_balanced(
    job: ReplayJob, duration: np.ndarray, transfer: np.ndarray, gap: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, RouterBalance]:
    """The ``balance-router`` change: what a balanced router does to the job, work conserved.

    A router moves tokens, so it moves expert work: in each *cell* (a §5 step, the region between two of a
    device's dispatch/combine exchanges counted in start order, and the devices of one EP group: the members
    of its exchange instances), every device of the group gets the group's mean expert work. A device's expert
    work in a cell is its expert activities' durations plus the gaps between two of them (a token-driven loop
    runs, and launches, more iterations with more tokens); each is scaled by (the mean / the device's work).
    A device with no expert activity in a cell where the mean is not 0 gets its share on its last compute
    activity of that cell (else it is left out: ``unplaced_ns``). Exchanges whose bytes follow the routing
    (``exchange-ragged``) move bytes with the tokens: a device's sends are conserved (its tokens, top-k copies
    each) and its receives follow its expert work in the region the exchange feeds (after it) or drains
    (before it), whichever holds more; the busiest member (the most expert work, ``W_max``) sets when the
    exchange ends, so every member's transfer ``τ`` (a non-member's duration) scales by
    ``(W̄ + W̄) / (W̄ + W_max) = 2 / (1 + W_max / W̄)``. Fixed-shape exchanges (padded, capacity) keep theirs.
    Durations are rounded half to even."""
    g = job.graph
    duration, transfer, gap = duration.copy(), transfer.copy(), gap.copy()
    n = job.size
    inside = job.step != NO_STEP
    compute = job.bucket == BUCKETS.index("compute")
    member = g.is_member
    expert = _role_mask(job, "expert") & compute & inside & ~member
    ragged = _role_mask(job, "exchange-ragged")
    exchange = (_role_mask(job, "exchange") | ragged) & (job.bucket == BUCKETS.index("comm")) & inside
    if job.device_names.size == 1:  # every expert on one device: nothing to move, whatever the load
        name = str(job.device_names[0])
        return duration, transfer, gap, RouterBalance(
            int(expert.sum()), int(exchange.sum()), int((ragged & exchange).sum()), 0, 0, 0,
            one_device=f"one {'chip' if job.kinds.get(name) == TPU else 'device'}, {name},",
            routed=_one_device_load(job.routed),
        )  # fmt: skip
    if not expert.any():
        return duration, transfer, gap, RouterBalance(0, int(exchange.sum()), int((ragged & exchange).sum()), 0, 0, 0)
    dev = g.device
    # the region of each row: the exchanges of its (device, step) that start at or before it (an exchange opens
    # the region after it), in the device's (start, end, row) order
    order = np.lexsort((np.arange(n), g.end, g.start, job.step, dev))
    ex_sorted = exchange[order].astype(np.int64)
    cell = combine_codes(dev[order], job.step[order])
    first = np.r_[True, cell[1:] != cell[:-1]] if n else np.zeros(0, dtype=bool)
    run = np.cumsum(ex_sorted)
    base = np.maximum.accumulate(np.where(first, run - ex_sorted, 0))
    region = np.empty(n, dtype=np.int64)
    region[order] = run - base
    # EP groups: a device belongs to the group of the first device among the members of its exchange instances
    n_dev = int(job.device_names.size)
    group_of = np.full(n_dev, -1, dtype=np.int64)
    ex_members = np.flatnonzero(exchange & member)
    if ex_members.size:
        inst = g.instance[ex_members]
        inst_u, inst_i = np.unique(inst, return_inverse=True)
        lowest = np.full(inst_u.size, n_dev, dtype=np.int64)
        np.minimum.at(lowest, inst_i, dev[ex_members])
        lead = np.full(n_dev, n_dev, dtype=np.int64)
        np.minimum.at(lead, dev[ex_members], lowest[inst_i])
        group_of = np.where(lead < n_dev, lead, -1)
    groups, group_size = np.unique(group_of, return_counts=True)
    size_of = dict(zip(groups.tolist(), group_size.tolist()))
    group = group_of[dev]
    # expert work per (cell, device): durations, plus the gaps between two expert activities of one region
    rows = np.flatnonzero(expert)
    trig = g.trigger[rows]
    internal = trig >= 0
    internal[internal] = expert[trig[internal]] & (region[trig[internal]] == region[rows[internal]])
    work = duration[rows] + np.where(internal, gap[rows], 0)
    key = combine_codes(job.step[rows], region[rows], group[rows])
    cells, cell_of = np.unique(key, return_inverse=True)
    k = cells.size
    total = np.bincount(cell_of, weights=work.astype(np.float64), minlength=k)
    per = np.zeros((k, n_dev), dtype=np.float64)
    np.add.at(per, (cell_of, dev[rows]), work.astype(np.float64))
    members_of = np.zeros(k, dtype=np.int64)
    members_of[cell_of] = group[rows]
    members = np.array([size_of[int(c)] for c in members_of.tolist()], dtype=np.float64)
    mean = total / members
    in_group = group_of[None, :] == members_of[:, None]  # [cell, device]: the device is of the cell's group
    # each device's share: the group's mean work (the durations spread), or, where the run's routed rows are
    # known, its own time per row times the group's mean rows (a slow device stays slow: a router moves tokens)
    target = np.broadcast_to(mean[:, None], per.shape).copy()
    busiest = per.max(axis=1) / np.where(mean > 0, mean, 1.0)
    rows_per = _device_rows(job, group_of, in_group)
    if rows_per is not None:
        layer_of = _cell_layers(job, rows, cell_of, k, rows_per.shape[0])
        target, busiest = _measured_shares(per, in_group, rows_per, layer_of)
    factor = np.where(per > 0, target / np.where(per > 0, per, 1.0), 1.0)
    f = factor[cell_of, dev[rows]]
    duration[rows] = np.rint(duration[rows] * f).astype(np.int64)
    scaled_gap = rows[internal]
    gap[scaled_gap] = np.rint(gap[scaled_gap] * f[internal]).astype(np.int64)
    moved = float(np.clip(per - target, 0, None).sum())

    def cell_index(step: np.ndarray, reg: np.ndarray, grp: np.ndarray) -> np.ndarray:
        """The cell of each (step, region, group), -1 where no expert activity made one (one numbering)."""
        keys = combine_codes(np.r_[job.step[rows], step], np.r_[region[rows], reg], np.r_[group[rows], grp])
        lut = np.full(int(keys.max()) + 1, -1, dtype=np.int64)
        lut[keys[: rows.size]] = cell_of
        return lut[keys[rows.size :]]

    # devices of a cell's group with no expert activity in it: their share on their last compute of the region
    unplaced = 0.0
    cell_group = np.zeros(k, dtype=np.int64)
    cell_group[cell_of] = group[rows]
    empty_c, empty_d = np.nonzero((group_of[None, :] == cell_group[:, None]) & (per == 0) & (target > 0))
    if empty_c.size:
        carriers = np.flatnonzero(compute & inside & ~member)
        carriers = carriers[cell_index(job.step[carriers], region[carriers], group[carriers]) >= 0]
        c_cell = cell_index(job.step[carriers], region[carriers], group[carriers])
        slot = c_cell * n_dev + dev[carriers]
        by = np.lexsort((g.start[carriers], slot))  # per (cell, device), the latest start last
        last_of = np.full(k * n_dev, -1, dtype=np.int64)
        is_last = np.r_[slot[by][1:] != slot[by][:-1], True] if by.size else np.zeros(0, dtype=bool)
        last_of[slot[by][is_last]] = carriers[by][is_last]
        carrier = last_of[empty_c * n_dev + empty_d]
        placed = carrier >= 0
        np.add.at(duration, carrier[placed], np.rint(target[empty_c[placed], empty_d[placed]]).astype(np.int64))
        unplaced = float(target[empty_c[~placed], empty_d[~placed]].sum())
    # exchanges whose bytes follow the routing: each device's transfer follows its tokens
    ragged_rows = np.flatnonzero(ragged & exchange)
    if ragged_rows.size:
        at = (job.step[ragged_rows], group[ragged_rows])
        feed = cell_index(at[0], region[ragged_rows], at[1])  # the region after it: the tokens it dispatches
        drain = cell_index(at[0], region[ragged_rows] - 1, at[1])  # the one before it: the results it combines
        w_feed = np.where(feed >= 0, total[np.maximum(feed, 0)], -1.0)
        w_drain = np.where(drain >= 0, total[np.maximum(drain, 0)], -1.0)
        chosen = np.where(w_feed >= w_drain, feed, drain)
        ok = chosen >= 0
        # the busiest member's bytes set the exchange's end: max over the group's devices of the cell
        scale = np.where(ok, 2.0 / (1.0 + busiest[np.maximum(chosen, 0)]), 1.0)
        is_m = member[ragged_rows]
        transfer[ragged_rows[is_m]] = np.rint(transfer[ragged_rows[is_m]] * scale[is_m]).astype(np.int64)
        duration[ragged_rows[~is_m]] = np.rint(duration[ragged_rows[~is_m]] * scale[~is_m]).astype(np.int64)
    return (
        duration,
        transfer,
        gap,
        RouterBalance(
            int(rows.size),
            int(exchange.sum()),
            int(ragged_rows.size),
            int(k),
            int(round(moved)),
            int(round(unplaced)),
            measured=rows_per is not None,
        ),
    )


_LAYER = re.compile(r"(?:^|[/_.(])layers?[_.]?(\d+)")


def _device_rows(job: ReplayJob, group_of: np.ndarray, in_group: np.ndarray) -> np.ndarray | None:
    """``[layer, device code]``: the rows the run routed to each device's experts per step (spec §11: the
    manifest's kept rows, else the experts laid out in contiguous blocks over the EP group's devices in global
    id order), where the job has one EP group whose members the load covers; None otherwise."""
    routed = job.routed
    groups = np.unique(group_of[group_of >= 0])
    if routed is None or groups.size != 1:
        return None
    members = np.flatnonzero(group_of == groups[0])
    gid_of = {str(name): gid for gid, name in job.device_ids.items()}
    gids = [gid_of.get(str(job.device_names[d])) for d in members.tolist()]
    if any(g is None for g in gids):
        return None
    by_rows = routed.device_rows(devices=members.size)
    if by_rows is None or by_rows.shape[1] != members.size:
        return None
    order = np.argsort(np.array(gids, dtype=np.int64), kind="stable")  # the i-th device by global id: rows' i
    out = np.zeros((by_rows.shape[0], job.device_names.size), dtype=np.float64)
    out[:, members[order]] = by_rows
    return out


def _cell_layers(job: ReplayJob, rows: np.ndarray, cell_of: np.ndarray, cells: int, layers: int) -> np.ndarray:
    """Per cell, the layer its expert work serves (``layer3``, ``layers.3`` in the rows' JAX scope or module
    path), -1 where the scopes name none or one beyond the load's layers (the cell then takes every layer's
    rows together)."""
    codes, values = job.codes("scope")
    numbers = np.array(
        [int(m.group(1)) if (m := _LAYER.search(str(v))) else -1 for v in values.tolist()] + [-1], dtype=np.int64
    )
    row_layer = numbers[codes[rows]]
    out = np.full(cells, -1, dtype=np.int64)
    first = np.unique(cell_of, return_index=True)[1]
    out[cell_of[first]] = row_layer[first]
    out[out >= layers] = -1
    return out


def _measured_shares(
    per: np.ndarray, in_group: np.ndarray, rows_per: np.ndarray, layer_of: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per (cell, device) the expert work a balanced router leaves it: its own time per routed row times the
    group's mean rows (a device with no rows: the group's time per row), and per cell the busiest member's rows
    over the mean (what sets a ragged exchange's end)."""
    rows = np.where(layer_of[:, None] >= 0, rows_per[np.maximum(layer_of, 0)], rows_per.sum(axis=0)[None, :])
    rows = np.where(in_group, rows, 0.0)
    members = np.maximum(in_group.sum(axis=1), 1)
    mean_rows = rows.sum(axis=1) / members
    pooled = np.where(rows.sum(axis=1) > 0, (per * in_group).sum(axis=1) / np.maximum(rows.sum(axis=1), 1e-300), 0)
    rate = np.where(rows > 0, per / np.where(rows > 0, rows, 1.0), pooled[:, None])
    target = np.where(in_group, rate * mean_rows[:, None], per)
    busiest = np.where(mean_rows > 0, rows.max(axis=1) / np.where(mean_rows > 0, mean_rows, 1.0), 1.0)
    return target, busiest


def _one_device_load(routed: RoutedLoad | None) -> str:
    """What the routed load says on one device: the worst layer's skew, and the drops a balanced router would
    keep where capacity buffers (fixed in size: no time changes) drop tokens."""
    if routed is None:
        return ""
    figures = expert_load_figures(routed)
    layers = figures.get("layers") or []
    if not layers:
        return ""
    worst = max(layers, key=lambda entry: entry.get("max_over_mean") or 0)
    text = (
        f"measured: layer {worst['layer']}'s {worst.get('tokens', 0):,.0f} {count_word(routed.source)} per step, its "
        f"hottest expert {worst.get('max_over_mean', 0):.1f}x the mean"
    )
    dropped = figures.get("dropped")
    if dropped:
        text += (
            f"; a balanced router would keep the {dropped:,.0f} assignments per step the capacity drops "
            f"({figures.get('dropped_share', 0):.1%}) in the same time: the capacity buffers are fixed in size"
        )
    return text
