"""The one way a pattern the user wrote becomes a regular expression: ``--step-marker``, a ``--what-if`` term's
``name~``/``scope~`` filter, the ``match`` and conditions of a ``--rules`` file (:func:`user_pattern`).

``re.compile`` answers a bad pattern three ways: :class:`re.error` (``[``), :class:`OverflowError` (a repeat
count past the engine's, ``a{99999999999}``) and :class:`RecursionError` (thousands of nested groups: the
parser recurses once per level). Each is refused here in one line naming where the pattern was written; a
caller that caught only ``re.error`` let the other two reach the catch-all.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import InputError

SHOWN_CHARS = 60  # of a longer pattern, the message shows its start and its length
MAX_REPEAT = 4_294_967_294  # the largest repeat count re compiles (CPython's _sre.MAXREPEAT - 1)


def shown(text: str, chars: int = SHOWN_CHARS) -> str:
    """``text`` as a message quotes it: in full up to ``chars`` characters, else its start and its length (a
    pattern of thousands of characters would make the one line a screenful)."""
    if len(text) <= chars:
        return repr(text)
    return f"{text[:chars]!r}… ({len(text):,} characters)"


def pattern_problem(text: str) -> str | None:
    """Why ``text`` is no regular expression Python compiles (None: it compiles)."""
    try:
        re.compile(text)
    except re.error as exc:
        return str(exc)
    except OverflowError:  # a repeat count past the engine's (an unsigned 32-bit count)
        return f"a repeat count past {MAX_REPEAT:,}, the most the regex engine takes"
    except RecursionError:  # one level of the parser's recursion per nested group
        return "groups nested too deeply for Python's regex parser"
    return None


def user_pattern(text: str, where: str, path: str | Path | None = None) -> re.Pattern[str]:
    """``text`` compiled, or the one-line refusal (exit 2): ``{where} {text}: not a regular expression
    (why)``, of ``path`` where the pattern came from a file. ``where`` names what the user wrote it as
    (``--step-marker``, ``rule 'x': match``)."""
    problem = pattern_problem(text)
    if problem is not None:
        raise InputError(path, f"{where} {shown(text)}: not a regular expression ({problem})")
    return re.compile(text)  # re's cache: the compile above is not paid twice
