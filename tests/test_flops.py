"""The FLOPs model: hand-counted toy configs, DeepSeek-V3's published sizes, device peaks, MFU and the CLI.

The expected numbers here are counted by hand from the layer shapes, not by calling
the code under test, so a wrong formula in ``moeprof.insight.flops`` cannot agree with itself.
"""

from __future__ import annotations

import json
import re

import pytest
import typer
from typer.testing import CliRunner

from moeprof.cli.flops import flops_command
from moeprof.errors import InputError
from moeprof.insight.flops import (
    ModelConfig,
    active_params_per_token,
    flops_per_token,
    load_model_config,
    peak_for,
    throughput_figures,
    total_params,
)

# hidden 4, 2 layers (first dense, second MoE), 2 experts top-1 of width 3, one shared expert,
# dense FFN width 8, 2 heads of dim 2 (standard attention), vocab 10
TOY_MOE = {
    "hidden_size": 4,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "n_routed_experts": 2,
    "num_experts_per_tok": 1,
    "moe_intermediate_size": 3,
    "n_shared_experts": 1,
    "intermediate_size": 8,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "vocab_size": 10,
}
# multiply-accumulates per token, counted by hand, at seq_len 6
TOY_MOE_MACS = {
    "attn_q": 2 * (4 * 2 * 2),  # 2 layers × h·n_h·d = 32
    "attn_kv": 2 * (2 * 4 * 2 * 2),  # 2 layers × (k and v) h·n_kv·d = 64
    "attn_out": 2 * (2 * 2 * 4),  # 2 layers × n_h·d·h = 32
    "attn_scores": 2 * (2 * (2 + 2) * 6 / 2),  # 2 layers × n_h·(d_qk+d_v)·S/2 = 48
    "routed_experts": 1 * 1 * (3 * 4 * 3),  # 1 MoE layer × top-1 × 3 matmuls of 4×3 = 36
    "shared_experts": 1 * (3 * 4 * 3),  # 36
    "dense_ffn": 1 * (3 * 4 * 8),  # 1 dense layer × 3 matmuls of 4×8 = 96
    "router": 1 * (4 * 2),  # 8
    "lm_head": 4 * 10,  # 40
}


def toy_moe() -> ModelConfig:
    return ModelConfig.from_hf(TOY_MOE, name="toy-moe")


def test_toy_moe_items_by_hand():
    b = flops_per_token(toy_moe(), seq_len=6, training=False)
    assert {i.key: i.flops for i in b.items} == {k: 2 * v for k, v in TOY_MOE_MACS.items()}
    assert b.total == 2 * 392  # the MACs above add up to 392
    train = flops_per_token(toy_moe(), seq_len=6)
    assert train.total == 3 * 2 * 392


def test_toy_moe_params_by_hand():
    cfg = toy_moe()
    attention = 2 * (16 + 32 + 16)  # q + k,v + o per layer, 2 layers
    # attention + dense FFN + (2 experts + shared + router) + embedding + untied LM head
    assert total_params(cfg) == attention + 96 + (2 * 36 + 36 + 8) + 40 + 40 == 420
    # the input embedding is a lookup: not an active matmul weight
    assert active_params_per_token(cfg) == attention + 96 + (36 + 36 + 8) + 40 == 344


def test_toy_mla_by_hand():
    raw = {
        "hidden_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "q_lora_rank": 4,
        "kv_lora_rank": 2,
        "qk_nope_head_dim": 3,
        "qk_rope_head_dim": 1,
        "v_head_dim": 2,
        "intermediate_size": 5,
        "vocab_size": 7,
    }
    b = flops_per_token(ModelConfig.from_hf(raw), seq_len=4, training=False)
    macs = {
        "attn_q": 8 * 4 + 4 * 2 * (3 + 1),  # down h→r_q, up r_q→n_h·(nope+rope) = 64
        "attn_kv": 8 * (2 + 1) + 2 * 2 * (3 + 2),  # down h→r_kv+rope, up r_kv→n_h·(nope+v) = 44
        "attn_out": 2 * 2 * 8,  # 32
        "attn_scores": 2 * ((3 + 1) + 2) * 4 / 2,  # 24
        "dense_ffn": 3 * 8 * 5,  # 120
        "lm_head": 8 * 7,  # 56
    }
    assert {i.key: i.flops for i in b.items} == {k: 2 * v for k, v in macs.items()}
    # a q projection without LoRA (DeepSeek-V2-Lite): h → n_h·(nope+rope) directly
    no_q_lora = flops_per_token(ModelConfig.from_hf({**raw, "q_lora_rank": None}), 4, training=False)
    assert no_q_lora.item("attn_q").flops == 2 * 8 * 2 * (3 + 1)


def test_deepseek_v3_matches_published_sizes():
    cfg = load_model_config("deepseek-v3")
    assert (cfg.num_moe_layers, cfg.num_dense_layers) == (58, 3)
    # DeepSeek-V3 report: 37B activated (main model 36.6B incl. the 0.9B LM head), 671B total
    assert active_params_per_token(cfg) == pytest.approx(37e9, rel=0.03)
    assert active_params_per_token(cfg) == pytest.approx(36.6e9, rel=0.005)
    assert total_params(cfg) == pytest.approx(671e9, rel=0.005)
    # routed experts, by hand: 58 layers × 8 experts × 3 × 7168 × 2048 × 2 FLOPs × 3 (training)
    b = flops_per_token(cfg, 4096)
    assert b.item("routed_experts").flops == 58 * 8 * 3 * 7168 * 2048 * 2 * 3
    # without attention scores, training FLOPs are 6 × the active matmul weights
    assert b.total - b.item("attn_scores").flops == 6 * active_params_per_token(cfg)
    assert b.total == pytest.approx(250.45e9, rel=1e-3)


def test_formulas_evaluate_to_their_flops():
    b = flops_per_token(load_model_config("deepseek-v3"), 4096)
    for item in b.items:
        numbers = item.formula.split(" = ")[1].replace("×", "*").replace("·", "*")
        assert re.fullmatch(r"[0-9*+/() ]+", numbers), item.formula
        assert eval(numbers) == pytest.approx(item.flops), item.formula


def test_mixtral_and_dense_configs():
    mixtral = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "vocab_size": 32000,
    }
    cfg = ModelConfig.from_hf(mixtral)
    assert (cfg.num_moe_layers, cfg.moe_intermediate_size, cfg.shared_intermediate_size) == (32, 14336, 0)
    # Mistral: Mixtral 8x7B has 46.7B parameters, 12.9B used per token (that figure includes the embedding)
    assert total_params(cfg) == pytest.approx(46.7e9, rel=0.005)
    assert active_params_per_token(cfg) + 32000 * 4096 == pytest.approx(12.9e9, rel=0.01)
    # GQA: k and v projections are n_kv/n_h the size of q's
    b = flops_per_token(cfg, 4096, training=False)
    assert b.item("attn_kv").flops == 2 * 32 * 2 * 4096 * 8 * 128
    llama2_7b = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
    }
    dense = ModelConfig.from_hf(llama2_7b)
    assert total_params(dense) == pytest.approx(6.74e9, rel=0.002)
    assert {i.key for i in flops_per_token(dense, 2048).items} == {
        "attn_q",
        "attn_kv",
        "attn_out",
        "attn_scores",
        "dense_ffn",
        "lm_head",
    }


def test_moe_layer_selection():
    qwen_like = {**TOY_MOE, "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    del qwen_like["first_k_dense_replace"]
    assert ModelConfig.from_hf(qwen_like).num_moe_layers == 2  # layers 1, 5 (3 is forced dense)
    assert ModelConfig.from_hf({**TOY_MOE, "num_hidden_layers": 7, "moe_layer_freq": 2}).num_moe_layers == 3
    assert ModelConfig.from_hf({**TOY_MOE, "moe_layer_freq": [0, 1]}).num_moe_layers == 1


@pytest.mark.parametrize(
    "raw, problem",
    [
        ({k: v for k, v in TOY_MOE.items() if k != "hidden_size"}, "hidden_size"),
        ({**TOY_MOE, "num_experts_per_tok": 3}, "num_experts_per_tok"),
        ({**TOY_MOE, "num_hidden_layers": "two"}, "num_hidden_layers"),
        ([1, 2], "not a JSON object"),
    ],
)
def test_bad_configs(raw, problem):
    with pytest.raises(InputError, match=problem):
        ModelConfig.from_hf(raw)


@pytest.mark.parametrize(
    "name, dtype, peak",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
        ("NVIDIA H100 80GB HBM3", "fp8", 1978.9),
        ("nvidia h200", "bfloat16", 989.4),
        ("NVIDIA H200", "float8_e4m3fn", 1978.9),
        ("NVIDIA H100 PCIe", "bf16", 756.5),
        ("NVIDIA H800", "fp16", 989.4),
        ("NVIDIA B200", "bf16", 2250.0),
        ("NVIDIA B200", "fp8", 4500.0),
        ("NVIDIA GB200", "bf16", 2500.0),
        ("NVIDIA GB300", "fp8", 5000.0),
        ("NVIDIA H100 NVL", "bf16", None),
        ("NVIDIA H200 NVL", "bf16", None),
        # V100 has no BF16: its 16-bit tensor peak is FP16's (125 TFLOPS SXM2), and it has no FP8
        ("Tesla V100-SXM2-16GB", "bf16", 125.0),
        ("Tesla V100-SXM2-16GB", "fp8", None),
        ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
        ("AMD Instinct MI300X", "fp8", 2614.9),
        ("NVIDIA GeForce RTX 3090", "bf16", None),
        ("NVIDIA H100 80GB HBM3", "int8", None),
        (None, "bf16", None),
    ],
)
def test_peak_for(name, dtype, peak):
    assert peak_for(name, dtype) == peak


def test_throughput_figures():
    # 8 sequences of 4096 tokens per 2 s step on 16 H100s at 250 GFLOPs/token
    out = throughput_figures(8 * 4096, 2.0, 250e9, 16, "NVIDIA H100 80GB HBM3")
    assert out["tokens_per_second"] == 16384.0
    assert out["tflops_per_device"] == pytest.approx(16384 * 250e9 / 16 / 1e12)  # 256
    assert out["peak_tflops"] == 989.4
    assert out["mfu"] == pytest.approx(256 / 989.4)
    assert out["peak_device"] == "H100 SXM"
    given = throughput_figures(1000, 1.0, 1e12, 4, None, peak_tflops=1000.0)
    assert given["tflops_per_device"] == 250.0 and given["mfu"] == 0.25
    unknown = throughput_figures(1000, 1.0, 1e12, 4, "Some Accelerator")
    assert "mfu" not in unknown and "peak_tflops" not in unknown
    with pytest.raises(ValueError):
        throughput_figures(1000, 0.0, 1e12, 4, None)


# --------------------------------------------------------------------------- CLI

cli = typer.Typer()
cli.command("flops")(flops_command)


@cli.callback()
def _root() -> None:
    """A group, so the command is invoked by name as under ``moeprof``."""


runner = CliRunner()


def test_cli_json():
    res = runner.invoke(cli, ["flops", "--model", "deepseek-v3", "--seq-len", "4096", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {"schema", "model", "seq_len", "mode", "flops_per_token", "items", "active_params_per_token"} <= set(doc)
    assert {"total_params", "symbols", "notes"} <= set(doc)
    assert doc["mode"] == "training" and doc["seq_len"] == 4096
    assert {"key", "label", "flops", "share", "formula"} <= set(doc["items"][0])
    assert sum(i["share"] for i in doc["items"]) == pytest.approx(1.0)
    inference = json.loads(runner.invoke(cli, ["flops", "--json", "--inference"]).stdout)
    assert inference["flops_per_token"] == pytest.approx(doc["flops_per_token"] / 3)


def test_cli_table_and_config_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TOY_MOE))
    res = runner.invoke(cli, ["flops", "--model", str(tmp_path / "config.json"), "--seq-len", "6"])
    assert res.exit_code == 0, res.output
    assert "routed experts" in res.stdout and "active parameters" in res.stdout
    assert runner.invoke(cli, ["flops", "--model", str(tmp_path), "--json"]).exit_code == 0  # the folder works too


@pytest.mark.parametrize("content", [None, "{not json", json.dumps({"hidden_size": 4})])
def test_cli_bad_model(tmp_path, content):
    model = "no-such-model"
    if content is not None:
        model = str(tmp_path / "config.json")
        (tmp_path / "config.json").write_text(content)
    res = runner.invoke(cli, ["flops", "--model", model])
    assert res.exit_code == 2
    assert res.stderr.startswith("moeprof: ") and len(res.stderr.strip().splitlines()) == 1
