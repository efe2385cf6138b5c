"""moeprof: where a mixture-of-experts training step loses its time on GPUs.

Library use::

    import moeprof
    events = moeprof.load("trace_dir/")      # one event table: every kernel, bucketed
    result = moeprof.analyze(events)         # spec figures per device, collectives, opportunities
    result.to_dict()                         # the moeprof.analysis/1 JSON object
"""

from __future__ import annotations

__version__ = "0.1.0"

from .capture.library import profile_steps
from .errors import InputError
from .options import LoadOptions
from .pipeline import AnalysisResult, StepOptions, analyze, analyze_paths, load

__all__ = [
    "AnalysisResult",
    "InputError",
    "LoadOptions",
    "StepOptions",
    "__version__",
    "analyze",
    "analyze_paths",
    "load",
    "profile_steps",
]
