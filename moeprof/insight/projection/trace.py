"""The projected timeline as a trace of its own (spec §9): what the HTML report draws beside the measured one
and what ``annotate --what-if`` writes for Perfetto.

:meth:`.projector.Projector.events` gives every activity of the job its projected start and end (each
device's own clock) and marks the critical path's activities, from the same replay as the projection it draws.
Here those rows become one :class:`Trace` (its step markers are each device's projected §5 step windows,
:meth:`.job.ReplayJob.step_windows`: the idle a measured window holds at its edges kept), which the pipeline
measures like any
trace, so the report and the annotated file show the projected timeline's §4 figures, exposed communication
and steps by the same code as the measured ones.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ...core.events import make_table
from ...core.trace import Trace, make_markers

# a comm row's §3 kind as the HLO opcode that says it: the annotated file (annotate --what-if) read back
# classifies its collectives as the measured trace's were (the replay keeps kinds, not opcodes)
OPCODE_OF_KIND = {
    "all-to-all": "all-to-all",
    "all-gather": "all-gather",
    "reduce-scatter": "reduce-scatter",
    "all-reduce": "all-reduce",
    "send-recv": "collective-permute",
    "broadcast": "collective-broadcast",
}


def projected_trace(
    events: pd.DataFrame,
    path: str = "projected",
    windows: pd.DataFrame | None = None,
    kinds: Mapping[str, str] | None = None,
) -> Trace:
    """The projected activities (``projected_events``' rows) as a trace, with per-device step markers:
    ``windows`` (device, step, start_ns, end_ns: the projection's step windows), else each step's projected
    earliest start to latest end of its activities on each device; ``kinds``: the measured devices' kinds
    (the projected job runs on the same chips)."""
    device = events["device"].astype(str).to_numpy(dtype=object)
    host = np.array([d.split("/", 1)[0] if "/" in d else d for d in device.tolist()], dtype=object)
    start = events["start_ns"].to_numpy(np.int64)
    end = np.maximum(events["end_ns"].to_numpy(np.int64), start)
    bucket = events["bucket"].astype(str).to_numpy(dtype=object)
    kind = events["kind"].astype(str).to_numpy(dtype=object)
    opcode = np.array([OPCODE_OF_KIND.get(k, "") for k in kind.tolist()], dtype=object)
    opcode[bucket != "comm"] = ""
    table = make_table(
        {
            "host": host,
            "device": device,
            "stream": events["stream"].astype(str).to_numpy(dtype=object),
            "name": events["name"].astype(str).to_numpy(dtype=object),
            "start_ns": start,
            "end_ns": end,
            "activity": np.where(bucket == "memcpy", "memcpy", "kernel"),
            "copy_kind": events["copy_kind"].astype(str).to_numpy(dtype=object),
            "hlo_op": events["op"].astype(str).to_numpy(dtype=object),
            "bucket": bucket,
            "kind": kind,
            "opcode": opcode,
            "ib_fraction": events["ib_fraction"].to_numpy(np.float64),
            "source": "moeprof-projection",
        }
    )
    if windows is None:
        step = events["step"].to_numpy(np.int64)
        in_step = step >= 0
        frame = pd.DataFrame({"device": device[in_step], "step": step[in_step], "s": start[in_step], "e": end[in_step]})
        windows = (
            frame.groupby(["device", "step"], sort=True).agg(start_ns=("s", "min"), end_ns=("e", "max")).reset_index()
        )
    windows = windows[windows["step"].to_numpy(np.int64) >= 0]
    dev = windows["device"].to_numpy(dtype=object)
    markers = make_markers(
        host=np.array([d.split("/", 1)[0] if "/" in d else d for d in dev.tolist()], dtype=object),
        device=dev,
        kind="step",
        name=np.array([f"Step {n}" for n in windows["step"].tolist()], dtype=object),
        start_ns=windows["start_ns"].to_numpy(np.int64),
        end_ns=windows["end_ns"].to_numpy(np.int64),
        number=windows["step"].to_numpy(np.int64),
    )
    return Trace(events=table, path=path, format="chrome", markers=markers, device_kinds=dict(kinds or {}))
