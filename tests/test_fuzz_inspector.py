"""Fuzz of the NCCL Inspector reader through the real CLI (mutations: tests/fuzz/inspector.py).

Each case runs on the job without and with P2P records (Send/Recv, NCCL 2.30). Every case keeps the
bad-input contract (exit 2 with one line naming a file, no traceback, input
untouched) or is accepted with sane figures; what each mutation must give is checked (a truncated or
retyped line is refused, a duplicated or blank line changes nothing). MOEPROF_FUZZ_RUNS (default 30),
MOEPROF_FUZZ_SEED (default 1).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.errors import UNFORESEEN
from tests.fuzz.inspector import InspectorCase, generate, seed_files
from tests.fuzz.mutators import ANY, REJECT, SAME

RUNS = int(os.environ.get("MOEPROF_FUZZ_RUNS", "30"))
SEED = int(os.environ.get("MOEPROF_FUZZ_SEED", "1"))
runner = CliRunner()


def _write(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}  # fmt: skip


def _analyze(root: Path) -> tuple[int, str, str]:
    res = runner.invoke(app, ["analyze", str(root / "logs"), "--json", "--jobs", "1"])
    return res.exit_code, res.stdout, res.stderr


def _sane(doc: dict) -> list[str]:
    bad = []
    section = doc["inspector"]
    for r in section["bandwidth"]:
        for k in ("bus_bandwidth_gbps", "transfer_bus_bandwidth_gbps"):
            v = r[k]
            if v is not None and (not math.isfinite(v) or v < 0):
                bad.append(f"{r['op']} {k} = {v}")
    for r in section["last_to_arrive"]:
        if not 0 <= r["shortest_share"] <= 1 or r["caused_us"] < 0:
            bad.append(f"{r['process']}: {r}")
    if section["beyond_shortest_us"] < 0:
        bad.append("beyond_shortest_us < 0")
    p2p = section["p2p"]
    if p2p["matched_records"] + p2p["unmatched_records"] != p2p["records"] or p2p["records"] != section["p2p_records"]:
        bad.append(f"p2p records do not add up: {p2p}")
    if p2p["beyond_shortest_us"] < 0 or any(not 0 <= r["shortest_share"] <= 1 for r in p2p["last_to_arrive"]):
        bad.append(f"p2p last to arrive: {p2p}")
    if any(v is not None for v in doc["total"].values()):
        bad.append("a §4 figure in total")
    return bad


@pytest.fixture(scope="module")
def unmutated(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict]:
    """The analysis of the unmutated job, without and with P2P records."""
    out_by = {}
    for p2p in (False, True):
        root = tmp_path_factory.mktemp("seed")
        _write(root, seed_files(p2p))
        rc, out, err = _analyze(root)
        assert rc == 0, err
        out_by[p2p] = json.loads(out)["inspector"]
    assert out_by[True]["p2p"]["matched_records"] == 16  # 8 Send/Recv pairs, all matched
    return out_by


@pytest.mark.slow
@pytest.mark.parametrize("p2p", [False, True], ids=["coll", "p2p"])
@pytest.mark.parametrize("index", range(RUNS))
def test_inspector_fuzz_case(tmp_path: Path, unmutated: dict[bool, dict], index: int, p2p: bool) -> None:
    _check(tmp_path, unmutated, generate(SEED, index, p2p), p2p)


@pytest.mark.parametrize(
    "key, steps",
    [
        ("28:4", ["last line cut to 369 chars", "last line cut already"]),
        ("28:59", ["blank line at 5", "line 2: coll_perf.coll_sn removed"]),
        ("28:144", ["line 6: coll_perf removed", "line 4: unknown keys added"]),
    ],
)
def test_steps_that_meet_on_a_line_compose(
    tmp_path: Path, unmutated: dict[bool, dict], key: str, steps: list[str]
) -> None:
    """Cases whose second step met what the first left (a cut line cut again, a blank line or a removed coll_perf
    picked for a field) made the generator raise (seed 28's campaign): the second step now draws a line it can
    change, and the case keeps the contract."""
    case = generate(*(int(x) for x in key.split(":")))
    assert case.steps == steps
    _check(tmp_path, unmutated, case, False)


def _check(tmp_path: Path, unmutated: dict[bool, dict], case: InspectorCase, p2p: bool) -> None:
    _write(tmp_path, case.files)
    before = _digest(tmp_path)
    rc, out, err = _analyze(tmp_path)
    where = f"case {case.key} ({case.target}: {'; '.join(case.steps)}, expect {case.expect})"
    assert "Traceback" not in out + err, where
    assert _digest(tmp_path) == before, f"{where}: input modified"
    assert not list(tmp_path.rglob("*.cache*")), where
    if rc == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and str(tmp_path) in lines[0], f"{where}: {err}"
        assert UNFORESEEN not in err, f"{where}: the catch-all answered: {err}"
        assert case.expect in (REJECT, ANY), f"{where}: refused: {err}"
        if case.expect == REJECT:
            assert case.target.split("/")[-1] in lines[0], f"{where}: the line names another file: {err}"
        return
    assert rc == 0, f"{where}: exit {rc}: {err}"
    assert case.expect in (SAME, ANY), f"{where}: accepted"
    doc = json.loads(out)
    assert not _sane(doc), f"{where}: {_sane(doc)}"
    if case.expect == SAME:
        got = doc["inspector"]
        for key in ("instances", "beyond_shortest_us", "bandwidth", "last_to_arrive", "p2p"):
            assert got[key] == unmutated[p2p][key], f"{where}: {key} changed"


@pytest.mark.slow
@pytest.mark.parametrize("p2p", [False, True], ids=["coll", "p2p"])
@pytest.mark.parametrize("index", range(RUNS))
def test_typed_route_reads_what_arrow_reads(index: int, p2p: bool) -> None:
    """The reader's typed route (msgspec) either leaves a file to Arrow's route or gives Arrow's rows exactly."""
    import tempfile

    import pandas as pd

    from moeprof.errors import InputError
    from moeprof.readers import nccl_inspector as ni

    case = generate(SEED, index, p2p)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write(root, case.files)
        for path in sorted((root / "logs").iterdir()):
            typed = ni._read_typed(path, path.read_bytes())
            if typed is None:
                continue
            try:
                arrow = ni._read_arrow(path, False)
            except InputError as exc:  # the typed route took what Arrow refuses
                raise AssertionError(f"case {case.key} {path.name}: typed read it, Arrow refused: {exc}") from None
            pd.testing.assert_frame_equal(typed.rows, arrow.rows)
            assert (typed.version, typed.warnings) == (arrow.version, arrow.warnings)
