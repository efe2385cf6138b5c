"""A PyTorch Kineto trace of one rank of a simulated H100 job, 8 GPUs a node (synthetic.counterfactual and
synthetic.fleet): the header torch.profiler writes, with the NCCL process groups of ``distributedInfo``."""

from __future__ import annotations

GPUS_PER_NODE = 8


def rank_doc(rank: int, ranks: int, events: list[dict], groups: tuple[dict, ...] = ()) -> dict:
    """Rank ``rank`` of ``ranks``: the node's GPUs in ``deviceProperties``, the default process group (every rank)
    and the ``groups`` after it in ``pg_config``, then ``events``."""
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": g, "name": "NVIDIA H100 80GB HBM3"} for g in range(min(GPUS_PER_NODE, ranks))],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": ranks,
            "pg_count": 1 + len(groups),
            "pg_config": [
                {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": ranks},
                *groups,
            ],
        },
        "traceEvents": events,
    }
