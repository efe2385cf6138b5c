"""The cross-rank ledger (spec §8) end to end, against sums computed here from the raw trace files.

The oracle re-reads the real 8-rank DLRM trace with ``json`` and applies §8 by hand: every rank is one
node's GPU (one clock, δ = 0), the group is unknown but all 8 ranks of the world are there (rule 4:
key = (kind, kernel name, n)), wait = min(max(last start − start, 0), duration).
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeprof.cli import app

from .helpers import SAMPLES, shared_trace

runner = CliRunner()
LEDGER_KEYS = (
    "comm_wait_ns",
    "comm_transfer_ns",
    "comm_unmatched_ns",
    "exposed_wait_ns",
    "exposed_transfer_ns",
    "exposed_unmatched_ns",
)


def analysis(*paths: Path) -> dict:
    res = runner.invoke(app, ["analyze", *map(str, paths), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _ns(us: float) -> int:
    return round(us * 1000)


def dlrm_oracle(folder: Path) -> dict:
    """Per rank: wait, transfer, straggler count and caused wait, by §8 from the raw kernels."""
    activities: dict[int, list[tuple[int, int, str]]] = {}
    for f in sorted(folder.glob("worker*.pt.trace.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        rank = doc["distributedInfo"]["rank"]
        kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
        activities[rank] = sorted((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["name"]) for e in kernels)
    instances: dict[tuple[str, int], dict[int, tuple[int, int]]] = defaultdict(dict)
    for rank, acts in activities.items():
        seen: dict[str, int] = defaultdict(int)
        for start, end, name in acts:
            instances[(name, seen[name])][rank] = (start, end)
            seen[name] += 1
    out = {r: {"wait": 0, "transfer": 0, "straggler": 0, "caused": 0} for r in activities}
    complete = 0
    for members in instances.values():
        if len(members) != len(activities):
            continue
        complete += 1
        last = max(s for s, _ in members.values())
        straggler = min(r for r, (s, _) in members.items() if s == last)
        caused = 0
        for rank, (start, end) in members.items():
            wait = min(max(last - start, 0), end - start)
            out[rank]["wait"] += wait
            out[rank]["transfer"] += end - start - wait
            caused += wait
        out[straggler]["straggler"] += 1
        out[straggler]["caused"] += caused
    return {"ranks": out, "instances": complete}


@pytest.mark.slow
def test_dlrm_wait_and_stragglers_match_the_raw_trace() -> None:
    folder = shared_trace("kineto/dlrm_8rank_v100")
    doc = analysis(folder)
    truth = dlrm_oracle(folder)
    assert doc["ledger"]["instances"] == truth["instances"] > 0
    assert doc["ledger"]["incomplete"] == 0 and doc["ledger"]["desynchronized"] == 0
    for dev in doc["devices"]:
        rank = int(dev["host"][4:])
        want = truth["ranks"][rank]
        assert (dev["comm_wait_ns"], dev["comm_transfer_ns"]) == (want["wait"], want["transfer"]), dev["device"]
        assert (dev["straggler_count"], dev["caused_wait_ns"]) == (want["straggler"], want["caused"])
        assert dev["comm_unmatched_ns"] == 0
    # the finding, from the oracle: communication there is mostly waiting, one rank arrives last
    waits = sum(r["wait"] for r in truth["ranks"].values())
    assert waits / doc["total"]["comm_ns"] > 0.9
    top = doc["ledger"]["stragglers"][0]
    assert top["device"] == "rank7/GPU:7" and top["straggler_count"] > truth["instances"] / 2


@pytest.mark.slow
def test_the_split_adds_up_everywhere() -> None:
    for path in (SAMPLES / "synthetic_2host_4gpu", SAMPLES / "cpu_moe_8dev", SAMPLES / "synthetic_2host_4gpu_kineto"):
        doc = analysis(path)
        assert doc["ledger"]["instances"] > 0
        for row in (*doc["devices"], doc["total"]):
            assert row["comm_wait_ns"] + row["comm_transfer_ns"] + row["comm_unmatched_ns"] == row["comm_ns"]
            assert (
                row["exposed_wait_ns"] + row["exposed_transfer_ns"] + row["exposed_unmatched_ns"]
                == row["exposed_comm_ns"]
            )
        for c in doc["collectives"]:
            assert c["wait_ns"] + c["transfer_ns"] <= c["total_ns"]
        assert sum(d["straggler_count"] for d in doc["devices"]) <= doc["ledger"]["instances"]


def test_one_rank_alone_is_all_unmatched_never_a_made_up_split() -> None:
    """Rank 0 of a 2-rank job: its peer's trace is missing, so no instance is complete (§8)."""
    doc = analysis(shared_trace("kineto/ddp_2rank_a100_rank0.json.gz"))
    (dev,) = doc["devices"]
    assert dev["comm_ns"] > 0 and doc["ledger"]["instances"] == 0 and doc["ledger"]["incomplete"] > 0
    assert (dev["comm_unmatched_ns"], dev["comm_wait_ns"], dev["comm_transfer_ns"]) == (dev["comm_ns"], 0, 0)
    assert (dev["exposed_unmatched_ns"], dev["exposed_wait_ns"]) == (dev["exposed_comm_ns"], 0)
    assert dev["straggler_count"] == 0 and doc["ledger"]["stragglers"] == []
    assert all(c.get("wait_ns") is None and c.get("transfer_ns") is None for c in doc["collectives"])


def test_a_compute_only_trace_has_no_ledger() -> None:
    doc = analysis(shared_trace("nsys/cloverleaf_a100.sqlite"))
    assert doc["total"]["comm_ns"] == 0 and "ledger" not in doc and "comm_wait_ns" not in doc["devices"][0]


@pytest.mark.slow
def test_the_same_job_gives_the_same_ledger_from_xplanes_and_kineto_rank_files() -> None:
    """One job, two formats: the XLA keys and the PyTorch keys must match the same instances."""
    xla = analysis(SAMPLES / "synthetic_2host_4gpu")
    torch = analysis(SAMPLES / "synthetic_2host_4gpu_kineto")
    assert xla["ledger"]["instances"] == torch["ledger"]["instances"]
    assert xla["ledger"]["clock_offsets_ns"]["node1"] == torch["ledger"]["clock_offsets_ns"]["node1"]
    assert {k: xla["total"][k] for k in LEDGER_KEYS} == {k: torch["total"][k] for k in LEDGER_KEYS}
