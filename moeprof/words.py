"""How counts read in English: ``1 step``, ``2 steps`` (every message that counts something)."""

from __future__ import annotations

_IRREGULAR = {"was": "were", "is": "are"}


def plural(count: int | float, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, the noun in the plural unless the count is exactly one (``1 step``, ``0 steps``).

    ``many`` is the plural where adding an ``s`` is wrong (``plural(n, "copy", "copies")``).
    """
    number = f"{count:,}" if isinstance(count, int) else f"{count:,.4g}"
    return f"{number} {noun_for(count, noun, many)}"


def noun_for(count: int | float, noun: str, many: str | None = None) -> str:
    """The noun alone, in the number ``count`` asks for."""
    if count == 1:
        return noun
    return many or _IRREGULAR.get(noun) or f"{noun}s"
