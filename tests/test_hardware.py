"""The hardware is the trace's: GPU presets as data, the model each format names, peaks and the knee."""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.core.hardware import match, table, vendor_of
from moeprof.errors import InputError
from moeprof.insight.bandwidth import job_hardware, latency_knee_bytes, link_peaks, verdict
from moeprof.options import LoadOptions
from moeprof.pipeline import analyze_paths, load_trace
from moeprof.readers.xplane import device_description
from moeprof.reports import terminal

from .helpers import SAMPLES, shared_trace

runner = CliRunner()
REQUIRED = ("V100", "A100", "H100", "H200", "B200", "GB200", "GB300", "MI300X", "MI325X", "MI350X", "MI355X")


# ---------------------------------------------------------------- the table


def test_presets_cover_every_required_gpu_with_its_sources():
    names = [g.name for g in table().gpus]
    for gpu in REQUIRED:
        found = match(gpu).preset
        assert found is not None and found.name.split()[0] == gpu, gpu
        assert found.name in names
    for g in table().gpus:
        assert g.bf16_tflops > 0 and (g.fp8_tflops is None or g.fp8_tflops > g.bf16_tflops), g.name
        assert g.scale_up in table().fabrics, g.name
        assert g.scale_out_gbps and g.scale_out_gbps > 0, g.name
        assert g.scale_up_gbps is None or g.scale_up_gbps > 0, g.name
        # the first source is the GPU's own datasheet (named, with its address where it has one); one names the NIC
        assert g.sources and re.search(r"datasheet|data sheet|spec", g.sources[0], re.I), g.name
        assert any(s.startswith("NIC:") for s in g.sources), g.name
        # AMD's scale-up fabric is xGMI (Infinity Fabric), NVIDIA's NVLink
        assert g.scale_up == ("xgmi" if g.vendor == "AMD" else "nvlink"), g.name
    for fabric in table().fabrics.values():
        if fabric.key in ("ici", "dcn"):  # TPU fabrics: outside NCCL's model, no latency claimed, a source named
            assert fabric.hop_latency_us is None and fabric.source.startswith("Google Cloud TPU")
            continue
        if fabric.key in ("host", "host_network"):  # XLA:CPU devices: no fabric, no latency claimed
            assert fabric.hop_latency_us is None and fabric.source.startswith("XLA:CPU")
            continue
        assert fabric.hop_latency_us is not None and fabric.hop_latency_us > 0 and "tuning.cc" in fabric.source
    assert table().base_latency_us > 0 and "tuning.cc" in table().base_latency_source


def test_every_preset_pattern_is_reachable():
    """A preset whose every pattern an earlier preset already takes would never be used."""
    raw = tomllib.loads(resources.files("moeprof.core").joinpath("hardware.toml").read_text())
    spellings = {
        "V100 PCIe": "Tesla V100-PCIE-16GB",
        "V100 SXM2": "Tesla V100-SXM2-32GB",
        "A100 PCIe": "NVIDIA A100 80GB PCIe",
        "A100 SXM": "NVIDIA A100-SXM4-80GB",
        "H100 PCIe": "NVIDIA H100 PCIe",
        "H100 SXM": "NVIDIA H100 80GB HBM3",
        "H200 SXM": "NVIDIA H200",
        "H800 SXM": "NVIDIA H800",
        "GB300": "NVIDIA GB300",
        "GB200": "NVIDIA GB200",
        "B200": "NVIDIA B200",
        "MI300X": "AMD Instinct MI300X",
        "MI325X": "AMD Instinct MI325X",
        "MI350X": "AMD Instinct MI350X",
        "MI355X": "AMD Instinct MI355X",
    }
    assert sorted(spellings) == sorted(g["name"] for g in raw["gpu"])
    for preset, name in spellings.items():
        assert match(name).preset is not None and match(name).preset.name == preset, name


@pytest.mark.parametrize(
    "name, preset",
    [
        ("Tesla V100-SXM2-16GB", "V100 SXM2"),
        ("Tesla V100-PCIE-16GB", "V100 PCIe"),
        ("NVIDIA A100-PG509-200", "A100 SXM"),  # the HTA DDP trace's board
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H800", "H800 SXM"),
        ("nvidia_h200", "H200 SXM"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD gfx94x (304 CUs, 192 GiB, 2100 MHz)", "MI300X"),  # what an XPlane device plane says
        ("AMD gfx94x (304 CUs, 256 GiB, 2100 MHz)", "MI325X"),
        ("AMD Instinct MI350X", "MI350X"),  # the shared rocprofv3 trace's agent name
        ("AMD gfx95x (256 CUs, 288 GiB, 2200 MHz)", "MI350X"),  # one chip, two clocks: 2.2 GHz air-cooled
        ("AMD gfx95x (256 CUs, 288 GiB, 2400 MHz)", "MI355X"),
        ("NVIDIA compute capability 7.0 (80 SMs, 16 GiB, 1530 MHz)", "V100 SXM2"),
        # unknown or ambiguous: no preset, never a guess
        ("gfx942", None),  # MI300A, MI300X and MI325X alike
        ("AMD gfx94x (228 CUs, 128 GiB, 2100 MHz)", None),  # MI300A
        ("NVIDIA compute capability 9.0 (132 SMs, 80 GiB, 1980 MHz)", None),  # H100 SXM or H800
        ("NVIDIA GeForce RTX 3090", None),
        ("AMD Instinct MI250X", None),
        ("NVIDIA H100 NVL", None),
        ("Tesla V100S-PCIE-32GB", None),
    ],
)
def test_names_traces_carry(name, preset):
    found = match(name)
    assert (found.preset.name if found.preset else None) == preset
    if preset is None:
        assert name in found.note and "no preset" in found.note


def test_every_preset_names_its_own_vendor():
    """The vendor table tells each preset's GPU by its name alone (what a GPU without a preset relies on)."""
    for g in table().gpus:
        for name in (g.name, f"{g.vendor} {g.name}"):
            found = vendor_of(name)
            assert found is not None and found.name == g.vendor, name
            assert found.scale_up == g.scale_up, name


@pytest.mark.parametrize(
    "models, hint, vendor, fabric_name",
    [
        ({"d0": "AMD Instinct MI250X", "d1": "AMD Instinct MI250X"}, None, "AMD", "xGMI"),  # no preset
        ({"d0": "AMD gfx90ax (110 CUs, 64 GiB, 1700 MHz)"}, None, "AMD", "xGMI"),  # an XPlane plane's words
        ({"d0": "NVIDIA GeForce RTX 3090"}, None, "NVIDIA", "NVLink"),
        ({}, "AMD", "AMD", "xGMI"),  # rocprofv3 output without its agent list: the format says ROCm
        ({"d0": "AMD Instinct MI250X"}, "NVIDIA", "AMD", "xGMI"),  # a name that says beats a format's hint
    ],
)
def test_the_fabric_follows_the_vendor_without_a_preset(models, hint, vendor, fabric_name):
    hw = job_hardware(models, None, hint)
    assert hw.preset is None and hw.peaks == {}
    assert hw.scale_up == ("xgmi" if vendor == "AMD" else "nvlink")
    assert hw.summary is not None and hw.summary["vendor"] == vendor and hw.summary["scale_up"] == fabric_name
    assert "preset" not in hw.summary  # no peaks are made up


def test_gpus_of_two_vendors_name_no_fabric():
    hw = job_hardware({"d0": "AMD Instinct MI250X", "d1": "NVIDIA GeForce RTX 3090"})
    assert hw.scale_up == "nvlink" and "vendor" not in (hw.summary or {})


def test_xplane_device_description():
    mi300 = {"device_vendor": "AMD", "clock_rate": 2100000, "core_count": 304, "memory_size": 206141652992,
             "compute_cap_major": 9, "compute_cap_minor": 4}  # fmt: skip
    assert device_description(mi300) == "AMD gfx94x (304 CUs, 192 GiB, 2100 MHz)"
    v100 = {"clock_rate": 1530000, "core_count": 80, "memory_size": 16945512448, "compute_cap_major": 7,
            "compute_cap_minor": 0.0}  # fmt: skip
    assert device_description(v100) == "NVIDIA compute capability 7.0 (80 SMs, 16 GiB, 1530 MHz)"
    assert device_description({"device_name": "NVIDIA H100 80GB HBM3", "core_count": 132}) == "NVIDIA H100 80GB HBM3"
    assert device_description({}) is None


# ---------------------------------------------------------------- the model each format names


@pytest.mark.parametrize(
    "relative, model, preset",
    [
        ("kineto/dlrm_8rank_v100/worker3.pt.trace.json.gz", "Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("kineto/ddp_2rank_a100_rank0.json.gz", "NVIDIA A100-PG509-200", "A100 SXM"),
        ("kineto/deepseek_v3_ep64_h800_rank0.json.gz", "NVIDIA H800", "H800 SXM"),
        ("kineto/vllm_tp8_b200_rank0.json.gz", "NVIDIA B200", "B200"),
        ("nsys/cloverleaf_a100.sqlite", "NVIDIA A100-SXM4-80GB", "A100 SXM"),
        ("xplane/jax_conv_8xmi300.xplane.pb", "AMD gfx94x (304 CUs, 192 GiB, 2100 MHz)", "MI300X"),
        ("xplane/tf_bert_8xv100_worker.xplane.pb", "NVIDIA compute capability 7.0 (80 SMs, 16 GiB, 1530 MHz)",
         "V100 SXM2"),
    ],
)  # fmt: skip
def test_model_read_from_shared_traces(relative, model, preset):
    trace = load_trace(shared_trace(relative))
    assert trace.device_models and set(trace.device_models.values()) == {model}
    assert set(trace.device_models) <= set(trace.device_names)
    assert match(model).preset.name == preset


@pytest.mark.slow
def test_model_read_from_samples_and_used_without_gpu():
    trace = load_trace(SAMPLES / "synthetic_2host_4gpu_kineto" / "rank5.pt.trace.json.gz")
    assert trace.device_models == {"rank5/GPU:1": "NVIDIA H100 80GB HBM3"}  # local GPU 1 of the second host
    a = analyze_paths([SAMPLES / "synthetic_2host_4gpu_kineto"])
    assert a.hardware["models"] == {"NVIDIA H100 80GB HBM3": 8}
    assert a.hardware["preset"] == "H100 SXM" and a.hardware["preset_from"] == "trace"
    assert a.hardware["link_peaks_gbps"] == {"ib": 50.0, "nvlink": 450.0}
    # the sample's collectives carry no bytes: no bandwidth to compare, so no verdict either way
    assert all(c.bus_bandwidth_gbps is None and c.bandwidth_verdict is None for c in a.collectives)
    # a sample whose files name no GPU keeps no peak, and no hardware section
    plain = analyze_paths([SAMPLES / "synthetic_1host_8gpu"])
    assert plain.hardware is None and all(c.link_peak_gbps is None for c in plain.collectives)
    assert "hardware" not in plain.to_json()


def test_trace_peaks_used_without_gpu():
    a = analyze_paths([shared_trace("kineto/ddp_2rank_a100_rank0.json.gz")])
    assert a.hardware["preset"] == "A100 SXM"
    peaked = [c for c in a.collectives if c.bus_bandwidth_gbps is not None]
    assert len(peaked) == 2
    for c in peaked:  # before: no peak without --gpu
        assert c.link == "nvlink" and c.link_peak_gbps == 300.0
        assert c.link_utilization == round(c.bus_bandwidth_gbps / 300.0, 4)


def test_gpu_flag_wins_and_disagreement_is_said():
    models = {"rank0/GPU:0": "NVIDIA A100-PG509-200"}
    own = job_hardware(models)
    assert own.preset.name == "A100 SXM" and own.peaks == {"nvlink": 300.0, "ib": 25.0} and not own.warnings
    forced = job_hardware(models, link_peaks("H100", None))
    assert forced.peaks == {"nvlink": 450.0, "ib": 50.0}
    assert forced.summary["preset_from"] == "--chip"
    assert forced.warnings == (
        "--chip H100 (H100 SXM) is not what the trace names: NVIDIA A100-PG509-200 (A100 SXM); "
        "the peaks of --chip are used",
    )
    assert not job_hardware(models, link_peaks("A100", None)).warnings
    # --link-peak wins over both
    assert job_hardware(models, link_peaks("H100", "ib=xdr")).peaks == {"nvlink": 450.0, "ib": 100.0}
    assert job_hardware(models, link_peaks(None, "nvlink=123")).peaks == {"nvlink": 123.0, "ib": 25.0}
    # an unknown model: a note, no peak
    unknown = job_hardware({"h/GPU:0": "NVIDIA GeForce RTX 3090"})
    assert unknown.peaks == {} and unknown.preset is None
    assert "NVIDIA GeForce RTX 3090: no preset" in unknown.summary["note"]
    mixed = job_hardware({"a/GPU:0": "NVIDIA H100 80GB HBM3", "b/GPU:0": "NVIDIA A100-SXM4-80GB"})
    assert mixed.preset is None and "2 GPU models" in mixed.summary["note"]


def test_gpu_a100_works():
    res = runner.invoke(app, ["analyze", str(SAMPLES / "synthetic_1host_8gpu"), "--gpu", "A100", "--json"])
    assert res.exit_code == 0, res.output  # before: "--gpu 'A100': unknown"
    doc = json.loads(res.stdout)
    assert doc["hardware"]["preset"] == "A100 SXM"
    nvlink = [c for c in doc["collectives"] if c["link"] == "nvlink" and c.get("bus_bandwidth_gbps")]
    assert nvlink and all(c["link_peak_gbps"] == 300.0 for c in nvlink)
    bad = runner.invoke(app, ["analyze", str(SAMPLES / "synthetic_1host_8gpu"), "--gpu", "RTX 3090"])
    assert bad.exit_code == 2 and "--chip 'RTX 3090': unknown; presets: V100 PCIe" in bad.output


# ---------------------------------------------------------------- latency-bound only below the knee


def test_knee_by_hand():
    # NCCL ring/Simple: 8.4 us + hops x 3.4 us (NVLink) or 14 us (network); bytes = latency x peak / bus factor
    assert latency_knee_bytes("all-reduce", 2, "nvlink", 300.0) == pytest.approx((8.4 + 2 * 3.4) * 1e-6 * 300e9)
    assert latency_knee_bytes("all-reduce", 8, "nvlink", 450.0) == pytest.approx((8.4 + 14 * 3.4) * 1e-6 * 450e9 / 1.75)
    assert latency_knee_bytes("all-gather", 4, "ib", 50.0) == pytest.approx((8.4 + 3 * 14) * 1e-6 * 50e9 / 0.75)
    assert latency_knee_bytes("all-to-all", 8, "nvlink", 450.0) == pytest.approx((8.4 + 3.4) * 1e-6 * 450e9 / 0.875)
    assert latency_knee_bytes("all-reduce", 1, "nvlink", 450.0) is None
    assert verdict(0.05, below_knee=True) == "latency-bound"
    assert verdict(0.05, below_knee=False) == "below-peak"
    assert verdict(0.5, below_knee=True) == "under-utilized"
    assert verdict(0.9, below_knee=False) == "bandwidth-bound"


def test_large_all_reduce_under_peak_is_not_latency_bound():
    """The issue's case: --gpu H100 on the DDP trace called a 19.5 MiB all-reduce latency-bound (1.5% of peak)."""
    path = shared_trace("kineto/ddp_2rank_a100_rank0.json.gz")
    a = analyze_paths([path], link_peaks=link_peaks("H100", None))
    by_kind = {c.kind: c for c in a.collectives}
    ar, bc = by_kind["all-reduce"], by_kind["broadcast"]
    assert ar.bytes_per_call == 20445626 and ar.link_utilization < 0.2
    knee = (8.4 + 2 * 3.4) * 1e-6 * 450e9  # 2 ranks, bus factor 1
    assert ar.latency_knee_bytes == round(knee) and ar.bytes_per_call > knee
    assert ar.bandwidth_verdict == "below-peak"
    # a 104 KiB broadcast at 1.2% of the peak is latency-bound: far below the knee
    assert bc.bytes_per_call < bc.latency_knee_bytes and bc.bandwidth_verdict == "latency-bound"
    remedy = next(o.remedy for o in a.opportunities if o.name == ar.name)
    assert "not latency-bound" in remedy and "it is latency-bound" not in remedy


# ---------------------------------------------------------------- model TFLOPS above the trace's own peak


@pytest.mark.slow
def test_model_tflops_above_the_traces_own_peak_is_flagged_and_refused(tmp_path):
    folder = shared_trace("kineto/dlrm_8rank_v100")
    args = ["analyze", str(folder), "--model", "deepseek-v3", "--tokens-per-step", "1048576", "--job-devices", "256"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    tp = doc["throughput"]
    assert tp["peak_tflops"] == 125.0 and tp["peak_device"] == "V100 SXM2"  # before: no peak, no flag
    # 1,048,576 tokens per step of 19.685 ms (the job's step: its kernels' first start to last end, §5), at
    # DeepSeek-V3's FLOPs per token over 256 devices: 5.155e4 at the 19.901 ms the slowest CPU range gave
    assert doc["step_ns"] == 19_685_000
    assert tp["tflops_per_device"] == pytest.approx(5.155e4 * 19.901 / 19.685, rel=1e-3)
    assert tp["mfu"] == pytest.approx(tp["tflops_per_device"] / 125.0)
    assert any(w.startswith("MFU ") and "is impossible" in w for w in doc["warnings"])
    saved = tmp_path / "dlrm.json"
    saved.write_text(res.stdout)
    check = runner.invoke(app, ["check", str(saved), "--max-comm-share", "0.99"])
    assert check.exit_code == 2
    # check shows every warning of the analysis first (issue 25 §5), then refuses in one line
    lines = [line for line in check.output.strip().splitlines() if not line.startswith("moeprof: warning:")]
    assert len(lines) == 1 and "is impossible" in lines[0] and "--model deepseek-v3" in lines[0]
    screen = runner.invoke(app, args)
    assert "warning: MFU" in screen.stdout and "is impossible" in screen.stdout


# ---------------------------------------------------------------- the NVLink domain fits the hosts


@pytest.mark.slow
@pytest.mark.parametrize("size", [3, 5, 6, 12])
def test_domain_size_that_cuts_a_host_is_refused(size):
    res = runner.invoke(app, ["analyze", str(SAMPLES / "synthetic_1host_8gpu"), "--nvlink-domain-size", str(size)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1
    assert f"--nvlink-domain-size {size} does not fit hosts of 8 GPUs" in lines[0]
    with pytest.raises(InputError, match="does not fit hosts of 8 GPUs"):
        analyze_paths([SAMPLES / "synthetic_1host_8gpu"], LoadOptions(nvlink_domain_size=size))


@pytest.mark.slow
@pytest.mark.parametrize("size", [1, 2, 4, 8, 16, 72])
def test_domain_size_of_whole_hosts_or_even_parts_is_taken(size):
    a = analyze_paths([SAMPLES / "synthetic_1host_8gpu"], LoadOptions(nvlink_domain_size=size))
    assert len(a.devices) == 8


# ---------------------------------------------------------------- xGMI on screen for AMD


def _screen(analysis) -> str:
    console = Console(width=160, record=True, color_system=None)
    terminal.render(analysis, console)
    return console.export_text()


def test_amd_scale_up_fabric_is_called_xgmi_on_screen():
    a = analyze_paths([SAMPLES / "synthetic_1host_8gpu"])
    nvidia = _screen(a)
    assert "comm NVLink" in nvidia and "xGMI" not in nvidia
    amd = a.with_(hardware=job_hardware({d.device: "AMD Instinct MI300X" for d in a.devices}).summary)
    text = _screen(amd)
    assert "comm xGMI" in text and "over xGMI" in text
    assert "NVLink" not in text.replace("keep it on NVLink", "")  # remedies are another matter
    assert "= MI300X (xGMI 448 GB/s, NIC 50 GB/s per GPU each way; 1,307 TFLOPS bf16)" in text


def test_mi300_xplane_says_xgmi():
    path = shared_trace("xplane/jax_conv_8xmi300.xplane.pb")
    text = _screen(analyze_paths([path]))
    assert "comm xGMI" in text and "comm NVLink" not in text
    assert "MI300X" in text


@pytest.mark.slow
def test_html_names_xgmi(tmp_path: Path):
    path = shared_trace("xplane/jax_conv_8xmi300.xplane.pb")
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["report", str(path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert "comm xGMI" in html and "comm NVLink" not in html
    assert "= MI300X (xGMI 448 GB/s" in html


@pytest.mark.slow
def test_an_amd_gpu_without_a_preset_reads_xgmi_and_gets_hip_graphs(tmp_path):
    """The MI300X sample with its agents renamed to a GPU the table lacks (MI250X): no peaks, but the fabric is
    still xGMI on screen and in the JSON, and launch gaps get HIP graphs, not CUDA graphs."""
    folder = tmp_path / "mi250x-node0"
    folder.mkdir()
    for f in (SAMPLES / "synthetic_rocprof_mi300x" / "mi300x-node0").iterdir():
        data = f.read_bytes()
        (folder / f.name).write_bytes(data.replace(b"MI300X", b"MI250X") if "agent_info" in f.name else data)
    res = runner.invoke(app, ["analyze", str(folder), "--jobs", "1", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["hardware"]["vendor"] == "AMD" and doc["hardware"]["scale_up"] == "xGMI"
    assert "preset" not in doc["hardware"] and "AMD Instinct MI250X" in doc["hardware"]["models"]
    families = {o["remedy_family"] for o in doc["opportunities"]}
    assert "hip-graphs" in families and "cuda-graphs" not in families
    text = runner.invoke(app, ["analyze", str(folder), "--jobs", "1"]).stdout
    assert "xGMI" in text and "NVLink" not in text
