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

import pytest

REPO = Path(__file__).resolve().parents[1]
DEVICES = 8

CHILD = textwrap.dedent(
    r"""
    import json, sys, time
    from pathlib import Path

    from moeprof.demo import configure_host_devices

    assert configure_host_devices(8), "jax imported too early"
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    from moeprof.demo import DemoConfig, dense_reference_moe, run_demo, sharded_moe
    from moeprof.demo import model

    out_path, trace_dir = Path(sys.argv[1]), Path(sys.argv[2])
    found = {"device_count": jax.device_count()}

    def summary(result):
        return {
            "records": [vars(r) for r in result.records],
            "tokens_per_second": result.tokens_per_second,
            "compile_seconds": result.compile_seconds,
            "total_seconds": result.total_seconds,
            "a2a_impl": result.a2a_impl,
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
            out, load, dropped = sharded_moe(layer, bias, h, cfg, mesh, a2a)
            return jnp.sum(out * probe), (out, load, dropped)

        def dense_loss(layer, h):
            out, load, dropped = dense_reference_moe(layer, bias, h, cfg, n)
            return jnp.sum(out * probe), (out, load, dropped)

        grad = lambda f: jax.jit(jax.grad(f, argnums=(0, 1), has_aux=True))
        (g_layer, g_h), (out, load, dropped) = grad(sharded_loss)(layer_s, h_s)
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
            "dropped": int(dropped),
            "ref_dropped": int(ref_dropped),
        }

    compare("padded", DemoConfig(router_skew=1.0), "padded")
    compare("ragged_emulated", DemoConfig(router_skew=1.0), "ragged")
    compare("capacity", DemoConfig(router_skew=2.0, capacity_factor=1.0), "capacity")
    compare("softmax_groups_gelu", DemoConfig(router="softmax", n_groups=4, topk_groups=2, activation="gelu"), "padded")

    out_path.write_text(json.dumps(found))
    """
)


@pytest.fixture(scope="module")
def child(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("demo")
    out, trace = tmp / "found.json", tmp / "trace"
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    env["JAX_PLATFORMS"] = "cpu"  # the checks below are for the 8-device CPU fallback path
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
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


def test_runs_on_eight_devices(child: dict[str, Any]) -> None:
    assert child["device_count"] == DEVICES
    assert "--xla_force_host_platform_device_count=8" in child["default"]["xla_flags"]
    assert child["default"]["a2a_impl"] == "padded"  # no ragged-all-to-all on XLA:CPU


def test_loss_decreases_dropless(child: dict[str, Any]) -> None:
    records = child["default"]["records"]
    losses = [r["loss"] for r in records]
    assert len(losses) >= 5
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.7 * losses[0], losses


def test_loads_sum_and_finite(child: dict[str, Any]) -> None:
    tokens = DEVICES * 256
    for run in ("default", "skewed_dropless", "skewed_capacity"):
        for r in child[run]["records"]:
            assert not r["nonfinite"]
            for layer_load in r["expert_load"]:
                assert len(layer_load) == 16
                assert sum(layer_load) == tokens * 2  # routed load counts before drops
            assert all(b >= 1.0 for b in r["balance_max_over_mean"])
            assert all(c >= 0.0 for c in r["load_cv"])


def test_dropless_drops_nothing_capacity_drops(child: dict[str, Any]) -> None:
    assert all(r["tokens_dropped"] == 0 for r in child["default"]["records"])
    assert all(r["tokens_dropped"] == 0 for r in child["skewed_dropless"]["records"])
    assert all(r["tokens_dropped"] > 0 for r in child["skewed_capacity"]["records"])
    # skewed routing really is skewed
    assert child["skewed_dropless"]["records"][0]["balance_max_over_mean"][0] > 2.0


def test_hlo_has_moe_collectives(child: dict[str, Any]) -> None:
    hlo = child["default"]["hlo_text"]
    ops = _collectives(hlo)
    # 2 layers x (dispatch + combine) forward, and their transposes backward
    assert ops["all-to-all"] >= 8, ops
    assert ops["all-gather"] > 0, ops  # FSDP weight gathers
    assert ops["reduce-scatter"] > 0, ops  # FSDP gradient scatters (transpose of the gathers)
    # ragged_dot: either an XLA ragged-dot, or (CPU) the dense dot jax lowers it to, over the padded receive buffer
    rows = DEVICES * 256 * 2
    assert "ragged-dot(" in hlo or re.search(rf"f32\[{rows},\d+\]\S* dot\(", hlo)


def test_trace_written(child: dict[str, Any]) -> None:
    xplanes = [size for name, size in child["trace_files"].items() if name.endswith(".xplane.pb")]
    assert len(xplanes) == 1 and xplanes[0] > 0


@pytest.mark.parametrize("variant", ["padded", "ragged_emulated", "capacity", "softmax_groups_gelu"])
def test_matches_dense_reference(child: dict[str, Any], variant: str) -> None:
    found = child["reference"][variant]
    assert found["load"] == found["ref_load"]
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
