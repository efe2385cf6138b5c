"""synthetic.fleet: an N-rank job of Kineto rank files whose truth is known.

The truth file is checked against a direct scan of the written JSON (durations
summed per kind of event), and moeprof against the truth in test_executors.py.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from synthetic.fleet import EP_GROUP, TRUTH_NAME, main, write_job

ROOT = Path(__file__).resolve().parents[1]


def scan(path: Path) -> dict:
    """The rank file as a person would read it: its JSON, durations in integer ns."""
    return json.loads(gzip.decompress(path.read_bytes()))


def ns(us: float) -> int:
    return round(us * 1000)


def test_truth_is_what_the_files_hold(tmp_path: Path) -> None:
    ranks, steps, layers = 20, 2, 3
    paths = write_job(tmp_path, ranks, steps=steps, layers=layers, seed=3)
    truth = json.loads((tmp_path / TRUTH_NAME).read_text())
    assert [p.name for p in paths] == [f"rank{r:02d}.pt.trace.json.gz" for r in range(ranks)]
    for r, path in enumerate(paths):
        doc = scan(path)
        assert doc["distributedInfo"]["rank"] == r and doc["distributedInfo"]["world_size"] == ranks
        sums: dict[str, int] = defaultdict(int)
        for ev in doc["traceEvents"]:
            if ev.get("cat") == "gpu_memcpy":
                sums["memcpy_ns"] += ns(ev["dur"])
            elif ev.get("cat") == "kernel":
                sums["comm_ns" if ev["name"].startswith("ncclDevKernel") else "compute_ns"] += ns(ev["dur"])
        row = truth["per_rank"][r]
        assert {k: row[k] for k in sums} == dict(sums)
        assert row["accumulated_ns"] == sum(sums.values())
        assert row["collectives"] == steps * (2 * layers + 1)  # two all-to-alls per layer, one all-reduce per step
    for key in ("accumulated_ns", "compute_ns", "comm_ns", "memcpy_ns"):
        assert truth["total"][key] == sum(r[key] for r in truth["per_rank"])


def test_collectives_carry_group_and_sequence(tmp_path: Path) -> None:
    """Every member of a group sees the same collectives in the same order (same Seq), ending together."""
    ranks = 20  # two EP groups: 0-15 and 16-19
    paths = write_job(tmp_path, ranks, steps=2, layers=1, seed=1)
    calls: dict[tuple[str, int], list[tuple[int, str, int]]] = defaultdict(list)  # (group, seq) -> members
    for r, path in enumerate(paths):
        doc = scan(path)
        events = doc["traceEvents"]
        kernels = {ev["args"]["correlation"]: ev for ev in events if ev.get("cat") == "kernel"}
        launches = {ev["args"]["correlation"]: ev for ev in events if ev.get("cat") == "cuda_runtime"}
        seqs: dict[str, list[int]] = defaultdict(list)
        for ev in events:
            if ev.get("name") != "record_param_comms":
                continue
            a = ev["args"]
            kernel = kernels[a["External id"]]
            launch = launches[a["External id"]]
            assert ev["ts"] <= launch["ts"] <= ev["ts"] + ev["dur"]  # the launch sits inside the op
            assert kernel["args"]["Seq"] == a["Seq"] and a["Rank"] == r
            members = list(range(a["Global rank start"], a["Global rank start"] + a["Group size"]))
            assert r in members
            if a["Group size"] <= 30:
                assert json.loads(a["Process Group Ranks"]) == members
            else:
                assert a["Process Group Ranks"].endswith(", ...]")
            seqs[a["Process Group Name"]].append(a["Seq"])
            calls[(a["Process Group Name"], a["Seq"])].append(
                (r, a["Collective name"], ns(kernel["ts"] + kernel["dur"]))
            )
        assert all(s == list(range(1, len(s) + 1)) for s in seqs.values())
        pg = {p["pg_name"]: p for p in doc["distributedInfo"]["pg_config"]}
        ep = r // EP_GROUP
        assert pg[str(1 + ep)]["ranks"] == list(range(ep * EP_GROUP, min((ep + 1) * EP_GROUP, ranks)))
    for (group, _seq), members in calls.items():
        expected = list(range(ranks)) if group == "0" else [m for m in range(ranks) if 1 + m // EP_GROUP == int(group)]
        assert sorted(m[0] for m in members) == expected
        assert len({m[1] for m in members}) == 1  # one collective
        assert max(m[2] for m in members) - min(m[2] for m in members) <= 1  # they end together (µs rounding)


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    a = write_job(tmp_path / "a", 8, seed=5)
    b = write_job(tmp_path / "b", 8, seed=5)
    c = write_job(tmp_path / "c", 8, seed=6)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert (tmp_path / "a" / TRUTH_NAME).read_text() == (tmp_path / "b" / TRUTH_NAME).read_text()
    assert [p.read_bytes() for p in a] != [p.read_bytes() for p in c]


@pytest.mark.slow
def test_a_1024_rank_job_is_a_few_megabytes(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "synthetic.fleet", str(tmp_path), "--ranks", "1024"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    files = sorted(tmp_path.glob("rank*.pt.trace.json.gz"))
    assert len(files) == 1024 and files[-1].name == "rank1023.pt.trace.json.gz"
    assert sum(f.stat().st_size for f in files) < 4e6
    assert "1024 rank files" in out.stdout
    assert json.loads((tmp_path / TRUTH_NAME).read_text())["ranks"] == 1024


@pytest.mark.parametrize("ranks", ["0", "1025"])
def test_rank_count_is_bounded(tmp_path: Path, ranks: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([str(tmp_path), "--ranks", ranks])
    assert info.value.code == 2 and "--ranks must be between 1 and 1024" in capsys.readouterr().err
