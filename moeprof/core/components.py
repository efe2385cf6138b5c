"""The model component each op serves: its own scope, the scope of what it is the backward of, the scope of
the parameters it reads or updates (docs/metrics.md, "Components").

A JAX name scope (:mod:`moeprof.core.scopes`) says where an op was written. Much of what a scope costs runs
outside it: XLA lowers the backward of ``ragged_dot`` to custom calls named ``ragged-dot-none`` with no name
stack, the optimizer updates a layer's parameters in top-level fusions (``jit(step)/reduce_and``), the
weight gradients, casts and copies XLA adds carry no scope. The program's own HLO (the XPlane's
``/host:metadata``) says what each of them reads and feeds, and that is what places them. Per computation
of the program, each distinct op once (never per event):

1. **own**: an op whose ``op_name`` names a scope (not ``(top level)``) serves it; a cast or copy of
   parameters (a movement op) serves the parameters' scope where that lies inside its own (a layer casting
   its weights at the layer's level: the cast serves the experts whose weights they are);
2. **parameter**: an op that reads weights (through movement ops: casts, copies, slices, bitcasts)
   serves the scope they were created under, the deepest scope holding every op of the model outside the
   movement ops that reads them (``params[2]['w_down']`` is read by ``layer2/moe/moe_experts`` only: that
   scope); several weights, their common scope. An op of an optimizer written in a scope of its own
   (``adam``, outside the differentiated model) that reads weights is their update: their scope;
3. **consumer**: an op with no name stack serves the common scope of the placed ops its result feeds (a
   weight gradient feeds its parameter's update, and a global gradient norm that serves no one scope);
   a top-level op (``jit(step)/...``) the same where all it feeds is placed by rule 2 or this one (a
   gradient reduction feeds updates only; the loss feeds the backward of the last layer and stays top
   level);
4. **producer**: an op with no name stack that feeds nothing placed serves the common scope of its operands.

Where none holds the op keeps its own scope (``(top level)``, ``(no scope)``). An op serves the backward
pass where its own name stack says so (``transpose``) or, placed by rules 2-4, where an op it reads does
(the backward ``ragged-dot-none`` reads the gradient of the layer's output; an update reads the gradient).
Control edges (``after-all`` tokens, ``add-dependency``'s second operand) are no data.

The ``component`` column holds the scope key an activity serves (``scope_key``, layers not folded) and
``backward`` its pass; a reader that knows both fills them itself (readers/kineto_scopes.py: a backward
kernel serves its forward op's scope), and where neither says, they are the activity's own scope key and pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .events import categorical_of, column_codes, combine_codes, first_rows, lookup, narrow_codes, numbered
from .hlo import HloInstruction, HloModule
from .scopes import NO_SCOPE, TOP_LEVEL, clean_path, own_pairs, scope_key
from .trace import Trace

# ops that move or reshape data and compute nothing: a parameter read through them is still the parameter
MOVEMENT_OPCODES = frozenset(
    {"parameter", "constant", "bitcast", "copy", "copy-start", "copy-done", "convert", "reshape", "transpose",
     "broadcast", "slice", "slice-start", "slice-done", "dynamic-slice", "concatenate", "get-tuple-element",
     "tuple", "all-gather", "all-gather-start", "all-gather-done", "async-start", "async-update", "async-done",
     "optimization-barrier", "opt-barrier", "bitcast-convert", "add-dependency"}
)  # fmt: skip
_UNPLACED = (TOP_LEVEL, NO_SCOPE)
_DIFFERENTIATED = re.compile(r"(?:^|/)(?:jvp|transpose)\(")
VIAS = ("own", "parameter", "consumer", "producer")


@dataclass(frozen=True)
class Served:
    """What one HLO op serves: the scope key, whether in the backward pass, and by which rule (VIAS)."""

    key: str
    backward: bool
    via: str


def common_scope(keys: Iterable[str]) -> str:
    """The deepest scope holding every key (``layer0/moe/moe_experts`` and ``layer0/moe`` -> ``layer0/moe``);
    ``(top level)`` where they share none."""
    parts = [k.split("/") for k in keys]
    if not parts:
        return TOP_LEVEL
    out = []
    for level in zip(*parts):
        if any(p != level[0] for p in level):
            break
        out.append(level[0])
    return "/".join(out) if out else TOP_LEVEL


def _inside(inner: str, outer: str) -> bool:
    return inner.startswith(outer + "/")


class _Computation:
    """One computation's data graph and each op's own scope."""

    def __init__(self, module: HloModule, names: list[str], movement: dict[str, bool]) -> None:
        inst = module.instructions
        self.names = [n for n in names if n in inst]
        self.inst: dict[str, HloInstruction] = {n: inst[n] for n in self.names}
        self.operands: dict[str, list[str]] = {}
        self.users: dict[str, list[str]] = {n: [] for n in self.names}
        for n in self.names:
            i = self.inst[n]
            data = () if i.opcode == "after-all" else i.operands[:1] if i.opcode == "add-dependency" else i.operands
            ops = [o for o in data if o in self.inst]
            self.operands[n] = ops
            for o in ops:
                self.users[o].append(n)
        self.movement = movement
        self.own: dict[str, tuple[str, bool]] = {}
        self.named: dict[str, bool] = {}  # the op_name is a name stack (jit(step)/...), not a bare name
        self.differentiated: dict[str, bool] = {}  # under jvp or transpose: the model, not its optimizer
        for n in self.names:
            path = clean_path(self.inst[n].op_name)
            self.named[n] = "/" in path
            self.differentiated[n] = bool(_DIFFERENTIATED.search(path))
            self.own[n] = scope_key(path) if self.named[n] else (TOP_LEVEL if path else NO_SCOPE, False)

    def placed(self, n: str) -> bool:
        return self.own[n][0] not in _UNPLACED

    def parameter_scopes(self) -> dict[str, str]:
        """The scope of each of the program's weights: the common scope of the placed ops that read it past the
        movement ops, under differentiation where the program differentiates (``jvp``, ``transpose`` in the
        name stack). A weight, in a program that differentiates, is a parameter read both under
        differentiation and outside it (by its update): not the optimizer's state (read by the update only),
        not the batch (read by the model only); where no parameter is read outside (the optimizer is another
        program), every parameter the model reads. In a program without differentiation, every parameter."""
        # (own key, differentiated, named) of the non-movement ops that read each op's result
        readers: dict[str, set[tuple[str, bool, bool]]] = {}
        for n in reversed(self.names):
            found: set[tuple[str, bool, bool]] = set()
            for u in self.users[n]:
                if self.movement[u]:
                    found |= readers.get(u, set())
                else:
                    found.add((self.own[u][0], self.differentiated[u], self.named[u]))
            readers[n] = found
        params = [n for n in self.names if self.inst[n].opcode == "parameter"]
        if any(self.differentiated.values()):
            model = [p for p in params if any(d for _, d, _ in readers[p])]
            # read outside differentiation by an op whose name stack says so (an op without one says nothing)
            weights = [p for p in model if any(named and not d for _, d, named in readers[p])] or model
            placed = {p: {k for k, d, _ in readers[p] if d and k not in _UNPLACED} for p in weights}
        else:
            placed = {p: {k for k, _, _ in readers[p] if k not in _UNPLACED} for p in params}
        return {p: common_scope(keys) for p, keys in placed.items() if keys}

    def read_parameters(self) -> dict[str, frozenset[str]]:
        """Per op, the parameters it reads through movement ops."""
        through: dict[str, frozenset[str]] = {}  # what a movement op passes on
        reads: dict[str, frozenset[str]] = {}
        for n in self.names:
            got = frozenset().union(*(through.get(o, frozenset()) for o in self.operands[n]))
            reads[n] = got
            if self.inst[n].opcode == "parameter":
                through[n] = frozenset((n,))
            elif self.movement[n]:
                through[n] = got
        return reads

    def serve(self) -> dict[str, Served]:
        scopes = self.parameter_scopes()
        reads = self.read_parameters()
        differentiates = any(self.differentiated.values())
        out: dict[str, Served] = {}
        for n in self.names:
            key, backward = self.own[n]
            read = [scopes[p] for p in reads[n] if p in scopes]
            of_params = common_scope(read) if read else TOP_LEVEL
            known = of_params not in _UNPLACED
            if self.placed(n):
                # an update written in a scope of its own (an optimizer's), outside the differentiated model
                update = differentiates and not self.differentiated[n]
                refined = known and of_params != key and not _inside(key, of_params)
                if refined and (update or (self.movement[n] and _inside(of_params, key))):
                    out[n] = Served(of_params, backward, "parameter")
                else:
                    out[n] = Served(key, backward, "own")
            elif known:
                out[n] = Served(of_params, backward, "parameter")
        for n in reversed(self.names):  # rule 3: users come after their operands
            if n in out:
                continue
            fed = [f for u in self.users[n] if (f := out.get(u)) is not None and f.key not in _UNPLACED]
            if self.named[n] and any(f.via not in ("parameter", "consumer") for f in fed):
                continue  # a top-level op that feeds the model (the loss) stays top level
            if fed:
                out[n] = Served(common_scope(f.key for f in fed), self.own[n][1], "consumer")
        for n in self.names:  # rule 4
            if n in out or self.named[n]:
                continue
            keys = [out[o].key for o in self.operands[n] if o in out and out[o].key not in _UNPLACED]
            if keys:
                out[n] = Served(common_scope(keys), self.own[n][1], "producer")
        for n in self.names:  # the pass: an op placed by dataflow is backward where what it reads is
            s = out.get(n)
            if s is None or s.via == "own" or s.backward:
                continue
            if any(out[o].backward if o in out else self.own[o][1] for o in self.operands[n]):
                out[n] = Served(s.key, True, s.via)
        return {n: s for n, s in out.items() if s.key not in _UNPLACED}


def _movement(module: HloModule) -> dict[str, bool]:
    """Per instruction: a movement op (a fusion of movement ops only counts as one)."""
    fused: dict[str, bool] = {}

    def of(inst: HloInstruction) -> bool:
        if inst.opcode in MOVEMENT_OPCODES:
            return True
        if inst.opcode != "fusion" or not inst.calls:
            return False
        body = inst.calls[0]
        if body not in fused:
            names = module.computations.get(body, [])
            fused[body] = bool(names) and all(module.instructions[m].opcode in MOVEMENT_OPCODES for m in names)
        return fused[body]

    return {n: of(i) for n, i in module.instructions.items()}


def serve_module(module: HloModule) -> dict[str, Served]:
    """What each op of the module's computations serves (the module docstring's rules), where a rule places
    it; ops of fused computations are not ops that run (their fusion is)."""
    movement = _movement(module)
    fusion_bodies = {c for i in module.instructions.values() if i.opcode == "fusion" for c in i.calls}
    out: dict[str, Served] = {}
    for computation, names in module.computations.items():
        if computation not in fusion_bodies:
            out.update(_Computation(module, names, movement).serve())
    return out


def attach_components(trace: Trace) -> Trace:
    """The trace with its ``component`` and ``backward`` columns filled: a reader's where it gave them, else
    what the trace's HLO places the row's op under (:func:`serve_module`), else the row's own scope key and
    pass. Each distinct (module, program, op) and each distinct scope is decided once."""
    events = trace.events
    n = len(events)
    if not n:
        return trace
    scope_c, scope_v = narrow_codes(events["scope"]) if "scope" in events.columns else (np.full(n, -1), np.zeros(0))
    own = own_pairs(scope_v)
    # each row's key as a code into ``texts`` (the distinct scopes' keys, then NO_SCOPE for a missing scope, then
    # the keys the HLO and the reader give): a string per distinct value, never per row
    texts: list[str] = [*(k for k, _ in own), NO_SCOPE]
    key = lookup(scope_c, np.arange(len(own), dtype=np.int64), len(own))
    backward = lookup(scope_c, np.array([b for _, b in own], dtype=bool), False)
    if trace.hlo:
        mod_c, mod_v = column_codes(events["hlo_module"])
        op_c, op_v = column_codes(events["hlo_op"])
        programs = events["program_id"].to_numpy(np.int64)
        distinct = combine_codes(mod_c, programs, op_c)
        first = first_rows(distinct)
        served: dict[int, dict[str, Served]] = {}
        keys, passes, known = [], [], []
        for m, p, o in zip(mod_c[first].tolist(), programs[first].tolist(), op_c[first].tolist(), strict=True):
            module = trace.hlo.get((str(mod_v[m]), int(p))) if m >= 0 else None
            module = module or (trace.hlo.get((str(mod_v[m]), -1)) if m >= 0 else None)
            s = None
            if module is not None and o >= 0:
                table = served.get(id(module))
                if table is None:
                    table = served[id(module)] = serve_module(module)
                s = table.get(str(op_v[o]))
            keys.append(s.key if s else "")
            passes.append(bool(s.backward) if s else False)
            known.append(s is not None)
        hit = np.array(known, dtype=bool)[distinct]
        key = np.where(hit, len(texts) + distinct, key)
        texts += keys
        backward = np.where(hit, np.array(passes, dtype=bool)[distinct], backward)
    given = _given(events)
    if given is not None:
        given_codes, given_text, given_backward, has = given
        key = np.where(has, len(texts) + given_codes, key)
        texts += given_text
        backward = np.where(has, given_backward, backward)
    # the keys numbered in order of first appearance through a table by key (no hash of every row), then named:
    # categorical_of(key, texts) without its factorize of 1M keys
    numbers, used = numbered(key, len(texts))
    component = categorical_of(numbers, np.array(texts, dtype=object)[used], numbered=True)
    return trace.replace(events=events.assign(component=component, backward=backward.astype(bool)))


def _given(events: pd.DataFrame) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray] | None:
    """The component and pass a reader gave (rows with a non-empty ``component``: its code into the distinct
    values' text, that text, the pass, and which rows), None where none did."""
    if "component" not in events.columns:
        return None
    codes, values = narrow_codes(events["component"])
    text = [str(v) for v in values.tolist()]
    if all(t == "" for t in text):  # no value a row could carry (a reader that gives none): no lookup per row
        return None
    has = lookup(codes, np.array([t != "" for t in text], dtype=bool), False)
    if not has.any():
        return None
    passes = events["backward"].to_numpy(bool) if "backward" in events.columns else np.zeros(len(events), bool)
    return codes.astype(np.int64, copy=False), text, passes, has  # int64: offset by the keys before them
