"""What a trace shows about the software stack: the framework, the workload, the libraries in use.

Remedies fit the trace (spec §6): XLA flags only for XLA programs, PyTorch settings
only for PyTorch, no gradient advice for inference, no "use DeepEP" where DeepEP
kernels already run. Each distinct kernel name is matched once.
"""

from __future__ import annotations

import pandas as pd

from ..core.trace import Trace
from ..core.vocabulary import vocabulary


def stack_facts(trace: Trace) -> dict:
    """framework, workload, hlo (bool), and in_use: the EP/GEMM libraries and paths the kernels show."""
    vocab = vocabulary()
    names = [str(n) for n in pd.unique(trace.events["name"].to_numpy(dtype=object))] if len(trace.events) else []
    in_use = {
        "deepep": any(vocab.deepep.search(str(n)) for n in names),
        "nccl_ep": any(vocab.nccl_ep.search(str(n)) for n in names),
        "grouped_gemm": any(vocab.gemm.search(str(n)) and vocab.grouped_gemm.search(str(n)) for n in names),
    }
    events = trace.events
    if len(events):
        opcodes = set(map(str, pd.unique(events["opcode"].to_numpy(dtype=object))))
        kinds = set(map(str, pd.unique(events["kind"].to_numpy(dtype=object)))) if "kind" in events else set()
        annotations = [str(a) for a in pd.unique(events["annotation"].to_numpy(dtype=object)) if a]
    else:
        opcodes, kinds, annotations = set(), set(), []
    in_use["ragged_all_to_all"] = any(o.startswith("ragged-all-to-all") for o in opcodes) or any(
        "RaggedAllToAll" in str(n) for n in names
    )
    # MoE evidence for calling an all-to-all an expert exchange: EP kernels, ragged all-to-all, or an
    # annotation of an MoE layer's dispatch/combine (DeepSeek's dispatch(F), MaxText's moe scope)
    moe_scope = any(("moe" in a.lower()) or a.lower().startswith(("dispatch", "combine")) for a in annotations)
    in_use["moe"] = bool(
        in_use["deepep"]
        or in_use["nccl_ep"]
        or in_use["ragged_all_to_all"]
        or moe_scope
        or bool(kinds & {"ep-dispatch", "ep-combine"})
    )
    return {
        "format": trace.format,
        "framework": trace.framework,
        "workload": trace.workload,
        "hlo": bool(trace.hlo),
        "in_use": in_use,
    }
