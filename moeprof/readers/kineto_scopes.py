"""The scope of each kernel of a PyTorch Kineto trace, and the component it serves (docs/metrics.md, "Scopes on
GPU traces").

A kernel's **scope** is the stack of ``record_function`` ranges (``user_annotation``: DeepSeek's ``1F1B`` and
``attn(F)``, ``## forward ##``, ``DistributedDataParallel.forward``) and PyTorch's module ranges (``nn.Module:
TransformerBlock_0``, written ``TransformerBlock_0``) that enclose its launch on the launching thread, outermost
first, then the innermost CPU op around the launch as its primitive (``aten::mm``):
``1F1B/attn(F)/RopeLoraFlashAttnVarlenFunc``. Step ranges (``ProfilerStep#N``, ``--step-marker``) are no
scope. A kernel no annotation encloses has none (a primitive alone is no scope).

The backward pass runs on autograd's own thread, which records no annotation: a kernel launched inside an
``autograd::engine::evaluate_function: ...`` op is backward, and takes the annotations that enclose its launch
on the process's other threads (the thread that called ``backward()`` waits inside them: DeepSeek's
``attn(B)``). Its **component** is the scope of the forward op it is the backward of where the trace holds it:
the backward op's ``Sequence number`` is its forward op's (``Fwd thread id`` 0 marks a forward op); else its
own scope. A forward kernel serves its own scope.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from ..core.events import combine_codes, first_rows, lookup, us_interval_to_ns
from ..core.scopes import NO_SCOPE, scope_key
from .kineto_columns import CPU_CATS, KinetoColumns

ENGINE_OP = "autograd::engine::evaluate_function: "  # what PyTorch's autograd engine runs a backward node in
_CPU_OP, _ANNOTATION, _PYTHON = (CPU_CATS.index(c) for c in ("cpu_op", "user_annotation", "python_function"))
MODULE = "nn.Module: "  # PyTorch's module ranges (with_modules / with_stack): "nn.Module: Linear_0"
_SLASH = re.compile(r"/")


def _component(name: str) -> str:
    """A range's name as one component of a scope path (a module range: its module, ``Linear_0``): a ``/``
    would split it."""
    return _SLASH.sub(":", name.removeprefix(MODULE).strip()) or "?"


class _Keys:
    """The scope key of each annotation's path (the CPU op after it is the primitive), decided once per distinct
    path and only for the annotations asked for (a model's module ranges are many; few launch a kernel)."""

    def __init__(self, paths: np.ndarray) -> None:
        self.paths = paths
        self.keys = np.full(len(paths), None, dtype=object)
        self.known: dict[str, str] = {}

    def of(self, rows: np.ndarray) -> np.ndarray:
        """The keys, filled for ``rows`` (-1 ignored)."""
        for r in np.unique(rows[rows >= 0]).tolist():
            if self.keys[r] is None:
                path = self.paths[r]
                key = self.known.get(path)
                if key is None:
                    key = self.known[path] = scope_key(f"{path}/kernel")[0]
                self.keys[r] = key
        return self.keys


def _paths(thread: np.ndarray, start: np.ndarray, end: np.ndarray, names: np.ndarray) -> np.ndarray:
    """Each range's path: the names of the ranges of its thread that enclose it, outermost first, then its own
    (ranges nest on a thread; a range that only overlaps another is not inside it)."""
    out = np.empty(len(names), dtype=object)
    order = np.lexsort((-end, start, thread))
    stack: list[int] = []
    current = None
    for i in order.tolist():
        if thread[i] != current:
            stack, current = [], thread[i]
        while stack and not (start[stack[-1]] <= start[i] and end[i] <= end[stack[-1]]):
            stack.pop()
        parent = out[stack[-1]] + "/" if stack else ""
        out[i] = parent + _component(str(names[i]))
        stack.append(i)
    return out


def kernel_scopes(
    cols: KinetoColumns,
    names: np.ndarray,
    threads: Callable[[np.ndarray, np.ndarray], np.ndarray],
    is_step: np.ndarray,
    anchor_thread: np.ndarray,
    anchor_t: np.ndarray,
    innermost: Callable[..., np.ndarray],
    launching: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per device activity: its scope path ("" none), the scope key of the component it serves ("": its own)
    and whether it serves the backward pass. ``threads``: thread ids of (pid, tid) codes; ``is_step``: per CPU
    row, a step range; ``anchor_thread``/``anchor_t``: each activity's launching thread (-1 unknown) and launch
    time (ns); ``innermost``: readers.kineto._innermost. A CPU row without a time is left out. Fourth, with
    ``launching``, each activity's launching op: the CPU row of the innermost CPU op around its launch on the
    launching thread (-1 none; without ``launching``, -1 everywhere), found in the same pass as the scopes'."""
    n = anchor_t.size
    scope = np.full(n, "", dtype=object)
    component = np.full(n, "", dtype=object)
    backward = np.zeros(n, dtype=bool)
    launcher = np.full(n, -1, dtype=np.int64)
    cpu = cols.cpu
    if not len(cpu) or not n:
        return scope, component, backward, launcher
    timed = (cpu.bad == 0) & np.isfinite(cpu.ts) & np.isfinite(cpu.dur)
    start, end = us_interval_to_ns(np.where(timed, cpu.ts, 0.0), np.where(timed, np.maximum(cpu.dur, 0.0), 0.0))
    range_thread = np.where(timed, threads(cpu.pid, cpu.tid), -1)
    launched = anchor_thread >= 0
    ops = np.flatnonzero(cpu.cat == _CPU_OP)
    op_names = names[cpu.name[ops]]
    # per distinct name: an autograd engine op (what a backward kernel is launched inside), a module range
    used, inverse = np.unique(cpu.name, return_inverse=True)
    used_names = [str(names[u]) for u in used.tolist()]
    engine = np.array([u.startswith(ENGINE_OP) for u in used_names], dtype=bool)[inverse]
    module = np.array([u.startswith(MODULE) for u in used_names], dtype=bool)[inverse]
    annotation = np.flatnonzero(((cpu.cat == _ANNOTATION) & ~is_step) | ((cpu.cat == _PYTHON) & module))
    engine_rows = ops[engine[ops]]
    in_engine = innermost(range_thread[engine_rows], start[engine_rows], end[engine_rows], anchor_thread, anchor_t)
    backward = launched & (in_engine >= 0)
    if not annotation.size:
        if launching:
            op_at = innermost(range_thread[ops], start[ops], end[ops], np.where(launched, anchor_thread, -1), anchor_t)
            launcher = np.where(op_at >= 0, ops[np.maximum(op_at, 0)], -1)
        return scope, component, backward, launcher
    paths = _paths(range_thread[annotation], start[annotation], end[annotation], names[cpu.name[annotation]])
    at = innermost(range_thread[annotation], start[annotation], end[annotation], anchor_thread, anchor_t)
    # a backward kernel's thread records no annotation: the one enclosing its launch on another thread
    lost = np.flatnonzero(backward & (at < 0))
    if lost.size:
        best_start = np.full(lost.size, -1, dtype=np.int64)
        for other in np.unique(range_thread[annotation]).tolist():
            hit = innermost(range_thread[annotation], start[annotation], end[annotation],
                            np.full(lost.size, other, dtype=np.int64), anchor_t[lost])  # fmt: skip
            later = (hit >= 0) & (anchor_thread[lost] != other)
            later &= np.where(hit >= 0, start[annotation][np.maximum(hit, 0)], -1) > best_start
            at[lost[later]] = hit[later]
            best_start[later] = start[annotation][hit[later]]
    has = at >= 0
    # the primitive: the innermost CPU op around the launch, on the launching thread
    asked = has | (launched if launching else False)
    op_at = innermost(range_thread[ops], start[ops], end[ops], np.where(asked, anchor_thread, -1), anchor_t)
    if launching:
        launcher = np.where(op_at >= 0, ops[np.maximum(op_at, 0)], -1)
    # each distinct (annotation, CPU op) once: its path; the key is the annotation's (the op is the primitive)
    keys = _Keys(paths)
    pair = combine_codes(np.where(has, at, -1), np.where(has, op_at, -1))
    first = first_rows(pair)
    paths_of = [
        f"{paths[a]}/{_component(str(op_names[o])) if o >= 0 else 'kernel'}" if a >= 0 else ""
        for a, o in zip(np.where(has, at, -1)[first].tolist(), op_at[first].tolist(), strict=True)
    ]
    scope = np.array(paths_of, dtype=object)[pair]
    component = np.where(has, lookup(at, keys.of(at), NO_SCOPE), np.where(backward, NO_SCOPE, "")).astype(object)
    # a backward kernel serves the scope of its forward op, where the trace holds it (same Sequence number)
    joined = _forward_scopes(cpu, ops, keys, annotation, range_thread, start, end, anchor_thread, anchor_t, backward,
                             innermost)  # fmt: skip
    found = joined != ""
    component[found] = joined[found]
    return scope, component, backward, launcher


def _forward_scopes(
    cpu, ops, keys, annotation, range_thread, start, end, anchor_thread, anchor_t, backward, innermost
) -> np.ndarray:
    """Per device activity launched in the backward pass, the scope key of the forward op it is the backward
    of ("" where the trace does not hold it or no annotation encloses it)."""
    n = anchor_t.size
    out = np.full(n, "", dtype=object)
    sequence, fwd = cpu.sequence[ops], cpu.fwd_thread[ops]
    back_rows, forward_rows = ops[(sequence >= 0) & (fwd > 0)], ops[(sequence >= 0) & (fwd == 0)]
    if not back_rows.size or not forward_rows.size or not backward.any():
        return out
    rows = np.flatnonzero(backward)
    node = innermost(range_thread[back_rows], start[back_rows], end[back_rows], anchor_thread[rows], anchor_t[rows])
    rows, node = rows[node >= 0], node[node >= 0]
    # the first forward op of each sequence number (an op and the ops it calls share it)
    f_seq = cpu.sequence[forward_rows]
    order = np.lexsort((start[forward_rows], f_seq))
    seqs, first = np.unique(f_seq[order], return_index=True)
    forward = forward_rows[order[first]]
    want = cpu.sequence[back_rows[node]]
    pos = np.minimum(np.searchsorted(seqs, want), max(seqs.size - 1, 0))
    hit = seqs.size > 0
    ok = (seqs[pos] == want) if hit else np.zeros(want.size, dtype=bool)
    rows, op = rows[ok], forward[pos[ok]]
    at = innermost(range_thread[annotation], start[annotation], end[annotation], range_thread[op], start[op])
    keep = at >= 0
    out[rows[keep]] = keys.of(at[keep])[at[keep]]
    return out
