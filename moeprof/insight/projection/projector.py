"""Spec §9's way in: the :class:`Projector` of a job (its replay columns and graph, built once) projects any
terms over it (:meth:`Projector.project`), gives the projected timeline a renderer draws
(:meth:`Projector.events`, :meth:`Projector.trace`), and says when a replay is affordable.

The pipeline makes it with the analysis (:func:`.plan.project_analysis`) and keeps it beside the analysis,
never in it: the analysis carries its projections as plain data (``Analysis.projections``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from ...core.analysis import Analysis, Opportunity, PathOp, Projection, StepBound
from ...core.events import BUCKETS
from ...core.sections import Throughput
from ...core.summary import choose_first_try
from ...core.trace import Trace
from ...errors import InputError
from .job import ReplayJob, bound_of
from .replay import has_compiled
from .terms import Change, change_of, parse_terms
from .trace import projected_trace

# the replay's size limits, here only
NUMPY_REPLAY_LIMIT = 50_000  # activities the numpy replay projects in seconds (without the C sweep or numba)
DRAWN_UNASKED_LIMIT = 100_000  # activities up to which the HTML report draws the balance projection unasked


def affordable(size: int) -> bool:
    """Whether a job of ``size`` activities is projected in seconds: the compiled replay (C, numba) at any
    size, the numpy one up to ``NUMPY_REPLAY_LIMIT`` (its relaxation takes one pass per edge of the longest
    chain: hours at a million activities)."""
    return size <= NUMPY_REPLAY_LIMIT or has_compiled()


def too_large(size: int) -> str:
    """Why a job of ``size`` activities is not projected (one sentence)."""
    return (
        f"{size:,} activities need the compiled replay (pip install 'moeprof[fast]' installs numba); without it "
        f"only jobs up to {NUMPY_REPLAY_LIMIT:,} activities are projected"
    )


PATH_OPS = 3  # the activities by name a step's bound names
_CAUSE_BUCKET = {"compute": "compute", "transfer": "comm", "wait": "comm", "copy": "memcpy", "other": "other"}


def path_ops(job: ReplayJob, rows: np.ndarray, cause: str) -> tuple[PathOp, ...]:
    """Of a critical path's activities (``rows``) in the bucket of ``cause``, the ``PATH_OPS`` (name, device,
    stream) with the most time, most first (their measured durations: the path runs through each whole)."""
    bucket = _CAUSE_BUCKET.get(cause)
    if bucket is None or not rows.size:
        return ()
    rows = rows[job.bucket[rows] == BUCKETS.index(bucket)]
    if not rows.size:
        return ()
    g = job.graph
    names_c, names_v = job.codes("name")
    streams_c, streams_v = job.codes("stream")
    key = pd.DataFrame(
        {"name": names_c[rows], "device": g.device[rows], "stream": streams_c[rows], "ns": g.duration[rows]}
    )
    top = key.groupby(["name", "device", "stream"], sort=True)["ns"].sum().reset_index()
    top = top.sort_values("ns", ascending=False, kind="stable").head(PATH_OPS)
    return tuple(
        PathOp(
            str(names_v[name]) if name >= 0 else "",
            str(job.device_names[device]),
            str(streams_v[stream]) if stream >= 0 else "",
            int(ns),
        )
        for name, device, stream, ns in zip(
            top["name"].tolist(), top["device"].tolist(), top["stream"].tolist(), top["ns"].tolist(), strict=True
        )
    )


@dataclass
class Projector:
    """The engine of a job's projections: its replay columns and graph (built once), the opportunities the
    ``opportunity=N`` filter counts, the throughput projections scale. Kept beside the analysis (never in it)."""

    job: ReplayJob
    opportunities: tuple[Opportunity, ...] = ()
    throughput: Throughput | None = None
    _last: tuple[tuple[str, ...], tuple[Change, np.ndarray, np.ndarray]] | None = field(default=None, repr=False)
    _change: tuple[tuple[str, ...], tuple[Opportunity, ...], Change] | None = field(default=None, repr=False)

    @property
    def size(self) -> int:
        return self.job.size

    @property
    def affordable(self) -> bool:
        return affordable(self.job.size)

    def check(self, terms: Sequence[str]) -> None:
        """Refuse (exit 2) terms this install cannot project in seconds."""
        if not self.affordable:
            raise InputError(None, f"--what-if {' '.join(terms)}: {too_large(self.job.size)}")

    def change(self, terms: Sequence[str]) -> Change:
        """The change of ``terms`` without its replay (kept for the replay that may follow): what a term
        selects is known before the replay is paid for."""
        key = tuple(terms)
        kept = self._change
        if kept is None or kept[0] != key or kept[1] is not self.opportunities:
            kept = self._change = (key, self.opportunities, change_of(self.job, parse_terms(terms), self.opportunities))
        return kept[2]

    def _replay(self, terms: Sequence[str]) -> tuple[Change, np.ndarray, np.ndarray]:
        """The change of ``terms`` and its replay; the last one is kept (a projection and its timeline are
        drawn from one replay)."""
        key = tuple(terms)
        if self._last is None or self._last[0] != key:
            change = self.change(terms)
            s, e = self.job.run(change.duration, change.transfer, change.gap)
            self._last = (key, (change, s, e))
        return self._last[1]

    def project(
        self, terms: Sequence[str], figures: bool = True, role: str = "", label: str = "", path: bool = True
    ) -> Projection:
        """The projection of ``terms``: step times, what bounds its longest step, (``path``) its critical path,
        and (``figures``) the projected timeline's §4/§8 figures per device."""
        parsed = parse_terms(terms)
        change, s, e = self._replay([t.text for t in parsed])
        what_if = [t.text for t in parsed]
        projection = self.job.projection(what_if, s, e, figures=figures, throughput=self.throughput, path=path)
        return replace(
            projection,
            role=role,
            label=label,
            selected=sum(change.selected),
            note=change.note,
            selection=change.found,
        )

    def events(self, terms: Sequence[str]) -> pd.DataFrame:
        """The job's activities (the replay's columns) with the projected ``start_ns``/``end_ns`` on each
        device's own clock (the measured ones kept as ``measured_*``), ``step``, and ``critical`` marking the
        critical path's activities: what the HTML timeline and ``annotate --what-if`` draw."""
        job = self.job
        _, s, e = self._replay([t.text for t in parse_terms(terms)])
        out = job.table.copy()
        out["measured_start_ns"] = out["start_ns"]
        out["measured_end_ns"] = out["end_ns"]
        out["start_ns"] = s + job.delta
        out["end_ns"] = e + job.delta
        out["step"] = job.step
        critical = np.zeros(job.size, dtype=bool)
        spans = job.step_spans(s, e)
        if spans.size:
            worst = int(job.step_numbers[int(np.argmax(spans))])
            critical[job.critical_rows(s, e, worst)] = True
        out["critical"] = critical
        return out

    def timeline(
        self, terms: Sequence[str], held: Sequence[Projection] = (), inputs: Sequence[str] = ()
    ) -> tuple[Projection, Trace, pd.DataFrame]:
        """``terms`` projected over the job (one replay; refused where not affordable): the projection (the one
        of ``held`` with the same terms and figures per device, where there is one), the projected timeline as
        a trace of its own (:func:`.trace.projected_trace`, named after the change and ``inputs``), and the
        critical path's activities (device, start_ns, end_ns, name, on each device's own clock)."""
        self.check(terms)
        held_one = next((p for p in held if list(p.what_if) == list(terms) and p.devices), None)
        projection = held_one or self.project(list(terms))
        events = self.events(list(terms))
        label = f"{' '.join(projection.what_if) or 'replay'} of {', '.join(inputs)}"
        trace = projected_trace(events, label, self.step_windows(terms), self.job.kinds)
        crit = events[events["critical"].to_numpy(bool)]
        critical = pd.DataFrame(
            {
                "device": crit["device"].astype(str).to_numpy(dtype=object),
                "start_ns": crit["start_ns"].to_numpy(np.int64),
                "end_ns": crit["end_ns"].to_numpy(np.int64),
                "name": crit["name"].astype(str).to_numpy(dtype=object),
            }
        )
        return projection, trace, critical

    def step_windows(self, terms: Sequence[str]) -> pd.DataFrame:
        """Each device's §5 step windows on the timeline ``terms`` project (device, step, start_ns, end_ns, on
        the device's own clock): the projected timeline's step markers."""
        _, s, e = self._replay([t.text for t in parse_terms(terms)])
        return self.job.step_windows(s, e)

    def unasked(self, analysis: Analysis) -> list[str] | None:
        """The change a page draws beside the measured timeline unasked (None: none): for a job of several
        devices, affordable, of at most ``DRAWN_UNASKED_LIMIT`` activities (measuring the projected timeline
        costs about what measuring the job did, so a larger job gets it with ``--what-if``), the first try (the
        verdict's own: :func:`moeprof.core.summary.choose_first_try`) where it is the router's or the straggler
        fix (the changes that move work between devices), else ``balance``."""
        if len(analysis.devices) <= 1 or not self.affordable or self.size > DRAWN_UNASKED_LIMIT:
            return None
        first = choose_first_try(analysis).projection
        if first is not None and first.role in ("router", "straggler"):
            return [" ".join(first.what_if)]
        return ["balance"]

    def measured_bound(self) -> StepBound | None:
        """What sets the end of the measured job's longest step (its critical path without any change), with
        the activities that make most of that cause's time on it (:func:`path_ops`)."""
        g = self.job.graph
        spans = self.job.measured_spans
        if not spans.size:
            return None
        worst = int(self.job.step_numbers[int(np.argmax(spans))])
        time, rows = self.job.critical_work(g.start, g.end, worst)
        bound = bound_of(time)
        return replace(bound, ops=path_ops(self.job, rows, bound.cause)) if bound is not None else None

    def measured_step_ns(self) -> int:
        """§9's step time, measured: the mean over steps of the job's §5 window (aligned)."""
        spans = self.job.measured_spans
        return int(round(float(spans.mean()))) if spans.size else 0
