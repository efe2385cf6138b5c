"""Fuzz cases of hostile *values* rather than hostile files (issue 49): option values and the small files a user
writes by hand, on valid inputs, drawn apart from the other routes (``generate_values(SEED, INDEX)``, replay
``python -m tests.fuzz --replay values:SEED:INDEX``; tests/test_fuzz_values.py runs them).

- ``what-if factor``: ``scale(FILTERS)=F``, ``scale()=F``, ``tokens=F``, ``tokens(routed)=F`` with F negative,
  non-finite, past any time (5e13, 1e300), not a number, or legal (0 to 1e6): a factor that is no finite number
  >= 0 is refused; any other is refused in one line or projected to sane figures (no negative time);
- ``pattern``: a regex that Python compiles or not (a repeat count past the engine's, 2,000 nested groups, an
  unterminated set) as a what-if filter (``name~``, ``scope~``), ``--step-marker`` or a ``--rules`` file's
  match or condition: refused in one line naming where it was written exactly when ``re.compile`` refuses it;
- ``baseline``: ``check --baseline`` of a saved analysis whose figures were made negative, non-numbers, past
  int64, emptied or inconsistent (spec §4: the buckets add up to accumulated, idle = span - busy, exposed comm
  within comm and the span): refused naming the file, else gated;
- ``config``: ``check --config`` TOML with a gate given in both spellings, unknown keys, and values of every
  type and range: refused naming the file where the contract says so (docs/ci.md), else gated;
- ``history``: a history database holding infinities and text where figures are: ``history --json`` prints
  strict JSON, and reading writes nothing beside the database.

What each case must give is decided here from the value alone (Python's ``re`` for a pattern, the spec's
relations for figures), never by asking moeprof.
"""

from __future__ import annotations

import json
import math
import random
import re
import sqlite3
import tempfile
from functools import cache
from pathlib import Path

from .mutators import (
    ANY,
    EXTREME_FLOATS,
    EXTREME_INTS,
    INT64_MAX,
    REJECT,
    SUBPROCESS_EVERY,
    Case,
    combine,
    json_bytes,
    seed_files,
    show,
)
from .seeds import SAMPLES, all_seeds

VALUES = "values"
KINDS = {"what-if factor": 6, "pattern": 6, "baseline": 4, "config": 3, "history": 1}
TRACE_SEEDS = {"kineto-tiny": 3, "xplane-small": 2, "xplane-tpu": 1}  # the last holds HLO: tokens scales ops

# ---- the values ----------------------------------------------------------------------------------------------------

# a value class each: past any time (legal as numbers: the replay must refuse or hold them), no factor, ordinary
FACTORS = {
    "huge": ["5e13", "1e300", "1e12", "2e6", "1e18", "9.3e18", "1e100", "1e6", "1000000", "999999.9"],
    "not a factor": ["-1", "-0.5", "-1e-300", "inf", "-inf", "nan", "NaN", "1e309", "0x10", "1e", "--1", "."],
    "ordinary": ["2", "0.5", "0", "-0", "1e-300", "1_000", "+3", "4e-324", "1e5"],
}
FACTOR_WEIGHTS = {"huge": 4, "not a factor": 3, "ordinary": 3}
NESTED = "(" * 2000 + "a" + ")" * 2000
# past the engine's limits (OverflowError, RecursionError: what escaped before), bad syntax (re.error), patterns
PATTERNS = {
    "past a limit": ["a{99999999999}", "x{1,4294967295}", NESTED, "(?:" * 2000 + "a" + ")" * 2000],
    "bad syntax": ["[", "(", "*a", "a**", "(?P<n>a)(?P=m)", "\\", "(?<=a+)b"],
    "compiles": [
        "x{4294967294}", "(" * 200 + "a" + ")" * 200, "nccl", ".*", "^$", "Send|Recv", "[a-z]+", "", "gemm|xmma",
        "\\d{1000}", "(?i)ALL", "fusion\\.\\d+",
    ],
}  # fmt: skip
PATTERN_WEIGHTS = {"past a limit": 4, "bad syntax": 2, "compiles": 3}
ROUTING = ["top_k={}", "capacity={}", "experts={}"]  # K experts per token, capacity factor, F times the experts
# most select activities of every seed (a term that selects nothing changes no time: it tests little)
FILTERS = ["", "", "bucket=comm", "bucket=compute", "bucket=compute", "name~nccl|gemm|fusion", "kind=all-to-all",
           "device=nope/GPU:9", "scope~layer"]  # fmt: skip


def compiles(pattern: str) -> bool:
    """Whether Python's ``re`` compiles ``pattern`` (any exception: it does not)."""
    try:
        re.compile(pattern)
    except Exception:  # re.error, OverflowError, RecursionError: each a pattern no one can search with
        return False
    return True


def factor_is_bad(text: str) -> bool:
    """A factor that can be no factor: not a number float() reads, not finite, or below 0."""
    try:
        value = float(text)
    except ValueError:
        return True
    return not math.isfinite(value) or value < 0


# ---- saved analyses --------------------------------------------------------------------------------------------------

ANALYSIS = SAMPLES / "cpu_moe_8dev" / "analysis.json"
BUCKETS = ("compute_ns", "comm_ns", "memcpy_ns", "other_ns")
_SLACK_NS = 4  # a hand-edited figure may round a few ns apart


def _figure_keys(row: dict) -> list[str]:
    return [k for k in row if (k.endswith("_ns") and k not in ("start_ns", "end_ns")) or k == "straggler_count"]


def baseline_expect(doc: dict) -> str:
    """REJECT where a figure is one no measurement gives (spec §4, §7): not a number, below 0, past int64, a total
    with no time, buckets that do not add up to accumulated, busy + idle != span, exposed comm past comm or the
    span, busy past the span. ANY otherwise (a fraction of a nanosecond, relations the gate does not read)."""
    rows = [doc.get("total") or {}, *(doc.get("devices") or []), *(doc.get("steps") or [])]
    for row in rows:
        values: dict[str, int] = {}
        for key in _figure_keys(row):
            v = row[key]
            if v is None:
                v = 0  # a null figure reads as a missing one: 0
            if isinstance(v, bool) or not isinstance(v, int | float):
                return REJECT
            if not math.isfinite(v) or v < 0 or v > INT64_MAX:
                return REJECT
            if isinstance(v, float) and v != int(v):
                return ANY  # a fraction of a nanosecond: read as some whole number
            values[key] = int(v)

        def g(key: str, values: dict[str, int] = values) -> int:
            return values.get(key, 0)

        if abs(sum(g(k) for k in BUCKETS) - g("accumulated_ns")) > _SLACK_NS:
            return REJECT
        if abs(g("busy_ns") + g("idle_ns") - g("span_ns")) > _SLACK_NS:
            return REJECT
        for part, whole in (("exposed_comm_ns", "comm_ns"), ("exposed_comm_ns", "span_ns"), ("busy_ns", "span_ns")):
            if g(part) > g(whole) + _SLACK_NS:
                return REJECT
    total = doc.get("total") or {}
    span = total.get("span_ns")
    if not isinstance(span, int | float) or isinstance(span, bool) or span <= 0:
        return REJECT
    return ANY


HOSTILE_FIGURES: list[object] = [
    *EXTREME_INTS, *EXTREME_FLOATS, None, True, "12", "", [], {}, [1, 2], 1e30, 7.3e24, 12.5,
]  # fmt: skip


def _baseline(rng: random.Random) -> tuple[dict, list[str]]:
    doc = json.loads(ANALYSIS.read_text())
    how = rng.choice(["one", "one", "one", "several", "empty", "scaled", "swap"])
    rows = [("total", doc["total"])] + [(f"devices[{i}]", d) for i, d in enumerate(doc["devices"])]
    rows += [(f"steps[{i}]", s) for i, s in enumerate(doc["steps"])]
    steps: list[str] = []
    if how in ("one", "several"):
        for _ in range(1 if how == "one" else rng.randint(2, 5)):
            where, row = rng.choice(rows)
            key = rng.choice(_figure_keys(row))
            if rng.random() < 0.1:
                row.pop(key)
                steps.append(f"baseline {where}.{key} removed")
            else:
                row[key] = rng.choice(HOSTILE_FIGURES)
                steps.append(f"baseline {where}.{key} = {show(row[key])}")
    elif how == "empty":
        for _, row in rows:
            for key in _figure_keys(row):
                row.pop(key)
        steps.append("baseline: every figure removed (an empty total)")
    elif how == "scaled":
        factor = rng.choice([1e24, -1.0, 1e10, 0.0])
        for _, row in rows:
            for key in _figure_keys(row):
                row[key] = row[key] * factor
        steps.append(f"baseline: every figure times {factor:g}")
    else:  # two figures of one row exchanged: each a possible number, together maybe not
        where, row = rng.choice(rows)
        a, b = rng.sample(_figure_keys(row), 2)
        row[a], row[b] = row[b], row[a]
        steps.append(f"baseline {where}: {a} and {b} exchanged")
    return doc, steps


# ---- check configs ---------------------------------------------------------------------------------------------------

FRACTION_GATES = (
    "max_comm_share", "max_exposed_comm_fraction", "max_idle_fraction", "max_exposed_wait_fraction",
    "max_exposed_transfer_fraction", "max_balance_saving", "tolerance",
)  # fmt: skip
NUMBER_GATES = ("max_exposed_comm_ms", "noise_alpha")
FLAGS = ("per_device", "allow_dropped")
UNKNOWN_KEYS = ("max_comm_shares", "Max_Comm_Share", "max__comm_share", "comm_share", "max-comm_share-")
CONFIG_VALUES: list[object] = [
    0.5, 0.0, 1.0, 1, 0, 2, 50, 150, -0.1, -1, 1e30, 1e-300, math.nan, math.inf, -math.inf, True, False,
    "50%", "0.5", "150%", "-5%", "50", "x", "", "nan%", [0.5], {"a": 1}, 2**64,
]  # fmt: skip


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def _number(value: object) -> float | None:
    return None if isinstance(value, bool) or not isinstance(value, int | float) else float(value)


def config_value_is_bad(key: str, value: object) -> bool:
    """What docs/ci.md says each setting takes: a fraction 0..1 (or "0%".."100%"), a finite number >= 0 (ms; a
    level at most 1), true or false."""
    if key in FLAGS:
        return not isinstance(value, bool)
    if key in FRACTION_GATES:
        if isinstance(value, str):
            text = value.strip()
            try:
                number = float(text[:-1]) / 100 if text.endswith("%") else float(text)
            except ValueError:
                return True
        else:
            found = _number(value)
            if found is None:
                return True
            number = found
        return not (math.isfinite(number) and 0 <= number <= 1)
    number = _number(value)
    if number is None or not math.isfinite(number) or number < 0:
        return True
    return key == "noise_alpha" and number > 1


def _config(rng: random.Random) -> tuple[str, list[str], str]:
    keys = rng.sample([*FRACTION_GATES, *NUMBER_GATES, *FLAGS], rng.randint(1, 3))
    lines: list[tuple[str, object]] = []
    expect = ANY
    for key in keys:
        if key in FLAGS:
            value = rng.choice([True, False, True, 1, "yes", 0.5])
        elif rng.random() < 0.6:  # a value it takes, most of the time: the other hostile parts then decide
            value = rng.choice([0.5, 0.25, 1, 0, "50%", "0.5"] if key in FRACTION_GATES else [0.5, 1, 0, 0.001])
        else:
            value = rng.choice(CONFIG_VALUES)
        spelled = key.replace("_", "-") if rng.random() < 0.5 else key
        lines.append((spelled, value))
        if config_value_is_bad(key, value):
            expect = REJECT
    if rng.random() < 0.3:  # one of them again, in the other spelling
        spelled, value = rng.choice(lines)
        other = spelled.replace("-", "_") if "-" in spelled else spelled.replace("_", "-")
        if other != spelled:
            lines.insert(rng.randrange(len(lines) + 1), (other, rng.choice([value, 0.5, 0.9])))
            expect = REJECT
    if rng.random() < 0.15:
        lines.insert(rng.randrange(len(lines) + 1), (rng.choice(UNKNOWN_KEYS), 0.5))
        expect = REJECT
    table = rng.random() < 0.3  # a pyproject-style table
    text = ("[tool.moeprof.check]\n" if table else "") + "".join(f"{k} = {_toml(v)}\n" for k, v in lines)
    steps = [f"config {'[tool.moeprof.check] ' if table else ''}" + "; ".join(f"{k} = {show(v)}" for k, v in lines)]
    return text, steps, expect


# ---- history databases -------------------------------------------------------------------------------------------

_HISTORY_DDL = """
CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, time_utc TEXT NOT NULL, command TEXT NOT NULL,
                   git_commit TEXT, inputs TEXT NOT NULL, passed INTEGER);
CREATE TABLE figures (run_id INTEGER NOT NULL REFERENCES runs(id), name TEXT NOT NULL, value REAL,
                      PRIMARY KEY (run_id, name));
CREATE TABLE gates (run_id INTEGER NOT NULL REFERENCES runs(id), name TEXT NOT NULL, figure TEXT NOT NULL,
                    value REAL, limit_value REAL, passed INTEGER NOT NULL, device TEXT, message TEXT,
                    PRIMARY KEY (run_id, name));
"""
HISTORY_VALUES: list[object] = [math.inf, -math.inf, 1e308, -1e308, 0.0, 0.5, "x", b"\x00\xff", None, 2**62, 12]


def _history(rng: random.Random) -> tuple[bytes, list[str]]:
    """A history database of 2-4 check runs (the layout ``--history`` writes), some values made hostile."""
    steps: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.db"
        conn = sqlite3.connect(path)
        try:
            wal = rng.random() < 0.5
            if wal:
                conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_HISTORY_DDL)
            figures = ["comm_share", "exposed_comm_fraction", "idle_fraction", "step_ms", "exposed_comm_ms"]
            for run in range(1, rng.randint(2, 4) + 1):
                conn.execute(
                    "INSERT INTO runs VALUES (?, ?, 'check', NULL, '[\"in/t\"]', ?)",
                    (run, f"2026-01-0{run}T00:00:00Z", run % 2),
                )
                for name in figures:
                    conn.execute("INSERT INTO figures VALUES (?, ?, ?)", (run, name, 0.25 * run))
                conn.execute(
                    "INSERT INTO gates VALUES (?, 'max-comm-share', 'comm_share', ?, 0.5, ?, NULL, 'm')",
                    (run, 0.25 * run, int(0.25 * run <= 0.5)),
                )
            for _ in range(rng.randint(1, 4)):
                value = rng.choice(HISTORY_VALUES)
                if rng.random() < 0.7:
                    run, name = rng.randint(1, 2), rng.choice(figures)
                    conn.execute("UPDATE figures SET value = ? WHERE run_id = ? AND name = ?", (value, run, name))
                    steps.append(f"history run {run} figure {name} = {show(value)}")
                else:
                    column = rng.choice(["value", "limit_value"])
                    conn.execute(f"UPDATE gates SET {column} = ? WHERE run_id = 2", (value,))
                    steps.append(f"history run 2 gate {column} = {show(value)}")
            conn.commit()
            if wal:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                steps.append("(WAL journal mode)")
        finally:
            conn.close()
        return path.read_bytes(), steps


# ---- cases --------------------------------------------------------------------------------------------------------


@cache
def _trace_seeds() -> dict[str, tuple[dict[str, bytes], str]]:
    seeds = all_seeds()
    return {name: (seed_files(seeds[name]), seeds[name].arg) for name in TRACE_SEEDS}


def _trace_case(
    rng: random.Random, kind: str, extra: random.Random
) -> tuple[str, dict[str, bytes], str, str, tuple[str, ...], list, str]:
    """(seed, files, arg, target, options, steps, expect) of a case on a valid trace."""
    name = rng.choices(list(TRACE_SEEDS), list(TRACE_SEEDS.values()))[0]
    files, arg = _trace_seeds()[name]
    files = dict(files)
    if kind == "what-if factor":
        factor = rng.choice(FACTORS[rng.choices(list(FACTOR_WEIGHTS), list(FACTOR_WEIGHTS.values()))[0]])
        shape = rng.choice(
            ["scale({})={}", "scale()={}", "scale()={}", "tokens={}", "tokens(routed)={}", "tokens({})={}"]
        )
        term = shape.format(rng.choice(FILTERS), factor) if shape.count("{}") == 2 else shape.format(factor)
        if name == "xplane-tpu" and extra.random() < 0.5:  # the routing terms resize ops from the HLO it holds
            term = extra.choice(ROUTING).format(factor)
        terms = [term]
        if rng.random() < 0.2:  # with another term: each applies on what the previous one left
            terms.append(rng.choice(["scale(bucket=compute)=0.5", "balance", "tokens=2"]))
        options = tuple(o for t in terms for o in ("--what-if", t))
        return (
            name,
            files,
            arg,
            "--what-if",
            options,
            [f"--what-if {t!r}" for t in terms],
            (REJECT if factor_is_bad(factor) else ANY),
        )
    pattern = rng.choice(PATTERNS[rng.choices(list(PATTERN_WEIGHTS), list(PATTERN_WEIGHTS.values()))[0]])
    where = rng.choice(["name~", "scope~", "balance", "step-marker", "rules", "rules-condition"])
    expect = ANY if compiles(pattern) else REJECT
    shown = show(pattern)
    if where in ("name~", "scope~", "balance"):
        term = f"balance(name~{pattern})" if where == "balance" else f"{'scale' if where == 'name~' else 'tokens'}" \
            f"({where}{pattern})=0.5"  # fmt: skip
        return name, files, arg, "--what-if", ("--what-if", term), [f"--what-if with the pattern {shown}"], expect
    if where == "step-marker":
        return name, files, arg, "--step-marker", ("--step-marker", pattern), [f"--step-marker {shown}"], expect
    condition = where == "rules-condition"
    rule = (
        '[[rule]]\nid = "fuzz"\nfield = "name"\n'
        + (f'match = "nccl"\nopcode = {json.dumps(pattern)}\n' if condition else f"match = {json.dumps(pattern)}\n")
        + 'bucket = "compute"\n'
    )
    files["rules.toml"] = rule.encode()
    what = "a condition (opcode)" if condition else "match"
    return name, files, arg, "rules.toml", ("--rules", "in/rules.toml"), [f"--rules: {what} {shown}"], expect


def generate_values(base_seed: int, index: int) -> Case:
    """A case of one hostile value (replay: ``python -m tests.fuzz --replay values:SEED:INDEX``)."""
    rng = random.Random(f"moeprof-fuzz-values:{base_seed}:{index}")
    kind = rng.choices(list(KINDS), list(KINDS.values()))[0]
    key = f"{VALUES}:{base_seed}:{index}"
    mode = "subprocess" if index % SUBPROCESS_EVERY == 0 else "worker"
    saved = ANALYSIS.read_bytes()
    if kind in ("what-if factor", "pattern"):
        # the routing terms came later: drawn from a stream of their own, so the earlier cases replay as they were
        extra = random.Random(f"moeprof-fuzz-values-routing:{base_seed}:{index}")
        seed, files, arg, target, options, steps, expect = _trace_case(rng, kind, extra)
        command = "analyze"
        if options[0] == "--what-if" and rng.random() < 0.2:
            command = rng.choice(["annotate", "report"])
        elif options[0] in ("--rules", "--step-marker") and rng.random() < 0.1:
            command = "events"
        return Case(key, seed, VALUES, [f"[{kind}]", *steps], combine([expect]), files, arg, target, command, mode,
                    options=options)  # fmt: skip
    if kind == "baseline":
        doc, steps = _baseline(rng)
        files = {"current.json": saved, "base.json": json_bytes(doc, indent=1)}
        return Case(key, "", VALUES, ["[baseline]", *steps], baseline_expect(doc), files, "current.json", "base.json",
                    "check", mode, options=("--baseline", "in/base.json"))  # fmt: skip
    if kind == "config":
        text, steps, expect = _config(rng)
        files = {"current.json": saved, "gates.toml": text.encode()}
        return Case(key, "", VALUES, ["[config]", *steps], expect, files, "current.json", "gates.toml", "check", mode,
                    options=("--config", "in/gates.toml"))  # fmt: skip
    db, steps = _history(rng)
    return Case(key, "", VALUES, ["[history]", *steps], ANY, {"runs.db": db}, "runs.db", "runs.db", "history", mode)
