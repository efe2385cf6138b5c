"""The CLI end to end: every sample, the JSON contract, events/classify, and bad input."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.errors import UNFORESEEN, unforeseen

from .helpers import SAMPLES, moeprof_here, shared_trace

runner = CliRunner()
SAMPLE_INPUTS = [
    SAMPLES / "synthetic_1host_8gpu",
    SAMPLES / "synthetic_2host_4gpu",
    SAMPLES / "synthetic_1host_8gpu.trace.json.gz",
]
SPEC_TOP_KEYS = {"schema", "inputs", "devices", "total", "collectives", "steps", "opportunities"}


def run_json(*args: str) -> dict:
    res = runner.invoke(app, ["analyze", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("path", SAMPLE_INPUTS, ids=lambda p: p.name)
def test_analyze_json_contract(path):
    doc = run_json(str(path))
    assert doc["schema"] == "moeprof.analysis/1"
    assert SPEC_TOP_KEYS <= set(doc)
    dev = doc["devices"][0]
    for key in (
        "device",
        "host",
        "accumulated_ns",
        "compute_ns",
        "comm_ns",
        "memcpy_ns",
        "other_ns",
        "comm_share",
        "span_ns",
        "busy_ns",
        "idle_ns",
        "exposed_comm_ns",
        "overlapped_comm_ns",
        "exposed_comm_fraction",
        "comm_nvlink_ns",
        "comm_ib_ns",
        "comm_unknown_link_ns",
    ):
        assert key in dev
    assert dev["kind"] == "GPU"  # as its reader recorded it (added key)
    assert set(doc["total"]) >= set(dev) - {"device", "host", "kind"}
    c = doc["collectives"][0]
    assert {"name", "kind", "link", "count", "total_ns", "exposed_ns", "bytes"} <= set(c)
    o = doc["opportunities"][0]
    assert {"title", "kind", "exposed_ns", "saving_bound_ns", "remedy"} <= set(o)
    assert 0 <= o["saving_bound_ns"] <= o["exposed_ns"]
    # shown by the §9 projected saving (what taking the opportunity's activities away buys the step)
    ranked = [x.get("projected_saving_ns") or 0 for x in doc["opportunities"]]
    assert ranked == sorted(ranked, reverse=True) and ranked[0] > 0
    assert any("--xla_gpu" in x["remedy"] or "ragged" in x["remedy"] for x in doc["opportunities"])


@pytest.mark.parametrize("path", SAMPLE_INPUTS, ids=lambda p: p.name)
def test_analyze_terminal(path):
    res = runner.invoke(app, ["analyze", str(path)])
    assert res.exit_code == 0, res.output
    assert "comm share" in res.stdout and "Opportunities" in res.stdout


def test_tensorboard_log_dir_and_run_selection(tmp_path):
    for run in ("2026_01_01_00_00_00", "2026_02_01_00_00_00"):
        folder = tmp_path / "plugins" / "profile" / run
        folder.mkdir(parents=True)
        (folder / "node0.xplane.pb").write_bytes((SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb").read_bytes())
    assert run_json(str(tmp_path))["inputs"][0].endswith("2026_02_01_00_00_00/node0.xplane.pb")
    assert run_json(str(tmp_path), "--run", "2026_01_01_00_00_00")["inputs"][0].count("2026_01_01") == 1
    res = runner.invoke(app, ["analyze", str(tmp_path), "--run", "nope"])
    assert res.exit_code == 2 and "no run named 'nope'" in res.output


def test_multi_host_files_given_one_by_one():
    folder = SAMPLES / "synthetic_2host_4gpu"
    doc = run_json(str(folder / "node0.xplane.pb"), str(folder / "node1.xplane.pb"))
    assert len(doc["devices"]) == 8 and {d["host"] for d in doc["devices"]} == {"node0", "node1"}


def test_events_command_writes_parquet_and_csv(tmp_path):
    for suffix in (".parquet", ".csv"):
        out = tmp_path / f"events{suffix}"
        res = runner.invoke(app, ["events", str(SAMPLES / "synthetic_2host_4gpu"), "-o", str(out)])
        assert res.exit_code == 0, res.output
        table = pd.read_parquet(out) if suffix == ".parquet" else pd.read_csv(out, keep_default_na=False)
        for col in (
            "host",
            "device",
            "stream",
            "name",
            "start_ns",
            "end_ns",
            "bucket",
            "kind",
            "hlo_module",
            "hlo_op",
            "bytes",
            "group",
            "ib_fraction",
        ):
            assert col in table.columns
        kernels = table[table["activity"].isin(["kernel", "memcpy", "memset"])]
        assert len(kernels) == 2 * 4 * 3 * (2 + 4 * (2 + 4 * 2) + 1)  # hosts x gpus x steps x kernels per step


def test_classify_command():
    res = runner.invoke(app, ["classify", "ncclDevKernel_SendRecv(x)", "--annotation", "nccl:all_to_all"])
    assert res.exit_code == 0 and "all-to-all" in res.stdout and "annotation:all-to-all" in res.stdout


# ------------------------------------------------------------------------------------------ bad input
def _bad_inputs(tmp: Path) -> dict[str, Path]:
    good = (SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb").read_bytes()
    files = {
        "missing": tmp / "nope.xplane.pb",
        "empty": tmp / "empty.xplane.pb",
        "truncated": tmp / "truncated.xplane.pb",
        "jpeg": tmp / "photo.xplane.pb",
        "emptydir": tmp / "emptydir",
        "badgzip": tmp / "cut.trace.json.gz",
        "badjson": tmp / "bad.trace.json",
        "notrace": tmp / "other.json",
    }
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(good[: len(good) // 2])
    files["jpeg"].write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01" + bytes(range(256)) * 40)
    files["emptydir"].mkdir()
    (files["emptydir"] / "notes.txt").write_text("no traces here")
    files["badgzip"].write_bytes(gzip.compress(b'{"traceEvents": [' + b"{}," * 1000)[:200])
    files["badjson"].write_text('{"traceEvents": [{"ph": "X", "name": ')
    files["notrace"].write_text('{"hello": 1}')
    return files


def analyze_bad_input(path: Path, process: bool) -> subprocess.CompletedProcess:
    if process:
        return subprocess.run(
            [sys.executable, "-m", "moeprof", "analyze", str(path)], capture_output=True, text=True, timeout=120
        )
    return moeprof_here(["analyze", str(path)], env={"MOEPROF_DEBUG": None})


@pytest.mark.parametrize(
    ("case", "process"),
    [
        # one through ``python -m moeprof`` (the entry point's own exit code and stderr), the rest in this
        # process: the one line and the exit code are the CLI's boundary's (tests/helpers.py moeprof_here)
        pytest.param("truncated", True, marks=pytest.mark.slow),
        *((c, False) for c in ["missing", "empty", "truncated", "jpeg", "emptydir", "badgzip", "badjson", "notrace"]),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, case, process):
    path = _bad_inputs(tmp_path)[case]
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.rglob("*") if p.is_file()}
    res = analyze_bad_input(path, process)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    after = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # the input is never modified, nothing written beside it


def test_usage_errors_exit_2(tmp_path):
    res = runner.invoke(app, ["analyze", str(SAMPLES / "synthetic_1host_8gpu"), "--steps", "x:y"])
    assert res.exit_code == 2
    res = runner.invoke(app, ["events", str(SAMPLES / "synthetic_1host_8gpu"), "-o", str(tmp_path / "e.xlsx")])
    assert res.exit_code == 2 and "parquet or .csv" in res.output


@pytest.mark.slow
def test_shared_xplanes_analyze_and_skip_derived_lines():
    from jax.profiler import ProfileData

    path = shared_trace("xplane/tf_bert_8xv100_worker.xplane.pb")
    doc = run_json(str(path))
    # independent route: sum the Stream lines' events straight from ProfileData
    expected = 0
    for plane in ProfileData.from_file(str(path)).planes:
        if plane.name.startswith("/device:GPU:"):
            for line in plane.lines:
                if line.name.startswith("Stream #"):
                    expected += sum(round(ev.duration_ns) for ev in line.events)
    assert doc["total"]["accumulated_ns"] == expected
    assert doc["total"]["comm_ns"] == 0
    assert run_json(str(shared_trace("xplane/jax_conv_8xmi300.xplane.pb")))["total"]["accumulated_ns"] > 0


def test_huge_input_is_refused_in_one_line(tmp_path, monkeypatch):
    """A trace whose reading would exhaust memory gets a clear line, not an OOM kill."""
    import moeprof.readers.base as parsers

    path = tmp_path / "big.xplane.pb"
    path.write_bytes((SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb").read_bytes())
    monkeypatch.setattr(parsers, "available_memory", lambda: 1024)  # pretend 1 KiB is free
    res = runner.invoke(app, ["analyze", str(path)])
    assert res.exit_code == 2
    assert "too large to analyze in memory" in res.output and str(path) in res.output
    monkeypatch.setenv("MOEPROF_IGNORE_MEMORY_CHECK", "1")
    assert runner.invoke(app, ["analyze", str(path)]).exit_code == 0


def test_an_eof_error_is_a_bug_not_a_ctrl_c(tmp_path, monkeypatch):
    """An EOFError inside a command (a truncated .pyc read at import: "marshal data too short", a pickle cut
    short) is an unforeseen failure: exit 2, and with MOEPROF_DEBUG=1 its traceback. Click takes an EOFError for
    Ctrl-D at a prompt, and a re-raised one used to end as "moeprof: interrupted", exit 130, nothing shown."""
    import moeprof.pipeline.runner as pipeline_runner

    def truncated(*args, **kwargs):
        raise EOFError("marshal data too short")

    monkeypatch.setattr(pipeline_runner, "load_trace", truncated)
    sample = SAMPLES / "synthetic_1host_8gpu" / "node0.xplane.pb"
    plain = moeprof_here(["analyze", str(sample)], env={"MOEPROF_DEBUG": None})
    assert (plain.returncode, plain.stderr.strip()) == (2, f"moeprof: cannot process the input: {unforeseen()}")
    debug = moeprof_here(["analyze", str(sample)], env={"MOEPROF_DEBUG": "1"})
    assert debug.returncode not in (0, 2, 130) and "interrupted" not in debug.stderr
    assert "EOFError: marshal data too short" in debug.stderr and "in truncated" in debug.stderr


@pytest.mark.slow
def test_processes_of_one_host_share_it(tmp_path):
    """Two XPlanes that name the same host (one process per GPU group) are one host: GPUs numbered on,
    one NVLink domain, so the 2x4 sample's cross-"host" collectives become all-NVLink."""
    from moeprof.readers.xspace_proto import messages

    for name in ("node0", "node1"):
        space = messages()["XSpace"]()
        space.ParseFromString((SAMPLES / "synthetic_2host_4gpu" / f"{name}.xplane.pb").read_bytes())
        space.hostnames[:] = ["box"]
        (tmp_path / f"box_{name}.xplane.pb").write_bytes(space.SerializeToString())
    doc = run_json(str(tmp_path))
    assert [d["device"] for d in doc["devices"]] == [f"box/GPU:{i}" for i in range(8)]
    assert doc["total"]["comm_ib_ns"] == 0 and doc["total"]["comm_unknown_link_ns"] == 0
    split = run_json(str(SAMPLES / "synthetic_2host_4gpu"))
    assert split["total"]["accumulated_ns"] == doc["total"]["accumulated_ns"]
    assert split["total"]["comm_ib_ns"] > 0


def _help(app_, args: list[str]) -> str:
    res = runner.invoke(app_, [*args, "--help"], terminal_width=100)
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.slow
def test_a_command_built_alone_is_the_command_of_the_whole_app():
    """`moeprof COMMAND` builds only that command (start-up): its help, options and subcommands must be
    those of the whole app's."""
    from moeprof.cli.main import COMMANDS, build_app

    whole = build_app()
    assert set(COMMANDS) == {c.name for c in whole.registered_commands} | {g.name for g in whole.registered_groups}
    for name in COMMANDS:
        assert _help(build_app(name), [name]) == _help(whole, [name]), name
    assert _help(build_app("capture"), ["capture", "demo"]) == _help(whole, ["capture", "demo"])


@pytest.mark.slow
def test_a_command_run_imports_no_other_command():
    script = (
        "import sys\n"
        "sys.argv = ['moeprof', 'analyze', '--json', sys.argv[1]]\n"
        "from moeprof.cli.main import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('moeprof.cli.')), file=sys.stderr)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, str(SAMPLE_INPUTS[2])], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["schema"] == "moeprof.analysis/1"
    # the command's module and the shared ones (the error boundary, Ctrl-C's answer, the app), no other command
    shared = ["moeprof.cli.common", "moeprof.cli.interrupt", "moeprof.cli.main"]
    assert res.stderr.strip().splitlines()[-1] == str(sorted(["moeprof.cli.analyze", *shared]))


# ------------------------------------------------------------------------------------------ refusals, one line
@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["analyze", str(SAMPLE_INPUTS[0]), "--top", "x"], "moeprof: Invalid value for '--top': "),
        (["analyze", str(SAMPLE_INPUTS[0]), "--bogus"], "moeprof: No such option: --bogus"),
        (["capture", "demo", "--devices", "many"], "moeprof: Invalid value for '--devices': "),
        (
            ["check", str(SAMPLE_INPUTS[0]), "--max-idle-fraction", "-1"],
            "moeprof: --max-idle-fraction -1: expected a fraction from 0 to 1",
        ),
        (["analyze"], "moeprof: Missing argument 'PATHS'"),
    ],
    ids=["top-x", "no-such-option", "subcommand", "range", "missing"],
)
def test_bad_option_values_are_one_line_exit_2(args: list[str], start: str) -> None:
    """A bad option value is refused as every other input: one line naming the option, exit 2, no usage box."""
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), res.output
    assert "╭" not in res.output
    # click's refusals point to the help; check's fraction parser names both spellings instead
    if not start.startswith("moeprof: --"):
        assert lines[0].endswith("--help)")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (gzip.compress(b'[[rule]]\nmatch = "x"\nbucket = "compute"\n'), "gzip-compressed (gunzip it first)"),
        (b"\xff\xfe[[rule]]", "rules must be TOML text in UTF-8; byte 0 is not (invalid start byte)"),
    ],
    ids=["gzip", "binary"],
)
def test_rules_file_that_is_not_text_is_named(tmp_path: Path, content: bytes, problem: str) -> None:
    rules = tmp_path / "rules.toml.gz"
    rules.write_bytes(content)
    res = runner.invoke(app, ["analyze", str(SAMPLE_INPUTS[0]), "--rules", str(rules)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [f"moeprof: {rules}: {res.output.split(': ', 2)[2].strip()}"]
    assert problem in res.output and "UnicodeDecodeError" not in res.output


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--expert-ffn", "-4"], "--expert-ffn must be a whole number >= 1 (got -4)"),
        (["--hidden", "0"], "--hidden must be a whole number >= 1 (got 0)"),
        (["--experts", "1"], "--top-k (2) must be at most --experts (1)"),
        (["--top-k", "0"], "--top-k must be a whole number >= 1 (got 0)"),
        (["--top-k", "99"], "--top-k (99) must be at most --experts (16)"),
        (["--layers", "0"], "--layers must be a whole number >= 1 (got 0)"),
        (["--steps", "0"], "--steps must be a whole number >= 1 (got 0)"),
        (["--sync-every", "0"], "--sync-every must be a whole number >= 1 (got 0)"),
        (["--tokens", "0"], "--tokens must be a whole number >= 1 (got 0)"),
        (["--capacity-factor", "0"], "--capacity-factor must be a number > 0 (got 0.0; leave it out for dropless"),
        (["--dtype", "int8"], "--dtype must be float32 or bfloat16 (got 'int8')"),
        (["--devices", "0"], "Invalid value for '--devices': "),
        (["--expert-compute", "tiled", "--top-k", "0"], "--top-k must be a whole number >= 1 (got 0)"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_capture_demo_refuses_bad_options_before_the_child_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], line: str
) -> None:
    """Issue 49: these were refused after 5-10 s in the child that imports jax, in its field names, with a run
    folder left behind (--devices 0 ran on one device). Now: one line in the options' names, exit 2, before the
    child (it is never started here), and no run folder."""
    import moeprof.capture.demo

    def started(*_: object, **__: object) -> None:
        raise AssertionError("the demo's child started: the options were not checked up front")

    monkeypatch.setattr(moeprof.capture.demo, "capture_demo", started)
    out = tmp_path / "run"
    res = runner.invoke(app, ["capture", "demo", "--out", str(out), *args])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"moeprof: {line}"), res.stderr
    assert "Traceback" not in res.output and UNFORESEEN not in res.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def _without_root_privilege() -> list[str]:
    """A prefix that runs a command without permission to read what its mode bits forbid: nothing when not
    root; as root, setpriv dropping the two capabilities that let root read anything."""
    import os
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: an unreadable folder cannot be made")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["folder", "file-inside", "file-in-folder"])
def test_unreadable_input_is_named(tmp_path: Path, where: str) -> None:
    """A folder or file moeprof may not read: "<path>: cannot read: permission denied", not a bare PermissionError."""
    locked = tmp_path / "locked"
    locked.mkdir()
    trace = locked / "run.trace.json.gz"
    trace.write_bytes((SAMPLE_INPUTS[2]).read_bytes())
    target = {"folder": locked, "file-inside": trace, "file-in-folder": locked}[where]
    (trace if where == "file-in-folder" else locked).chmod(0)
    try:
        res = subprocess.run(
            [*_without_root_privilege(), sys.executable, "-m", "moeprof", "analyze", str(target)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        locked.chmod(0o755)
        trace.chmod(0o644)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and res.stdout == "", res.stderr
    named = trace if where == "file-in-folder" else target
    assert len(lines) == 1 and lines[0].startswith(f"moeprof: {named}: "), res.stderr
    assert "ermission denied" in lines[0] and "PermissionError" not in lines[0]


def _every_command() -> list[list[str]]:
    from moeprof.cli.main import build_app

    whole = build_app()
    out = [[c.name] for c in whole.registered_commands]
    for group in whole.registered_groups:
        out += [[group.name, c.name] for c in group.typer_instance.registered_commands]
    return [[], *out]


@pytest.mark.slow
def test_help_names_option_values_not_python_types() -> None:
    """`--top N`, `--rules PATH`, `--gpu GPU`, flags without a value: not `<bool>`, `<int range>`, `<list[str]>`."""
    import re

    python_type = re.compile(r"<(bool|int|float|str|path|int range|float range|list\[[^\]]*\])>")
    for command in _every_command():
        text = runner.invoke(app, [*command, "--help"], terminal_width=200).output
        assert not python_type.search(text), (command, python_type.findall(text))
    text = runner.invoke(app, ["analyze", "--help"], terminal_width=200).output
    for shown in (r"--top +N ", r"--rules +PATH ", r"--chip, ?--gpu +CHIP "):
        assert re.search(shown, text), text
    assert re.search(r"--json +Print", text) and "{PATHS}..." in text


@pytest.mark.slow
@pytest.mark.parametrize("mode", [[], ["--json"], ["--help"]], ids=["text", "json", "help"])
def test_closed_stdout_pipe_ends_as_a_unix_tool(mode: list[str]) -> None:
    """`moeprof ... | head`: when the reader has gone, moeprof ends as cat or grep do, killed by SIGPIPE, nothing
    on stderr, whatever it prints (typer made the text exit 1 and a buffered JSON exit 0 or 120)."""
    import os
    import signal

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before moeprof writes a byte: no race with its writes
    proc = subprocess.Popen(
        [sys.executable, "-m", "moeprof", "analyze", str(SAMPLE_INPUTS[0]), *mode],
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGPIPE and err == b"", (proc.returncode, err[-2000:])


@pytest.mark.parametrize("width", [80, pytest.param(100, marks=pytest.mark.slow)])
def test_every_help_is_boxed_and_shows_every_option_name_whole(width: int) -> None:
    """At 80 columns typer's six-column panels cut check's longest names (--max-exposed-transfer-fraction is 31
    characters): its help was click's plain text while every other command's was boxed. Every command's help is
    boxed, and every option name reads whole."""
    import re

    for command in _every_command()[1:]:
        text = re.sub(r"\x1b\[[0-9;]*m", "", runner.invoke(app, [*command, "--help"], terminal_width=width).output)
        assert "╭─ Options" in text, (command, text[:400])
        cut = re.findall(r"--[a-z][\w-]*…", text)  # rich ends a name it cuts with an ellipsis
        assert not cut, (command, cut)


def test_a_step_marker_with_a_group_prints_no_library_warning():
    """``--step-marker 'ProfilerStep#(\\d+)'`` (a pattern with a group) printed pandas' two-line UserWarning on a
    successful run. Nothing but the report now; the steps are those the pattern names."""
    kineto = SAMPLES / "synthetic_2host_4gpu_kineto"
    res = subprocess.run(
        [sys.executable, "-m", "moeprof", "analyze", str(kineto), "--step-marker", r"ProfilerStep#(\d+)", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert (res.returncode, res.stderr) == (0, "")
    plain = json.loads(runner.invoke(app, ["analyze", str(kineto), "--json"]).stdout)
    assert json.loads(res.stdout)["steps"] == plain["steps"]
    one = runner.invoke(app, ["analyze", str(kineto), "--json", "--step-marker", r"ProfilerStep#(1)$"])
    assert {s["step"] for s in json.loads(one.stdout)["steps"]} == {1}


def test_a_library_warning_is_one_moeprof_line_that_the_fuzz_oracle_flags():
    """A Python warning that still reached moeprof's own process (the CLI, a pool worker) is one ``moeprof:
    warning:`` line, with the catch-alls' words (the fuzz oracles fail on them), not Python's two lines quoting
    moeprof's source; MOEPROF_DEBUG=1 keeps Python's, which say where it came from."""
    code = (
        "import warnings; from moeprof.workers import own_process; own_process(); "
        "warnings.warn('This pattern is interpreted as a regular expression, and has match groups.', UserWarning)"
    )
    env = {k: v for k, v in os.environ.items() if k != "MOEPROF_DEBUG"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert res.stderr.splitlines() == [
        "moeprof: warning: This pattern is interpreted as a regular expression, and has match groups. "
        f"({UNFORESEEN}; MOEPROF_DEBUG=1 shows where)"
    ]
    debug = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, "MOEPROF_DEBUG": "1"}, timeout=60
    )
    assert "UserWarning" in debug.stderr and "moeprof: warning" not in debug.stderr
