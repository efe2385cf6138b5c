"""A run's step as its activities fill it: the time of each (JAX scope, op) per device and step, and what
no activity accounts for. What ``diff`` explains a measured change with (docs/ci.md, "Where the change went").

Over the activities of the §5 steps (those the §9 ``step_ns`` is measured over: an activity belongs to the
step whose window on its device holds its start), per run:

* ``step``: §9's ``step_ns``, the mean over steps of the job's §5 window (its devices' step windows from the
  earliest start to the latest end, aligned; idle a device-side window holds at its edges included), rounded
  to the ns: the step every screen shows;
* a **part**: the summed duration of the activities of one (component, pass, primitive, op, bucket), over the
  devices and steps (the per-device mean per step divides by devices x steps); the component is the scope
  the activity serves (core.components: its own, its backward's, its parameters'), the primitive its own
  path's;
* ``accumulated``: the sum of every part (§4's accumulated time, over the steps' activities);
* ``busy``: per device and step, the length of the union of its activities in the step, summed.

Per device and step (means): ``step = accumulated + idle − overlap``, with ``idle = step − busy`` (no
activity of the device runs) and ``overlap = accumulated − busy`` (activities run on top of one another):
an identity, so a change of the step is the change of every part plus the change of ``idle − overlap``.

The op of an activity (:func:`op_classes`) is what it is, never an HLO op name (``fusion.123`` does not
survive a recompilation): XLA's hlo_category (an async collective's without its ``-start``: ``all-gather``;
a wrapped one's, ``async-start``, is its collective kind), else the collective kind (comm), else the HLO
opcode; an activity with neither, outside any JAX scope, is its kernel name (GPU traces without XLA);
inside a scope, its bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.events import combine_codes, first_rows, lookup
from ..core.scopes import scope_parts, served_rows
from .projection import ReplayJob

PART_COLUMNS = ["scope", "backward", "primitive", "op", "bucket", "count", "total_ns"]


@dataclass(frozen=True)
class StepParts:
    """One run's steps, per (scope, pass, primitive, op, bucket) and in total (sums over devices and steps)."""

    devices: int
    steps: int
    step_ns: int  # §9's step_ns (a mean, rounded)
    accumulated_ns: int  # Σ duration of the steps' activities
    busy_ns: int  # Σ over (device, step) of the union of its activities
    parts: pd.DataFrame  # PART_COLUMNS; scope is the component's key (core.components), not folded
    scoped: bool  # some activity carries a JAX scope

    @property
    def per(self) -> int:
        """devices x steps: what a sum divides by to be per device and step."""
        return max(self.devices, 1) * max(self.steps, 1)

    def mean(self, total_ns: float) -> float:
        """A sum over devices and steps as ns per device and step."""
        return total_ns / self.per

    @property
    def idle_ns(self) -> float:
        """Per device and step: the step minus the device's busy time."""
        return self.step_ns - self.mean(self.busy_ns)

    @property
    def overlap_ns(self) -> float:
        """Per device and step: activity time beyond the busy time (activities on top of one another)."""
        return self.mean(self.accumulated_ns - self.busy_ns)


def op_classes(
    category: np.ndarray, opcode: np.ndarray, kind: np.ndarray, bucket: np.ndarray, name: np.ndarray, scoped: np.ndarray
) -> np.ndarray:
    """What each activity is (module docstring), from its distinct values (one call per distinct tuple)."""
    out = np.empty(category.size, dtype=object)
    for i, (cat, opc, k, b, n, s) in enumerate(
        zip(category.tolist(), opcode.tolist(), kind.tolist(), bucket.tolist(), name.tolist(), scoped.tolist())
    ):
        # an async collective's activity spans -start to -done and carries its -start op's category; a
        # wrapped one's (async-start) names no collective: its kind does
        named = cat.removesuffix("-start") if b == "comm" else cat
        if named and not (b == "comm" and named == "async" and k):
            out[i] = named
        elif b == "comm" and k:
            out[i] = k
        elif opc:
            out[i] = opc
        else:
            out[i] = b if s else n or b
    return out


def _text(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    return lookup(codes, np.array([str(v) for v in values.tolist()], dtype=object), "")


def busy_ns(device: np.ndarray, step: np.ndarray, start: np.ndarray, end: np.ndarray) -> int:
    """Σ over (device, step) of the length of the union of its intervals ``[start, end)``."""
    if not start.size:
        return 0
    order = np.lexsort((start, step, device))
    group = combine_codes(device[order], step[order])
    s, e = start[order], end[order]
    reach = pd.Series(e).groupby(group).cummax().to_numpy(np.int64)
    # what each interval adds to the union: the part past everything before it in its group ended
    before = np.empty_like(reach)
    before[0] = s[0]
    before[1:] = reach[:-1]
    first = np.r_[True, group[1:] != group[:-1]]
    before = np.where(first, s, np.maximum(before, s))
    return int(np.maximum(e - before, 0).sum(dtype=np.int64))


def step_parts(job: ReplayJob) -> StepParts:
    """The :class:`StepParts` of a job's measured steps (the replay's table: one row per activity)."""
    table = job.table
    start_all = table["start_ns"].to_numpy(np.int64) - job.delta
    end_all = np.maximum(table["end_ns"].to_numpy(np.int64) - job.delta, start_all)
    spans = job.step_spans(start_all, end_all)
    step_ns = int(round(float(spans.mean()))) if spans.size else 0
    rows = job.step_rows
    devices, steps = len(job.device_names), max(int(job.step_numbers.size), 1)
    start, end = start_all[rows], end_all[rows]
    duration = end - start
    dev_c = job.codes("device")[0][rows]
    busy = busy_ns(dev_c, job.step[rows], start, end)
    codes = {c: job.codes(c) for c in ("scope", "category", "opcode", "kind", "bucket", "name")}
    scope_c, scope_v = codes["scope"]
    scope_text = _text(np.arange(len(scope_v)), scope_v)
    has_scope = lookup(scope_c[rows], scope_text != "", False)
    # the op of each distinct (category, opcode, kind, bucket, name where it decides, scoped)
    cat, opc, kind, bucket, name = (codes[c][0][rows] for c in ("category", "opcode", "kind", "bucket", "name"))
    known = [lookup(c, _text(np.arange(len(codes[n][1])), codes[n][1]) != "", False)
             for c, n in ((cat, "category"), (opc, "opcode"), (kind, "kind"))]  # fmt: skip
    named = ~(known[0] | known[1] | known[2]) & ~has_scope
    op_key = combine_codes(cat, opc, kind, bucket, np.where(named, name, -1), has_scope)
    at = first_rows(op_key)
    texts = {c: _text(codes[c][0][rows][at], codes[c][1]) for c in ("category", "opcode", "kind", "bucket", "name")}
    op_of = op_classes(texts["category"], texts["opcode"], texts["kind"], texts["bucket"], texts["name"], has_scope[at])
    bucket_of = texts["bucket"]
    # the component each activity serves (core.components) and its pass; the primitive is its own path's
    component = job.codes("component")
    served, served_pairs = served_rows((scope_c, scope_v), component, job.table["backward"].to_numpy(bool))
    frame = pd.DataFrame(
        {"served": served[rows], "scope": scope_c[rows], "op": op_key, "count": 1, "total_ns": duration}
    )
    summed = frame.groupby(["served", "scope", "op"], sort=False).sum().reset_index()
    primitives = np.array([scope_parts(str(v))[2] if v else "" for v in scope_text.tolist()] + [""], dtype=object)
    at_served = summed["served"].to_numpy(np.int64)
    parts = pd.DataFrame(
        {
            "scope": np.array([k for k, _ in served_pairs], dtype=object)[at_served],
            "backward": np.array([b for _, b in served_pairs], dtype=bool)[at_served],
            "primitive": primitives[summed["scope"].to_numpy(np.int64)],  # -1 (missing) reads the last entry
            "op": op_of[summed["op"].to_numpy(np.int64)],
            "bucket": bucket_of[summed["op"].to_numpy(np.int64)],
            "count": summed["count"].to_numpy(np.int64),
            "total_ns": summed["total_ns"].to_numpy(np.int64),
        }
    )
    keys = ["scope", "backward", "primitive", "op", "bucket"]
    parts = parts.groupby(keys, sort=True).sum().reset_index()[PART_COLUMNS]
    return StepParts(
        devices=devices,
        steps=steps,
        step_ns=step_ns,
        accumulated_ns=int(duration.sum(dtype=np.int64)),
        busy_ns=busy,
        parts=parts,
        scoped=bool(has_scope.any()),
    )
