"""What a trace shows about the software stack: the framework, the workload, the libraries in use.

Remedies fit the trace (spec §6): XLA flags only for XLA programs, PyTorch settings
only for PyTorch, no gradient advice for inference, no "use DeepEP" where DeepEP
kernels already run. Each distinct kernel name is matched once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from ..core.events import column_codes, lookup, present_values
from ..core.hardware import vendor_of
from ..core.names import namespace_of, said
from ..core.sections import Launches
from ..core.trace import Trace
from ..core.vocabulary import searches, vocabulary
from ..words import plural

# formats only one vendor's tools write: rocprofv3 (CSV, JSON) and its rocpd database run on ROCm
VENDOR_FORMATS = {"rocprof-csv": "AMD", "rocprof-json": "AMD", "rocpd": "AMD"}


def _calls(codes: np.ndarray, values: np.ndarray, pattern: re.Pattern[str]) -> tuple[int, str]:
    """How many activities have a name ``pattern`` finds, and the most frequent such name (whole)."""
    hit = np.array([bool(pattern.search(str(v))) for v in values.tolist()], dtype=bool)
    if not hit.any():
        return 0, ""
    counts = np.bincount(codes[codes >= 0], minlength=len(values))
    counts = np.where(hit, counts, 0)
    return int(counts.sum()), str(values[int(np.argmax(counts))])


def _fp8_before_dispatch(events: pd.DataFrame, codes: np.ndarray, values: np.ndarray) -> tuple[int, int, str]:
    """(dispatches whose input was cast to FP8 just before, dispatches, the cast's name): per device, each
    normal-mode dispatch's first kernel (its layout, else its notify) against the last kernel that ended before
    it starts, DeepEP's own aside: a per-token FP8 cast there is the dispatch's input being cast."""
    vocab = vocabulary()
    layout = np.array(["get_dispatch_layout" in str(v) for v in values.tolist()], dtype=bool)
    first = (
        layout
        if layout[np.unique(codes[codes >= 0])].any()
        else np.array([bool(vocab.deepep_notify_dispatch.search(str(v))) for v in values.tolist()], dtype=bool)
    )
    deepep = np.array([bool(vocab.deepep.search(str(v))) for v in values.tolist()], dtype=bool)
    cast = np.array([bool(vocab.fp8_token_cast.search(str(v))) for v in values.tolist()], dtype=bool)
    anchor = lookup(codes, first, False)
    if not anchor.any():
        return 0, 0, ""
    other = ~lookup(codes, deepep, True) & ~anchor
    device = events["device"].astype(str).to_numpy(dtype=object)
    start = events["start_ns"].to_numpy(np.int64)
    end = events["end_ns"].to_numpy(np.int64)
    found, total, names = 0, 0, []
    for d in np.unique(device[anchor]).tolist():
        mine = device == d
        rows = np.flatnonzero(mine & other)
        rows = rows[np.argsort(end[rows], kind="stable")]
        anchors = start[mine & anchor]
        before = np.searchsorted(end[rows], anchors, side="right") - 1
        total += anchors.size
        prior = rows[before[before >= 0]]
        is_cast = lookup(codes[prior], cast, False)
        found += int(is_cast.sum())
        names += [said(str(values[c])) for c in codes[prior][is_cast][:1].tolist()]
    return found, total, names[0] if names else ""


def _deepep_facts(trace: Trace) -> tuple[dict[str, bool], dict[str, str]]:
    """What the DeepEP kernels show: its mode, an FP8 dispatch, a CPU that waits for received-token counts;
    each with the evidence it was read from."""
    events = trace.events
    vocab = vocabulary()
    codes, values = column_codes(events["name"]) if len(events) else (np.zeros(0, np.int64), np.zeros(0, object))
    normal, normal_name = _calls(codes, values, vocab.deepep_normal)
    low_latency, ll_name = _calls(codes, values, vocab.deepep_low_latency)
    notify, _ = _calls(codes, values, vocab.deepep_notify_dispatch)
    in_use = {"deepep_normal": normal > 0, "deepep_low_latency": low_latency > 0}
    evidence: dict[str, str] = {}
    if normal:
        space = namespace_of(normal_name)
        evidence["deepep_normal"] = f"DeepEP's normal-mode kernels run ({space}::, {plural(normal, 'call')})"
    if low_latency:
        space = namespace_of(ll_name)
        evidence["deepep_low_latency"] = f"DeepEP's low-latency kernels run ({space}::, {plural(low_latency, 'call')})"
    ll_fp8, _ = _calls(codes, values, vocab.deepep_ll_fp8)
    cast, dispatches, cast_name = _fp8_before_dispatch(events, codes, values) if normal else (0, 0, "")
    in_use["fp8_dispatch"] = bool(ll_fp8) or (dispatches > 0 and 2 * cast >= dispatches)
    if ll_fp8:
        evidence["fp8_dispatch"] = f"the low-latency dispatch sends FP8 (internode_ll::dispatch<true, ...>: {ll_fp8})"
    elif in_use["fp8_dispatch"]:
        evidence["fp8_dispatch"] = (
            f"the tokens are cast to FP8 just before {cast} of the {plural(dispatches, 'dispatch', 'dispatches')}"
            f" ({cast_name} ends right before the dispatch's first kernel)"
        )
    in_use["cpu_waits_for_counts"] = notify > 0
    if notify:
        waits = f"{plural(notify, 'notify_dispatch call')}: at each non-cached dispatch the CPU waits for the"
        waits += " received-token counts"
        longest = {k: v for k, v in trace.host_range_ns.items() if "dispatch" in k.lower()}
        if longest:
            name = max(longest, key=lambda k: longest[k])
            waits += f" (the host range {name} lasts up to {longest[name] / 1e6:.1f} ms)"
        evidence["cpu_waits_for_counts"] = waits
    return in_use, evidence


def stack_facts(trace: Trace) -> dict:
    """framework, workload, hlo (bool), in_use: the EP/GEMM libraries and paths the kernels show, and evidence:
    where the trace shows each of the facts remedies are checked against (in words)."""
    vocab = vocabulary()
    events = trace.events
    names = [str(n) for n in present_values(events["name"])] if len(events) else []
    in_use = {
        "deepep": any(searches(vocab.deepep, names)),
        "nccl_ep": any(searches(vocab.nccl_ep, names)),
        "grouped_gemm": any(searches(vocab.grouped_gemm, [n for n, g in zip(names, searches(vocab.gemm, names)) if g])),
    }
    deepep, evidence = _deepep_facts(trace) if in_use["deepep"] else ({}, {})
    in_use.update(deepep)
    if len(events):
        opcodes = set(map(str, present_values(events["opcode"])))
        kinds = set(map(str, present_values(events["kind"]))) if "kind" in events else set()
        annotations = [str(a) for a in present_values(events["annotation"]) if a]
    else:
        opcodes, kinds, annotations = set(), set(), []
    in_use["ragged_all_to_all"] = any(o.startswith("ragged-all-to-all") for o in opcodes) or any(
        "RaggedAllToAll" in str(n) for n in names
    )
    in_use["symm_mem"] = any(searches(vocab.symm_mem, names))
    host = (*annotations, *trace.annotations)
    in_use["embedding"] = any(searches(vocab.sharded_embedding, [*names, *host]))
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
        "evidence": evidence,
    }


LAUNCH_COUNTS = ("kernel_launches", "without_activity", "captured", "captured_without_activity")


def launch_summary(files: Iterable[Mapping[str, Any]]) -> Launches | None:
    """The files' launch facts (``Trace.launches``, one per file) summed; None where no file read its launches."""
    read = [f for f in files if f]
    if not read:
        return None
    out: dict[str, Any] = {k: int(sum(int(r.get(k) or 0) for r in read)) for k in LAUNCH_COUNTS}
    out["capture_api"] = next((str(r["capture_api"]) for r in read if r.get("capture_api")), "")
    return cast("Launches", out)


def trace_vendor(trace: Trace) -> str:
    """AMD, NVIDIA or unknown: what the file's GPU names agree on, else what its format implies."""
    named = {v.name for v in (vendor_of(str(m)) for m in set(trace.device_models.values()) if m) if v is not None}
    if len(named) == 1:
        return named.pop()
    return VENDOR_FORMATS.get(trace.format, "unknown") if not named else "unknown"


FLAGS = (
    "moe",
    "deepep",
    "deepep_normal",
    "deepep_low_latency",
    "fp8_dispatch",
    "cpu_waits_for_counts",
    "nccl_ep",
    "ragged_all_to_all",
    "grouped_gemm",
    "symm_mem",
    "embedding",
    "fsdp",
)


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
    evidence: Mapping[str, str] = field(default_factory=dict)  # flag -> where the trace shows it, in words

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
            # the first file's words for a fact (files of one job show it alike)
            evidence={k: v for f in reversed(facts) for k, v in (f.get("evidence") or {}).items()},
        )
