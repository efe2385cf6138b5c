"""What a trace shows about the software stack: the framework, the workload, the libraries in use.

Remedies fit the trace (spec §6): XLA flags only for XLA programs, PyTorch settings
only for PyTorch, no gradient advice for inference, no "use DeepEP" where DeepEP
kernels already run. Each distinct kernel name is matched once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..core.events import present_values
from ..core.hardware import vendor_of
from ..core.trace import Trace
from ..core.vocabulary import vocabulary

# formats only one vendor's tools write: rocprofv3 (CSV, JSON) and its rocpd database run on ROCm
VENDOR_FORMATS = {"rocprof-csv": "AMD", "rocprof-json": "AMD", "rocpd": "AMD"}


def stack_facts(trace: Trace) -> dict:
    """framework, workload, hlo (bool), and in_use: the EP/GEMM libraries and paths the kernels show."""
    vocab = vocabulary()
    events = trace.events
    names = [str(n) for n in present_values(events["name"])] if len(events) else []
    in_use = {
        "deepep": any(vocab.deepep.search(str(n)) for n in names),
        "nccl_ep": any(vocab.nccl_ep.search(str(n)) for n in names),
        "grouped_gemm": any(vocab.gemm.search(str(n)) and vocab.grouped_gemm.search(str(n)) for n in names),
    }
    if len(events):
        opcodes = set(map(str, present_values(events["opcode"])))
        kinds = set(map(str, present_values(events["kind"]))) if "kind" in events else set()
        annotations = [str(a) for a in present_values(events["annotation"]) if a]
    else:
        opcodes, kinds, annotations = set(), set(), []
    in_use["ragged_all_to_all"] = any(o.startswith("ragged-all-to-all") for o in opcodes) or any(
        "RaggedAllToAll" in str(n) for n in names
    )
    in_use["symm_mem"] = any(vocab.symm_mem.search(n) for n in names)
    host = (*annotations, *trace.annotations)
    in_use["embedding"] = any(vocab.sharded_embedding.search(n) for n in (*names, *host))
    in_use["fsdp"] = any(vocab.fsdp_range.search(a) for a in host)
    # an all-to-all whose HLO scope names an MoE layer (MaxText's MoeBlock, a "moe" named_scope)
    hlo_moe = any(
        vocab.moe_scope.search(inst.op_name)
        for module in trace.hlo.values()
        for inst in module.instructions.values()
        if inst.opcode.startswith(("all-to-all", "ragged-all-to-all")) and inst.op_name
    )
    # MoE evidence for calling an all-to-all an expert exchange: EP kernels, ragged all-to-all, or an
    # annotation of an MoE layer's dispatch/combine (DeepSeek's dispatch(F), MaxText's moe scope)
    moe_scope = any(vocab.moe_scope.search(a) for a in host)
    in_use["moe"] = bool(
        in_use["deepep"]
        or in_use["nccl_ep"]
        or in_use["ragged_all_to_all"]
        or moe_scope
        or hlo_moe
        or bool(kinds & {"ep-dispatch", "ep-combine"})
    )
    if any(vocab.training_range.search(a) for a in trace.annotations):
        workload = "training"
    elif any(vocab.inference_range.search(a) for a in trace.annotations):
        workload = "inference"
    else:
        workload = "unknown"
    return {
        "format": trace.format,
        "framework": trace.framework,
        "vendor": trace_vendor(trace),
        "workload": workload,
        "hlo": bool(trace.hlo),
        "in_use": in_use,
    }


def trace_vendor(trace: Trace) -> str:
    """AMD, NVIDIA or unknown: what the file's GPU names agree on, else what its format implies."""
    said = {v.name for v in (vendor_of(str(m)) for m in set(trace.device_models.values()) if m) if v is not None}
    if len(said) == 1:
        return said.pop()
    return VENDOR_FORMATS.get(trace.format, "unknown") if not said else "unknown"


FLAGS = ("moe", "deepep", "nccl_ep", "ragged_all_to_all", "grouped_gemm", "symm_mem", "embedding", "fsdp")


@dataclass(frozen=True)
class Stack:
    """The job's stack as its files show it: what remedies must fit."""

    framework: str = "unknown"  # xla | pytorch | unknown
    vendor: str = "unknown"  # AMD | NVIDIA | unknown: the GPUs' (HIP graphs on AMD, CUDA graphs on NVIDIA)
    workload: str = "unknown"  # training | inference | unknown
    hlo: bool = False  # the trace carries the programs' HLO (dependency bounds are known)
    in_use: frozenset[str] = field(default_factory=frozenset)
    # device -> GPU | TPU | CPU as the readers recorded it (core.trace.DEVICE_KINDS): what remedies fit
    device_kinds: Mapping[str, str] = field(default_factory=dict)

    def uses(self, flag: str) -> bool:
        return flag in self.in_use

    @staticmethod
    def of(facts: Iterable[dict]) -> Stack:
        """One stack for the files of a job (a framework only when they agree)."""
        facts = list(facts)
        frameworks = {"xla" if f.get("framework") == "jax" else f.get("framework", "unknown") for f in facts}
        workloads = {f.get("workload", "unknown") for f in facts}
        workload = "training" if "training" in workloads else ("inference" if workloads == {"inference"} else "unknown")
        framework = frameworks.pop() if len(frameworks) == 1 else "unknown"
        vendors = {f.get("vendor", "unknown") for f in facts} - {"unknown"}
        return Stack(
            framework=framework if framework in ("xla", "pytorch") else "unknown",
            vendor=vendors.pop() if len(vendors) == 1 else "unknown",
            workload=workload,
            hlo=any(f.get("hlo") for f in facts),
            in_use=frozenset(k for f in facts for k, v in (f.get("in_use") or {}).items() if v),
        )
