"""moeprof: where a mixture-of-experts training step loses its time on GPUs and TPUs.

Library use::

    import moeprof
    traces = moeprof.load("trace_dir/")      # one Trace per file: events (a DataFrame) + metadata
    analysis = moeprof.analyze(traces)       # spec figures per device, collectives, opportunities
    analysis.to_json()                       # the moeprof.analysis/1 object

Names are imported on first use, so ``import moeprof`` (and ``moeprof --version``) stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._lazy import lazy_attribute
from ._version import __version__

__all__ = [
    "Analysis",
    "InputError",
    "LoadOptions",
    "StepOptions",
    "Trace",
    "__version__",
    "analyze",
    "analyze_paths",
    "load",
    "measure",
    "profile_steps",
]

_WHERE = {
    "Analysis": "moeprof.core.analysis",
    "Trace": "moeprof.core.trace",
    "InputError": "moeprof.errors",
    "LoadOptions": "moeprof.options",
    "StepOptions": "moeprof.options",
    "analyze": "moeprof.pipeline",
    "analyze_paths": "moeprof.pipeline",
    "load": "moeprof.pipeline",
    "measure": "moeprof.pipeline",
    "profile_steps": "moeprof.capture.library",
}

if TYPE_CHECKING:
    from .capture.library import profile_steps
    from .core.analysis import Analysis
    from .core.trace import Trace
    from .errors import InputError
    from .options import LoadOptions, StepOptions
    from .pipeline import analyze, analyze_paths, load, measure


def __getattr__(name: str) -> Any:
    return lazy_attribute(globals(), __name__, _WHERE, name)
