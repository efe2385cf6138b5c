"""The ``moeprof.analysis/1`` JSON object (spec §7), as text."""

from __future__ import annotations

import orjson

from ..core.analysis import Analysis


def to_json(analysis: Analysis, indent: bool = True) -> str:
    option = orjson.OPT_INDENT_2 if indent else 0
    return orjson.dumps(analysis.to_json(), option=option | orjson.OPT_SERIALIZE_NUMPY).decode()
