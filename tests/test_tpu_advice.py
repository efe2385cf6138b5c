"""Issue 31 items 4-6: the chip's peaks (TPU presets, --chip), advice that fits a TPU, JAX name scopes (the
per-scope table, the scope~ what-if filter) and the FLOPs utilization the trace's own ops state."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import moeprof
from moeprof.cli import app
from moeprof.core.classify import classify
from moeprof.core.events import make_table
from moeprof.core.hardware import match, table
from moeprof.core.scopes import NO_SCOPE, TOP_LEVEL, attach_scopes, fold_layers, scope_key
from moeprof.core.topology import attribute_links
from moeprof.core.trace import Trace, make_markers
from moeprof.insight.remedies import Situation, catalogue, choose, for_collective
from moeprof.insight.stack import Stack
from moeprof.pipeline import Request, analyze_paths, run

from .helpers import SAMPLES

runner = CliRunner()
CPU_DEMO = SAMPLES / "cpu_moe_8dev"


# ---------------------------------------------------------------- presets


@pytest.mark.parametrize(
    "preset, bf16, hbm, ici_bidirectional, dcn",
    [
        # Google Cloud's TPU pages: peak bf16 TFLOP/s, HBM GB/s, bidirectional ICI GB/s, DCN per chip (GB/s)
        ("TPU v5e", 197.0, 819.0, 400.0, 2 * 100 / 8 / 8),  # 2 x 100 Gbps NICs per host of 8 chips
        ("TPU v5p", 459.0, 2765.0, 1200.0, 50 / 8),
        ("TPU v6e", 918.0, 1638.0, 800.0, 100 / 8),
        ("TPU7x", 2307.0, 7380.0, 1200.0, 100 / 8),
        ("TPU v4", 275.0, 1200.0, None, None),  # its page states no per-chip ICI or DCN bandwidth
    ],
)
def test_tpu_presets_hold_googles_figures(preset, bf16, hbm, ici_bidirectional, dcn):
    chip = next(t for t in table().tpus if t.name == preset)
    assert chip.vendor == "Google" and chip.is_tpu and chip.scale_up == "ici" and chip.scale_out == "dcn"
    assert chip.bf16_tflops == bf16 and chip.hbm_gbps == hbm
    assert chip.scale_up_gbps == (None if ici_bidirectional is None else ici_bidirectional / 2)  # one direction
    assert chip.scale_out_gbps == (None if dcn is None else pytest.approx(dcn))
    assert chip.sources and "cloud.google.com/tpu/docs" in chip.sources[0]
    assert f"{bf16:g}" in chip.sources[0] and f"{hbm:g}" in chip.sources[0]
    if ici_bidirectional:
        assert f"{ici_bidirectional:g}" in chip.sources[0]


@pytest.mark.parametrize(
    "name, preset",
    [
        ("TPU v5 lite", "TPU v5e"),  # JAX's device_kind on v5e
        ("TPU v5 Lite", "TPU v5e"),  # the plane's device_type_string
        ("v5litepod-4", "TPU v5e"),  # TPU_ACCELERATOR_TYPE
        ("TPU v5e", "TPU v5e"),
        ("TPU v5", "TPU v5p"),
        ("v5p", "TPU v5p"),
        ("TPU v6 lite", "TPU v6e"),
        ("Trillium", "TPU v6e"),
        ("TPU7x", "TPU7x"),
        ("Ironwood", "TPU7x"),
        ("TPU v4", "TPU v4"),
        ("TPU v4 lite", None),  # v4i: other figures
        ("TPU v3", None),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),  # GPUs as before
    ],
)
def test_chip_names(name, preset):
    found = match(name)
    assert (found.preset.name if found.preset else None) == preset
    if preset is None:
        assert "no preset" in found.note


def test_chip_option_takes_tpu_names_and_gpu_stays_an_alias():
    res = runner.invoke(app, ["analyze", str(SAMPLES / "synthetic_1host_8gpu"), "--chip", "TPU v5e", "--json"])
    assert res.exit_code == 0, res.output  # before: "--gpu 'TPU v5e': unknown"
    hw = json.loads(res.stdout)["hardware"]
    assert hw["preset"] == "TPU v5e" and hw["preset_from"] == "--chip"
    assert hw["scale_up"] == "ICI" and hw["scale_out"] == "DCN" and hw["hbm_gbps"] == 819.0
    assert hw["link_peaks_gbps"] == {"nvlink": 200.0, "ib": 3.125}
    old = runner.invoke(app, ["analyze", str(SAMPLES / "synthetic_1host_8gpu"), "--gpu", "A100", "--json"])
    assert old.exit_code == 0 and json.loads(old.stdout)["hardware"]["preset"] == "A100 SXM"
    bad = runner.invoke(app, ["analyze", str(SAMPLES / "synthetic_1host_8gpu"), "--chip", "TPU v4 lite"])
    assert bad.exit_code == 2 and "--chip 'TPU v4 lite': unknown (TPU v4i" in bad.output


# ---------------------------------------------------------------- remedies on a TPU

GPU_WORDS = re.compile(r"(?i)CUDA|NCCL|--xla_gpu|NVLink|InfiniBand|\bSMs?\b|command buffer|torch")
# every libtpu flag a TPU remedy names, with the MaxText or Google recipe that uses it (remedies.toml cites them)
SOURCED_FLAGS = {
    "--xla_tpu_enable_async_collective_fusion",  # MaxText xla_flags_library.py CF_FOR_ALL_GATHER / _ALL_REDUCE
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_reduce",
    "--xla_tpu_enable_async_collective_fusion_fuse_reduce_scatter",  # ENABLE_SPARSECORE_OFFLOADING_FOR_RS
    "--xla_tpu_enable_async_collective_fusion_multiple_steps",
    "--xla_tpu_overlap_compute_collective_tc",
    "--xla_enable_async_all_gather",
    "--xla_enable_async_all_reduce",
    "--xla_tpu_enable_sparse_core_collective_offload_reduce_scatter",
    "--xla_tpu_enable_data_parallel_all_reduce_opt",  # DATA_PARALLEL_OVERLAP (DCN all-reduces)
    "--xla_tpu_data_parallel_opt_different_sized_ops",
    "--xla_enable_async_collective_permute",  # ENABLE_ASYNC_COLLECTIVE_PERMUTE
    "--xla_tpu_enable_all_experimental_scheduler_features",  # HOST_OFFLOAD_FLAGS
    "--xla_tpu_enable_scheduler_memory_pressure_tracking",
    "--xla_tpu_host_transfer_overlap_limit",
    "--xla_max_concurrent_host_send_recv",
    "--xla_tpu_enable_async_all_to_all",  # MaxText v6e benchmark configs, ASYNC_A2A
}
KINDS = sorted({k for r in catalogue()[0] for k in r.kinds})


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_a_tpu_remedy_and_none_speaks_gpu(kind):
    for flags in (frozenset(), frozenset({"moe"}), frozenset({"moe", "ragged_all_to_all"})):
        for role in ("expert", "data-parallel", "none"):
            for bound in ("wait", "transfer", "unknown"):
                for link in ("nvlink", "ib", "unknown"):
                    s = Situation(kind, role, link, "tpu", bound, 0.1)
                    fix, text = for_collective(s, Stack("xla", "training", True, flags), "below-peak")
                    assert fix.devices == ("tpu",) and fix.id.startswith("tpu-"), (kind, fix.id)
                    assert not GPU_WORDS.search(text), (kind, fix.id, text)


def test_tpu_remedy_flags_are_the_sourced_ones():
    rows = [r for r in catalogue()[0] if "tpu" in r.devices]
    assert rows and all(r.devices == ("tpu",) for r in rows)
    for r in rows:
        flags = set(re.findall(r"--xla_\w+", r.text))
        assert flags <= SOURCED_FLAGS, (r.id, flags - SOURCED_FLAGS)
        if flags:
            assert r.sources, r.id
    # a GPU keeps its GPU remedies: no TPU row is ever chosen for a GPU or a CPU
    for kind in KINDS:
        for devices in ("gpu", "cpu"):
            assert not choose(Situation(kind, devices=devices), Stack("xla")).id.startswith("tpu-")


def test_tpu_addenda_name_ici_and_dcn():
    s = Situation("all-to-all", "expert", "ib", "tpu", "transfer", 0.1)
    _, text = for_collective(s, Stack("xla", "training", True, frozenset({"moe"})), "under-utilized")
    assert "crosses DCN" in text and "ICI peak" in text and "NCCL" not in text


# ---------------------------------------------------------------- scopes


@pytest.mark.parametrize(
    "path, key, backward",
    [
        ("jit(step)/jvp(layer0)/experts/dot_general:", "layer0/experts", False),
        ("jit(step)/transpose(jvp(layer2))/experts/ragged_dot_general/ragged-dot-none:", "layer2/experts", True),
        ("jit(step)/jvp(layer0)/router/jit(_one_hot)/broadcast_in_dim:", "layer0/router", False),
        ("jit(step)/transpose(jvp())/shard_map/moe/scatter-add", "moe", True),  # a primitive with a hyphen
        ("jit(step)/adam/mul", "adam", False),
        # a while loop's body is structure; a scope entered twice in a row is one
        (
            "jit(step)/transpose(jvp(layer1))/moe/moe_experts/moe_experts/while/body/dot_general",
            "layer1/moe/moe_experts",
            True,
        ),
        ("jit(step)/add", TOP_LEVEL, False),
        ("jit(step)/jvp()/moe/tk,tkh->th/dot_general", "moe", False),  # an einsum names a call, not a scope
        ("jit(step)/transpose(jvp())/mul;jit(step)/transpose(jvp())/broadcast_in_dim", TOP_LEVEL, True),  # fused
        ("", NO_SCOPE, False),
    ],
)
def test_scope_key(path, key, backward):
    assert scope_key(path) == (key, backward)


def test_fold_layers():
    keys = ["layer0/experts", "layer1/experts", "layer2/router", "layer1", "mlp/fc1", "mlp/fc2", "block3/attn", "adam"]
    folded = fold_layers(keys)
    assert folded["layer0/experts"] == folded["layer1/experts"] == "layer*/experts"
    assert folded["layer2/router"] == "layer*/router"  # one name, several numbers at that depth
    assert folded["layer1"] == "layer*"  # the layer's own ops (its FSDP gathers): a layer, with scopes inside
    assert folded["mlp/fc1"] == "mlp/fc1" and folded["mlp/fc2"] == "mlp/fc2"  # the last part: kept
    assert folded["block3/attn"] == "block3/attn" and folded["adam"] == "adam"  # one number only


def test_scope_from_the_hlo_and_the_kernels_first_event():
    """A GPU XPlane carries hlo_op on the first event of a kernel's name in the file only: its other events,
    on any device, take that event's scope."""
    events = make_table(
        {
            "host": "h",
            "device": ["h/GPU:0", "h/GPU:0", "h/GPU:0", "h/GPU:1"],
            "name": ["fusion_1", "fusion_1", "fusion_2", "fusion_1"],
            "hlo_module": ["jit_step", "", "jit_step", ""],
            "hlo_op": ["fusion.1", "", "missing.7", ""],
            "program_id": [3, -1, 3, -1],
            "start_ns": [0, 10, 20, 0],
            "end_ns": [5, 15, 25, 5],
            "activity": "kernel",
        }
    )
    from moeprof.core.hlo import parse_hlo_text

    hlo = parse_hlo_text(
        "HloModule jit_step\n\nENTRY %main {\n"
        '  %fusion.1 = f32[4]{0} fusion(), kind=kLoop, metadata={op_name="jit(step)/jvp(moe)/experts/dot_general"}\n'
        "}\n"
    )
    trace = attach_scopes(Trace(events=events, path="x", format="xplane", hlo={("jit_step", 3): hlo}))
    scope = trace.events["scope"].astype(str).tolist()
    # fusion_2's op is not in the HLO: no scope; GPU:1's fusion_1 takes the name's scope from GPU:0
    assert scope == ["jit(step)/jvp(moe)/experts/dot_general"] * 2 + ["", "jit(step)/jvp(moe)/experts/dot_general"]


def test_cpu_demo_scope_table_adds_up_and_names_the_moe_scopes():
    a = analyze_paths([CPU_DEMO])
    by = {r.scope: r for r in a.scopes}
    assert sum(r.total_ns for r in a.scopes) == a.total.accumulated_ns
    assert {"moe", "moe/moe_experts", TOP_LEVEL} <= set(by)
    # every all-to-all of the demo runs in its moe scope (the demo's _in_moe_scope): its time is moe's comm
    a2a = sum(c.total_ns for c in a.collectives if c.kind == "all-to-all")
    assert a2a > 0 and by["moe"].comm_ns >= a2a
    assert all(r.tflops_per_s is None for r in a.scopes) and a.utilization is None  # XLA:CPU states no FLOPs
    doc = a.to_json()
    assert [r["scope"] for r in doc["scopes"]] == [r.scope for r in a.scopes]
    back = moeprof.Analysis.from_json(json.loads(json.dumps(doc)))
    assert back.scopes == a.scopes


def test_scope_what_if_selects_by_name_scope():
    """name~moe_experts matches no activity (XLA names its ops fusion.N, all_to_all.N); scope~ does."""
    state = run(Request(moeprof.load(CPU_DEMO)))
    assert state.projector is not None
    job = state.projector.job
    scoped = job.codes("scope")
    chosen = np.array(["moe_experts" in str(v) for v in scoped[1].tolist()], dtype=bool)[scoped[0]]
    named = job.codes("name")
    assert not np.array(["moe_experts" in str(v) for v in named[1].tolist()], dtype=bool)[named[0]].any()
    assert chosen.any()
    half = moeprof.analyze(moeprof.load(CPU_DEMO), what_if=["scale(scope~moe_experts)=0"]).projection("asked")
    same = moeprof.analyze(moeprof.load(CPU_DEMO), what_if=["scale(name~moe_experts)=0"]).projection("asked")
    assert same.projected_step_ns == same.measured_step_ns  # selects nothing: nothing changes
    assert half.projected_step_ns < half.measured_step_ns
    res = runner.invoke(app, ["analyze", str(CPU_DEMO), "--what-if", "scale(scope=moe)=0.5"])
    assert res.exit_code == 2 and "scope takes a pattern: scope~REGEX" in res.output


# ---------------------------------------------------------------- FLOPs against the chip's peak


def _tpu_trace(model_b: float) -> Trace:
    """Two 1 ms steps on one TPU chip; per step op a (400 µs, 4e10 FLOPs: 100 TFLOP/s), op b (200 µs,
    8e10 FLOPs by XLA's flops stat: 400 TFLOP/s, model_flops ``model_b``), op c (100 µs, 1e9)."""
    ops = [
        ("fusion.1", "jit(step)/jvp(layer0)/experts/dot_general:", 0, 400_000, 4e10, 4e10),
        ("fusion.2", "jit(step)/transpose(jvp(layer1))/experts/dot_general:", 400_000, 600_000, 8e10, model_b),
        ("fusion.3", "jit(step)/adam/mul:", 600_000, 700_000, 1e9, 1e9),
    ]
    rows = [(n, s, a + k * 1_000_000, b + k * 1_000_000, f, m) for k in range(2) for n, s, a, b, f, m in ops]
    names, scopes, starts, ends, flops, model = (list(x) for x in zip(*rows, strict=True))
    events = make_table(
        {
            "host": "vm",
            "device": "vm/TPU:0",
            "global_id": 0,
            "gpus_per_domain": 1,
            "stream": "XLA Ops",
            "name": names,
            "hlo_op": names,
            "scope": scopes,
            "start_ns": starts,
            "end_ns": ends,
            "activity": "kernel",
            "source": "xplane",
            "flops": flops,
            "model_flops": model,
        }
    )
    # the Steps line, and the XLA Modules line: one program execution per step, 700 µs of its 1 ms
    markers = make_markers(
        host="vm", device="vm/TPU:0", kind=["step", "step", "module", "module"], name="jit_step",
        start_ns=[0, 1_000_000, 0, 1_000_000], end_ns=[1_000_000, 2_000_000, 700_000, 1_700_000],
        number=[0, 1, -1, -1],
    )  # fmt: skip
    trace = Trace(
        events=events,
        path="tpu",
        format="xplane",
        markers=markers,
        framework="jax",
        device_peaks={"vm/TPU:0": {"tflops": 202.7, "hbm_gbps": 819.16}},
        device_kinds={"vm/TPU:0": "TPU"},
    )
    return attribute_links(attach_scopes(classify(trace)))


def test_utilization_uses_model_flops_and_the_planes_peak():
    a = moeprof.analyze(_tpu_trace(model_b=2e10))
    u = a.utilization
    assert u["flops_source"] == "model_flops" and u["peak_tflops"] == 202.7
    assert "device plane" in u["peak_from"]
    per_step = 4e10 + 2e10 + 1e9
    assert u["flops_per_step"] == pytest.approx(per_step)
    assert u["tflops_per_s_per_device"] == pytest.approx(per_step / 1_000_000 / 1e3)  # FLOPs per ns / 1e3
    assert u["mfu"] == pytest.approx(per_step / 1e6 / 1e3 / 202.7)
    assert "ops_above_peak" not in u and "steps_above_peak" not in u
    experts = next(r for r in a.scopes if r.scope == "layer*/experts")
    assert experts.members == ("layer0/experts", "layer1/experts") and experts.backward_ns == 2 * 200_000
    assert experts.tflops_per_s == pytest.approx(2 * (4e10 + 2e10) / (2 * 600_000) / 1e3)
    assert experts.peak_fraction == pytest.approx(experts.tflops_per_s / 202.7)


def test_an_op_above_the_peak_is_named_and_the_step_flagged():
    """With model_flops equal to XLA's flops (as the shared ragged_dot capture has them), op b states 400
    TFLOP/s: more than the 202.7 the chip can do. It is named with its factor, and so is every step whose
    stated FLOPs exceed the peak; nothing is capped."""
    a = moeprof.analyze(_tpu_trace(model_b=8e10))
    u = a.utilization
    (op,) = u["ops_above_peak"]
    assert op["op"] == "fusion.2" and op["scope"] == "layer1/experts"
    assert op["tflops_per_s"] == pytest.approx(8e10 / 200_000 / 1e3) and op["of_peak"] == pytest.approx(400 / 202.7)
    assert u["ops_above_peak_flops_share"] == pytest.approx(8e10 / (4e10 + 8e10 + 1e9))
    assert any("fusion.2 (2.0x)" in w for w in a.warnings)
    assert "steps_above_peak" not in u  # 121 TFLOP/s per step: under the peak
    flagged = moeprof.analyze(_tpu_trace(model_b=8e11)).utilization  # 881 TFLOP/s per step
    assert [s["step"] for s in flagged["steps_above_peak"]] == [0, 1]
    assert flagged["mfu"] == pytest.approx((4e10 + 8e11 + 1e9) / 1e6 / 1e3 / 202.7)


def test_a_chip_named_on_the_command_line_wins_over_the_plane():
    a = moeprof.analyze(_tpu_trace(2e10), link_peaks=moeprof_link_peaks("TPU v5p"))
    assert a.utilization["peak_tflops"] == 459.0 and a.utilization["peak_from"] == "--chip TPU v5p"


def moeprof_link_peaks(chip: str):
    from moeprof.insight.bandwidth import link_peaks

    return link_peaks(chip, None)


def test_tpu_device_gets_host_gaps_not_launch_or_cuda_advice():
    """One program per step: the 300 µs between the two executions (700 µs to 1 ms) is the host's; the
    window ends at the last op (1.7 ms), so the idle after it is not counted."""
    a = moeprof.analyze(_tpu_trace(2e10))
    assert not [o for o in a.opportunities if o.kind in ("launch-gaps", "small-gemms")]
    (gaps,) = [o for o in a.opportunities if o.kind == "host-gaps"]
    assert gaps.saving_bound_ns == 300_000 and gaps.evidence["count"] == 1
    assert gaps.remedy_id == "tpu-host-gaps" and "one program per step" in gaps.remedy
    for o in a.opportunities:
        assert not GPU_WORDS.search(o.remedy), o.remedy


# ---------------------------------------------------------------- capture on a TPU

NO_TCP = """
import errno, socket, sys, runpy
class Refused(socket.socket):  # the OS refusing TCP sockets, as the TPU machine's sandbox does (errno 97)
    def __init__(self, *args, **kwargs):
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
socket.socket = Refused
sys.argv = ["moeprof", "capture", *sys.argv[1:]]
runpy.run_module("moeprof", run_name="__main__")
"""


@pytest.mark.parametrize(
    "args, why",
    [
        (["run", "--", sys.executable, "-c", "pass"], "talks to the job's profiler over loopback"),
        (["live", "127.0.0.1:9999"], "reaches the job's profiler servers over TCP"),
    ],
    ids=["run", "live"],
)
def test_capture_without_tcp_says_so_and_names_the_library_route(tmp_path, args, why):
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", NO_TCP, args[0], "--out", str(out), *args[1:]]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    (line,) = lines
    assert "cannot open a TCP socket on this machine (OSError [Errno 97]" in line and why in line
    assert "moeprof.profile_steps" in line and "jax.profiler.trace" in line
    assert not out.exists()  # refused before anything ran or was written


def test_demo_is_sized_for_an_accelerator_and_keeps_its_cpu_sizes():
    from moeprof.capture.demo import demo_topology
    from moeprof.demo.config import DemoConfig, sized_for

    given = {"expert_ffn": 1024, "router_skew": 4.0}
    assert sized_for("cpu", given) == given  # DemoConfig's small CPU sizes: the tests and the quick demo
    on_tpu = DemoConfig(**sized_for("tpu", given))
    assert (on_tpu.dtype, on_tpu.hidden, on_tpu.tokens_per_device, on_tpu.layers) == ("bfloat16", 2048, 16384, 3)
    assert on_tpu.router_skew == 4.0 and on_tpu.expert_ffn == 1024
    assert DemoConfig(**sized_for("gpu", {"hidden": 512, "dtype": "float32"})).hidden == 512  # what was given wins
    cpu = DemoConfig(**sized_for("cpu", {}))
    assert (cpu.dtype, cpu.hidden, cpu.tokens_per_device) == ("float32", 64, 256)
    assert demo_topology("tpu", 4) == {"hosts": 1, "devices_per_host": 4, "ici_domain": "one slice"}
    assert demo_topology("cpu", 4) == {"hosts": 1, "devices_per_host": 4, "nvlink_domain": "one host"}


def test_model_mfu_takes_the_planes_peak():
    """--model's MFU on a TPU is against the chip's own stated peak (202.7), not the page's 197."""
    from moeprof.insight.throughput import with_throughput

    a = with_throughput(moeprof.analyze(_tpu_trace(2e10)), "deepseek-v3", tokens_per_step=1024)
    assert a.throughput["peak_tflops"] == 202.7
    assert a.throughput["mfu"] == pytest.approx(a.throughput["tflops_per_device"] / 202.7)


# ---------------------------------------------------------------- the real TPU captures (after TPU reading)


def test_ragged_dot_capture_against_xprofs_figures():
    """tpu/moe_ragged_dot_v5e_1chip (README there, xprof 2.24 on the same file): XLA's cost model states 22.30 T
    FLOPs per step, 151% of the 202.7 TFLOP/s the plane states, because it counts the backward ragged dots it
    expands into convolution fusions dense over the 16 experts: recounted from their shapes (tests/
    test_ragged_flops.py) nothing is above the peak, XLA's figure kept beside; the 1.24 ms per step xprof calls
    idle lies between the step's program executions."""
    from moeprof.errors import InputError

    from .helpers import shared_trace

    try:
        a = analyze_paths([shared_trace("tpu/moe_ragged_dot_v5e_1chip.xplane.pb")])
    except InputError as exc:  # this branch alone, before issue 31's TPU reading (items 1-3) is merged
        if "no device activity" not in str(exc):
            raise
        pytest.skip("TPU planes are not read here yet (issue 31 items 1-3)")
    u = a.utilization
    assert u["peak_tflops"] == 202.7 and "device plane" in u["peak_from"]
    assert u["flops_per_step_xla"] == pytest.approx(22.30e12, rel=1e-3)
    assert u["mfu_xla"] == pytest.approx(1.486, abs=0.005) and u["recounted_ops"] == 27
    # the 9 weight gradients each lose 15 of their 16 dense ragged dots (2·M·K·N = 1.374e11 FLOPs each)
    assert u["flops_per_step"] == pytest.approx(u["flops_per_step_xla"] - 9 * 15 * 2 * 32_768 * 2_048 * 1_024)
    assert "steps_above_peak" not in u and "ops_above_peak" not in u
    assert not any("fusion.189" in w for w in a.warnings)
    by = {r.scope: r for r in a.scopes}
    assert {"layer*/experts", "layer*/permute", "layer*/unpermute", "layer*/router", "adam"} <= set(by)
    assert by["layer*/experts"].members == ("layer0/experts", "layer1/experts", "layer2/experts")
    (gaps,) = [o for o in a.opportunities if o.kind == "host-gaps"]
    # xprof: idle 7.470 ms over the capture, of which all but what idles inside the programs is between them
    assert gaps.exposed_ns == pytest.approx(7.470e6, rel=0.01) and gaps.remedy_id == "tpu-host-gaps"
    assert a.hardware["preset"] == "TPU v5e" and a.hardware["hbm_gbps"] == 819.0


def test_a_tpu_screen_counts_chips_not_devices():
    """On a TPU the screen says chip (issue 39 item 4): the headline counts chips and every "worst device"
    (first try, opportunity panel) is the worst chip; a GPU job keeps its devices."""
    tpu = CliRunner().invoke(app, ["analyze", str(SAMPLES / "tpu_v5e_demo")], env={"COLUMNS": "200"})
    assert tpu.exit_code == 0, tpu.output
    assert "1 chip from 1 trace file" in tpu.stdout and "device from" not in tpu.stdout
    assert "the worst chip" in tpu.stdout and "the worst device" not in tpu.stdout
    gpu = CliRunner().invoke(app, ["analyze", str(SAMPLES / "synthetic_1host_8gpu")], env={"COLUMNS": "200"})
    assert gpu.exit_code == 0, gpu.output
    assert "8 devices from 1 trace file" in gpu.stdout and "the worst chip" not in gpu.stdout
