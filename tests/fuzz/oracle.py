"""The contract every run must keep (spec §7 and the project brief), as checks on one run's outcome.

Bad input: exit 2, exactly one line on stderr, ``moeprof: ...``, naming the file, no traceback.
Accepted input: figures that can be true (no negative ``_ns``, shares and fractions in [0, 1], buckets that
add up to accumulated, links that add up to comm, busy and exposed within the span) and at least one device.
Either way: the input is not modified and nothing is written beside it.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from moeprof.errors import UNFORESEEN

from .mutators import NO_INT64, REJECT, SAME, SAME_OR_REJECT, Case
from .runner import Outcome

BUCKETS = ("compute_ns", "comm_ns", "memcpy_ns", "other_ns")
LINKS = ("comm_nvlink_ns", "comm_ib_ns", "comm_unknown_link_ns")
EXPOSED_LINKS = ("exposed_comm_nvlink_ns", "exposed_comm_ib_ns", "exposed_comm_unknown_link_ns")
# the words of moeprof's last-resort catch-alls, the CLI's and each reader's: an exception nothing turned into
# what is wrong with the input
GENERIC_FAILURE = UNFORESEEN
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class Violation:
    code: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


# the file each writing command must leave in out/ when it exits 0
OUTPUTS = {"events": "events.csv", "report": "report.html", "annotate": "annotated.trace.json.gz"}


def check(
    case: Case,
    outcome: Outcome,
    before: dict,
    after: dict,
    seed_figures: dict | None,
    outputs: dict[str, int] | None = None,
) -> list[Violation]:
    """Every broken rule of the contract in one run; ``outputs``: sizes of the files under ``out/``."""
    v: list[Violation] = []
    add = lambda code, detail: v.append(Violation(code, detail))  # noqa: E731
    both = outcome.stdout + outcome.stderr
    if outcome.timed_out:
        add("hang", f"no exit within {case.timeout:g} s")
    elif outcome.rc is None:
        add("crash", f"died of signal {outcome.signal}" if outcome.signal else "the process died")
    if outcome.escaped or "Traceback (most recent call last)" in both:
        add("traceback", outcome.escaped or _first(outcome.stderr, "Traceback"))
    if GENERIC_FAILURE in outcome.stderr:
        add("unforeseen-exception", _line_with(outcome.stderr, GENERIC_FAILURE))
    ok_codes = (0, 1, 2) if case.command == "check" else (0, 2)
    if outcome.rc is not None and outcome.rc not in ok_codes:
        add("exit-code", f"exit code {outcome.rc}")
    if outcome.rc == 2:
        _check_error(case, outcome, add)
        if case.expect == SAME:
            add("rejected-good-input", _first(outcome.stderr))
    elif outcome.rc == 0 or (outcome.rc == 1 and case.command == "check"):
        if case.expect == REJECT:
            add("accepted-bad-input", f"exit {outcome.rc} on input that must be refused")
        stray = [ln for ln in outcome.stderr.splitlines() if ln.strip() and not _own_line(ln, case)]
        if stray:
            add("stray-stderr", f"{len(stray)} line(s) not from moeprof, first: {stray[0][:160]!r}")
        if case.command == "analyze":
            _check_figures(case, outcome, add, seed_figures)
        elif case.command == "history":
            try:
                _strict_json(outcome.stdout)
            except ValueError as exc:
                add("bad-json", f"history --json is not strict JSON: {exc}")
        wanted = OUTPUTS.get(case.command)
        if wanted and outputs is not None and not outputs.get(wanted):
            add("no-output", f"exit 0 but out/{wanted} is missing or empty")
    _check_files(before, after, add)
    return v


def _own_line(line: str, case: Case) -> bool:
    """moeprof's own stderr: its prefixed lines, the "wrote ..." note of commands that write a file, and
    annotate's "projected with ..." note (annotate --what-if)."""
    return line.startswith("moeprof") or (
        case.command != "analyze"
        and line.startswith(("wrote ", "projected with " if case.command == "annotate" else "wrote "))
    )


def _first(text: str, containing: str = "") -> str:
    for line in text.splitlines():
        if containing in line:
            return line.strip()[:300]
    return text.strip()[:300]


def _line_with(text: str, needle: str) -> str:
    return _first(text, needle)


def names_file(line: str, case: Case) -> bool:
    """Whether the error line names the mutated file or the path given (control characters may be escaped)."""
    for candidate in (case.target, case.arg):
        name = candidate.rstrip("/").rsplit("/", 1)[-1]
        pieces = [p for p in _CONTROL.split(name) if p]
        if pieces and all(p in line for p in pieces):
            return True
    return False


def _check_error(case: Case, outcome: Outcome, add) -> None:
    text = outcome.stderr
    # the warnings a command printed before it refused (check prints every warning, then its refusal: the
    # dropped activities it names are in the warning above it) are not the error; the error is one line
    lines = [ln for ln in text.splitlines() if not ln.startswith("moeprof: warning: ")]
    if len(lines) != 1 or not text.endswith("\n"):
        add("stderr-lines", f"{len(lines)} stderr lines besides warnings (want exactly one): {text[:300]!r}")
    line = next((ln for ln in lines if ln.startswith("moeprof")), lines[0] if lines else "")
    if not line.startswith("moeprof: "):
        add("stderr-prefix", f"error line does not start with 'moeprof: ': {line[:200]!r}")
    if not names_file(text.replace("\n", " "), case):
        add("unnamed-file", f"the error does not name {case.target!r}: {line[:200]!r}")
    if outcome.stdout.strip():
        add("stdout-on-error", f"stdout on exit 2: {outcome.stdout[:120]!r}")


def _strict_json(text: str) -> object:
    def refuse(token: str) -> object:
        raise ValueError(f"non-standard JSON number {token}")

    return json.loads(text, parse_constant=refuse)


def _check_figures(case: Case, outcome: Outcome, add, seed_figures: dict | None) -> None:
    try:
        doc = _strict_json(outcome.stdout)
    except ValueError as exc:
        add("bad-json", f"stdout is not strict JSON: {exc}; {outcome.stdout[:120]!r}")
        return
    if not isinstance(doc, dict) or doc.get("schema") != "moeprof.analysis/1":
        add("bad-json", "no moeprof.analysis/1 object on stdout")
        return
    devices = doc.get("devices") or []
    if not devices:
        add("no-devices", "accepted a trace with no device activity (exit 0, devices: [])")
    for problem in sanity(doc):
        add(*problem)
    # an activity whose time no int64 ns holds is dropped (or the file refused): never silently
    if any(NO_INT64 in step for step in case.steps) and not any(
        "cannot be placed" in str(w) for w in doc.get("warnings") or []
    ):
        add("silent-drop", "a device time beyond int64 ns was accepted without a warning that it was dropped")
    if case.expect in (SAME, SAME_OR_REJECT) and seed_figures is not None:
        got = figures(doc)
        if got != seed_figures:
            add("figures-changed", _diff(seed_figures, got))


def _walk(obj: object, path: str = ""):
    if isinstance(obj, dict):
        for k, val in obj.items():
            yield from _walk(val, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, val in enumerate(obj):
            yield from _walk(val, f"{path}[{i}]")
    else:
        yield path, obj


def sanity(doc: dict) -> list[tuple[str, str]]:
    """Relations every analysis must satisfy; ``(code, detail)`` for each broken one."""
    out: list[tuple[str, str]] = []
    for path, val in _walk(doc):
        key = path.rsplit(".", 1)[-1]
        if isinstance(val, bool) or not isinstance(val, int | float):
            continue
        if key == "below_roof_ns":
            # spec §10: d − roof_ns, signed (negative where an op's counts make its roof longer than it ran:
            # levers.role_rows says so); never non-finite
            if isinstance(val, float) and not math.isfinite(val):
                out.append(("non-finite", f"{path} = {val}"))
            continue
        if path.startswith(".projections[") and key in ("saving_ns", "saving_fraction"):
            # a projection's saving has a sign: balance gives the fast ranks the median's (longer) durations, and
            # a step may come out longer (spec §9); an opportunity's projected saving (work removed) stays >= 0
            if isinstance(val, float) and not math.isfinite(val):
                out.append(("non-finite", f"{path} = {val}"))
            continue
        if isinstance(val, float) and not math.isfinite(val):
            out.append(("non-finite", f"{path} = {val}"))
        elif key.endswith("_ns") and val < 0:
            out.append(("negative-ns", f"{path} = {val}"))
        elif (key.endswith(("_share", "_fraction")) or key == "ib_fraction") and not 0 <= val <= 1:
            out.append(("fraction-range", f"{path} = {val}"))
    rows = [("total", doc.get("total") or {})]
    rows += [(f"device {d.get('device')}", d) for d in doc.get("devices") or []]
    rows += [(f"step {s.get('step')} {s.get('device')}", s) for s in doc.get("steps") or []]
    for where, r in rows:

        def g(k: str, r: dict = r) -> int | float | None:
            return r.get(k) if isinstance(r.get(k), int | float) else None

        if all(g(k) is not None for k in (*BUCKETS, "accumulated_ns")) and sum(g(k) for k in BUCKETS) != g(
            "accumulated_ns"
        ):
            out.append(("bucket-sum", f"{where}: {' + '.join(str(g(k)) for k in BUCKETS)} != {g('accumulated_ns')}"))
        if all(g(k) is not None for k in (*LINKS, "comm_ns")) and sum(g(k) for k in LINKS) != g("comm_ns"):
            out.append(("link-sum", f"{where}: nvlink+ib+unknown {sum(g(k) for k in LINKS)} != comm {g('comm_ns')}"))
        if all(g(k) is not None for k in (*EXPOSED_LINKS, "exposed_comm_ns")) and sum(g(k) for k in EXPOSED_LINKS) != g(
            "exposed_comm_ns"
        ):
            out.append(("link-sum", f"{where}: exposed by link != exposed_comm_ns {g('exposed_comm_ns')}"))
        span, busy = g("span_ns"), g("busy_ns")
        if span is not None and busy is not None:
            if busy > span:
                out.append(("busy-span", f"{where}: busy {busy} > span {span}"))
            if g("idle_ns") is not None and g("idle_ns") != span - busy:
                out.append(("idle", f"{where}: idle {g('idle_ns')} != span - busy {span - busy}"))
        if busy is not None and g("accumulated_ns") is not None and busy > g("accumulated_ns"):
            out.append(("busy-accumulated", f"{where}: busy {busy} > accumulated {g('accumulated_ns')}"))
        if span is not None and g("exposed_comm_ns") is not None and g("exposed_comm_ns") > span:
            out.append(("exposed-span", f"{where}: exposed {g('exposed_comm_ns')} > span {span}"))
        if None not in (g("exposed_comm_ns"), g("overlapped_comm_ns"), g("comm_ns")) and (
            g("exposed_comm_ns") + g("overlapped_comm_ns") > g("comm_ns")
        ):
            out.append(("exposed-comm", f"{where}: exposed + overlapped > comm {g('comm_ns')}"))
        if g("start_ns") is not None and g("end_ns") is not None and g("end_ns") < g("start_ns"):
            out.append(("step-order", f"{where}: end {g('end_ns')} < start {g('start_ns')}"))
        acc, comm = g("accumulated_ns"), g("comm_ns")
        if acc and comm is not None and g("comm_share") is not None and abs(g("comm_share") - comm / acc) > 1e-9:
            out.append(("share", f"{where}: comm_share {g('comm_share')} != comm/accumulated {comm / acc}"))
    devices = doc.get("devices") or []
    total = doc.get("total") or {}
    for key in (*BUCKETS, "accumulated_ns", "busy_ns", "span_ns", "exposed_comm_ns", *LINKS):
        vals = [d.get(key) for d in devices]
        if devices and key in total and all(isinstance(x, int) for x in vals) and sum(vals) != total[key]:
            out.append(("total-sum", f"total.{key} {total[key]} != sum over devices {sum(vals)}"))
    for c in doc.get("collectives") or []:
        if (
            isinstance(c.get("exposed_ns"), int)
            and isinstance(c.get("total_ns"), int)
            and c["exposed_ns"] > c["total_ns"]
        ):
            out.append(
                ("collective", f"collective {c.get('name')!r}: exposed {c['exposed_ns']} > total {c['total_ns']}")
            )
    for o in doc.get("opportunities") or []:
        s, e = o.get("saving_bound_ns"), o.get("exposed_ns")
        if isinstance(s, int) and isinstance(e, int) and s > e:
            out.append(("opportunity", f"opportunity {o.get('kind')!r}: saving bound {s} > exposed {e}"))
    return out


def figures(doc: dict) -> dict:
    """The figures a meaning-preserving change must leave alone: per device and total, every ``_ns`` and share."""

    def pick(row: dict) -> dict:
        return {k: v for k, v in row.items() if k.endswith(("_ns", "_share", "_fraction"))}

    return {
        "devices": {d.get("device"): pick(d) for d in doc.get("devices") or []},
        "total": pick(doc.get("total") or {}),
    }


def _diff(want: dict, got: dict) -> str:
    if set(want["devices"]) != set(got["devices"]):
        return f"devices {sorted(want['devices'])[:4]} became {sorted(got['devices'])[:4]}"
    for dev, row in [("total", want["total"]), *want["devices"].items()]:
        other = got["total"] if dev == "total" else got["devices"][dev]
        for k, val in row.items():
            if other.get(k) != val:
                return f"{dev} {k}: {val} became {other.get(k)}"
    return "figures differ"


def _check_files(before: dict, after: dict, add) -> None:
    if before == after:
        return
    changed = sorted(k for k in before if k in after and before[k] != after[k])
    created = sorted(k for k in after if k not in before)
    removed = sorted(k for k in before if k not in after)
    if changed:
        add("input-modified", f"changed: {changed[:5]}")
    if created or removed:
        add("files-written", f"created {created[:5]}, removed {removed[:5]}")
