"""Steps of an Nsight export: NVTX ranges named like steps, and each XLA module execution's launches."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...core.trace import empty_markers, make_markers, trailing_number
from .columns import ints


def module_launches(
    host: str, devices: np.ndarray, modules: np.ndarray, ranges: np.ndarray, act: pd.DataFrame, rows: np.ndarray
) -> pd.DataFrame:
    """``module_launch`` markers: per device, one per ``XlaModule:#hlo_module=...#`` range instance (one
    execution of the module on the host) that launched activity, spanning what it launched."""
    frame = pd.DataFrame(
        {
            "device": devices,
            "module": modules,
            "range": ranges,
            "start": ints(act["start"], len(act))[rows],
            "end": ints(act["end"], len(act))[rows],
        }
    )
    frame = frame[frame["module"] != ""]
    if frame.empty:
        return empty_markers()
    runs = frame.groupby(["device", "range", "module"], sort=True).agg(start=("start", "min"), end=("end", "max"))
    return make_markers(
        host=host,
        device=runs.index.get_level_values("device").to_numpy(dtype=object),
        kind="module_launch",
        name=runs.index.get_level_values("module").to_numpy(dtype=object),
        start_ns=runs["start"].to_numpy(dtype=np.int64),
        end_ns=runs["end"].to_numpy(dtype=np.int64),
    )


def step_markers(nv: pd.DataFrame, host: str) -> pd.DataFrame:
    """``step`` markers (device "": every device of the host) for NVTX ranges named like steps."""
    if not len(nv) or not nv["is_step"].any():
        return empty_markers()
    s = nv.loc[nv["is_step"], ["clean", "start", "end"]].sort_values("start", kind="stable")
    number = pd.Series([trailing_number(c) for c in s["clean"]], index=s.index)
    number = number.where(number >= 0)
    # ranges without a number (train_step) are numbered by their order, per name
    ordinal = s.groupby("clean").cumcount()
    steps = number.fillna(ordinal).to_numpy(dtype=np.int64)
    return make_markers(
        host=host,
        device="",
        kind="step",
        name=s["clean"].to_numpy(dtype=object),
        start_ns=s["start"].to_numpy(dtype=np.int64),
        end_ns=s["end"].to_numpy(dtype=np.int64),
        number=steps,
    )
