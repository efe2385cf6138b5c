"""Names that fit a table's column on one line: cut in the middle, keeping what tells them apart.

A kernel's demangled name (``void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*,
float*, ...)``, 250 characters) folded into an 18-character column reads as fragments (``void`` /
``dpsk::ep::internode::comb`` / ``ine<false, 8,``), and cut at its end it loses what tells two kernels apart
(``dispatch<false, 8, false, 8>`` from ``dispatch<false, 8, true, 8>``). A kernel or op name is cut by
:func:`moeprof.core.names.cut` (one way of saying a kernel's name, on every screen); here a scope path
(``layer*/moe/moe_experts (bwd)``) loses its middle components first (:func:`cut_path`), names that a cut makes
alike are cut again where they differ (:func:`cut_apart`), and :func:`widths` shares a table's free width among
its name columns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.names import ELLIPSIS, cut, middle

NAME_MIN_WIDTH = 12  # a name column narrower than this says too little to be worth showing


def cut_path(path: str, width: int, sep: str = "/") -> str:
    """A scope path in at most ``width`` characters: its first component and as many of its last ones as fit, an
    ellipsis between (``layer*/…/moe_experts (bwd)``); a component too long for that cut in its middle."""
    if len(path) <= width:
        return path
    parts = path.split(sep)
    if len(parts) > 2:
        for keep in range(len(parts) - 2, 0, -1):
            shown = sep.join([parts[0], ELLIPSIS, *parts[len(parts) - keep :]])
            if len(shown) <= width:
                return shown
    if len(parts) > 1 and len(parts[-1]) + 2 <= width:  # the innermost scope, the most particular, alone
        return f"{ELLIPSIS}{sep}{parts[-1]}"
    return middle(path, width, head=(width - 1) // 3)


def widths(natural: Sequence[int], room: int, least: int = NAME_MIN_WIDTH) -> list[int]:
    """Widths for text columns whose longest cells are ``natural`` wide, sharing ``room`` characters: every column
    whole where they fit, else the widest ones cut to a common limit (none below ``least``, or its natural width
    where that is less)."""
    natural = [max(0, n) for n in natural]
    if sum(natural) <= room:
        return list(natural)
    floor = [min(n, least) for n in natural]
    # the largest limit c with sum(min(n, c)) <= room
    lo, hi = 0, max(natural)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in natural) <= room:
            lo = mid
        else:
            hi = mid - 1
    return [max(f, min(n, lo)) for n, f in zip(natural, floor, strict=True)]


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _apart(name: str, others: Sequence[str], width: int) -> str:
    """``name`` in ``width`` characters around where it differs from ``others`` (names that came out of a cut the
    same): the part no other shares at its start or end, with as much of its surroundings as fits, an ellipsis
    where text is left out (``…/## all2all_data:kjt splits ##/…`` beside ``…/## alltoall_fwd_single ##/…``)."""
    start = max((_common_prefix(name, o) for o in others), default=0)
    tail = max((_common_prefix(name[::-1], o[::-1]) for o in others), default=0)
    end = max(len(name) - tail, start + 1)
    start = min(start, end - 1)

    def framed(a: int, b: int) -> str:
        return (ELLIPSIS if a > 0 else "") + name[a:b] + (ELLIPSIS if b < len(name) else "")

    # widen the differing part by its surroundings, a character on each side in turn, while it fits
    grown = True
    while grown:
        grown = False
        if start > 0 and len(framed(start - 1, end)) <= width:
            start, grown = start - 1, True
        if end < len(name) and len(framed(start, end + 1)) <= width:
            end, grown = end + 1, True
    shown = framed(start, end)
    if len(shown) <= width:
        return shown
    return middle(shown, width)  # the differing part itself is wider than the column


def cut_apart(names: Sequence[str], width: int, one: Callable[[str, int], str] = cut) -> list[str]:
    """Every name cut by ``one`` to ``width``; names that are different but came out the same are cut again
    around where they differ (:func:`_apart`), so that two rows never read alike when their names are not."""
    shown = [one(n, width) for n in names]
    clashes: dict[str, set[str]] = {}
    for name, text in zip(names, shown, strict=True):
        clashes.setdefault(text, set()).add(name)
    for i, (name, text) in enumerate(zip(names, shown, strict=True)):
        rivals = clashes[text] - {name}
        if rivals:
            shown[i] = _apart(name, sorted(rivals), width)
    return shown
