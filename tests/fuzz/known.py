"""Failure classes already found and not yet fixed (see KNOWN_FAILURES.md).

A failing case whose every violation is explained by a class here is an expected failure
(pytest.xfail, not strict); anything else fails the test. Whoever fixes a class deletes its entry:
from then on the harness enforces it. (Fixed on main and deleted so: multi-file-error-lost,
no-device-activity-accepted, newline-in-file-name, out-of-memory-unnamed.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .mutators import Case
from .oracle import Violation
from .runner import Outcome


@dataclass(frozen=True)
class KnownClass:
    id: str
    codes: frozenset[str]  # the violations this class explains
    matches: Callable[[Case, Outcome, list[Violation]], bool]


def escaped_type(outcome: Outcome) -> str:
    """The exception type in moeprof's catch-all message ("cannot process the input: TypeError: ...")."""
    m = re.search(r"cannot process the input: (\w+)", outcome.stderr)
    return m.group(1) if m else ""


SANITY = frozenset({
    "negative-ns", "fraction-range", "bucket-sum", "link-sum", "busy-span", "idle", "busy-accumulated", "exposed-span",
    "exposed-comm", "step-order", "share", "total-sum", "collective", "opportunity", "non-finite",
})  # fmt: skip
ONE_LINE = frozenset({"unforeseen-exception", "unnamed-file", "stderr-lines"})
# values near or past the int64 range, as the mutation log spells them
_EXTREME = re.compile(
    r"9223372036854775807|9223372036854775808|2\^63|4611686018427387904|9223372036854|1000000000000000000"
    r"|18446744073709551615|1\.7e\+?1[58]|1700000000000000|1e\+?300"
)


_PY_WARNING = re.compile(r"\.py:\d+: \w*Warning: ")
_NATIVE_LOG = re.compile(r"(?m)^[EWIF]\d{4} \d\d:\d\d:\d\d|absl::InitializeLog")


def _steps(case: Case) -> str:
    return " ; ".join(case.steps)


def _codes(violations: list[Violation]) -> set[str]:
    return {v.code for v in violations}


def _escaped(*types: str, fmts: tuple[str, ...] = (), text: str = "") -> Callable[[Case, Outcome, list], bool]:
    def match(case: Case, outcome: Outcome, violations: list[Violation]) -> bool:
        return (
            escaped_type(outcome) in types and (not fmts or case.fmt in fmts) and (not text or text in outcome.stderr)
        )

    return match


def _extreme(fmt: str) -> Callable[[Case, Outcome, list], bool]:
    def match(case: Case, outcome: Outcome, violations: list[Violation]) -> bool:
        return case.fmt == fmt and outcome.rc == 0 and bool(_EXTREME.search(_steps(case)))

    return match


KNOWN: list[KnownClass] = [
    # a device time no int64 nanosecond can hold (1e300, 2^64) is accepted, the activity misplaced
    KnownClass(
        "time-beyond-int64-accepted",
        frozenset({"accepted-bad-input"}) | SANITY,
        lambda c, o, v: "[time beyond int64 ns]" in _steps(c) and o.rc in (0, 1),
    ),
    # a device activity whose start is no number (a string, null, missing) is accepted, placed at a guess
    KnownClass(
        "device-time-not-a-number-accepted",
        frozenset({"accepted-bad-input"}) | SANITY,
        lambda c, o, v: "[device time not a number]" in _steps(c) and o.rc in (0, 1),
    ),
    # int64 overflow in interval sums on extreme but representable times: negative figures, busy > span
    KnownClass("kineto-extreme-times-overflow", SANITY, _extreme("kineto")),
    KnownClass("xprof-json-extreme-times-overflow", SANITY, _extreme("xprof-json")),
    KnownClass("nsys-extreme-times-overflow", SANITY, _extreme("nsys-sqlite")),
    KnownClass("nsys-parquet-extreme-times-overflow", SANITY, _extreme("nsys-parquet")),
    KnownClass("xplane-extreme-times-overflow", SANITY, _extreme("xplane")),
    # nsys reader: a WAL-mode export gets -shm/-wal files created beside it
    KnownClass(
        "nsys-wal-sidecar-files",
        frozenset({"files-written"}),
        lambda c, o, v: c.fmt == "nsys-sqlite" and "WAL" in _steps(c),
    ),
    # Python warnings printed on stderr: numpy RuntimeWarnings (NaN or overflow cast to int64; the nsys parquet
    # seed itself prints two), a pandas UserWarning merging int and float keys
    KnownClass(
        "python-warning-on-stderr",
        frozenset({"stray-stderr", "stderr-lines"}),
        lambda c, o, v: bool(_PY_WARNING.search(o.stderr)),
    ),
    # jaxlib/XLA C++ logging on stderr: absl/glog lines ("E0000 ... wire_format_lite.cc", "profile_data_lib.cc",
    # an HLO RET_CHECK with a stack trace) when an XPlane holds invalid UTF-8, odd stat types or a broken HLO
    KnownClass(
        "native-log-lines-on-stderr",
        frozenset({"stray-stderr", "stderr-lines"}),
        lambda c, o, v: c.fmt == "xplane" and bool(_NATIVE_LOG.search(o.stderr)),
    ),
    # exceptions that escape a reader as "cannot process the input: <Type>" without the file's name
    # (a Kineto document that is a bare array of non-objects is read by the same xprof reader)
    KnownClass(
        "xprof-json-non-object-event",
        ONE_LINE,
        _escaped("AttributeError", fmts=("xprof-json", "kineto"), text="has no attribute 'get'"),
    ),
    # a ts/dur that is a list, object or non-numeric string meets float()
    KnownClass(
        "xprof-json-time-not-a-number",
        ONE_LINE,
        lambda c, o, v: (
            c.fmt == "xprof-json"
            and (
                (escaped_type(o) == "TypeError" and "float()" in o.stderr)
                or (escaped_type(o) == "ValueError" and "to float" in o.stderr)
            )
        ),
    ),
    KnownClass("xprof-json-group-arg", ONE_LINE, _escaped("ValueError", fmts=("xprof-json",), text="invalid literal")),
    KnownClass("json-unhashable-id", ONE_LINE, _escaped("TypeError", fmts=("xprof-json", "kineto"), text="unhashable")),
    KnownClass("gzip-corrupt-zlib-error", ONE_LINE, _escaped("error", text="decompressing")),
    KnownClass("json-deep-nesting-recursion", ONE_LINE, _escaped("RecursionError")),
    KnownClass("xplane-metadata-decode-error", ONE_LINE, _escaped("DecodeError", fmts=("xplane",))),
    # a NULL id (enum, GPU or string table) meets int()
    KnownClass(
        "nsys-null-id",
        ONE_LINE,
        _escaped("TypeError", fmts=("nsys-sqlite", "nsys-parquet"), text="int() argument must be"),
    ),
    KnownClass("not-a-file-not-a-dir", ONE_LINE, _escaped("NotADirectoryError")),
    KnownClass("json-huge-int-overflow", ONE_LINE, _escaped("OverflowError", fmts=("kineto", "xprof-json"))),
    # a double (1e300, NaN) or a uint64 past int64 where the XPlane reader wants an integer stat
    KnownClass("xplane-stat-value-to-int", ONE_LINE, _escaped("OverflowError", "ValueError", fmts=("xplane",))),
    # a column mixing types (text, blob, numbers) reaches a pandas sort or categorical that cannot order it
    KnownClass(
        "nsys-mixed-type-column",
        ONE_LINE,
        _escaped("TypeError", fmts=("nsys-sqlite", "nsys-parquet"), text="not ordered"),
    ),
    # a binary column holding bytes that are not UTF-8 (NVTX text) is decoded strictly
    KnownClass(
        "nsys-parquet-binary-text", ONE_LINE, _escaped("UnicodeDecodeError", fmts=("nsys-parquet", "nsys-sqlite"))
    ),
    # an enum or GPU name that is not text (a float after a parquet export) meets str methods
    KnownClass("nsys-name-not-text", ONE_LINE, _escaped("AttributeError", fmts=("nsys-sqlite", "nsys-parquet"))),
    KnownClass("nsys-parquet-list-column", ONE_LINE, _escaped("TypeError", fmts=("nsys-parquet",), text="unhashable")),
    # times near the int64 limits give a value past int64 that a writer refuses: orjson in the JSON report,
    # Python int -> C long in the annotated trace
    KnownClass(
        "value-past-int64-at-output",
        ONE_LINE,
        lambda c, o, v: (
            (escaped_type(o) == "TypeError" and "64-bit range" in o.stderr)
            or (escaped_type(o) == "OverflowError" and c.command == "annotate")
        ),
    ),
    # nsys reader: `nsys export` runs without a timeout
    KnownClass("nsys-export-hang", frozenset({"hang"}), lambda c, o, v: c.arg.endswith(".nsys-rep")),
]


def classify(case: Case, outcome: Outcome, violations: list[Violation]) -> list[KnownClass]:
    return [k for k in KNOWN if any(v.code in k.codes for v in violations) and k.matches(case, outcome, violations)]


def unexplained(violations: list[Violation], classes: list[KnownClass]) -> list[Violation]:
    codes = set().union(*(k.codes for k in classes)) if classes else set()
    return [v for v in violations if v.code not in codes]
