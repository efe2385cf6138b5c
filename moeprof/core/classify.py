"""Classification: bucket and collective kind of every activity, from ordered rules kept as data.

Each distinct combination of the evidence columns is classified once; the
result is mapped back over the table, so a trace with millions of kernels but a
few thousand distinct names costs a few thousand rule walks.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from .events import BUCKETS, KINDS, combine_codes, first_rows, narrow_codes
from .patterns import user_pattern
from .trace import Trace
from .vocabulary import folded_values, searches

FIELDS = ("opcode", "category", "collective", "annotation", "activity", "copy_kind", "name")
LINKS = ("nvlink", "ib", "internode")  # internode: NVLink inside the node and RDMA across (DeepEP, core.topology)


@dataclass(frozen=True)
class Rule:
    id: str
    field: str
    pattern: re.Pattern[str]
    bucket: str | None = None
    kind: str | None = None
    requires: str | None = None
    link: str | None = None
    # further conditions on other fields, all of which must hold too (e.g. the kernel name, for a rule on an
    # annotation; the copy kind, for a rule on the opcode)
    also: tuple[tuple[str, re.Pattern[str]], ...] = ()

    def matches(self, evidence: dict[str, str]) -> bool:
        if not self.pattern.search(evidence.get(self.field, "")):
            return False
        return all(p.search(evidence.get(f, "")) for f, p in self.also)


@dataclass(frozen=True)
class Classification:
    bucket: str
    kind: str
    rule: str  # "bucket-rule" or "bucket-rule+kind-rule"
    link: str  # "", "nvlink" or "ib": the path the kernel names itself


def _rule_from_dict(raw: dict, origin: str) -> Rule:
    def bad(msg: str) -> InputError:
        return InputError(origin, f"rule {raw.get('id', '?')!r}: {msg}")

    for key in ("id", "field", "match"):
        if not isinstance(raw.get(key), str):
            raise bad(f"needs a string '{key}'")
    if raw["field"] not in FIELDS:
        raise bad(f"field must be one of {', '.join(FIELDS)}")
    if raw.get("bucket") is not None and raw["bucket"] not in BUCKETS:
        raise bad(f"bucket must be one of {', '.join(BUCKETS)}")
    if raw.get("kind") is not None and raw["kind"] not in KINDS:
        raise bad(f"kind must be one of {', '.join(KINDS)}")
    if raw.get("link") is not None and raw["link"] not in LINKS:
        raise bad("link must be nvlink, ib or internode")
    if raw.get("bucket") is None and raw.get("kind") is None:
        raise bad("sets neither bucket nor kind")
    also_fields = [f for f in FIELDS if f != raw["field"] and raw.get(f) is not None]
    for f in also_fields:
        if not isinstance(raw[f], str):
            raise bad(f"a condition on '{f}' must be a string (a regular expression)")
    where = f"rule {raw['id']!r}:"
    pattern = user_pattern(raw["match"], f"{where} match", origin)
    also = tuple((f, user_pattern(raw[f], f"{where} {f}", origin)) for f in also_fields)
    return Rule(
        id=raw["id"],
        field=raw["field"],
        pattern=pattern,
        bucket=raw.get("bucket"),
        kind=raw.get("kind"),
        requires=raw.get("requires"),
        link=raw.get("link"),
        also=also,
    )


def load_rules(text: str, origin: str) -> tuple[Rule, ...]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(origin, f"not valid TOML: {exc}") from None
    rules = data.get("rule", [])
    if not isinstance(rules, list):
        raise InputError(origin, "expected [[rule]] tables")
    return tuple(_rule_from_dict(r, origin) for r in rules)


@cache
def default_rules() -> tuple[Rule, ...]:
    text = resources.files("moeprof.core").joinpath("taxonomy.toml").read_text(encoding="utf-8")
    return load_rules(text, "moeprof/core/taxonomy.toml")


def rules_with(extra: str | Path | None) -> tuple[Rule, ...]:
    """The default rules, preceded by a user's rules file when given."""
    if extra is None:
        return default_rules()
    path = Path(extra)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read rules: {exc.strerror or exc}") from None
    if data[:2] == b"\x1f\x8b":
        raise InputError(path, "rules must be TOML text; this file is gzip-compressed (gunzip it first)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"rules must be TOML text in UTF-8; byte {exc.start} is not ({exc.reason})") from None
    return load_rules(text, str(path)) + default_rules()


def classify_one(evidence: dict[str, str], rules: tuple[Rule, ...]) -> Classification:
    """Bucket, kind, the rule ids that decided, and a named link for one activity."""
    bucket_rule = None
    for rule in rules:
        if rule.bucket and rule.requires is None and rule.matches(evidence):
            bucket_rule = rule
            break
    if bucket_rule is None:
        # nothing matched (not a kernel, copy or memset): spec §2 puts it in "other"
        return Classification("other", "", "unmatched", "")
    bucket = bucket_rule.bucket or "other"
    if bucket != "comm":
        return Classification(bucket, "", bucket_rule.id, "")
    kind_rule = None
    for rule in rules:
        if rule.kind and rule.requires in (None, "comm") and rule.matches(evidence):
            if rule.bucket not in (None, "comm"):
                continue
            kind_rule = rule
            break
    kind = kind_rule.kind if kind_rule and kind_rule.kind else (bucket_rule.kind or "other")
    rule_id = bucket_rule.id if kind_rule in (None, bucket_rule) else f"{bucket_rule.id}+{kind_rule.id}"
    return Classification(bucket, kind, rule_id, bucket_rule.link or "")


def expand(values: list[str], codes: np.ndarray) -> pd.Categorical:
    """``values[codes]`` as a Categorical, without materializing a string per row."""
    small_codes, categories = pd.factorize(np.asarray(values, dtype=object))
    return pd.Categorical.from_codes(small_codes[codes], categories=pd.Index(categories, dtype=object))


def classify(trace: Trace, rules: tuple[Rule, ...] | None = None) -> Trace:
    """The trace with ``bucket``, ``kind``, ``rule`` and ``link_hint`` of every activity filled."""
    return trace.replace(events=classify_table(trace.events, rules))


def classify_table(events: pd.DataFrame, rules: tuple[Rule, ...] | None = None) -> pd.DataFrame:
    """A copy of an event table with ``bucket``, ``kind``, ``rule`` and ``link_hint`` filled.

    The rules are walked as :func:`classify_one` walks them, for all distinct evidence tuples at
    once: each rule is searched once per distinct value of its field among the tuples still
    undecided, never twice.
    """
    rules = rules or default_rules()
    if not len(events):
        return events
    per_column = []
    for col in FIELDS:
        codes, uniques = narrow_codes(events[col])
        # a missing value (code -1) reads "" (the string appended last), as classify_one reads an absent field
        per_column.append((codes, [*(str(u or "") for u in uniques.tolist()), ""]))
    # one code per distinct evidence tuple (combine_codes leaves out a column of one value: most fields of a
    # kernel-only trace)
    combined = combine_codes(*(codes for codes, _ in per_column))
    firsts = first_rows(combined)
    evidence = _Evidence({col: (codes[firsts], values) for col, (codes, values) in zip(FIELDS, per_column)})
    pair_codes, table = _classify_tuples(evidence, rules)
    per_event = pair_codes[combined]
    if "group" in events:
        per_event, table = _local_collectives(events["group"], per_event, table)
    return events.assign(
        **{
            column: expand([getattr(c, attr) for c in table], per_event)
            for attr, column in (("bucket", "bucket"), ("kind", "kind"), ("rule", "rule"), ("link", "link_hint"))
        }
    )


LOCAL_RULE = "group-of-one"  # the rule id of a collective whose group is its own device (a local copy)


def one_member_groups(values: np.ndarray) -> np.ndarray:
    """Per distinct value of a ``group`` column: whether it names exactly one device (``"0"``)."""
    return np.array([str(v or "").strip().isdigit() for v in values.tolist()], dtype=bool)


def _local_collectives(
    group: pd.Series, per_event: np.ndarray, table: list[Classification]
) -> tuple[np.ndarray, list[Classification]]:
    """A collective whose communicating group has one member moves no byte between devices (one TPU chip's
    all-to-all of an expert-parallel program, a one-rank process group): spec §2 puts copies inside one
    device in ``memcpy``. It keeps its kind (what it is called by), but no link (docs/metrics.md, "Buckets")."""
    is_comm = np.array([c.bucket == "comm" for c in table], dtype=bool)
    if not is_comm.any():
        return per_event, table
    codes, values = narrow_codes(group)
    one = one_member_groups(values)
    if not one.any():  # no group of one device among the values: nothing to look up per row
        return per_event, table
    single = np.r_[one, False][codes]  # code -1 (missing) reads False
    local = single & is_comm[per_event]
    if not local.any():
        return per_event, table
    # one more classification per comm classification that has local rows: the same kind, bucket memcpy
    moved = {int(k): len(table) + i for i, k in enumerate(np.unique(per_event[local]).tolist())}
    extra = [Classification("memcpy", table[k].kind, f"{LOCAL_RULE}+{table[k].rule}", "") for k in moved]
    out = per_event.copy()
    remap = np.arange(len(table), dtype=np.int64)
    for k, new in moved.items():
        remap[k] = new
    out[local] = remap[per_event[local]]
    return out, [*table, *extra]


def _classify_tuples(evidence: _Evidence, rules: tuple[Rule, ...]) -> tuple[np.ndarray, list[Classification]]:
    """For each distinct evidence tuple, the index of its classification in the returned list."""
    n = evidence.size
    no_rule = len(rules)
    bucket_rule = evidence.first_match(
        rules, [i for i, r in enumerate(rules) if r.bucket and r.requires is None], np.arange(n)
    )
    bucket_rule[bucket_rule < 0] = no_rule
    is_comm = np.array([r.bucket == "comm" for r in rules] + [False])[bucket_rule]
    kind_rule = np.full(n, -1, dtype=np.int64)
    kind_eligible = [
        i for i, r in enumerate(rules) if r.kind and r.requires in (None, "comm") and r.bucket in (None, "comm")
    ]
    kind_rule[is_comm] = evidence.first_match(rules, kind_eligible, np.flatnonzero(is_comm))
    # few distinct (bucket rule, kind rule) pairs: each becomes one Classification
    pair_codes, pairs = pd.factorize(bucket_rule * (no_rule + 1) + (kind_rule + 1))
    table = []
    for pair in pairs.tolist():
        b, k = divmod(pair, no_rule + 1)
        table.append(_classification(rules, b, k - 1))
    return pair_codes, table


def _classification(rules: tuple[Rule, ...], b: int, k: int) -> Classification:
    """What :func:`classify_one` returns when rule ``b`` set the bucket and rule ``k`` the kind (-1: none)."""
    if b == len(rules):
        return Classification("other", "", "unmatched", "")
    bucket_rule = rules[b]
    bucket = bucket_rule.bucket or "other"
    if bucket != "comm":
        return Classification(bucket, "", bucket_rule.id, "")
    kind_rule = rules[k] if k >= 0 else None
    kind = kind_rule.kind if kind_rule and kind_rule.kind else (bucket_rule.kind or "other")
    rule_id = bucket_rule.id if kind_rule in (None, bucket_rule) else f"{bucket_rule.id}+{kind_rule.id}"
    return Classification(bucket, kind, rule_id, bucket_rule.link or "")


class _Evidence:
    """The distinct evidence tuples, as per-field codes into each field's distinct strings, with every
    regular-expression search memoized per (pattern, distinct string).

    (One alternation of a field's patterns, to skip the values none of them matches, measured slower:
    Python's ``re`` tries every alternative at every position, where a lone pattern skips ahead by its
    literal prefix.)"""

    def __init__(self, columns: dict[str, tuple[np.ndarray, list[str]]]) -> None:
        self.columns = columns
        self.size = len(next(iter(columns.values()))[0])
        self._searched: dict[tuple[str, re.Pattern[str]], np.ndarray] = {}  # 1 match, 0 none, -1 not searched
        self._folded: dict[str, list[str | None]] = {}  # each field's strings lower-cased once (vocabulary.searches)

    def first_match(self, rules: tuple[Rule, ...], eligible: list[int], todo: np.ndarray) -> np.ndarray:
        """For the tuples ``todo``, the first of the ``eligible`` rules that matches (-1: none)."""
        found = np.full(todo.size, -1, dtype=np.int64)
        where = np.arange(todo.size)  # positions in ``todo`` still undecided
        for i in eligible:
            if not where.size:
                break
            rule = rules[i]
            hit = self._matches(rule.field, rule.pattern, todo[where])
            for field, condition in rule.also:
                if hit.any():
                    hit[hit] = self._matches(field, condition, todo[where[hit]])
            found[where[hit]] = i
            where = where[~hit]
        return found

    def _matches(self, field: str, pattern: re.Pattern[str], tuples: np.ndarray) -> np.ndarray:
        codes, values = self.columns[field]
        picked = codes[tuples]
        done = self._searched.setdefault((field, pattern), np.full(len(values), -1, dtype=np.int8))
        unknown = np.zeros(len(values), dtype=bool)
        unknown[picked[done[picked] < 0]] = True
        todo = np.flatnonzero(unknown)
        if todo.size:
            folded = self._folded.get(field)
            if folded is None:
                folded = self._folded[field] = folded_values(values)
            rows = todo.tolist()
            done[todo] = searches(pattern, [values[v] for v in rows], [folded[v] for v in rows])
        return done[picked] == 1
