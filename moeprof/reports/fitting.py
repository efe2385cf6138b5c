"""Names that fit a table's column on one line: cut in the middle, keeping what tells them apart.

A kernel's demangled name (``void dpsk::ep::internode::combine<false, 8, __nv_bfloat16, 8, 2, 16, 24>(int4*,
float*, ...)``, 250 characters) folded into an 18-character column reads as fragments (``void`` /
``dpsk::ep::internode::comb`` / ``ine<false, 8,``), and cut at its end it loses what tells two kernels apart
(``dispatch<false, 8, false, 8>`` from ``dispatch<false, 8, true, 8>``). :func:`cut` shortens a name for one line:
a C++ signature loses its return type and parameter list, then its leading namespaces, then the middle of what is
left (an ellipsis), keeping the function's name at the head and the name's end (template arguments, a suffix
number, ``(bwd)``) at the tail; a scope path (``layer*/moe/moe_experts (bwd)``) loses its middle components first.
:func:`widths` shares a table's free width among its name columns.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

ELLIPSIS = "…"
NAME_MIN_WIDTH = 12  # a name column narrower than this says too little to be worth showing

# the start of every kernel name of a library: NCCL's (ncclKernel_AllToAll_RING_LL_Sum_int8_t,
# ncclDevKernel_SendRecv) and RCCL's
_LIBRARY_PREFIXES = ("ncclDevKernel_", "ncclKernel_")


def _outside(text: str) -> list[bool]:
    """Whether each character of ``text`` lies outside every ``<...>`` and ``(...)`` (a bracket itself is not)."""
    depth, out = 0, []
    for c in text:
        if c in "<(":
            depth += 1
        out.append(depth == 0)
        if c in ">)":
            depth -= 1
    return out


def _without_parameters(name: str) -> str:
    """A demangled C++ function's qualified name and template arguments: ``void ns::f<1>(int, float*)`` ->
    ``ns::f<1>``. Anything else as it is."""
    text = name.strip()
    if not text.endswith(")") or "(" not in text:
        return text
    # the parameter list: from the "(" that balances the last ")"
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            head = text[:i].rstrip()
            break
    else:
        return text
    if not head or not re.search(r"[\w>]$", head):
        return text
    # the return type: words before the qualified name, outside template brackets and parentheses
    # (``(anonymous namespace)::f``)
    spaces = [i for i, (c, out) in enumerate(zip(head, _outside(head), strict=True)) if c == " " and out]
    return head[spaces[-1] + 1 :] if spaces else head


def _without_namespaces(name: str, width: int) -> str:
    """Leading ``ns::`` qualifiers dropped one by one (outside brackets) until the name fits."""
    while len(name) > width:
        outside = _outside(name)
        at = next((i for i in range(len(name) - 1) if outside[i] and name[i : i + 2] == "::"), None)
        if at is None:
            return name
        name = name[at + 2 :]
    return name


def _middle(text: str, width: int, head: int | None = None) -> str:
    """``text`` in ``width`` characters with an ellipsis in the middle: ``head`` characters of its start (default:
    two fifths of the room), the rest from its end."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    room = width - 1
    head = min(room, max(0, room * 2 // 5 if head is None else head))
    return text[:head] + ELLIPSIS + text[len(text) - (room - head) :]


def cut(name: str, width: int) -> str:
    """A kernel, op or collective name in at most ``width`` characters (see the module's docstring)."""
    if len(name) <= width:
        return name
    short = _without_parameters(name)
    if len(short) <= width:
        return short
    short = _without_namespaces(short, width)
    if len(short) <= width:
        return short
    for prefix in _LIBRARY_PREFIXES:  # what every kernel of the library starts with tells two of them apart least
        if short.startswith(prefix) and len(short) > len(prefix):
            short = short[len(prefix) :]
            break
    if len(short) <= width:
        return short
    # the function's name whole at the head where the room allows, the end of its template arguments at the tail
    base = short.split("<", 1)[0]
    head = None
    if "<" in short and len(base) + 3 <= width:  # "name<" + "…" + at least the closing ">"
        if width - len(base) - 2 < 5:  # no room for a readable end of the arguments: none of them
            return f"{base}<{ELLIPSIS}>"
        head = max(len(base) + 1, (width - 1) * 2 // 5)
    return _middle(short, width, head)


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
    return _middle(path, width, head=(width - 1) // 3)


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
    return _middle(shown, width)  # the differing part itself is wider than the column


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
