"""Tests of the demo MoE training step (moeprof.demo.model).

jax reads XLA_FLAGS once, and pytest may already have imported jax without 8
host devices, so every check runs in one child Python with the flag set; the
child writes its findings as JSON and the tests below assert on them.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .helpers import CPU_COMPILE_FLAGS

REPO = Path(__file__).resolve().parents[1]
DEVICES = 8

CHILD = textwrap.dedent(
    r"""
    import json, sys, time
    import numpy as np
    from pathlib import Path

    from moeprof.demo import configure_host_devices

    assert configure_host_devices(8), "jax imported too early"
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from moeprof.demo import DemoConfig, dense_reference_moe, run_demo, sharded_moe
    from moeprof.demo import model

    out_path, trace_dir = Path(sys.argv[1]), Path(sys.argv[2])
    arrays_dir = out_path.parent
    found = {"device_count": jax.device_count()}

    def summary(result):
        return {
            "records": [vars(r) for r in result.records],
            "tokens_per_second": result.tokens_per_second,
            "compile_seconds": result.compile_seconds,
            "total_seconds": result.total_seconds,
            "a2a_impl": result.a2a_impl,
            "expert_impl": result.expert_impl,
            "expert_ops": result.expert_ops,
            "load": result.load,
            "xla_flags": result.xla_flags,
            "model_flops_per_token": result.model_flops_per_token,
            "active_params_per_token": result.active_params_per_token,
        }

    t = time.perf_counter()
    default = run_demo(DemoConfig(), trace_dir)
    found["default"] = summary(default)
    found["default"]["hlo_text"] = default.hlo_text
    found["default"]["wall_seconds"] = time.perf_counter() - t
    files = [p for p in trace_dir.rglob("*") if p.is_file()]
    found["trace_files"] = {str(p.relative_to(trace_dir)): p.stat().st_size for p in files}

    skewed = dict(router_skew=2.0, steps=2, warmup_steps=0, layers=1)
    found["skewed_dropless"] = summary(run_demo(DemoConfig(**skewed), None))
    found["skewed_capacity"] = summary(run_demo(DemoConfig(capacity_factor=1.0, **skewed), None))
    found["skewed_ahead"] = summary(run_demo(DemoConfig(sync_every=2, **skewed), None))
    found["skew4"] = summary(run_demo(DemoConfig(router_skew=4.0, steps=1, warmup_steps=0, layers=1), None))

    # what the first step of those one-layer runs routes: its input and router, for a recomputation in numpy
    one_layer = DemoConfig(layers=1)
    key_params, key_data = jax.random.split(jax.random.key(one_layer.seed))
    first = model.init_params(one_layer, key_params)[0]
    x0, _ = model.make_batch(one_layer, jax.device_count(), key_data)
    for name, value in (("x", x0), ("norm", first["norm"]), ("router", first["router"])):
        np.save(arrays_dir / f"{name}.npy", np.asarray(value))

    # the tiled expert computation against ragged_dot, on group sizes that hit every edge
    M, H, F, G, TILE = 300, 16, 24, 3, 32
    ks = jax.random.split(jax.random.key(3), 5)
    xs = jax.random.normal(ks[0], (M, H), jnp.float32)
    w = {
        "w_up": jax.random.normal(ks[1], (G, H, F)),
        "w_gate": jax.random.normal(ks[2], (G, H, F)),
        "w_down": jax.random.normal(ks[3], (G, F, H)),
    }
    probe = jax.random.normal(ks[4], (M, H), jnp.float32)
    scale = lambda a: float(jnp.max(jnp.abs(a))) + 1e-12
    err = lambda a, b: float(jnp.max(jnp.abs(a - b))) / scale(b)
    tiled_cases = []
    # the group sizes are arguments, as in the demo's step (its router computes them): one compilation per
    # activation, not one per case
    tiled_of = {
        act: (
            jax.jit(lambda xs, w, gs, act=act: model.tiled_expert_ffn(xs, w, gs, act, TILE)),
            jax.jit(jax.grad(
                lambda xs, w, gs, act=act: jnp.sum(model.tiled_expert_ffn(xs, w, gs, act, TILE) * probe),
                argnums=(0, 1),
            )),
        )
        for act in ("swiglu", "gelu")
    }
    for sizes in ([100, 0, 77], [0, 0, 0], [300, 0, 0], [1, 1, 1], [32, 64, 96], [65, 130, 105]):
        gs = jnp.array(sizes, jnp.int32)
        for act in ("swiglu", "gelu"):
            tiled, tiled_grad = tiled_of[act]
            ragged = lambda xs, w: model.ragged_expert_ffn(xs, w, gs, act)
            y_t, y_r = tiled(xs, w, gs), ragged(xs, w)
            g_t = tiled_grad(xs, w, gs)
            g_r = jax.grad(lambda xs, w: jnp.sum(ragged(xs, w) * probe), argnums=(0, 1))(xs, w)
            used = sum(sizes)
            tiled_cases.append({
                "sizes": sizes,
                "activation": act,
                "out_rel_err": err(y_t, y_r),
                "tail_max_abs": float(jnp.max(jnp.abs(y_t[used:]))) if used < M else 0.0,
                "grad_x_rel_err": err(g_t[0], g_r[0]),
                "grad_w_rel_err": max(err(g_t[1][k], g_r[1][k]) for k in ("w_up", "w_down")),
                "grad_gate_rel_err": err(g_t[1]["w_gate"], g_r[1]["w_gate"]),
            })
    found["tiled_vs_ragged"] = tiled_cases
    n_tiles, group, first_row, end = model.tile_schedule(jnp.array([65, 0, 130], jnp.int32), 64, 300 // 64 + 1 + 3)
    found["schedule"] = {
        "n_tiles": int(n_tiles), "group": group.tolist(), "first": first_row.tolist(), "end": end.tolist()
    }

    # the real ragged_all_to_all, traced (XLA:CPU cannot compile it): on one device with the tiled experts,
    # the loop carry's type must hold (a TPU refused the program when the exchange's output buffer was
    # typed as the same on every device)
    one = DemoConfig(devices=1, expert_compute="tiled", tokens_per_device=64, hidden=32, expert_ffn=32, layers=1)
    one_mesh = model.make_mesh(one)
    state = model.initial_state(one, one_mesh)
    try:
        jax.jit(model.make_train_step(one, one_mesh, state[0], "ragged", "tiled")).trace(*state)
        found["tiled_ragged_one_device"] = "traced"
    except Exception as exc:
        found["tiled_ragged_one_device"] = str(exc)[:2000]

    def emulated_ragged_all_to_all(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes, *,
                                   axis_name, axis_index_groups=None):
        # XLA:CPU cannot run ragged-all-to-all; this follows its documented semantics with all_gather
        ops = jax.lax.all_gather(operand, axis_name)
        starts = jax.lax.all_gather(input_offsets, axis_name)
        sizes = jax.lax.all_gather(send_sizes, axis_name)
        dests = jax.lax.all_gather(output_offsets, axis_name)
        me = jax.lax.axis_index(axis_name)
        j = jnp.arange(operand.shape[0])
        for s in range(ops.shape[0]):
            rows = ops[s][jnp.clip(starts[s, me] + j, 0, operand.shape[0] - 1)]
            where = jnp.where(j < sizes[s, me], dests[s, me] + j, output.shape[0])
            output = output.at[where].set(rows, mode="drop")
        return output

    jax.lax.ragged_all_to_all = emulated_ragged_all_to_all

    def compare(name, cfg, a2a):
        mesh = model.make_mesh(cfg)
        n = mesh.size
        layer = model.init_params(cfg, jax.random.key(1))[0]
        kh, kb, kr = jax.random.split(jax.random.key(2), 3)
        h = jax.random.normal(kh, (n * cfg.tokens_per_device, cfg.hidden), jnp.float32)
        bias = 0.01 * jax.random.normal(kb, (cfg.experts,), jnp.float32)
        probe = jax.random.normal(kr, h.shape, jnp.float32)
        sh = NamedSharding(mesh, P("ep"))
        layer_s, h_s = jax.device_put(layer, sh), jax.device_put(h, sh)

        def sharded_loss(layer, h):
            out, load, dropped, rows = sharded_moe(layer, bias, h, cfg, mesh, a2a)
            return jnp.sum(out * probe), (out, load, dropped, rows)

        def dense_loss(layer, h):
            out, load, dropped = dense_reference_moe(layer, bias, h, cfg, n)
            return jnp.sum(out * probe), (out, load, dropped)

        grad = lambda f: jax.jit(jax.grad(f, argnums=(0, 1), has_aux=True))
        (g_layer, g_h), (out, load, dropped, rows) = grad(sharded_loss)(layer_s, h_s)
        (r_layer, r_h), (ref, ref_load, ref_dropped) = grad(dense_loss)(layer, h)
        scale = lambda a: float(jnp.max(jnp.abs(a))) + 1e-12
        err = lambda a, b: float(jnp.max(jnp.abs(a - b))) / scale(b)
        found.setdefault("reference", {})[name] = {
            "out_rel_err": err(out, ref),
            "out_scale": scale(ref),
            "grad_h_rel_err": err(g_h, r_h),
            "grad_rel_err": {k: err(g_layer[k], r_layer[k]) for k in g_layer if k in r_layer},
            "load": [int(v) for v in load],
            "ref_load": [int(v) for v in ref_load],
            "device_rows": [int(v) for v in rows],
            "expert_impl": model.resolve_expert_impl(cfg, "cpu"),
            "dropped": int(dropped),
            "ref_dropped": int(ref_dropped),
        }

    compare("padded", DemoConfig(router_skew=1.0), "padded")
    compare("ragged_emulated", DemoConfig(router_skew=1.0), "ragged")
    compare("capacity", DemoConfig(router_skew=2.0, capacity_factor=1.0), "capacity")
    compare("softmax_groups_gelu", DemoConfig(router="softmax", n_groups=4, topk_groups=2, activation="gelu"), "padded")
    compare("ragged_dot", DemoConfig(router_skew=1.0, expert_compute="ragged_dot"), "padded")
    # hot and idle devices, partial tiles
    compare("tiled_skew4", DemoConfig(router_skew=4.0, expert_compute="tiled", expert_tile_rows=48), "padded")
    # the token-movement levers: permutations differentiated by gathers, and no exchange on a one-device axis
    compare("permute_gather", DemoConfig(router_skew=1.0, permute_backward="gather"), "padded")
    compare("ragged_permute_gather", DemoConfig(router_skew=1.0, permute_backward="gather"), "ragged")
    one_skip = {"devices": 1, "router_skew": 1.0, "skip_one_device_exchange": True}
    compare("one_device_skip", DemoConfig(**one_skip), "ragged")
    compare("one_device_skip_gather", DemoConfig(**one_skip, permute_backward="gather"), "ragged")

    out_path.write_text(json.dumps(found))
    """
)


@pytest.fixture(scope="module")
def child_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo")


@pytest.fixture(scope="module")
def child(child_dir: Path) -> dict[str, Any]:
    tmp = child_dir
    out, trace = tmp / "found.json", tmp / "trace"
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES} {CPU_COMPILE_FLAGS}"
    env["JAX_PLATFORMS"] = "cpu"  # the checks below are for the 8-device CPU fallback path
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    # JAX's compilation cache, for this child alone: a program compiled twice is compiled once (the dense
    # reference of padded and ragged_emulated, of both permute_gather variants..., and three runs' parameter
    # programs; their keys are the program's text and the compile options and flags). The default run, whose
    # trace is written, comes first: its programs are compiled, none is read back
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp / "jax-cache")
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), str(trace)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(out.read_text())


def _collectives(hlo: str) -> Counter[str]:
    # instruction opcodes; the CPU all-to-all has a tuple result, so match the opcode before "("
    ops = r"all-to-all|ragged-all-to-all|all-gather|reduce-scatter|all-reduce|collective-permute"
    return Counter(m.group(1) for m in re.finditer(rf"\s({ops})(?:-start)?\(", hlo))


@pytest.mark.slow
def test_runs_on_eight_devices(child: dict[str, Any]) -> None:
    assert child["device_count"] == DEVICES
    assert "--xla_force_host_platform_device_count=8" in child["default"]["xla_flags"]
    assert child["default"]["a2a_impl"] == "padded"  # no ragged-all-to-all on XLA:CPU
    assert child["default"]["expert_impl"] == "tiled"  # ragged_dot on XLA:CPU ignores the group sizes


def test_loss_decreases_dropless(child: dict[str, Any]) -> None:
    records = child["default"]["records"]
    losses = [r["loss"] for r in records]
    assert len(losses) >= 5
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.7 * losses[0], losses


def test_loads_sum_and_finite(child: dict[str, Any]) -> None:
    tokens = DEVICES * 256
    for run in ("default", "skewed_dropless", "skewed_capacity", "skew4"):
        for r in child[run]["records"]:
            assert not r["nonfinite"]
            for layer_load, device_load in zip(r["expert_load"], r["device_load"], strict=True):
                assert len(layer_load) == 16 and len(device_load) == DEVICES
                assert sum(layer_load) == tokens * 2  # routed load counts before drops
                if run != "skewed_capacity":
                    # the rows each device computed on (from its group sizes) are its two experts' loads
                    assert device_load == [layer_load[2 * d] + layer_load[2 * d + 1] for d in range(DEVICES)]
            if run == "skewed_capacity":  # one layer: what is computed on is what was not dropped
                assert sum(r["device_load"][0]) == tokens * 2 - r["tokens_dropped"]
            assert all(b >= 1.0 for b in r["balance_max_over_mean"])
            assert all(c >= 0.0 for c in r["load_cv"])


def test_dropless_drops_nothing_capacity_drops(child: dict[str, Any]) -> None:
    assert all(r["tokens_dropped"] == 0 for r in child["default"]["records"])
    assert all(r["tokens_dropped"] == 0 for r in child["skewed_dropless"]["records"])
    assert all(r["tokens_dropped"] > 0 for r in child["skewed_capacity"]["records"])
    # skewed routing really is skewed
    assert child["skewed_dropless"]["records"][0]["balance_max_over_mean"][0] > 2.0


def test_the_host_running_ahead_changes_no_result(child: dict[str, Any]) -> None:
    """--sync-every 2: the host waits once, after the second step, not after each; the steps compute the same
    (losses, loads, drops bit for bit) and the wall clock of each is still recorded."""
    every, ahead = child["skewed_dropless"]["records"], child["skewed_ahead"]["records"]
    assert len(ahead) == len(every) == 2
    for a, b in zip(every, ahead, strict=True):
        assert (a["loss"], a["expert_load"], a["tokens_dropped"]) == (b["loss"], b["expert_load"], b["tokens_dropped"])
        assert b["wall_seconds"] > 0


def test_hlo_has_moe_collectives(child: dict[str, Any]) -> None:
    hlo = child["default"]["hlo_text"]
    ops = _collectives(hlo)
    # 2 layers x (dispatch + combine) forward, and their transposes backward
    assert ops["all-to-all"] >= 8, ops
    assert ops["all-gather"] > 0, ops  # FSDP weight gathers
    assert ops["reduce-scatter"] > 0, ops  # FSDP gradient scatters (transpose of the gathers)
    # the tiled experts: one while loop per layer forward and one backward, in the experts' name scope
    loops = re.findall(r"%(while\.\d+) = .* while\(.*op_name=\"[^\"]*/moe_experts/", hlo)
    assert len(loops) == 2 * 2, loops
    assert set(loops) <= set(child["default"]["expert_ops"])


def test_trace_written(child: dict[str, Any]) -> None:
    xplanes = [size for name, size in child["trace_files"].items() if name.endswith(".xplane.pb")]
    assert len(xplanes) == 1 and xplanes[0] > 0


ONE_DEVICE_VARIANTS = ("one_device_skip", "one_device_skip_gather")


@pytest.mark.parametrize(
    "variant",
    [
        "padded",
        "ragged_emulated",
        "capacity",
        "softmax_groups_gelu",
        "ragged_dot",
        "tiled_skew4",
        "permute_gather",
        "ragged_permute_gather",
        *ONE_DEVICE_VARIANTS,
    ],
)
def test_matches_dense_reference(child: dict[str, Any], variant: str) -> None:
    found = child["reference"][variant]
    assert found["expert_impl"] == ("ragged_dot" if variant == "ragged_dot" else "tiled")
    assert found["load"] == found["ref_load"]
    load = found["ref_load"]
    if variant in ONE_DEVICE_VARIANTS:
        assert found["device_rows"] == [sum(load)]  # one device computes every row
    elif variant != "capacity":
        assert found["device_rows"] == [load[2 * d] + load[2 * d + 1] for d in range(DEVICES)]
    assert found["dropped"] == found["ref_dropped"]
    assert found["out_scale"] > 1e-3  # the routed output is not trivially zero
    assert found["out_rel_err"] < 1e-4, found
    assert found["grad_h_rel_err"] < 1e-4, found
    assert set(found["grad_rel_err"]) >= {"router", "w_up", "w_down"}
    assert max(found["grad_rel_err"].values()) < 1e-4, found
    if variant == "capacity":
        assert found["dropped"] > 0
    else:
        assert found["dropped"] == 0


def test_model_flops_formula(child: dict[str, Any]) -> None:
    h, f, e, k, layers = 64, 128, 16, 2, 2
    ffn = 3 * h * f  # SwiGLU: gate, up, down
    active = layers * (h * e + k * ffn + ffn)  # router + top_k experts + shared expert
    assert child["default"]["active_params_per_token"] == active
    assert child["default"]["model_flops_per_token"] == 6 * active


def test_configure_host_devices_rewrites_flag() -> None:
    from moeprof.demo import xla_flags_with_host_devices

    flags = xla_flags_with_host_devices(8, "--xla_foo=1 --xla_force_host_platform_device_count=2")
    assert flags.split() == ["--xla_foo=1", "--xla_force_host_platform_device_count=8"]


# ---- routing loads and skew


def _recomputed_load(arrays: Path, skew: float, top_k: int = 2) -> tuple[np.ndarray, int]:
    """Per-expert load of the first step's layer 0 from its input and router, in float64 numpy.

    Returns the load and the number of tokens whose top-k choice is within rounding of a tie
    (float32 in the step; such tokens may legitimately land on either expert).
    """
    x, norm, router = (np.load(arrays / f"{name}.npy").astype(np.float64) for name in ("x", "norm", "router"))
    hn = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * norm
    logits = hn @ router + skew * np.linspace(1.0, -1.0, router.shape[1])
    scores = 1.0 / (1.0 + np.exp(-logits))  # sigmoid router; the balancing bias starts at zero
    order = np.argsort(-scores, axis=1)
    chosen = order[:, :top_k]
    ranked = np.take_along_axis(scores, order, axis=1)
    near_ties = int(np.sum(ranked[:, top_k - 1] - ranked[:, top_k] < 1e-5))
    return np.bincount(chosen.ravel(), minlength=router.shape[1]), near_ties


@pytest.mark.parametrize(("run", "skew"), [("skewed_dropless", 2.0), ("skew4", 4.0)])
def test_routing_loads_match_recomputation(child: dict[str, Any], child_dir: Path, run: str, skew: float) -> None:
    expected, near_ties = _recomputed_load(child_dir, skew)
    record = child[run]["records"][0]  # no warm-up: the first step routes with the initial weights
    got = np.array(record["expert_load"][0])
    assert np.abs(got - expected).sum() <= 2 * near_ties, (got.tolist(), expected.tolist())
    per_device = expected.reshape(DEVICES, -1).sum(axis=1)
    assert np.abs(np.array(record["device_load"][0]) - per_device).sum() <= 2 * near_ties
    assert record["device_max_over_mean"][0] == pytest.approx(per_device.max() / per_device.mean(), abs=0.01)


def test_skew_zero_is_balanced_and_skew_ramps(child: dict[str, Any]) -> None:
    balanced = child["default"]["load"]
    assert balanced["router_skew"] == 0.0
    # random routing of 4,096 assignments: within a few tens of percent of the mean everywhere
    assert balanced["imbalance_max_over_mean"] < 1.35
    assert max(balanced["device_max_over_mean_per_layer"]) < 1.35
    two, four = child["skewed_dropless"]["load"], child["skew4"]["load"]
    for load in (two, four):
        devices = np.array(load["tokens_per_device"][0])
        assert load["hottest_device"] == 0  # the ramp favours expert 0, on device 0
        # load falls along the ramp: each device at most a rounding blip above the one before it
        assert np.all(np.diff(devices) <= 0.02 * devices.mean()), devices.tolist()
    assert 2.0 < two["imbalance_max_over_mean"] < four["imbalance_max_over_mean"]
    assert four["imbalance_max_over_mean"] > 4.0
    # the summary is the records' own numbers, averaged over steps
    rows = np.mean([r["device_load"] for r in child["skewed_dropless"]["records"]], axis=0)
    np.testing.assert_allclose(two["tokens_per_device"], rows)
    assert two["imbalance_max_over_mean"] == pytest.approx(rows.sum(axis=0).max() / rows.sum(axis=0).mean())


# ---- the tiled expert computation


def test_tiled_matches_ragged_dot(child: dict[str, Any]) -> None:
    cases = child["tiled_vs_ragged"]
    assert len(cases) == 12
    for case in cases:
        assert case["out_rel_err"] < 1e-5, case
        assert case["tail_max_abs"] == 0.0, case  # rows past the groups come out zero, as ragged_dot's do
        assert case["grad_x_rel_err"] < 1e-5, case
        assert case["grad_w_rel_err"] < 1e-5, case
        if case["activation"] == "swiglu":
            assert case["grad_gate_rel_err"] < 1e-5, case


def test_tiled_experts_trace_after_a_one_device_ragged_exchange(child: dict[str, Any]) -> None:
    assert child["tiled_ragged_one_device"] == "traced"


def test_tile_schedule_by_hand(child: dict[str, Any]) -> None:
    # groups of 65, 0 and 130 rows in 64-row tiles: rows [0, 65) in 2 tiles, [65, 195) in 3
    sched = child["schedule"]
    assert sched["n_tiles"] == 5
    assert sched["group"][:5] == [0, 0, 2, 2, 2]
    assert sched["first"][:5] == [0, 64, 65, 129, 193]
    assert sched["end"][:5] == [65, 65, 195, 195, 195]


# ---- the command


@pytest.mark.slow
def test_capture_demo_router_skew_reaches_manifest(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    args = ["--router-skew", "3", "--tokens", "64", "--layers", "1", "--steps", "2", "--warmup", "0"]
    args += ["--devices", str(DEVICES), "--expert-ffn", "128"]  # the small model, not the command's defaults
    res = subprocess.run(
        [sys.executable, "-m", "moeprof", "capture", "demo", *args, "--out", str(out)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "comm share" in res.stdout  # the report
    lines = res.stderr.strip().splitlines()
    # progress, one phase a line, and nothing else: no jax/XLA log lines
    assert all(line.startswith(("moeprof: ", "run folder: ")) for line in lines), lines
    joined = "\n".join(lines)
    for phase in ("compiling", "profiling step 1/2", "profiling step 2/2", "analyzing"):
        assert phase in joined, lines
    assert "warm-up" not in joined  # --warmup 0

    manifest = json.loads((out / "manifest.json").read_text())
    demo = manifest["demo"]
    assert manifest["model"]["router_skew"] == 3.0 and demo["router_skew"] == 3.0
    assert demo["expert_compute"] == "tiled" and demo["expert_ops"]
    load = demo["load"]
    assert load["router_skew"] == 3.0
    per_device = np.array(load["tokens_per_device"])
    assert per_device.shape == (1, DEVICES)
    assert per_device.sum() == pytest.approx(64 * DEVICES * 2)  # every (token, k) assignment, dropless
    assert load["imbalance_max_over_mean"] == pytest.approx(per_device.max() / per_device.mean())
    assert load["imbalance_max_over_mean"] > 2.0
    assert [r["device_load"] for r in demo["records"]] and len(demo["records"]) == 2
    assert not (out / "demo_stderr.log").exists() or "Traceback" not in (out / "demo_stderr.log").read_text()


def test_capture_demo_rejects_bad_expert_compute(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "moeprof", "capture", "demo", "--expert-compute", "dense", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [
        "moeprof: --expert-compute must be auto, ragged_dot or tiled (got 'dense')"
    ], res.stderr
