"""What the screens say, in the words and units that fit the figures (issue 49): the devices a trace names against
those that ran work, the fabric of virtual CPU devices, host copies against the compute that could hide them,
per-step figures whose parts add up to their whole. The figures are computed here from the inputs by other
routes (jax's ProfileData, the JSON's per-device rows, the steps' rows)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli.main import app
from moeprof.core.analysis import Analysis
from moeprof.core.summary import verdict
from moeprof.reports.text import duration, payoff_rows, verdict_lines

from .helpers import SAMPLES, shared_trace

runner = CliRunner()


def _first_lines(*args: str, n: int = 8) -> list[str]:
    res = runner.invoke(app, ["analyze", *args], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return res.stdout.splitlines()[:n]


# ---------------------------------------------------------------- the devices a trace names (issue 49)


def test_a_trace_whose_planes_did_not_all_run_work_says_how_many_of_them_did():
    """tf_bert_8xv100_worker: 8 GPU planes, 3 with events (counted by jax's own XPlane reader). The headline said
    "3 devices from 1 trace file" above "GPUs: 8 x NVIDIA ...": now how many of the named GPUs had activity."""
    from jax.profiler import ProfileData

    path = shared_trace("xplane/tf_bert_8xv100_worker.xplane.pb")
    planes = [p for p in ProfileData.from_file(str(path)).planes if p.name.startswith("/device:GPU:")]
    active = [p for p in planes if any(True for line in p.lines for _ in line.events)]
    assert (len(planes), len(active)) == (8, 3)
    text = "\n".join(_first_lines(str(path)))
    assert f"{len(active)} of the {len(planes)} GPUs the trace names had device activity, 1 step" in text, text
    assert f"GPUs: {len(planes)} x NVIDIA" in text
    assert "devices from 1 trace file" not in text


def test_a_trace_whose_every_named_device_ran_work_keeps_its_count():
    text = "\n".join(_first_lines(str(shared_trace("xplane/jax_conv_8xmi300.xplane.pb"))))
    assert "8 devices from 1 trace file, 5 steps" in text and "had device activity" not in text


# ---------------------------------------------------------------- --what-if's help, from the terms' table


@pytest.mark.parametrize("command", ["analyze", "report", "annotate"])
def test_every_term_of_the_table_is_in_each_commands_what_if_help(command):
    """analyze --help left out the tokens term (the help was written by hand three times): every command that
    takes --what-if lists every registered term, one a line, with its forms and its help line."""
    from moeprof.insight.projection.terms import TERMS

    res = runner.invoke(app, [command, "--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0, res.output
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", res.output).split())
    assert len(TERMS) >= 4
    for term in TERMS:
        line = " ".join(f"{', '.join(term.forms)}: {term.help}.".split())
        assert line in flat, (term.name, flat[flat.find("--what-if") :][:1500])
    # and nothing else lists them: the parser's own message names the same forms
    res = runner.invoke(app, ["analyze", "x.json", "--what-if", "nonsense"])
    assert res.exit_code == 2 and all(form in res.output for term in TERMS for form in term.forms), res.output


# ---------------------------------------------------------------- XLA:CPU devices: no fabric, no straggler to fix


@pytest.fixture(scope="module")
def cpu_demo() -> Analysis:
    """The committed demo capture on 8 XLA:CPU devices (balanced routing)."""
    return moeprof.analyze_paths([SAMPLES / "cpu_moe_8dev"])


def test_cpu_devices_are_not_said_to_talk_over_nvlink(cpu_demo, tmp_path):
    """The demo's CPU devices had a `comm NVLink` column and their collectives went "over NVLink": threads of one
    process copy in the host's memory, over no fabric."""
    assert {d.kind for d in cpu_demo.devices} == {"CPU"}
    hw = cpu_demo.hardware
    assert hw is not None and (hw["accelerator"], hw["scale_up"]) == ("CPU", "host memory")
    assert "preset" not in hw and not hw.get("link_peaks_gbps")  # no peak: no share of one, no knee
    assert all(c.link_peak_gbps is None and c.latency_knee_bytes is None for c in cpu_demo.collectives)
    res = runner.invoke(app, ["analyze", str(SAMPLES / "cpu_moe_8dev")], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "NVLink" not in res.stdout and "InfiniBand" not in res.stdout, res.stdout[:3000]
    assert "comm host memory" in res.stdout and "over host memory" in res.stdout
    assert "CPUs: 8 XLA:CPU devices of one host" in res.stdout
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(SAMPLES / "cpu_moe_8dev"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert "NVLink" not in html and "comm host memory" in html


def test_the_straggler_fix_is_no_first_try_on_cpu_devices(cpu_demo):
    """On shared cores the device that arrives late is the one the host scheduled later: where the straggler fix
    saves the most, the first try says what it is on these devices, and its row carries that note."""
    v = verdict(cpu_demo)
    straggler = cpu_demo.projection("straggler")
    assert v is not None and v.cpu and straggler is not None
    lines = verdict_lines(replace(v, first_try=straggler))
    first = lines[1]
    assert first.startswith("First try: capture the same program on GPUs or TPUs before tuning it"), first
    assert "make every rank as fast as the median rank" not in first
    assert f"the straggler fix would save {duration(straggler.saving_ns)}" in first and "no device to fix" in first
    notes = {r.terms: r.note for r in payoff_rows(cpu_demo)}
    assert notes["balance"].startswith("XLA:CPU devices share the host's cores")
    # as the trace has it: the largest projected change is an opportunity taken away, said as such
    first = verdict_lines(v)[1]
    assert v.first_try is not None and v.first_try.role == "opportunity"
    assert f"opportunity 1 ({v.first_try_title}) taken away, {duration(v.first_try.saving_ns)}" in first, first


def test_waiting_on_cpu_devices_is_the_hosts_scheduling(cpu_demo):
    waiting = [o for o in cpu_demo.opportunities if "waiting" in o.title]
    assert waiting and all(o.remedy_family == "cpu-scheduling" for o in waiting)
    assert all("make the work before it even across ranks" not in o.remedy for o in waiting)


def test_a_gpu_job_keeps_its_fabric_and_its_first_try():
    """The CPU reading is the CPU job's alone: a GPU job's straggler row has no such note."""
    result = moeprof.analyze_paths([SAMPLES / "synthetic_1host_8gpu"])
    v = verdict(result)
    assert v is not None and not v.cpu
    assert all("XLA:CPU" not in r.note for r in payoff_rows(result))
    assert not verdict_lines(v)[1].startswith("First try: capture the same program on GPUs")


# ---------------------------------------------------------------- host copies against the compute beside them


def _union(s: np.ndarray, e: np.ndarray) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(zip(s.tolist(), e.tolist(), strict=True)):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _overlap(a: int, b: int, segments: list[tuple[int, int]]) -> int:
    return sum(max(0, min(b, y) - max(a, x)) for x, y in segments)


def _copies_against_compute(db) -> dict[int, tuple[int, int]]:
    """Per device id, from the export's own tables: (the bulk host copies' exposed time, the compute time beside
    no copy): kernels are the compute (no collective runs in these traces), HtoD copies and DtoH copies of 64 KiB
    or more the bulk copies (smaller DtoH copies are syncs, a finding of their own)."""
    import sqlite3

    con = sqlite3.connect(db)
    kernels = pd.read_sql("SELECT deviceId AS d, start AS s, end AS e FROM CUPTI_ACTIVITY_KIND_KERNEL", con)
    copies = pd.read_sql(
        "SELECT deviceId AS d, start AS s, end AS e FROM CUPTI_ACTIVITY_KIND_MEMCPY"
        " WHERE copyKind = 1 OR (copyKind = 2 AND bytes >= 65536)",
        con,
    )
    con.close()
    out = {}
    for device, k in kernels.groupby("d"):
        compute = _union(k["s"].to_numpy(), k["e"].to_numpy())
        c = copies[copies["d"] == device]
        exposed = sum(e - s - _overlap(s, e, compute) for s, e in zip(c["s"].tolist(), c["e"].tolist(), strict=True))
        busy = _union(c["s"].to_numpy(), c["e"].to_numpy())
        beside = sum(y - x for x, y in compute) - sum(_overlap(x, y, busy) for x, y in compute)
        out[int(device)] = (exposed, beside)
    return out


@pytest.mark.parametrize("trace", ["nsys/h100_2gpu_1s.sqlite", "nsys/saxpy_mpi_old_schema.sqlite"])
def test_host_copies_are_bounded_by_the_compute_that_could_hide_them(trace):
    """h100_2gpu_1s: 'First try: overlap the host<->device copies with compute — projected to save 251 ms' with
    22.4 ms of compute per device to hide them under. Overlap hides at most that compute (the bound, computed
    here from the export's tables), the words say what the projection does (the copies taken away: fewer
    bytes), and the remedy says why overlap is not enough."""
    path = shared_trace(trace)
    truth = _copies_against_compute(path)
    result = moeprof.analyze_paths([path])
    o = next(o for o in result.opportunities if o.kind == "host-copies")
    bounds = {d: min(exposed, beside) for d, (exposed, beside) in truth.items()}
    assert o.saving_bound_ns == max(bounds.values()) and o.bound_from == "compute"
    assert o.exposed_ns == sum(exposed for exposed, _ in truth.values())
    worst = max(bounds, key=bounds.__getitem__)
    assert (o.evidence["exposed_ns"], o.evidence["compute_to_hide_under_ns"]) == truth[worst]
    assert all(beside < exposed for exposed, beside in truth.values())  # the copies outweigh the compute
    assert o.title == "exposed host<->device copies, more than the compute beside them could hide"
    assert o.remedy_family == "fewer-host-copies" and "hides at most that compute" in o.remedy
    first = verdict_lines(verdict(result))[1]
    assert first.startswith("First try: move fewer bytes between host and device — projected to save"), first
    assert "overlap the host<->device copies" not in first
    out = "\n".join(_first_lines(str(path), n=60))
    bound = duration(o.saving_bound_ns).replace("\N{NO-BREAK SPACE}", " ")
    assert f"hidden: at most {bound} on the worst device (bounded by the compute beside" in (
        " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
    )


def test_host_copies_compute_can_hide_keep_the_overlap_remedy():
    """The generator's job: its copies are short beside its compute, so overlap can hide them all."""
    result = moeprof.analyze_paths([SAMPLES / "synthetic_1host_8gpu"])
    o = next(o for o in result.opportunities if o.kind == "host-copies")
    assert o.evidence["compute_to_hide_under_ns"] >= o.evidence["exposed_ns"] == o.saving_bound_ns
    assert o.remedy_family == "async-host-copies" and o.title == "exposed host<->device copies"


# ---------------------------------------------------------------- per step, one unit


def _printed(text: str, unit: str) -> float:
    return float(text.replace(",", "")) * {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit]


def _figure(label: str, flat: str) -> tuple[float, float]:
    """(mean, worst) of a "LABEL X ms mean, Y ms worst (device)" part of the first lines, in ns."""
    m = re.search(rf"{label}:? ([\d.,]+) (ns|µs|ms|s) mean, ([\d.,]+) (ns|µs|ms|s) worst", flat)
    assert m, (label, flat[:1500])
    return _printed(m[1], m[2]), _printed(m[3], m[4])


def _near(printed: float, value: float) -> bool:
    """A figure printed to three significant digits (duration()) against its value."""
    return abs(printed - value) <= 0.006 * max(abs(value), 1.0) + 1


@pytest.mark.parametrize(
    "source", ["sample:cpu_moe_8dev", "sample:synthetic_2host_4gpu", "shared:kineto/dlrm_8rank_v100"]
)
def test_the_exposed_comm_split_adds_up_to_its_whole_per_step(source):
    """The README's demo printed "per device and step: exposed comm 232 ms mean" over "exposed comm waiting:
    627 ms mean ... moving bytes: 531 ms mean": the parts were sums over the 5 steps (cpu_moe_8dev: 55.6 ms
    against 46.2 + 65.0). Now the parts are per device and step and add up to the whole. Computed here from the
    JSON: the whole from the steps' rows (each device's mean over its steps), the parts from the devices' rows
    over the steps (the steps tile each device's exposed comm on these inputs: checked first)."""
    kind, name = source.split(":", 1)
    path = SAMPLES / name if kind == "sample" else shared_trace(name)
    res = runner.invoke(app, ["analyze", str(path), "--json", "--no-projection"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows = pd.DataFrame(doc["steps"])
    devices = pd.DataFrame(doc["devices"]).set_index("device")
    per_device = rows.groupby("device")["exposed_comm_ns"]
    assert (per_device.sum() == devices["exposed_comm_ns"]).all()  # the premise: the steps tile the window
    steps = rows.groupby("device")["step"].nunique()
    whole = per_device.mean()
    parts = {
        label: devices[key] / steps
        for label, key in (
            ("exposed comm waiting", "exposed_wait_ns"),
            ("moving bytes", "exposed_transfer_ns"),
            ("unmatched", "exposed_unmatched_ns"),
        )
    }
    assert np.allclose(sum(parts.values()), whole)  # spec §8: the parts are the device's exposed comm
    lines = _first_lines(str(path), "--no-projection", n=12)
    flat = " ".join(" ".join(lines).split())
    mean, worst = _figure("per device and step: exposed comm", flat)
    assert _near(mean, whole.mean()) and _near(worst, whole.max()), flat
    assert "per device and step, exposed comm waiting:" in flat
    printed = {}
    for label, values in parts.items():
        if label == "unmatched" and values.max() == 0:
            assert "unmatched: none" in flat
            printed[label] = 0.0
            continue
        m, w = _figure(label, flat)
        assert _near(m, values.mean()) and _near(w, values.max()), (label, m, values.mean(), flat)
        printed[label] = m
    assert _near(sum(printed.values()), mean), (printed, mean)  # the line adds up as printed


def test_every_time_on_the_terminal_is_per_step_where_the_trace_has_steps():
    """cpu_moe_8dev (2 steps): the per-device table, the stragglers, the collectives, the scopes and the
    opportunities said window sums (the table's exposed comm 111 ms beside the headline's 55.6 ms per step);
    each now says per step, and its figures are the JSON's over the steps."""
    path = SAMPLES / "cpu_moe_8dev"
    doc = json.loads(runner.invoke(app, ["analyze", str(path), "--json"]).stdout)
    steps = len({s["step"] for s in doc["steps"]})
    assert steps == 2
    res = runner.invoke(app, ["analyze", str(path)], env={"COLUMNS": "220"})
    out = res.stdout
    assert "Per device (ms per step, the capture's 2 steps)" in out
    mean_row = next(line for line in out.splitlines() if line.strip().startswith("mean ") and "%" in line)
    exposed = np.mean([d["exposed_comm_ns"] for d in doc["devices"]]) / steps / 1e6
    assert f"{exposed:,.3f}" in mean_row, (mean_row, exposed)
    assert "others waited" in out and "for it, ms/step" in out
    top = doc["collectives"][0]
    assert "ms per device and step: the mean over the devices each ran on" in out
    assert f"{top['total_ns'] / top['devices'] / steps / 1e6:,.3f}" in out
    assert "Scopes (4, layers folded), ms per device and step" in out
    o = doc["opportunities"][0]
    flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
    assert f"{o['exposed_ns'] / steps / 1e6:,.3f} ms per step at stake over all devices" in flat
    assert "at stake over all devices" in flat and " ms at stake" not in flat.replace("ms per step at stake", "")
