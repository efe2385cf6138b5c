"""Print the table of docs/real-traces.md: the `total` of `moeprof analyze --json` on each public trace.

python tools/real_traces_table.py [../shared/traces]
"""

from __future__ import annotations

import sys
from pathlib import Path

from moeprof.errors import InputError
from moeprof.pipeline import analyze_paths

TRACES = [
    "kineto/deepseek_v3_ep64_h800_rank0.json.gz",
    "kineto/dlrm_8rank_v100",
    "kineto/ddp_2rank_a100_rank0.json.gz",
    "kineto/torchrec_128rank_sampled",
    "kineto/vllm_tp8_b200_rank0.json.gz",
    "nsys/torch_a2a_2gpu.sqlite",
    "nsys/h100_2gpu_1s.sqlite",
    "nsys/cloverleaf_a100.sqlite",
    "nsys/saxpy_mpi_old_schema.sqlite",
    "xplane/tf_bert_8xv100_worker.xplane.pb",
    "xplane/jax_conv_8xmi300.xplane.pb",
    "tpu/demo_v5e_1chip.xplane.pb",
    "tpu/moe_ragged_dot_v5e_1chip.xplane.pb",
]


def ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f}"


def row(root: Path, name: str) -> str:
    try:
        doc = analyze_paths([root / name], jobs=1).to_json()
    except InputError as err:
        return f"| `{name}` | refused: {err.problem} |"
    t = doc["total"]
    top = max(doc["collectives"], key=lambda c: c["total_ns"], default=None)
    top_text = f"`{top['name'][:48]}` ({top['kind']}, {top['link']}, {top['count']})" if top else "-"
    ledger = "-"  # the ledger runs where a job has several members of a group
    if t["comm_ns"] and "comm_wait_ns" in t:
        parts = (t["comm_wait_ns"], t["comm_transfer_ns"], t["comm_unmatched_ns"])
        ledger = " / ".join(f"{p / t['comm_ns']:.0%}" for p in parts)
    links = " / ".join(ms(t[k]) for k in ("comm_nvlink_ns", "comm_ib_ns", "comm_unknown_link_ns"))
    steps = len({s["step"] for s in doc["steps"]})
    return (
        f"| `{name}` | {len(doc['devices'])} | {steps} | {ms(t['accumulated_ns'])} | {t['comm_share']:.1%} "
        f"| {ms(t['exposed_comm_ns'])} | {ms(t['idle_ns'])} | {links} "
        f"| {ledger} | {top_text} |"
    )


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / ".." / "shared" / "traces")
    print(
        "| trace | devices | steps | accumulated ms | comm share | exposed comm ms | idle ms "
        "| comm NVLink / IB / unknown ms | comm waiting / transfer / unmatched | top collective (kind, link, calls) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in TRACES:
        print(row(root, name))


if __name__ == "__main__":
    main()
