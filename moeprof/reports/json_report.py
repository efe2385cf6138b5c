"""The ``moeprof.analysis/1`` JSON object (spec §7)."""

from __future__ import annotations

import math

import orjson

from ..pipeline import AnalysisResult


def _clean(value: object) -> object:
    # JSON has no NaN: unknown figures are null
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def to_json(result: AnalysisResult, indent: bool = True) -> str:
    option = orjson.OPT_INDENT_2 if indent else 0
    return orjson.dumps(_clean(result.to_dict()), option=option | orjson.OPT_SERIALIZE_NUMPY).decode()
