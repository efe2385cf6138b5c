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
from .events import BUCKETS, KINDS, column_codes, first_rows
from .trace import Trace

FIELDS = ("opcode", "collective", "annotation", "activity", "copy_kind", "name")
LINKS = ("nvlink", "ib")


@dataclass(frozen=True)
class Rule:
    id: str
    field: str
    pattern: re.Pattern[str]
    bucket: str | None = None
    kind: str | None = None
    requires: str | None = None
    link: str | None = None
    name: re.Pattern[str] | None = None  # a second condition on the kernel name, for rules on another field

    def matches(self, evidence: dict[str, str]) -> bool:
        if not self.pattern.search(evidence.get(self.field, "")):
            return False
        return self.name is None or bool(self.name.search(evidence.get("name", "")))


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
        raise bad("link must be nvlink or ib")
    if raw.get("bucket") is None and raw.get("kind") is None:
        raise bad("sets neither bucket nor kind")
    try:
        pattern = re.compile(raw["match"])
        name = re.compile(raw["name"]) if raw.get("name") is not None else None
    except re.error as exc:
        raise bad(f"bad regular expression: {exc}") from None
    return Rule(
        id=raw["id"],
        field=raw["field"],
        pattern=pattern,
        bucket=raw.get("bucket"),
        kind=raw.get("kind"),
        requires=raw.get("requires"),
        link=raw.get("link"),
        name=name,
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
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, f"cannot read rules: {exc.strerror or exc}") from None
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
    """A copy of an event table with ``bucket``, ``kind``, ``rule`` and ``link_hint`` filled."""
    rules = rules or default_rules()
    if not len(events):
        return events
    # one integer code per distinct evidence tuple
    combined = np.zeros(len(events), dtype=np.int64)
    per_column = []
    for col in FIELDS:
        codes, uniques = column_codes(events[col])
        per_column.append((codes, uniques))
        combined, _ = pd.factorize(combined * (len(uniques) + 1) + codes)
    # a missing value (code -1) indexes the "" appended last: it reads as classify_one reads an absent field
    values = [(codes, [*uniques.tolist(), ""]) for codes, uniques in per_column]
    table = [
        classify_one({col: str(u[c[row]] or "") for col, (c, u) in zip(FIELDS, values)}, rules)
        for row in first_rows(combined).tolist()
    ]
    return events.assign(
        **{
            column: expand([getattr(c, attr) for c in table], combined)
            for attr, column in (("bucket", "bucket"), ("kind", "kind"), ("rule", "rule"), ("link", "link_hint"))
        }
    )
