"""A CI gate never passes on nothing: inputs that cannot be measured honestly are refused in one line.

Each case was a silent pass or a silent merge before (issue 10, "a CI gate must never pass on nothing"
and "many files"); the refusal must name the file and the problem, exit 2, no traceback.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.readers.xspace_proto import messages

from .helpers import SAMPLES, moeprof_here, shared_trace

pytestmark = pytest.mark.slow  # every test here runs for seconds (the edit loop: -m "not slow")

runner = CliRunner()


def moeprof_cli(*args: str, cwd: Path | None = None, process: bool = False) -> subprocess.CompletedProcess:
    """The command with stderr as a user sees it: ``process``, the real ``python -m moeprof``; else run in this
    process through the CLI's app (tests/helpers.py moeprof_here: a warning or an escaped exception reads as
    more lines on stderr), where the one line and the exit code are the CLI's own boundary's."""
    if process:
        return subprocess.run(
            [sys.executable, "-m", "moeprof", *args], capture_output=True, text=True, timeout=300, cwd=cwd
        )
    return moeprof_here(list(args), cwd, {"MOEPROF_DEBUG": None})


def one_line_error(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 2, (res.returncode, res.stdout[-500:], res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moeprof: "), res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def test_a_trace_without_device_activity_is_refused_by_every_command(tmp_path: Path) -> None:
    empty = tmp_path / "e.json"
    empty.write_text('{"traceEvents": []}')
    for args in (
        ["analyze", str(empty)],
        ["analyze", str(empty), "--json"],
        ["check", str(empty), "--max-comm-share", "0.5"],
        ["report", str(empty), "-o", str(tmp_path / "r.html")],
        ["annotate", str(empty), "-o", str(tmp_path / "a.trace.json.gz")],
    ):
        line = one_line_error(moeprof_cli(*args, process=args == ["analyze", str(empty)]))  # one as a process
        assert str(empty) in line and "no device activity" in line
    assert not (tmp_path / "r.html").exists()


def test_check_refuses_a_saved_analysis_without_devices(tmp_path: Path) -> None:
    saved = json.loads((SAMPLES / "cpu_moe_8dev" / "analysis.json").read_text())
    saved["devices"], saved["steps"] = [], []
    path = tmp_path / "analysis.json"
    path.write_text(json.dumps(saved))
    line = one_line_error(moeprof_cli("check", str(path), "--max-comm-share", "0.99"))
    assert "no device" in line


def test_a_step_selection_that_matches_nothing_is_refused() -> None:
    run = SAMPLES / "cpu_moe_8dev"
    steps = sorted({s["step"] for s in json.loads((run / "analysis.json").read_text())["steps"]})
    line = one_line_error(moeprof_cli("check", str(run), "--skip-first", "5", "--max-comm-share", "0.99"))
    assert "--skip-first 5" in line and f"the trace has {len(steps)} step{'' if len(steps) == 1 else 's'} " in line
    assert ", ".join(map(str, steps)) in line
    line = one_line_error(moeprof_cli("analyze", str(run), "--steps", "7:9"))
    assert "--steps 7:9 matches no step" in line


def test_one_bad_file_among_several_is_named(tmp_path: Path) -> None:
    good = tmp_path / "good.trace.json.gz"
    shutil.copyfile(SAMPLES / "synthetic_1host_8gpu.trace.json.gz", good)
    bad = tmp_path / "empty.json"
    bad.write_bytes(b"")
    line = one_line_error(moeprof_cli("analyze", str(good), str(bad)))
    assert line == f"moeprof: {bad}: empty file"


def test_an_impossible_mfu_warns_in_analyze_and_is_refused_by_check(tmp_path: Path) -> None:
    args = ["--model", "deepseek-v3", "--tokens-per-step", "1048576", "--job-devices", "256", "--gpu", "H100"]
    res = runner.invoke(app, ["analyze", str(SAMPLES / "synthetic_2host_4gpu"), *args, "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["throughput"]["mfu"] > 1
    assert any(w.startswith("MFU ") and "impossible" in w for w in doc["warnings"])
    # check reads the throughput a run folder carries: an impossible one is not gated, it is refused
    saved = json.loads((SAMPLES / "cpu_moe_8dev" / "analysis.json").read_text())
    saved["throughput"] = doc["throughput"]
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(saved))
    line = one_line_error(moeprof_cli("check", str(path), "--max-comm-share", "0.99"))
    assert "impossible" in line


def test_unrelated_files_claiming_one_device_are_refused() -> None:
    folder = shared_trace("kineto")
    line = one_line_error(moeprof_cli("analyze", str(folder)))
    # their identities disagree before their devices collide (docs/metrics.md, "One job")
    assert "cannot be one job with" in line and "world size" in line
    assert line.count(str(folder)) == 2  # both files named


def test_one_capture_in_several_formats_is_read_once(tmp_path: Path) -> None:
    for name in ("synthetic_1host_8gpu.nsys.sqlite", "synthetic_1host_8gpu.trace.json.gz"):
        shutil.copyfile(SAMPLES / name, tmp_path / name)
    res = runner.invoke(app, ["analyze", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    truth = json.loads((SAMPLES / "synthetic_1host_8gpu.truth.json").read_text())
    assert len(doc["devices"]) == len(truth["devices"]) == 8
    assert doc["total"]["accumulated_ns"] == truth["total"]["accumulated_ns"]
    assert any(
        "synthetic_1host_8gpu.trace.json.gz holds the same activities as" in w
        and "read " + str(tmp_path / "synthetic_1host_8gpu.nsys.sqlite") + " only" in w
        for w in doc["warnings"]
    )


def test_processes_of_one_host_keep_their_devices_apart(tmp_path: Path) -> None:
    """Two CPU-only processes of one host, files named by address: never merged into one device."""
    src = next((SAMPLES / "cpu_moe_8dev" / "trace").rglob("*.xplane.pb"))
    shutil.copyfile(src, tmp_path / "127.0.0.1_9001.xplane.pb")
    # the second process ran its own activities (a byte copy would be one capture twice, read once)
    space = messages()["XSpace"].FromString(src.read_bytes())
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                event.duration_ps = event.duration_ps * 2 + 5_000_000
    (tmp_path / "127.0.0.1_9002.xplane.pb").write_bytes(space.SerializeToString())
    res = runner.invoke(app, ["analyze", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    devices = [d["device"] for d in json.loads(res.stdout)["devices"]]
    assert len(devices) == len(set(devices)) == 16
    assert {d.split("/")[0] for d in devices} == {"vm:127.0.0.1_9001", "vm:127.0.0.1_9002"}


def test_gzip_of_nothing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}'))
    line = one_line_error(moeprof_cli("analyze", str(path)))
    assert "no device activity" in line


@pytest.mark.parametrize("bad", ["x:y", "3:1x"])
def test_bad_step_syntax(bad: str) -> None:
    line = one_line_error(moeprof_cli("analyze", str(SAMPLES / "synthetic_1host_8gpu"), "--steps", bad))
    assert "--steps" in line
