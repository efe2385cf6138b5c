"""The figures a TPU remedy cites are what our own captures on the chip show (sample_traces/tpu_v5e_*): each text
is checked against the analysis of the captures it names, so a remedy cannot drift from its evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from moeprof.core.analysis import Analysis
from moeprof.insight.remedies import by_id
from moeprof.options import ExecOptions
from moeprof.pipeline import Request, run

from .helpers import SAMPLES

ABLATION = SAMPLES / "tpu_v5e_ablation"


def _text(remedy_id: str) -> str:
    remedy = by_id(remedy_id)
    assert remedy is not None, remedy_id
    return remedy.text


def _model(run: str) -> dict:
    return json.loads((ABLATION / run / "manifest.json").read_text())["model"]


def _measured(path: Path) -> Analysis:
    """The capture's analysis without §9 (roles and the measured step are all these tests read), in this process."""
    return run(Request([path], execution=ExecOptions(jobs=1), projections="none")).analysis


def _experts_tflops(a: Analysis) -> float:
    experts = next(r for r in a.to_json()["roles"] if r["role"] == "experts")
    return experts["flops"] / experts["time_ns"] / 1e3


@pytest.fixture(scope="module")
def experts_rate() -> dict[str, float]:
    """The experts' ops' TFLOP/s in each ablation run, by run."""
    runs = ("base", "tok4096", "tok8192", "exp32", "topk1", "topk4", "ffn2048")
    return {name: _experts_tflops(_measured(ABLATION / name)) for name in runs}


def test_the_experts_remedy_cites_the_rates_by_rows_per_expert(experts_rate: dict[str, float]) -> None:
    # rows per expert from each run's own settings (tokens x top-k / experts), not from the trace
    rows = {
        name: _model(name)["tokens_per_device"] * _model(name)["top_k"] // _model(name)["experts"]
        for name in experts_rate
    }
    assert rows == {
        "base": 2048, "tok4096": 512, "tok8192": 1024, "exp32": 1024, "topk1": 1024, "topk4": 4096, "ffn2048": 2048
    }  # fmt: skip
    by_rows: dict[int, list[float]] = {}
    for name, rate in experts_rate.items():
        if name != "ffn2048":
            by_rows.setdefault(rows[name], []).append(rate)
    # the rate rises with the rows each expert gets, and the three ways to 1,024 rows agree within 3 TFLOP/s
    means = [sum(v) / len(v) for _, v in sorted(by_rows.items())]
    assert means == sorted(means) and max(by_rows[1024]) - min(by_rows[1024]) < 3
    text = _text("tpu-onchip-experts-below-dense")
    said = (
        f"at {experts_rate['tok4096']:.0f} TFLOP/s with 512 rows per expert, "
        f"{min(by_rows[1024]):.0f}-{max(by_rows[1024]):.0f} with 1,024",
        f"{experts_rate['base']:.0f} with 2,048 and {experts_rate['topk4']:.0f} with 4,096",
        f"changed nothing ({experts_rate['ffn2048']:.1f} against {experts_rate['base']:.1f})",
    )
    for words in said:
        assert words in text, words
    assert (
        f"{experts_rate['tok4096']:.0f} TFLOP/s with 512 rows per expert and {experts_rate['topk4']:.0f} with 4,096"
        in _text("tpu-onchip-experts")
    )


def test_the_precision_and_host_remedies_cite_their_captures() -> None:
    # f32 and the bf16 run of the same session on the chip (the levers' base; the ablation's base/ is another's)
    f32 = _measured(ABLATION / "f32").step_ns / 1e6
    bf16 = _measured(SAMPLES / "tpu_v5e_levers" / "base").step_ns / 1e6
    assert f"from {f32:.1f} to {bf16:.1f} ms per step" in _text("tpu-onchip-experts-f32")
    every, ahead = (_measured(SAMPLES / "tpu_v5e_host_ahead" / name) for name in ("every", "ahead"))
    assert f"from {every.step_ns / 1e6:.2f} to {ahead.step_ns / 1e6:.2f} ms per step" in _text("tpu-host-gaps")
