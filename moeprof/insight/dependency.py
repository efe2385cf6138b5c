"""The HLO dataflow graph: which compute could run while a collective is in flight.

A collective can only be hidden behind compute that neither feeds it (its
transitive operands) nor consumes it (its transitive users). That compute,
measured on the device, bounds what overlapping the collective can save.
"""

from __future__ import annotations

from ..core.hlo import HloModule

# instructions that launch no kernel of their own
_FREE = frozenset(
    {
        "parameter",
        "constant",
        "get-tuple-element",
        "tuple",
        "bitcast",
        "copy-start",
        "copy-done",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        "async-done",
        "all-gather-done",
        "all-reduce-done",
        "collective-permute-done",
        "send-done",
        "recv-done",
    }
)


def _closure(start: str, edges: dict[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(edges.get(start, ()))
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(edges.get(node, ()))
    return seen


def _graph(module: HloModule, computation: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    cached = module.graphs.get(computation)
    if cached is not None:
        return cached
    names = module.computations.get(computation, [])
    operands = {n: [o for o in module.instructions[n].operands if o in module.instructions] for n in names}
    users: dict[str, list[str]] = {n: [] for n in names}
    for n, ops in operands.items():
        for o in ops:
            users.setdefault(o, []).append(n)
    module.graphs[computation] = (operands, users)
    return operands, users


def independent_ops(module: HloModule, op: str) -> frozenset[str]:
    """Instructions of ``op``'s computation that neither feed nor consume it (kernel-launching ones).

    An async collective counts its ``*-done`` as itself: what consumes the done
    consumes the collective.
    """
    inst = module.instructions.get(op)
    if inst is None:
        return frozenset()
    operands, users = _graph(module, inst.computation)
    before = _closure(op, operands)
    after = _closure(op, users)
    names = module.computations.get(inst.computation, [])
    return frozenset(
        n
        for n in names
        if n != op
        and n not in before
        and n not in after
        and module.instructions[n].opcode not in _FREE
        and not module.instructions[n].is_collective
    )
