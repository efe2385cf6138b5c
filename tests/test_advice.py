"""Advice that fits the trace (spec §6): framework, workload, what already runs, and honest wording.

Each property is read off the real traces' own evidence (their kernels and CPU ranges), not off
moeprof's choices: a PyTorch trace is one whose file is Kineto, DeepEP runs where its kernels do,
inference is a vLLM server's trace.
"""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from moeprof.cli import app
from moeprof.insight.remedies import Situation, catalogue, choose
from moeprof.insight.stack import FLAGS, Stack

from .helpers import SAMPLES, shared_trace

runner = CliRunner()
XLA_WORDS = re.compile(r"--xla_|ragged_all_to_all|ragged_dot|MaxText|jax\.")
# ("FSDP" alone is also the name of a JAX sharding axis; these are PyTorch's knobs)
TORCH_WORDS = re.compile(r"\bDDP\b|FSDP2|_prefetch=|torch\.|async_op|bucket_cap_mb|TorchRec|vLLM")
GRADIENT_WORDS = re.compile(r"(?i)gradient|backward|\bDDP\b|FSDP")


def analysis(path) -> dict:
    res = runner.invoke(app, ["analyze", str(path), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


PYTORCH = [
    "kineto/deepseek_v3_ep64_h800_rank0.json.gz",
    "kineto/dlrm_8rank_v100",
    "kineto/ddp_2rank_a100_rank0.json.gz",
    "kineto/torchrec_128rank_sampled",
    "kineto/vllm_tp8_b200_rank0.json.gz",
]


@pytest.mark.slow
@pytest.mark.parametrize("rel", PYTORCH)
def test_pytorch_traces_get_no_xla_advice(rel: str) -> None:
    doc = analysis(shared_trace(rel))
    assert doc["opportunities"]
    for o in doc["opportunities"]:
        assert not XLA_WORDS.search(o["remedy"]), (o["title"], o["remedy"])
        # no HLO in a Kineto trace: nothing may claim what the HLO leaves
        assert "the HLO leaves" not in o["evidence"].get("detail", "")
        # never "hlo": a Kineto trace's bounds come from its exposed time, the ledger, the roof its shapes
        # give (levers) or the compute beside a host copy
        assert o["bound_from"] in ("exposed", "ledger", "roof", "compute"), o["title"]


@pytest.mark.slow
@pytest.mark.parametrize("path", [SAMPLES / "cpu_moe_8dev", SAMPLES / "synthetic_2host_4gpu"], ids=lambda p: p.name)
def test_xla_traces_get_no_pytorch_advice(path) -> None:
    doc = analysis(path)
    assert doc["opportunities"]
    for o in doc["opportunities"]:
        assert not TORCH_WORDS.search(o["remedy"]), (o["title"], o["remedy"])


def test_inference_gets_no_gradient_advice() -> None:
    doc = analysis(shared_trace("kineto/vllm_tp8_b200_rank0.json.gz"))
    assert doc["opportunities"]
    for o in doc["opportunities"]:
        assert not GRADIENT_WORDS.search(o["remedy"]), (o["title"], o["remedy"])
    # its all-reduce already runs on symmetric memory (multimem kernels): the next step is fusion
    (ar,) = [o for o in doc["opportunities"] if o["kind"] == "all-reduce"]
    assert "already" in ar["remedy"] and "fuse_allreduce_rms" in ar["remedy"]


def test_deepep_users_are_not_told_to_use_deepep() -> None:
    doc = analysis(shared_trace("kineto/deepseek_v3_ep64_h800_rank0.json.gz"))
    ep = [o for o in doc["opportunities"] if o["kind"] in ("ep-dispatch", "ep-combine", "expert-exchange")]
    assert ep
    for o in ep:
        assert "already" in o["remedy"] and "DeepEP" in o["remedy"]
        assert "(DeepEP, NCCL EP)" not in o["remedy"]  # the suggestion to adopt it
    assert any(o["title"].startswith("expert dispatch/combine") for o in ep)


@pytest.mark.slow
def test_embedding_all_to_all_is_not_called_an_expert_exchange() -> None:
    """DLRM's all-to-all moves embeddings: nothing in the trace says MoE, so no title says expert."""
    doc = analysis(shared_trace("kineto/dlrm_8rank_v100"))
    kinds = {o["kind"] for o in doc["opportunities"]}
    assert "expert-exchange" in kinds
    # the op-level all-to-all counts the same time as the exchange: merged into it, its evidence kept
    (exchange,) = [o for o in doc["opportunities"] if o["kind"] == "expert-exchange"]
    assert "all-to-all" in {m["kind"] for m in exchange["evidence"]["same_time_as"]}
    for o in [*doc["opportunities"], *exchange["evidence"]["same_time_as"]]:
        assert "expert" not in o["title"].lower(), o["title"]
    for o in doc["opportunities"]:
        assert "expert" not in o["remedy"].lower(), o["remedy"]


@pytest.mark.slow
def test_a_remedy_is_written_once_and_referenced() -> None:
    doc = analysis(SAMPLES / "synthetic_2host_4gpu")
    by_id: dict[str, set[str]] = {}
    for o in doc["opportunities"]:
        assert o["remedy_id"], o["title"]
        rules, _ = catalogue()
        base = next(r.text for r in rules if r.id == o["remedy_id"])
        assert o["remedy"].startswith(base)
        by_id.setdefault(o["remedy_id"], set()).add(base)
    assert all(len(texts) == 1 for texts in by_id.values())


KINDS = sorted({k for r in catalogue()[0] for k in r.kinds})


@pytest.mark.parametrize("kind", KINDS, ids=lambda t: t)
def test_every_kind_has_a_fallback_for_any_situation(kind: str) -> None:
    """Whatever the stack and the situation, every kind has a remedy; a rule's conditions hold for it."""
    for framework in ("xla", "pytorch", "unknown"):
        for workload in ("training", "inference", "unknown"):
            for flags in ((), FLAGS):
                stack = Stack(framework, workload, False, frozenset(flags))
                for devices in ("gpu", "cpu", "tpu"):
                    for bound in ("wait", "transfer", "unknown"):
                        for hidden in (None, 0.1, 0.95):
                            for role in ("expert", "exchange", "data-parallel", "tensor-parallel", "none"):
                                s = Situation(kind, role, "ib", devices, bound, hidden)
                                chosen = choose(s, stack)
                                assert kind in chosen.kinds
                                assert chosen.framework in (None, framework)
                                assert chosen.workload in (None, workload)
                                # a row that names no devices is for GPUs and CPUs; a TPU gets a TPU row
                                assert devices in (chosen.devices or ("gpu", "cpu"))
                                assert not chosen.bound or bound in chosen.bound
                                assert not chosen.roles or role in chosen.roles
