"""The chip kind is one fact (issue 39 item 7): each reader records every device's kind (GPU, TPU, CPU) where it
names the device; the analysis carries it (JSON ``devices[].kind``) and everything downstream looks it up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli.main import app
from moeprof.core.analysis import DeviceFigures, saved_kind
from moeprof.insight.remedies import devices_kind

from .helpers import SAMPLES

runner = CliRunner()

# every sample format, and the kind its devices are (the file says it: a TPU plane, a CPU capture, GPU planes)
KINDS = {
    "synthetic_1host_8gpu": "GPU",  # XPlane GPU planes
    "synthetic_1host_8gpu.nsys.sqlite": "GPU",
    "synthetic_1host_8gpu.trace.json.gz": "GPU",  # Kineto
    "synthetic_2host_4gpu_kineto": "GPU",
    "synthetic_rocpd_mi300x": "GPU",
    "synthetic_rocprof_mi300x": "GPU",
    "synthetic_rocprof_mi300x_json": "GPU",
    "synthetic_tpu_2slice": "TPU",
    "tpu_v5e_demo": "TPU",
    "cpu_moe_8dev": "CPU",  # an XPlane of XLA's CPU devices
}


@pytest.mark.parametrize("sample", sorted(KINDS))
def test_every_reader_records_each_devices_kind(sample: str) -> None:
    traces = moeprof.load(SAMPLES / sample)
    for trace in traces:
        assert {trace.kind_of(d) for d in trace.device_names} == {KINDS[sample]}, trace.path


def test_the_analysis_carries_the_kind_and_a_saved_one_reads_back(tmp_path: Path) -> None:
    res = runner.invoke(app, ["analyze", str(SAMPLES / "tpu_v5e_demo"), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {d["kind"] for d in doc["devices"]} == {"TPU"}
    back = moeprof.Analysis.from_json(doc)
    assert back.device_kind == "TPU" and [d.kind for d in back.devices] == ["TPU"]
    # a document saved before devices carried their kind: its device names, as moeprof wrote them, say it
    old = {k: v for k, v in doc["devices"][0].items() if k != "kind"}
    assert DeviceFigures.from_json(old).kind == "TPU"
    assert (saved_kind("rank3/GPU:3"), saved_kind("vm/CPU:0"), saved_kind("my-accelerator")) == ("GPU", "CPU", "")


def test_remedies_look_the_kind_up_never_at_the_name() -> None:
    """A device named like a GPU that its reader recorded as a TPU chip is a TPU chip (and the other way)."""
    kinds = {"h/GPU:0": "TPU", "h/TPU:1": "GPU", "h/x": "CPU"}
    assert devices_kind(["h/GPU:0"], kinds) == "tpu"
    assert devices_kind(["h/TPU:1"], kinds) == "gpu"
    assert devices_kind(["h/x"], kinds) == "cpu"
    assert devices_kind(["h/GPU:0", "h/x"], kinds) == "gpu"  # a mix: GPU advice, as before
