"""The committed real CPU capture of the demo MoE step: kinds from HLO, figures by an independent walk."""

from __future__ import annotations

from collections import defaultdict

import pytest

import moeprof

from .helpers import SAMPLES

RUN = SAMPLES / "cpu_moe_8dev"


def test_collective_kinds_come_from_the_hlo():
    result = moeprof.analyze_paths([RUN]).to_json()
    kinds = {c["kind"] for c in result["collectives"]}
    assert {"all-to-all", "all-gather", "reduce-scatter"} <= kinds
    # JAX names these ops psum_invariant.N / all_gather.N: the kind is the HLO opcode's
    psums = [c for c in result["collectives"] if c["name"].startswith("psum_invariant")]
    assert psums and all(c["kind"] == "all-reduce" for c in psums)
    assert all(r.startswith(("hlo:", "compute")) for r in result["rules"])
    assert len(result["devices"]) == 8
    assert sorted({s["step"] for s in result["steps"]}) == [0, 1]
    assert result["manifest"]["kind"] == "demo" and result["throughput"]["tokens_per_second"] > 0


@pytest.mark.slow
def test_figures_match_an_independent_walk_of_the_thunks():
    """Sum each CPU device's outermost thunk executions straight from ProfileData."""
    from jax.profiler import ProfileData

    xplane = next(RUN.rglob("*.xplane.pb"))
    per_device: dict[int, int] = defaultdict(int)
    for plane in ProfileData.from_file(str(xplane)).planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            spans = []
            for ev in line.events:
                stats = dict(ev.stats)
                if "hlo_op" in stats and "device_ordinal" in stats:
                    spans.append((round(ev.start_ns), round(ev.end_ns), stats["device_ordinal"]))
            spans.sort(key=lambda s: (s[0], -s[1]))
            reach = -1
            for start, end, dev in spans:
                if end <= reach:
                    continue  # a thunk inside another (a loop body): counted with its parent
                per_device[dev] += end - start
                reach = max(reach, end)
    result = moeprof.analyze_paths([RUN]).to_json()
    got = {int(d["device"].rsplit(":", 1)[1]): d["accumulated_ns"] for d in result["devices"]}
    assert got == dict(per_device)
