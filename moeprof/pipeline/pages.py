"""What ``moeprof report`` draws, measured: one :class:`~moeprof.reports.html.ReportInput` per input (one job
each), each measured with the timeline views its page draws, and beside a single job its projected timeline
(spec §9: the terms ``--what-if`` asked for, else the change a page draws unasked). The report renders these
inputs; it never analyzes or projects (the import contract keeps reports below the pipeline)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.expert_load import RoutedLoad
from ..errors import InputError
from ..options import RAW_EVENTS_CAP, ExecOptions, LoadOptions, StepOptions
from ..readers import TraceSource
from ..readers.discovery import JobPlan, plan_job
from ..reports.html import ReportInput, distinct_labels, input_label, timeline_options
from .inspector import NO_TIMELINE
from .runner import ProjectedJob, Request, run


def report_inputs(
    groups: Sequence[Sequence[Path]],
    options: LoadOptions | None = None,
    step_options: StepOptions | None = None,
    link_peaks: dict[str, float] | None = None,
    lanes: str = "device",
    max_events: int = RAW_EVENTS_CAP,
    execution: ExecOptions | None = None,
    progress: Callable[[TraceSource], None] | None = None,
    what_if: Sequence[str] | None = None,
    plans: Sequence[JobPlan] | None = None,
    expert_load: RoutedLoad | None = None,
) -> list[ReportInput]:
    """Each group of paths as one input of the page (several: compared side by side); one job is drawn
    beside its projection: ``what_if``'s terms when given (an empty list: no projection), else the change a
    page draws unasked where the job gets one. ``plans``: the groups' plans where the caller made them."""
    options = options or LoadOptions()
    labels = distinct_labels(input_label(list(g)) for g in groups)
    plans = list(plans) if plans is not None else [plan_job(list(g), options) for g in groups]
    project_one = len(groups) == 1 and what_if != []
    inputs = 2 if project_one else len(groups)  # a projected input shares the page's cap
    items: list[ReportInput] = []
    for label, plan in zip(labels, plans, strict=True):
        result = run(
            Request(
                plan,
                options,
                step_options,
                execution or ExecOptions(),
                link_peaks,
                timeline=timeline_options(lanes, max_events, inputs, len(plan.files)),
                projected=(list(what_if) if what_if else "default") if project_one else None,
                progress=progress,
                expert_load=expert_load,
            )
        )
        items.append(ReportInput(label, result.analysis, result.timeline, result.instances))
        if what_if and project_one and result.projected is None:  # NCCL Inspector logs: no timeline
            raise InputError(None, f"--what-if {' '.join(what_if)}: {NO_TIMELINE}")
        if result.projected is not None:
            items.append(projected_input(label, result.projected))
    return items


def projected_input(label: str, projected: ProjectedJob) -> ReportInput:
    """The projected timeline as an input of the page, beside the measured one."""
    return ReportInput(
        f"{label} · {projected.label}",
        projected.analysis,
        projected.timeline,
        None,
        projected.projection,
        projected.critical,
    )
