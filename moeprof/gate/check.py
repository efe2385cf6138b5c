"""CI gates on communication figures: ``moeprof check`` as a library.

A gate is an upper limit on one figure of an analysis (the ``moeprof.analysis/1``
object): an absolute limit (``max_comm_share = 0.5``) or a baseline plus a
tolerance (absolute on ratios, relative on times). Per MoE role (spec §10), a role's
share of the step has an upper limit and its fraction of its roof a lower one
(``max_role_share = {permute = 0.3}``, ``min_roof_fraction = {experts = 0.5}``). Figures are measured on the
total by default or on every device (the worst one decides). Inputs may be
traces, run folders or saved analysis JSON files, so a baseline is just the
analysis of a good run; its ``steps`` rows are the step-to-step spread a
baseline gate judges a change against (:mod:`moeprof.gate.noise`).
"""

from __future__ import annotations

import json
import math
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.analysis import LEDGER_KEYS, NS_KEYS, Analysis, Figures, StepFigures, sum_figures
from ..errors import InputError
from ..insight.throughput import manifest_throughput, throughput_mismatch
from ..options import ExecOptions, LoadOptions, StepOptions
from ..outputs import cannot_write, replacing
from ..pipeline import Request, run
from ..readers import discover
from ..readers.runfolder import ANALYSIS, read_manifest
from .noise import DEFAULT_ALPHA, NoiseTest, welch_test

if TYPE_CHECKING:
    from ..core.analysis import Projection

CHECK_SCHEMA = "moeprof.check/1"

# figure -> (unit, what it is); ratios are fractions in [0, 1], times milliseconds
FIGURES: dict[str, tuple[str, str]] = {
    "comm_share": ("ratio", "comm / accumulated kernel time"),
    "exposed_comm_fraction": ("ratio", "exposed comm / span"),
    "idle_fraction": ("ratio", "idle / span"),
    # the worst step's exposed comm of the mean device (of the worst device with --per-device), not a sum
    "exposed_comm_ms": ("ms", "exposed comm in the worst step, per device (ms)"),
    # §8, where the traces hold several members of a group
    "exposed_wait_fraction": ("ratio", "exposed waiting for the last rank / span"),
    "exposed_transfer_fraction": ("ratio", "exposed transfer / span"),
    # §9: the step time the `balance` projection saves (every rank as fast as the median rank) / step time
    "balance_saving": ("ratio", "step saved by balancing the ranks / step"),
    # NCCL Inspector logs (no timeline): time beyond each collective's shortest member, of all collective time
    "beyond_shortest_fraction": ("ratio", "Inspector: members' time beyond each collective's shortest / all"),
    "last_to_arrive_fraction": ("ratio", "Inspector: others' time beyond the top last-to-arrive process / all"),
}
INSPECTOR_FIGURES = ("beyond_shortest_fraction", "last_to_arrive_fraction")
# gate key (config and CLI, underscores or dashes) -> figure
GATES: dict[str, str] = {f"max_{name}": name for name in FIGURES}
# spec §10, per MoE role (the analysis' "roles": per step, the mean over steps and devices), one limit per role:
# gate key -> (figure, "max" | "min"); figure -> (unit, what it is)
ROLE_GATES: dict[str, tuple[str, str]] = {
    "max_role_share": ("role_share", "max"),
    "min_roof_fraction": ("roof_fraction", "min"),
}
ROLE_FIGURES: dict[str, tuple[str, str]] = {
    "role_share": ("ratio", "a role's time / step"),
    "roof_fraction": ("ratio", "a role's time at the roof / its time with counts"),
}
CONFIG_KEYS = (*GATES, *ROLE_GATES, "per_device", "baseline", "tolerance", "noise_alpha", "allow_dropped")
# options whose value is a fraction: 0.5 or 50%, never a bare 50 (a share gate at 50 could never fail)
FRACTION_KEYS = (*(f"max_{name}" for name, (unit, _) in FIGURES.items() if unit == "ratio"), "tolerance")
DEFAULT_TOLERANCE = 0.02


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def figure_words(figure: str) -> str:
    """What a gated figure is, in words (a §4 figure, or a role's)."""
    return (FIGURES.get(figure) or ROLE_FIGURES[figure])[1]


def parse_role_limits(values: object, name: str, path: Path | None = None) -> dict[str, float]:
    """A role gate's limits: ``ROLE=F`` items (the CLI's repeated option) or a table ``{ROLE = F}`` (TOML); the
    roles spec §10 names, each fraction written 0.3 or 30%. A bad one is refused in one line naming it."""
    from ..core.roofline import ROLES

    flag = _flag(name)
    if isinstance(values, dict):
        items = [(str(k), v) for k, v in values.items()]
    elif isinstance(values, list | tuple):
        items = []
        for item in values:
            role, sep, value = str(item).partition("=")
            if not sep or not role.strip() or not value.strip():
                raise InputError(path, f"{flag} {item!r}: expected ROLE=FRACTION, e.g. {flag} permute=0.3")
            items.append((role.strip(), value.strip()))
    else:
        raise InputError(path, f"{flag} = {values!r}: expected a table of ROLE = FRACTION, e.g. {{permute = 0.3}}")
    out: dict[str, float] = {}
    for role, value in items:
        if role not in ROLES:
            raise InputError(path, f"{flag} {role}: not a role; the roles are {', '.join(ROLES)}")
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InputError(path, f'{flag} {role} = {value!r}: expected a fraction (0.5 or "50%")')
        try:
            out[role] = parse_fraction(value, name)
        except InputError as exc:
            raise InputError(path, f"{flag} {role}={value}: {exc.problem.split(': ', 1)[1]}") from None
    return out


def _not_finite(number: float) -> str | None:
    """What a value that is no limit is: nan or infinite (``1e400`` reads as infinite), else None."""
    if math.isnan(number):
        return "not a number"
    if math.isinf(number):
        return "infinite"
    return None


def parse_fraction(value: object, name: str) -> float:
    """A fraction given as ``0.5`` or ``"50%"``; a bare number above 1 is refused, showing both spellings
    where the number reads as a percentage (up to 100); nan and infinities are refused by name."""
    flag = _flag(name)
    if isinstance(value, bool):
        raise InputError(None, f"{flag} {value!r}: expected a fraction, 0.5 or 50%")
    text = str(value).strip()
    percent = text.endswith("%")
    try:
        number = float(text[:-1] if percent else text)
    except ValueError:
        raise InputError(None, f"{flag} {text!r}: expected a fraction, 0.5 or 50%") from None
    what = _not_finite(number)
    if what is not None:
        raise InputError(None, f"{flag} {text}: {what}; expected a fraction from 0 to 1, 0.5 or 50%")
    if number < 0:
        raise InputError(None, f"{flag} {text}: expected a fraction from 0 to 1, 0.5 or 50%")
    if percent:
        number /= 100
    if number > 1:
        if percent:
            raise InputError(None, f"{flag} {text}: a fraction is at most 100%")
        if number <= 100:  # a percentage without its sign: say how to write it
            raise InputError(
                None, f"{flag} {text}: a fraction is at most 1; write {number / 100:g} or {text}% for {text} percent"
            )
        raise InputError(None, f"{flag} {text}: a fraction is at most 1 (100%), e.g. 0.5 or 50%")
    return number


def parse_number(value: object, name: str, at_most: float | None = None) -> float:
    """A finite number >= 0 (and at most ``at_most``): a limit in ms, a significance level. nan and
    infinities (``1e400``) are refused by name: an infinite limit would pass whatever the run did."""
    flag = _flag(name)
    if isinstance(value, bool):
        raise InputError(None, f"{flag} {value!r}: expected a number")
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        raise InputError(None, f"{flag} {text!r}: expected a number") from None
    what = _not_finite(number)
    if what is not None:
        raise InputError(None, f"{flag} {text}: {what}; expected a finite number >= 0")
    if number < 0:
        raise InputError(None, f"{flag} {text}: expected a number >= 0")
    if at_most is not None and number > at_most:
        raise InputError(None, f"{flag} {text}: expected a number from 0 to {at_most:g}")
    return number


# ---------------------------------------------------------------- loading inputs


@dataclass
class Source:
    """One input made into an :class:`Analysis`, and what it was."""

    path: Path
    kind: str  # "analysis" (a saved JSON), "run" (a run folder), "trace"
    analysis: Analysis


def is_analysis_json(path: Path) -> bool:
    """A moeprof JSON document (analysis, or another moeprof schema) rather than a trace."""
    if not path.is_file() or not path.name.lower().endswith(".json"):
        return False
    if path.name == ANALYSIS:
        return True
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    # Kineto's "schemaVersion" does not match '"schema"'; moeprof writes its schema first
    return b'"schema"' in head and b'"moeprof.' in head


def read_analysis(path: Path) -> Analysis:
    """A saved ``moeprof.analysis/1`` object, validated enough for gates and diffs."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(path, f"not valid JSON ({exc})") from None
    analysis = Analysis.from_json(data, str(path))
    problem = figures_problem(analysis)
    if problem is not None:  # a gate against it would pass or fail on nonsense (0%, or 7e24%)
        raise InputError(path, problem)
    return analysis


# A time of a saved analysis is int64 ns (292 years at most): a figure past it was never measured
_LARGEST_NS = 2**63 - 1
_SLACK_NS = 4  # figures edited through floats may round a few ns apart (moeprof writes the §4 identities exact)


def figures_problem(analysis: Analysis) -> str | None:
    """The first figure of a saved analysis that no measurement gives (None: every one is possible), in words
    naming the row and the figure: a time below 0 or past int64, an empty total (for a timeline), parts past
    their whole (spec §4: the buckets add up to ``accumulated_ns``, ``idle_ns = span_ns - busy_ns``, exposed
    communication is communication, and within the span)."""
    rows: list[tuple[str, Figures]] = [("total", analysis.total)]
    rows += [(f"device {d.device}", d) for d in analysis.devices]
    rows += [(f"step {s.step} of {s.device}", s) for s in analysis.steps]
    for where, row in rows:
        problem = _row_problem(row)
        if problem is not None:
            return f"{where}: {problem}"
    if not analysis.timeline_free and analysis.total.span_ns <= 0:
        return "total: span_ns is 0 or missing: the analysis holds no measured time (its figures are empty)"
    return None


def _row_problem(f: Figures) -> str | None:
    values = {k: int(getattr(f, k)) for k in NS_KEYS}
    values.update({k: int(v) for k, v in (f.ledger or {}).items() if k in LEDGER_KEYS})
    for key, value in values.items():
        if value < 0:
            return f"{key} is {value:,}: no measured time is below 0"
        if value > _LARGEST_NS:
            return f"{key} is {value:.3g} ns: no measured time is past int64 nanoseconds (292 years)"
    parts = f.compute_ns + f.comm_ns + f.memcpy_ns + f.other_ns
    if abs(parts - f.accumulated_ns) > _SLACK_NS:
        return (
            f"compute, comm, memcpy and other add up to {parts:,} ns, not to accumulated_ns ({f.accumulated_ns:,}): "
            "a measurement's buckets always do"
        )
    if abs(f.busy_ns + f.idle_ns - f.span_ns) > _SLACK_NS:
        return f"busy_ns + idle_ns is {f.busy_ns + f.idle_ns:,} ns, not span_ns ({f.span_ns:,}): a measurement's is"
    for part, whole in (("exposed_comm_ns", "comm_ns"), ("exposed_comm_ns", "span_ns"), ("busy_ns", "span_ns")):
        if values[part] > values[whole] + _SLACK_NS:
            return f"{part} ({values[part]:,}) is more than {whole} ({values[whole]:,}): a part of it never is"
    return None


def load_source(
    path: Path,
    options: LoadOptions | None = None,
    step_options: StepOptions | None = None,
    execution: ExecOptions | None = None,
) -> Source:
    """Analyze a trace or run folder, or read a saved analysis JSON."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if is_analysis_json(path):
        return Source(path, "analysis", read_analysis(path))
    manifest = read_manifest(path) if path.is_dir() else None
    if manifest is not None and (path / ANALYSIS).is_file() and not _has_traces(path, options):
        # a run folder whose trace was not kept: its stored analysis still holds the figures
        analysis = read_analysis(path / ANALYSIS)
        if analysis.manifest is None:
            analysis = analysis.with_(manifest=manifest)
        if analysis.throughput is None and (tp := manifest_throughput(manifest)):
            analysis = analysis.with_(throughput=tp)
        return Source(path, "run", analysis)
    analysis = run(Request([path], options or LoadOptions(), step_options, execution or ExecOptions())).analysis
    return Source(path, "run" if manifest is not None else "trace", analysis)


LEDGER_FIGURES = ("exposed_wait_fraction", "exposed_transfer_fraction")
PROJECTION_FIGURES = ("balance_saving",)  # from the analysis' balance projection (§9), a job figure


def balance_projection(analysis: Analysis) -> Projection | None:
    """The ``balance`` projection the analysis carries (multi-rank jobs), else None."""
    return analysis.projection("straggler")


def balance_saving(analysis: Analysis) -> float:
    """The fraction of the mean step the balance projection saves (0 where the step is empty)."""
    p = balance_projection(analysis)
    if p is None:
        raise KeyError("balance")
    return p.saving_ns / p.measured_step_ns if p.measured_step_ns else 0.0


def checkable(source: Source, figures: tuple[str, ...] = (), role_gates: tuple[str, ...] = ()) -> Analysis:
    """The analysis a gate may judge, or an InputError: a gate never passes on nothing or on nonsense."""
    a = source.analysis
    if role_gates and not a.roles:
        raise InputError(
            source.path,
            f"{_flag(role_gates[0])} needs the time per MoE role (spec §10, the analysis' roles), which this "
            "analysis has none of: no device activity, or saved by a moeprof from before roles",
        )
    if a.host_only:
        raise InputError(source.path, f"{a.HOST_ONLY}: no figure to gate (analyze them for their traffic)")
    if a.timeline_free:
        timed = [f for f in figures if f not in INSPECTOR_FIGURES]
        if timed:
            raise InputError(
                source.path,
                f"--max-{timed[0].replace('_', '-')} cannot be gated on NCCL Inspector logs: they have no timeline,"
                " so the §4 figures are unknown; gate --max-beyond-shortest-fraction or --max-last-to-arrive-fraction",
            )
        if not (a.inspector or {}).get("exec_us"):
            raise InputError(source.path, "the Inspector logs hold no collective time: nothing to gate")
        return a
    wanted_inspector = [f for f in figures if f in INSPECTOR_FIGURES]
    if wanted_inspector:
        raise InputError(
            source.path,
            f"--max-{wanted_inspector[0].replace('_', '-')} gates NCCL Inspector logs; this is a timeline trace "
            "(gate its ledger: --max-exposed-wait-fraction)",
        )
    if not a.devices:
        raise InputError(source.path, "the analysis holds no device: nothing to gate")
    if "balance_saving" in figures and balance_projection(a) is None:
        raise InputError(
            source.path,
            "--max-balance-saving needs the balance projection, which moeprof computes for a job of several "
            "devices (analyze the traces of every rank together); this analysis has none",
        )
    wanted = [f for f in figures if f in LEDGER_FIGURES]
    if wanted and not a.ledger_matched:
        raise InputError(
            source.path,
            f"--max-{wanted[0].replace('_', '-')} needs the cross-rank ledger to match collectives, which needs the "
            "traces of several members of a group (several rank files, or several devices of one file); "
            + ("none matched" if a.ledger is not None else "there is no ledger"),
        )
    tp = a.throughput or {}
    mfu, tflops, peak = tp.get("mfu"), tp.get("tflops_per_device"), tp.get("peak_tflops")
    if isinstance(mfu, int | float) and mfu > 1:
        raise InputError(source.path, f"MFU {mfu:.1%} is impossible: {throughput_mismatch(tp)}")
    if isinstance(tflops, int | float) and isinstance(peak, int | float) and peak and tflops > peak:
        raise InputError(
            source.path,
            f"{tflops:,.1f} model TFLOPS per device exceeds the {peak:,.0f} TFLOPS peak: " + throughput_mismatch(tp),
        )
    return a


def _has_traces(folder: Path, options: LoadOptions | None) -> bool:
    try:
        return bool(discover([folder], options))
    except InputError:
        return False


# ---------------------------------------------------------------- figures


@dataclass
class Measure:
    value: float
    device: str | None = None  # the worst device (the one that decides in per-device mode)
    step: int | None = None  # the worst step, for per-step figures


def device_values(analysis: Analysis, figure: str) -> list[Measure]:
    """The figure on every device (exposed comm per step: the device's worst step)."""
    if figure != "exposed_comm_ms":
        return [Measure(d.value(figure), d.device) for d in analysis.devices]
    if not analysis.steps:  # no steps: the whole window is the one step
        return [Measure(d.exposed_comm_ns / 1e6, d.device) for d in analysis.devices]
    worst: dict[str, Measure] = {}
    for s in analysis.steps:
        m = Measure(s.exposed_comm_ns / 1e6, s.device, s.step)
        if s.device not in worst or m.value > worst[s.device].value:
            worst[s.device] = m
    return list(worst.values())


def total_value(analysis: Analysis, figure: str) -> Measure:
    """The figure of the whole job.

    Exposed comm per step is the mean over devices of each step's exposed time (the
    figure the analysis reports per step in ``spread.steps``), worst step; without
    steps the mean over devices of the whole window. A mean keeps it a per-device
    time, comparable with the per-device gate and across device counts.
    """
    if figure != "exposed_comm_ms":
        return Measure(analysis.total.value(figure))
    if not analysis.steps:
        devices = analysis.devices
        mean = sum(d.exposed_comm_ns for d in devices) / len(devices) if devices else 0.0
        return Measure(mean / 1e6)
    per_step: dict[int, list[float]] = {}
    for s in analysis.steps:
        per_step.setdefault(s.step, []).append(float(s.exposed_comm_ns))
    step, values = max(per_step.items(), key=lambda kv: (sum(kv[1]) / len(kv[1]), -kv[0]))
    return Measure(sum(values) / len(values) / 1e6, step=step)


def measure(analysis: Analysis, figure: str, per_device: bool = False) -> Measure:
    """The figure on the total (naming the worst device) or on the worst device."""
    if figure not in FIGURES:
        raise KeyError(figure)
    if figure in PROJECTION_FIGURES:  # one figure of the whole job, whatever the scope
        return Measure(balance_saving(analysis))
    if figure in INSPECTOR_FIGURES:
        return inspector_value(analysis, figure)
    devices = device_values(analysis, figure)
    worst = max(devices, key=lambda m: m.value) if devices else None
    if per_device:
        return worst or Measure(0.0)
    total = total_value(analysis, figure)
    if total.step is not None:  # name the device that exposed most in the step that decides
        in_step = [s for s in analysis.steps if s.step == total.step]
        total.device = max(in_step, key=lambda s: s.exposed_comm_ns).device
    else:
        total.device = worst.device if worst else None
    return total


def inspector_value(analysis: Analysis, figure: str) -> Measure:
    """A figure of NCCL Inspector logs, as a share of all collective time (per device: the same, the logs
    name no device); the process the others waited for most is named."""
    section = analysis.inspector or {}
    total = float(section.get("exec_us") or 0.0)
    last = section.get("last_to_arrive") or []
    top = last[0] if last else None
    if figure == "beyond_shortest_fraction":
        value = float(section.get("beyond_shortest_us") or 0.0)
    else:
        value = float(top["caused_us"]) if top else 0.0
    return Measure(value / total if total else 0.0, top["process"] if top else None)


def step_time_ns(analysis: Analysis) -> float:
    """The job's step time, the one every screen shows: §9's ``step_ns`` (the mean over steps of the job's §5
    window: its devices' step windows from the earliest start to the latest end, aligned). A saved analysis
    from before it was written: the median over steps of the slowest device's step span; without steps the
    longest device window."""
    if analysis.step_ns is not None:
        return float(analysis.step_ns)
    per_step: dict[int, float] = {}
    for s in analysis.steps:
        per_step[s.step] = max(per_step.get(s.step, 0.0), float(s.span_ns))
    if per_step:
        spans = sorted(per_step.values())
        mid = len(spans) // 2
        return spans[mid] if len(spans) % 2 else (spans[mid - 1] + spans[mid]) / 2
    return float(max((d.span_ns for d in analysis.devices), default=0))


def step_values(analysis: Analysis, figure: str, per_device: bool = False) -> list[float]:
    """The figure in every measured step, in step order: the per-step spread a baseline gate tests against.

    Total scope: the step's own ratio of the sums over devices, or (exposed comm per step) the mean
    over devices; per-device scope: the worst device of the step. Empty where the analysis has no
    steps, or for a §8 figure where its steps carry no ledger figures.
    """
    if figure not in FIGURES:
        raise KeyError(figure)
    if figure in LEDGER_FIGURES and not any(s.ledger is not None for s in analysis.steps):
        return []
    by_step: dict[int, list[StepFigures]] = {}
    for s in analysis.steps:
        by_step.setdefault(s.step, []).append(s)
    out = []
    for _, rows in sorted(by_step.items()):
        if figure == "exposed_comm_ms":
            each = [r.exposed_comm_ns / 1e6 for r in rows]
            out.append(max(each) if per_device else sum(each) / len(each))
        else:
            out.append(max(r.value(figure) for r in rows) if per_device else sum_figures(rows).value(figure))
    return out


def step_count(analysis: Analysis) -> int:
    """Distinct steps measured (1 when the trace has none: the window is one step)."""
    return max(len({s.step for s in analysis.steps}), 1)


# ---------------------------------------------------------------- configuration


@dataclass
class CheckConfig:
    limits: dict[str, float] = field(default_factory=dict)  # figure -> absolute upper limit
    # spec §10: role gate key (ROLE_GATES) -> role -> its limit (a share's upper, a roof fraction's lower)
    role_limits: dict[str, dict[str, float]] = field(default_factory=dict)
    per_device: bool = False
    baseline: Path | None = None
    tolerance: float = DEFAULT_TOLERANCE
    noise_alpha: float = DEFAULT_ALPHA  # level of the step-noise test of baseline gates (1: tolerance only)
    allow_dropped: bool = False  # gate an input whose reader dropped activities it could not place
    origin: str | None = None  # the config file the gates came from, if any

    @property
    def has_gates(self) -> bool:
        return bool(self.limits) or bool(self.role_limits) or self.baseline is not None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.moeprof.check] table, from ``start`` upward."""
    for folder in (start.resolve(), *start.resolve().parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _check_table(_read_toml(candidate), candidate, required=False) is not None:
            return candidate
    return None


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, f"not valid TOML ({exc})") from None


def _check_table(data: dict, path: Path, required: bool) -> dict | None:
    """[tool.moeprof.check] of a pyproject-style file, else (a file of our own) its top level."""
    if "tool" not in data:
        return data if required else None
    table = data.get("tool", {}).get("moeprof", {}).get("check")
    if table is None:
        if required:
            raise InputError(path, "no [tool.moeprof.check] table")
        return None
    if not isinstance(table, dict):
        raise InputError(path, "[tool.moeprof.check] is not a table")
    return table


def _normalize(table: dict, path: Path) -> dict:
    """Validated gate settings of a config table (keys with dashes or underscores; one key written both ways
    is refused, naming both: which one holds is no rule a reader of the file would guess)."""
    out: dict = {}
    spelled: dict[str, str] = {}
    for raw, value in table.items():
        key = str(raw).replace("-", "_")
        if key not in CONFIG_KEYS:
            raise InputError(path, f"unknown gate key {raw!r} (known: {', '.join(CONFIG_KEYS)})")
        if key in spelled:
            raise InputError(path, f"{spelled[key]!r} and {raw!r} are the same setting, given twice: keep one")
        spelled[key] = str(raw)
        if key in ROLE_GATES:
            out[key] = parse_role_limits(value, key, path)
        elif key in FRACTION_KEYS:
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                raise InputError(path, f'{raw} = {value!r}: expected a fraction (0.5 or "50%")')
            try:
                out[key] = parse_fraction(value, key)
            except InputError as exc:
                raise InputError(path, f"{raw} = {value!r}: {exc.problem.split(': ', 1)[1]}") from None
        elif key in GATES or key == "noise_alpha":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(path, f"{raw} = {value!r}: expected a number >= 0")
            try:
                out[key] = parse_number(value, key, at_most=1 if key == "noise_alpha" else None)
            except InputError as exc:
                raise InputError(path, f"{raw} = {value!r}: {exc.problem.split(': ', 1)[1]}") from None
        elif key in ("per_device", "allow_dropped"):
            if not isinstance(value, bool):
                raise InputError(path, f"{raw} = {value!r}: expected true or false")
            out[key] = value
        else:  # baseline: relative to the file that names it, so CI finds it from any directory
            if not isinstance(value, str) or not value:
                raise InputError(path, f"{raw} = {value!r}: expected a file path")
            out[key] = (path.parent / value) if not Path(value).is_absolute() else Path(value)
    return out


def resolve_config(cli: dict, config_file: Path | None = None, cwd: Path | None = None) -> CheckConfig:
    """Gates from ``--config FILE`` or the nearest pyproject.toml, overridden by CLI values (None = unset)."""
    settings: dict = {}
    origin = None
    if config_file is not None:
        if not config_file.is_file():
            raise InputError(config_file, "no such file")
        settings = _normalize(_check_table(_read_toml(config_file), config_file, required=True) or {}, config_file)
        origin = str(config_file)
    elif (found := find_pyproject(cwd or Path.cwd())) is not None:
        settings = _normalize(_check_table(_read_toml(found), found, required=True) or {}, found)
        origin = str(found)
    for key, value in cli.items():
        key = key.replace("-", "_")
        if key not in CONFIG_KEYS:
            raise InputError(None, f"unknown gate {key!r}")
        if value is None or (key in ROLE_GATES and not value):
            continue
        if key in ROLE_GATES:  # the command line's limits per role join the config file's
            settings[key] = {**settings.get(key, {}), **parse_role_limits(value, key)}
        elif key in FRACTION_KEYS:
            settings[key] = parse_fraction(value, key)
        elif key in GATES or key == "noise_alpha":
            settings[key] = parse_number(value, key, at_most=1 if key == "noise_alpha" else None)
        else:
            settings[key] = value
    alpha = float(settings.get("noise_alpha", DEFAULT_ALPHA))
    return CheckConfig(
        limits={GATES[k]: float(settings[k]) for k in GATES if k in settings},
        role_limits={k: dict(settings[k]) for k in ROLE_GATES if settings.get(k)},
        per_device=bool(settings.get("per_device", False)),
        baseline=Path(settings["baseline"]) if settings.get("baseline") is not None else None,
        tolerance=float(settings.get("tolerance", DEFAULT_TOLERANCE)),
        noise_alpha=alpha,
        allow_dropped=bool(settings.get("allow_dropped", False)),
        origin=origin,
    )


# ---------------------------------------------------------------- gates


@dataclass
class GateResult:
    name: str  # "max-comm-share", or "comm-share-vs-baseline"
    figure: str
    unit: str  # "ratio" or "ms"
    value: float
    limit: float
    passed: bool
    device: str | None = None
    step: int | None = None
    baseline: float | None = None
    message: str = ""
    # baseline gates: Welch's test of the step means (None: fewer than two steps in a run, tolerance only)
    noise: dict | None = None
    gated: bool = True  # False: shown against the baseline but not gated (its step-to-step noise is unknown)
    sense: str = "max"  # the limit is an upper one ("max") or a lower one ("min": a role's roof fraction)

    @property
    def past_limit(self) -> bool:
        """Whether the value is on the wrong side of its limit (a gate past it holds only within the noise)."""
        return self.value < self.limit if self.sense == "min" else self.value > self.limit


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.2f}%" if unit == "ratio" else f"{value:,.3f} ms"


def _where(m: Measure, per_device: bool) -> str:
    parts = []
    if m.device:
        parts.append(f"{'on' if per_device else 'worst device'} {m.device}")
    if m.step is not None:
        parts.append(f"step {m.step}")
    return f" ({', '.join(parts)})" if parts else ""


def _gate(
    name: str,
    figure: str,
    m: Measure,
    limit: float,
    per_device: bool,
    base: float | None,
    noise: NoiseTest | None = None,
) -> GateResult:
    unit = FIGURES[figure][0]
    over = m.value > limit
    passed = not over or (noise is not None and not noise.beyond_noise)
    scope = scope_words(figure, per_device)
    verdict = "holds" if passed else "FAILED"
    message = f"{name} {verdict}: {figure} ({scope}) {fmt(m.value, unit)} {'>' if over else '<='} {fmt(limit, unit)}"
    if base is not None:
        message += f" (baseline {fmt(base, unit)})"
    message += _where(m, per_device)
    if over and noise is not None:
        message += "; " + noise_words(noise, unit)
    elif over and base is not None:
        message += "; no step spread to test against (fewer than two steps): tolerance only"
    return GateResult(name, figure, unit, m.value, limit, passed, m.device, m.step, base, message, _noise_json(noise))


def scope_words(figure: str, per_device: bool) -> str:
    """What a gate's figure is taken over, in its message: the worst device, or the job: the ratio of the sums
    over devices ("total"), or for exposed comm per step the mean device's (a time of one device, never a sum)."""
    if per_device:
        return "worst device"
    return "mean device" if FIGURES[figure][0] == "ms" else "total"


def _ungated(name: str, figure: str, m: Measure, limit: float, per_device: bool, base: float) -> GateResult:
    unit = FIGURES[figure][0]
    scope = scope_words(figure, per_device)
    message = (
        f"{name} not gated: {figure} ({scope}) {fmt(m.value, unit)} (baseline {fmt(base, unit)})"
        f"{_where(m, per_device)};"
        " the steps carry no wait/transfer split, so its step-to-step noise is unknown"
        f" (gate it with --max-{figure.replace('_', '-')})"
    )
    return GateResult(name, figure, unit, m.value, limit, True, m.device, m.step, base, message, None, False)


def noise_words(noise: NoiseTest, unit: str) -> str:
    """The test in words: step means, the excess over the tolerance, and Welch's p against the level."""
    verdict = "beyond the noise of the steps" if noise.beyond_noise else "within the noise of the steps"
    return (
        f"{verdict}: step mean {fmt(noise.current_mean, unit)} ± {fmt(noise.current_sd, unit)} over "
        f"{noise.current_steps} steps vs {fmt(noise.baseline_mean, unit)} ± {fmt(noise.baseline_sd, unit)} over "
        f"{noise.baseline_steps}, Welch t = {noise.t:.2f} (df {noise.df:.1f}), one-sided p = {noise.p:.2g} "
        f"{'<' if noise.p < noise.alpha else '>='} {noise.alpha:g}"
    )


def _noise_json(noise: NoiseTest | None) -> dict | None:
    if noise is None:
        return None
    doc = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(noise).items()}
    return {"test": "welch-one-sided", **doc, "beyond_noise": noise.beyond_noise}


def evaluate(analysis: Analysis, config: CheckConfig, baseline: Analysis | None = None) -> list[GateResult]:
    """Every configured gate on ``analysis``: absolute limits first, then baseline comparisons.

    Against a baseline the same scope is compared (per-device mode: worst device
    against the baseline's worst device, whatever the devices are called, since
    host names change between CI machines). Ratios may grow by ``tolerance``
    (absolute), times by ``tolerance`` x the baseline. A baseline gate fails only
    when the figure is past that limit *and* its per-step values moved beyond
    noise: Welch's one-sided test that the step mean grew by more than the
    tolerance, at ``config.noise_alpha`` (:func:`moeprof.gate.noise.welch_test`).
    Where either run has fewer than two steps the tolerance alone decides.
    """
    results = []
    for figure, limit in config.limits.items():
        m = measure(analysis, figure, config.per_device)
        results.append(_gate(f"max-{figure.replace('_', '-')}", figure, m, limit, config.per_device, None))
    for key, limits in config.role_limits.items():
        for role, limit in limits.items():
            results.append(role_gate(analysis, key, role, limit))
    if baseline is not None:
        for figure, (unit, _) in FIGURES.items():
            inspector = figure in INSPECTOR_FIGURES
            if inspector != analysis.timeline_free or inspector != baseline.timeline_free:
                continue  # Inspector logs and timeline traces share no figure
            if figure in LEDGER_FIGURES and not (analysis.ledger_matched and baseline.ledger_matched):
                continue
            if figure in PROJECTION_FIGURES:  # gated only when asked for (--max-balance-saving)
                continue  # the split exists only where both runs had the traces of several members
            base = measure(baseline, figure, config.per_device).value
            limit = base + config.tolerance if unit == "ratio" else base * (1 + config.tolerance)
            m = measure(analysis, figure, config.per_device)
            name = f"{figure.replace('_', '-')}-vs-baseline"
            before = step_values(baseline, figure, config.per_device)
            after = step_values(analysis, figure, config.per_device)
            split_unknown = len(before) < 2 or len(after) < 2
            if figure in LEDGER_FIGURES and split_unknown and min(step_count(baseline), step_count(analysis)) > 1:
                # the steps carry no wait/transfer split: the noise of these parts of exposed comm is
                # unknown (on a shared machine they swap tens of points between captures), so they
                # are shown, not gated; an explicit --max-exposed-*-fraction (or --noise-alpha 1) still gates them
                if config.noise_alpha < 1:
                    results.append(_ungated(name, figure, m, limit, config.per_device, base))
                    continue
            # the tolerance on the step means: absolute on ratios, relative to the baseline's mean on times
            shift = (
                config.tolerance if unit == "ratio" or len(before) < 2 else config.tolerance * sum(before) / len(before)
            )
            noise = welch_test(before, after, shift, config.noise_alpha)
            results.append(_gate(name, figure, m, limit, config.per_device, base, noise))
    return results


def role_value(analysis: Analysis, figure: str, role: str) -> float:
    """A role's figure from the analysis' ``roles`` (per step, the mean over steps and devices): its time over
    the step time every screen shows (``role_share``; 0 where the role ran nothing), or its time at the roof
    over its time with counts (``roof_fraction``: 1 at the roof). A roof fraction with no counted time is
    unknown: an InputError (exit 2), never a pass."""
    row = next((r for r in analysis.roles if r.get("role") == role), None)
    if figure == "role_share":
        step = step_time_ns(analysis)
        return float(row.get("time_ns") or 0) / step if row is not None and step > 0 else 0.0
    roof = float(row.get("roof_ns") or 0) if row is not None else 0.0
    counted = roof + float(row.get("below_roof_ns") or 0) if row is not None else 0.0
    if counted <= 0:
        raise InputError(
            None,
            f"--min-roof-fraction {role}: the {role} role has no time with FLOP or byte counts in this analysis "
            "(no such activity, or the trace states no counts): its roof fraction is unknown",
        )
    return roof / counted


def role_gate(analysis: Analysis, key: str, role: str, limit: float) -> GateResult:
    """One role gate (``max-role-share[permute]``): a share at most its limit, a roof fraction at least its."""
    figure, sense = ROLE_GATES[key]
    value = role_value(analysis, figure, role)
    passed = value <= limit if sense == "max" else value >= limit
    name = f"{key.replace('_', '-')}[{role}]"
    sign = ("<=" if passed else ">") if sense == "max" else (">=" if passed else "<")
    what = "share of the step" if figure == "role_share" else "fraction of its roof"
    message = (
        f"{name} {'holds' if passed else 'FAILED'}: the {role} role's {what} (per step, the mean over steps and"
        f" devices) {fmt(value, 'ratio')} {sign} {fmt(limit, 'ratio')}"
    )
    return GateResult(name, figure, "ratio", value, limit, passed, message=message, sense=sense)


def verdict(results: list[GateResult], source: Source, config: CheckConfig) -> dict:
    """The ``moeprof.check/1`` object."""
    return {
        "schema": CHECK_SCHEMA,
        "passed": all(r.passed for r in results),
        "path": str(source.path),
        "inputs": list(source.analysis.inputs) or [str(source.path)],
        "scope": "per-device" if config.per_device else "total",
        "baseline": str(config.baseline) if config.baseline else None,
        "tolerance": config.tolerance if config.baseline else None,
        "noise_test": f"Welch one-sided, alpha {config.noise_alpha:g}" if config.baseline else None,
        "config": config.origin,
        "warnings": list(source.analysis.warnings),
        "dropped_activities": source.analysis.dropped_activities,
        "gates": [asdict(r) for r in results],
    }


def junit_xml(results: list[GateResult], suite: str = "moeprof.check") -> ET.ElementTree:
    """One testcase per gate; failed gates carry a <failure> with the message."""
    failures = sum(not r.passed for r in results)
    skipped = sum(not r.gated for r in results)
    root = ET.Element("testsuites", name=suite, tests=str(len(results)), failures=str(failures), errors="0")
    ts = ET.SubElement(
        root, "testsuite", name=suite, tests=str(len(results)), failures=str(failures), errors="0", skipped=str(skipped)
    )
    for r in results:
        case = ET.SubElement(ts, "testcase", classname=suite, name=r.name, time="0")
        if not r.gated:  # shown against the baseline, not gated: a skipped test, with the reason
            ET.SubElement(case, "skipped", message=r.message)
        elif not r.passed:
            failure = ET.SubElement(case, "failure", message=r.message, type="GateFailed")
            failure.text = "\n".join(_details(r))
        else:
            ET.SubElement(case, "system-out").text = r.message
    ET.indent(root)
    return ET.ElementTree(root)


def _details(r: GateResult) -> Iterator[str]:
    yield r.message
    yield f"value: {r.value!r} ({r.unit})"
    yield f"limit: {r.limit!r}"
    if r.baseline is not None:
        yield f"baseline: {r.baseline!r}"
    if r.device:
        yield f"device: {r.device}"
    if r.step is not None:
        yield f"step: {r.step}"


def write_junit(results: list[GateResult], path: Path) -> None:
    try:
        with replacing(path) as into:
            junit_xml(results).write(into, encoding="utf-8", xml_declaration=True)
    except OSError as exc:
        raise cannot_write(path, exc, " the JUnit report") from None
