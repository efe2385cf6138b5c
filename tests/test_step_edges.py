"""What a replay makes of a step's window (core/steps.py ``StepEdges``; docs/metrics.md, "Projection"): the windows'
edges follow the activities that bound them, and the idle after a step's last activity is the step's, not each
device's. Each case is worked out by hand on a few activities."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moeprof.core.steps import step_edges


def edges(devices: list[int], starts: list[int], ends: list[int], windows: list[tuple[int, int, int, int]]):
    """Step 0 on every activity; ``windows``: (device, step, start, end)."""
    w = pd.DataFrame(windows, columns=["device", "step", "start_ns", "end_ns"])
    n = len(devices)
    return step_edges(
        np.array(devices, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        np.array(starts, dtype=np.int64),
        np.array(ends, dtype=np.int64),
        np.array([0], dtype=np.int64),
        w,
    )


# two devices, one step window each as a device marker gives it ([0, 100] with idle after the last activity):
# device 0 runs 0-40 and 40-90 (10 of idle after), device 1 runs 0-30 and 30-60 (40 of idle: done early, waiting)
DEVICES = [0, 0, 1, 1]
STARTS = [0, 40, 0, 30]
ENDS = [40, 90, 30, 60]
WINDOWS = [(0, 0, 0, 100), (1, 0, 0, 100)]


def test_the_measured_timeline_gives_the_measured_windows():
    e = edges(DEVICES, STARTS, ENDS, WINDOWS)
    lo, hi = e.windows(np.array(STARTS), np.array(ENDS))
    assert lo.tolist() == [0, 0] and hi.tolist() == [100, 100]
    spans, has = e.spans(np.array(STARTS), np.array(ENDS))
    assert spans.tolist() == [100] and has.tolist() == [True]


def test_a_device_done_early_absorbs_its_slowdown_in_its_idle():
    e = edges(DEVICES, STARTS, ENDS, WINDOWS)
    # device 1's second activity 30 longer (30-90): it still ends with device 0's last; the step keeps its 100
    spans, _ = e.spans(np.array(STARTS), np.array([40, 90, 30, 90]))
    assert spans.tolist() == [100]
    # 50 longer (30-110): it is now the step's last activity, 20 past device 0's; the step's idle after it
    # (10) is kept: 110 + 10 = 120
    spans, _ = e.spans(np.array(STARTS), np.array([40, 90, 30, 110]))
    assert spans.tolist() == [120]
    _, hi = e.windows(np.array(STARTS), np.array([40, 90, 30, 110]))
    assert hi.tolist() == [120, 120]


def test_the_last_device_moves_the_step_by_its_move():
    e = edges(DEVICES, STARTS, ENDS, WINDOWS)
    # device 0's last activity 20 shorter (40-70): the step's last activity is now device 0's at 70 (device 1
    # ends at 60), 20 earlier: the step ends at 80, both windows with it
    spans, _ = e.spans(np.array(STARTS), np.array([40, 70, 30, 60]))
    assert spans.tolist() == [80]


def test_one_device_keeps_the_idle_after_its_last_activity():
    # a TPU's Steps line: [0, 100] with its program 0-90; the program 30 shorter ends the step 30 earlier
    e = edges([0, 0], [0, 40], [40, 90], [(0, 0, 0, 100)])
    spans, _ = e.spans(np.array([0, 40]), np.array([40, 60]))
    assert spans.tolist() == [70]
