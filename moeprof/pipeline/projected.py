"""The projected timeline measured (spec §9): what the HTML report draws beside the measured one and what
``annotate --what-if`` writes for Perfetto.

The projector makes the projected timeline a trace of its own
(:meth:`moeprof.insight.projection.Projector.timeline`); here it is measured like any trace, so the report
and the annotated file show the projected timeline's §4 figures, exposed communication and steps by the same
code as the measured ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..core.analysis import Analysis, Projection
from ..core.timeline import TimelineOptions, TimelineView
from ..core.trace import Trace
from ..errors import InputError
from . import JobState, analyze_state


@dataclass(frozen=True)
class ProjectedJob:
    """One projection of a job: its figures, its timeline as a trace, that trace measured, its critical path."""

    projection: Projection
    trace: Trace
    analysis: Analysis  # the projected timeline measured (§4 figures, steps)
    timeline: tuple[TimelineView, ...]  # its devices' timeline views
    critical: pd.DataFrame  # device, start_ns, end_ns, name: the critical path's activities (own clock)

    @property
    def label(self) -> str:
        return "projected: " + " ".join(self.projection.what_if) if self.projection.what_if else "replayed"


def project_timeline(
    analysis: Analysis,
    state: JobState,
    terms: Sequence[str],
    timeline: TimelineOptions | None = None,
) -> ProjectedJob:
    """``terms`` projected over the job (one replay): the :class:`Projection` (the analysis' own where it holds
    the same terms), and its timeline as a measured trace."""
    if state.projector is None:
        raise InputError(None, f"--what-if {' '.join(terms)}: the analysis has no device activity to project")
    projection, trace, critical = state.projector.timeline(terms, analysis.projections, analysis.inputs)
    measured, measured_state = analyze_state([trace], timeline=timeline or TimelineOptions())
    # the projected job runs on the measured job's GPUs: its fabric and peaks are theirs (xGMI on AMD)
    return ProjectedJob(
        projection,
        trace,
        measured.with_(inputs=analysis.inputs, hardware=analysis.hardware),
        measured_state.timeline,
        critical,
    )
