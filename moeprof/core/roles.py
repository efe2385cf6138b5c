"""The MoE role of every device activity (spec §10 "Roles"): router, permute, dispatch, experts, combine,
unpermute, shared, attention, optimizer or other.

The roles are taxonomy as data (``roles.toml``): ordered rules over an activity's evidence, the first that
holds gives its role. Evidence, strongest first: what the op itself is where it says so whatever range launched
it (a collective's kind or opcode, a ragged dot, a grouped GEMM, a top-k), then the words of its own scope or
range path (JAX name scopes, Kineto ``record_function`` and module ranges), then the optimizer's updates, then
the words of the component it serves (core/components.py: a backward op serves its forward's scope, a cast its
parameters'), then its enclosing communication range, then its kernel name. A path's words are read from its
innermost component out (``layer0/moe/combine`` is the combine's, not the MoE block's).

Everything is decided once per distinct evidence tuple (scope path, component, pass, opcode, name, kind,
annotation), never per row; each regular expression runs once per distinct string of its field.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import numpy as np
import pandas as pd

from .events import categorical_of, column_codes, combine_codes, first_rows, lookup, narrow_codes
from .names import said
from .scopes import NO_SCOPE, TOP_LEVEL, clean_path, scope_parts
from .trace import Trace
from .vocabulary import folded_values, searches, vocabulary

_UNCUT = 1 << 30  # a label's width: never cut in its middle (core.names.said cuts prose at 48)
_DIFFERENTIATED = re.compile(r"(?:^|/)(?:jvp|transpose)\(")
_CONDITIONS = ("opcode", "name", "kind", "category", "primitive", "scope_role", "served_role", "range_role")
_FLAGS = ("update", "moe")


@dataclass(frozen=True)
class RoleRule:
    id: str
    role: str  # a role, "@exchange" or "@words"
    conditions: tuple[tuple[str, re.Pattern[str]], ...] = ()
    vocab: tuple[re.Pattern[str], ...] = ()  # name patterns of the taxonomy's vocabulary that must all hold
    flags: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True)
class Word:
    pattern: re.Pattern[str]
    role: str  # a role, "@ffn" or "@moe"
    exchange: str = ""  # the exchange a scope of this word holds (dispatch, combine)


@dataclass(frozen=True)
class RoleTable:
    roles: tuple[str, ...]
    glue: tuple[str, ...]
    rules: tuple[RoleRule, ...]
    words: tuple[Word, ...]
    index: dict[str, int] = field(default_factory=dict)  # role -> its position in roles


@cache
def role_table() -> RoleTable:
    """The roles, the token-movement roles and the rules of ``roles.toml`` (loaded once)."""
    raw = tomllib.loads(resources.files("moeprof.core").joinpath("roles.toml").read_text(encoding="utf-8"))
    vocab = vocabulary()
    roles = tuple(raw["roles"])
    rules = []
    for r in raw["rule"]:
        rules.append(
            RoleRule(
                id=r["id"],
                role=r["role"],
                conditions=tuple((k, re.compile(r[k])) for k in _CONDITIONS if k in r),
                vocab=tuple(getattr(vocab, v) for v in r.get("name_vocabulary", ())),
                flags=tuple((k, bool(r[k])) for k in _FLAGS if k in r),
            )
        )
    words = tuple(
        Word(getattr(vocab, w["vocabulary"]) if "vocabulary" in w else re.compile(w["match"]), w["role"],
             w.get("exchange", ""))
        for w in raw["word"]
    )  # fmt: skip
    for rule in rules:
        if rule.role not in (*roles, "@exchange", "@words"):
            raise ValueError(f"roles.toml: rule {rule.id} names no role ({rule.role})")
    return RoleTable(roles, tuple(raw["glue"]), tuple(rules), words, {r: i for i, r in enumerate(roles)})


ROLES: tuple[str, ...] = role_table().roles
GLUE: tuple[str, ...] = role_table().glue
EXCHANGES = ("dispatch", "combine")


def _components(path: str) -> list[str]:
    return [] if path in ("", NO_SCOPE, TOP_LEVEL) else path.split("/")


_PASS = re.compile(r"\([^()/]*\)$")  # a pass a range's name ends in: DeepSeek's mlp(F), mlp(B), mlp(W)


def _normal(part: str) -> str:
    return _PASS.sub("", part)


class _Words:
    """What the words say of a path: the role its innermost named component gives, the exchange (dispatch,
    combine) its innermost exchange word names, and the path up to the component that gave the role (passes
    dropped: ``1F1B/mlp`` of ``1F1B/mlp(W)/kernel``); memoized per distinct path."""

    def __init__(self, words: tuple[Word, ...]) -> None:
        self.words = words
        self.seen: dict[str, tuple[str, str, str]] = {}

    def of(self, path: str) -> tuple[str, str, str]:
        got = self.seen.get(path)
        if got is None:
            role = exchange = where = ""
            parts = _components(path)
            for i in range(len(parts) - 1, -1, -1):
                for w in self.words:
                    if w.pattern.search(parts[i]):
                        if not role:
                            role, where = w.role, "/".join(_normal(p) for p in parts[: i + 1])
                        exchange = exchange or w.exchange
                        break
                if role and exchange:
                    break
            got = self.seen[path] = (role, exchange, where)
        return got


def _prefixes(path: str) -> list[str]:
    """Every prefix of a path, passes dropped (``1F1B/mlp(F)`` -> ``1F1B``, ``1F1B/mlp``)."""
    parts = [_normal(p) for p in _components(path)]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


@dataclass
class _Evidence:
    """One distinct evidence tuple's strings and flags."""

    opcode: str
    name: str
    kind: str
    annotation: str
    path: str  # the own scope path (tf_op / op_name)
    component: str  # the served component key ("" none)
    category: str  # XLA's hlo_category ("" unknown)
    backward: bool  # serves the backward pass (reads gradients, core.components)


def _column(table: pd.DataFrame, column: str) -> tuple[np.ndarray, list[str]]:
    """(codes, distinct strings with "" for a missing value last) of a string column ("" everywhere if absent);
    a categorical's codes as narrow as pandas keeps them (a widened copy of 1M rows per field is not needed)."""
    if column not in table.columns:
        return np.full(len(table), -1, dtype=np.int8), [""]
    codes, values = narrow_codes(table[column])
    return codes, [*(str(v) if isinstance(v, str) else "" for v in values.tolist()), ""]


def role_codes(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of an event table: its role as a code into :data:`ROLES`, and the id of the rule that decided it as
    a code into the ids returned third. Needs ``bucket``/``kind`` (classification) and reads ``scope``,
    ``component`` (core.scopes, core.components) where the table has them."""
    spec = role_table()
    ids = np.array([r.id for r in spec.rules], dtype=object)
    key, role, rule = _tuple_roles(table, spec)
    return role[key], rule[key], ids


def _tuple_roles(table: pd.DataFrame, spec: RoleTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each row's evidence tuple, numbered from 0 in order of first appearance; each tuple's role as a code into
    :data:`ROLES`; each tuple's deciding rule)."""
    n = len(table)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    fields = ("opcode", "name", "kind", "annotation", "scope", "component", "category")
    columns = {f: _column(table, f) for f in fields}
    passes = table["backward"].to_numpy(bool) if "backward" in table.columns else np.zeros(n, dtype=bool)
    # combine_codes leaves out a column of one value (most columns of a kernel-only trace, the pass of a forward)
    key = combine_codes(*(codes for codes, _ in columns.values()), passes)
    first = first_rows(key)
    text = [[columns[f][1][int(c)] for c in columns[f][0][first].tolist()] for f in fields]
    tuples = [
        _Evidence(opcode, name, kind, annotation, path, component, category, bool(p))
        for opcode, name, kind, annotation, path, component, category, p in zip(
            *text, passes[first].tolist(), strict=True
        )
    ]
    decided = _decide(tuples, spec)
    role = np.array([spec.index[r] for r, _ in decided], dtype=np.int64)
    rule = np.array([i for _, i in decided], dtype=np.int64)
    return key, role, rule


def _decide(tuples: list[_Evidence], spec: RoleTable) -> list[tuple[str, int]]:
    """The role and the deciding rule's index of each distinct evidence tuple."""
    words = _Words(spec.words)
    parts = {p: scope_parts(clean_path(p)) if p else (NO_SCOPE, False, "") for p in {t.path for t in tuples}}
    differentiates = any(_DIFFERENTIATED.search(p) for p in parts)
    # the strings each field's patterns are searched in, per tuple
    values: dict[str, list[str]] = {
        "opcode": [t.opcode for t in tuples],
        "name": _labels([t.name for t in tuples]),
        "kind": [t.kind for t in tuples],
        "category": [t.category for t in tuples],
        "primitive": [parts[t.path][2] for t in tuples],
    }
    # the own path's words with what scope_key drops from its end (a scope a bare transform ends: "moe_experts/while"
    # keys as "moe" with "moe_experts" its primitive; Kineto's innermost op: aten::_flash_attention_forward)
    own = [words.of(_own_path(parts[t.path])) for t in tuples]
    served = [words.of(t.component) if t.component else ("", "", "") for t in tuples]
    ranged = [words.of(t.annotation.replace("/", ":")) if t.annotation else ("", "", "") for t in tuples]
    values["scope_role"] = [w[0] for w in own]
    values["served_role"] = [w[0] for w in served]
    values["range_role"] = [w[0] for w in ranged]
    memo: dict[tuple[str, re.Pattern[str]], np.ndarray] = {}
    # each field's distinct strings and every tuple's code into them, once: a pattern is searched per string
    coded = {f: pd.factorize(np.array(v, dtype=object)) for f, v in values.items()}
    texts: dict[str, tuple[list[str], list[str | None]]] = {}  # each field's strings, and lower-cased once

    def holds(field_name: str, pattern: re.Pattern[str]) -> np.ndarray:
        got = memo.get((field_name, pattern))
        if got is None:
            codes, distinct = coded[field_name]
            if field_name not in texts:
                strings = [str(v) for v in distinct.tolist()]
                texts[field_name] = (strings, folded_values(strings))
            hit = np.array(searches(pattern, *texts[field_name]), dtype=bool)
            got = memo[(field_name, pattern)] = hit[codes]
        return got

    expert_evidence = np.zeros(len(tuples), dtype=bool)
    for rule in spec.rules:
        if rule.role == "experts":
            expert_evidence |= _matches(rule, holds, {}, len(tuples))
    flags = {
        "update": np.array([_update(t, parts[t.path], own[i][0], differentiates) for i, t in enumerate(tuples)]),
        "moe": np.full(len(tuples), bool(expert_evidence.any() or any(w[0] == "experts" for w in own))),
    }
    # the scopes that hold routed-expert work by the op's own evidence (a grouped GEMM, a ragged dot): an MLP
    # scope among them is the routed experts' (DeepSeek's mlp(F), mlp(B), mlp(W)); any other MLP is a dense FFN
    experts_in = {p for i in np.flatnonzero(expert_evidence).tolist() for p in _prefixes(parts[tuples[i].path][0])}
    out: list[tuple[str, int]] = [("other", len(spec.rules) - 1)] * len(tuples)
    todo = np.ones(len(tuples), dtype=bool)
    for index, rule in enumerate(spec.rules):
        if not todo.any():
            break
        hit = todo & _matches(rule, holds, flags, len(tuples))
        for i in np.flatnonzero(hit).tolist():
            role = _role_of(rule.role, tuples[i], own[i], served[i], ranged[i], experts_in)
            out[i] = (role, index)
        todo &= ~hit
    return out


def _own_path(parts: tuple[str, bool, str]) -> str:
    key, _, primitive = parts
    if not primitive:
        return key
    return primitive if key in (NO_SCOPE, TOP_LEVEL) else f"{key}/{primitive}"


def _labels(names: list[str]) -> list[str]:
    """Each name's label as one says it (core.names.said: its function with the innermost namespace, no return
    type, template or argument lists; never cut), once per distinct name."""
    seen: dict[str, str] = {}
    return [seen.setdefault(n, said(n, _UNCUT)) if n not in seen else seen[n] for n in names]


def _matches(
    rule: RoleRule, holds: Callable[[str, re.Pattern[str]], np.ndarray], flags: dict[str, np.ndarray], n: int
) -> np.ndarray:
    hit = np.ones(n, dtype=bool)
    for field_name, pattern in rule.conditions:
        hit &= holds(field_name, pattern)
    for pattern in rule.vocab:
        hit &= holds("name", pattern)
    for flag, wanted in rule.flags:
        hit &= flags[flag] == wanted if flag in flags else np.zeros(n, dtype=bool)
    return hit


def _update(t: _Evidence, parts: tuple[str, bool, str], own_role: str, differentiates: bool) -> bool:
    """An op of a program that differentiates, outside its differentiation (a name stack without jvp or
    transpose) and in no scope that names a role: what the step does after the gradients, the optimizer's update
    of the weights (core/components.py rule 2 places it under the component it updates), the check or norm of
    the gradients. The loss and the model are under jvp."""
    del parts
    path = clean_path(t.path)
    return bool(differentiates and "/" in path and not _DIFFERENTIATED.search(path) and not own_role)


def _role_of(
    rule_role: str,
    t: _Evidence,
    own: tuple[str, str, str],
    served: tuple[str, str, str],
    ranged: tuple[str, str, str],
    experts_in: set[str],
) -> str:
    if rule_role == "@exchange":
        for _, exchange, _ in (own, ranged, served):
            if exchange:
                return exchange
        if t.kind in ("ep-dispatch", "ep-combine"):
            return t.kind[3:]
        # an all-to-all no word places in a dispatch or combine: the MoE's exchange where the words say MoE or
        # say nothing (as the balance-router term and the expert-exchange finding read it), else another's
        said = {own[0], served[0], ranged[0]} - {""}
        return "dispatch" if not said or said & {"@moe", "experts", "permute", "unpermute"} else "other"
    if rule_role == "@words":
        word, _, where = next(w for w in (own, served, ranged) if w[0])
        if word == "@ffn":
            return "experts" if where in experts_in else "shared"
        if word == "@moe":
            return "permute"
        return word
    return rule_role


def attach_roles(trace: Trace) -> Trace:
    """The trace with its ``role`` column filled (:func:`role_codes`)."""
    events = trace.events
    if not len(events):
        return trace
    key, role, _ = _tuple_roles(events, role_table())
    # the tuples are numbered in order of first appearance: the column's categories come in the order the roles
    # first appear over the rows, as they would from each row's role, with one lookup per row instead of three
    return trace.replace(events=events.assign(role=categorical_of(key, np.array(ROLES, dtype=object)[role], True)))


def row_roles(table: pd.DataFrame) -> np.ndarray:
    """Each row's role as a code into :data:`ROLES`: the ``role`` column where the table has it filled (every table
    moeprof loads), else decided now."""
    if "role" in table.columns:
        codes, values = column_codes(table["role"])
        index = role_table().index
        if any(str(v) in index for v in values.tolist()):  # a table built without moeprof's load: none filled
            table_index = np.array([index.get(str(v), index["other"]) for v in values.tolist()], dtype=np.int64)
            return lookup(codes, table_index, index["other"])
    return role_codes(table)[0]


def role_and_rule(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: its role (a code into :data:`ROLES`) and the index of the rule of ``roles.toml`` that decided it
    (:func:`rule_index`)."""
    role, rule, _ = role_codes(table)
    return role, rule


def rule_index(rule_id: str) -> int:
    """The position of a rule of ``roles.toml`` by its id (a rule the table lacks: -1)."""
    return next((i for i, r in enumerate(role_table().rules) if r.id == rule_id), -1)


def glue_mask(role: np.ndarray, one_device_exchange: np.ndarray) -> np.ndarray:
    """Token movement (spec §10 "glue"): router, permute, unpermute, and the exchanges on a group of one device
    (``one_device_exchange``: per row, a dispatch/combine whose group is its own device: a local copy)."""
    index = role_table().index
    glue = np.isin(role, [index[r] for r in GLUE])
    exchange = np.isin(role, [index[r] for r in EXCHANGES])
    return glue | (exchange & one_device_exchange)
