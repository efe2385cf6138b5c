"""The per-file map's helpers against brute forces written per event (``pipeline/per_file.py``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moeprof
from moeprof.core.metrics import DeviceTimeline, EventColumns
from moeprof.insight.dependency import independent_ops
from moeprof.pipeline.per_file import _independent_compute

from .helpers import SAMPLES


def _brute_independent(device: str, frame: pd.DataFrame, clipped: np.ndarray, hlo: dict) -> list[dict]:
    """Event by event: a compute kernel's op (else the first op its name had), its time per op, then per
    distinct (module, program, op) of a collective the time of the ops the HLO shows independent of it."""
    first_op: dict = {}
    op_time: dict = {}
    for name, op in zip(frame["name"], frame["hlo_op"], strict=True):
        if op != "" and name not in first_op:
            first_op[name] = op
    for name, op, bucket, t in zip(frame["name"], frame["hlo_op"], frame["bucket"], clipped.tolist(), strict=True):
        if bucket == "compute" and t > 0:
            key = op if op != "" else first_op.get(name)
            if key is not None:
                op_time[key] = op_time.get(key, 0) + t
    out, seen = [], set()
    for mod, pid, op, bucket in zip(frame["hlo_module"], frame["program_id"], frame["hlo_op"], frame["bucket"]):
        if bucket != "comm" or op == "" or (mod, pid, op) in seen:
            continue
        seen.add((mod, pid, op))
        module = hlo.get((mod, int(pid))) or hlo.get((mod, -1))
        if module is None or op not in module.instructions:
            continue
        total = sum(op_time.get(o, 0) for o in independent_ops(module, op))
        out.append({"device": device, "key": op, "independent_ns": total})
    return out


@pytest.mark.parametrize("blank", [0.0, 0.3, 0.9])
def test_independent_compute_matches_an_event_by_event_walk(blank):
    """On the real CPU capture of the demo step (HLO attached), with a third of the compute kernels given
    another op of the capture (a name then has several: its first one counts), a share of their ops
    blanked as the reader leaves them (stats read on a name's first event only), and clipped times
    that are zero in places."""
    trace = moeprof.load(SAMPLES / "cpu_moe_8dev")[0]
    events = trace.events.copy()
    rng = np.random.default_rng(int(blank * 10))
    ops = events["hlo_op"].astype(object).to_numpy().copy()
    compute = (events["bucket"] == "compute").to_numpy()
    swapped = compute & (rng.random(len(events)) < 1 / 3)
    ops[swapped] = rng.choice(np.unique(ops[compute]), int(swapped.sum()))
    ops[compute & (rng.random(len(events)) < blank)] = ""
    events["hlo_op"] = pd.Categorical(ops)
    columns = EventColumns(events)
    checked = 0
    for device, positions in events.groupby("device", observed=True).indices.items():
        rows = DeviceTimeline(events, np.asarray(positions, dtype=np.int64), columns)
        clipped = rng.integers(0, 3, rows.start.size) * rng.integers(1, 10**6, rows.start.size)
        got = _independent_compute(str(device), rows, clipped, dict(trace.hlo))
        want = _brute_independent(str(device), events.iloc[rows.positions], clipped, dict(trace.hlo))
        assert got == want
        checked += len(want)
    assert checked > 0  # the capture's collectives were found in its HLO


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["n1", "n0", "n2"]), st.sampled_from(["n1/GPU:1", "n0/GPU:0", "n2/GPU:3"])),
             min_size=1, max_size=40),
    st.booleans(),
)  # fmt: skip
def test_group_numbers_are_a_sorted_groupbys(rows: list[tuple[str, str]], categorical: bool) -> None:
    """Each row's group number is pandas' sorted group-by's (categories in the order they appear, unused ones, or
    plain strings)."""
    from moeprof.pipeline.per_file import _group_numbers

    host, device = [r[0] for r in rows], [r[1] for r in rows]
    make = (
        (lambda v: pd.Series(pd.Categorical(v, categories=[*dict.fromkeys(v), "unused"])))
        if categorical
        else (lambda v: pd.Series(np.array(v, dtype=object)))
    )
    frame = pd.DataFrame({"host": make(host), "device": make(device)})
    want = frame.groupby(["host", "device"], sort=True, observed=True).ngroup().to_numpy()
    assert _group_numbers(frame["host"], frame["device"]).tolist() == want.tolist()
