"""Real PyTorch Kineto traces of uneven all-to-alls (spec §11's split sizes), and the splits sent, as truth.

Runs ``torch.distributed.all_to_all_single`` with uneven, known splits on N gloo processes (TCP on 127.0.0.1,
CPU only: no device timeline) under ``torch.profiler.profile(record_shapes=True)``, two profiled steps of an
MoE layer's token exchange each: a dispatch (bf16 rows of 8, a skewed router's counts: one hot receiver) and
its combine (the transposed counts back, fp32 rows of shape [4, 2]). Every rank writes its Kineto trace
(gzipped) and the script writes ``<out>.truth.json`` beside the folder: for each call (step, name, dtype,
bytes per row) the rows each sender sent each receiver, as the script passed them (the sender's
``input_split_sizes``), and the torch version. With 4 ranks PyTorch records every list in the op's
``Concrete Inputs``; with 33 it drops them (``""``): that is what the world-33 capture is for.

    python sample_traces/make_kineto_alltoall.py 4 sample_traces/kineto_alltoall_gloo_w4
    python sample_traces/make_kineto_alltoall.py 33 sample_traces/kineto_alltoall_gloo_w33

Needs torch (the CPU build is enough); moeprof's tests read the committed traces and need no torch.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import sys
from pathlib import Path

ROW_DISPATCH = (8,)  # bf16 elements per row of the dispatch
ROW_COMBINE = (4, 2)  # fp32 elements per row of the combine: a 3-D tensor, rows along dim 0


def splits_of(world: int, step: int) -> list[list[int]]:
    """Rows sender s sends receiver d in ``step``'s dispatch: uneven per pair, receiver ``(2 + step) % world``
    hot (8x), one pair sending none."""
    hot = (2 + step) % world
    out = []
    for s in range(world):
        row = []
        for d in range(world):
            rows = 1 + (3 * s + 5 * d + 7 * step) % 6
            if d == hot:
                rows *= 8
            if (s, d) == (0, 1):
                rows = 0
            row.append(rows)
        out.append(row)
    return out


def calls(world: int) -> list[dict]:
    """The profiled calls in order: per step a dispatch and its combine (the counts transposed)."""
    out = []
    for step in range(2):
        sent = splits_of(world, step)
        out.append({"step": step, "name": "dispatch", "dtype": "bfloat16", "row_shape": list(ROW_DISPATCH),
                    "bytes_per_row": 2 * 8, "rows": sent})  # fmt: skip
        back = [[sent[d][s] for d in range(world)] for s in range(world)]
        out.append({"step": step, "name": "combine", "dtype": "float32", "row_shape": list(ROW_COMBINE),
                    "bytes_per_row": 4 * 8, "rows": back})  # fmt: skip
    return out


def worker(rank: int, world: int, out: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    plan = calls(world)
    dtypes = {"bfloat16": torch.bfloat16, "float32": torch.float32}

    received: list[tuple[list[int], object]] = []

    def exchange(call: dict) -> None:
        send = call["rows"][rank]  # this rank's input_split_sizes
        recv = [call["rows"][s][rank] for s in range(world)]  # its output_split_sizes
        x = torch.full((sum(send), *call["row_shape"]), float(rank), dtype=dtypes[call["dtype"]])
        y = torch.empty((sum(recv), *call["row_shape"]), dtype=dtypes[call["dtype"]])
        dist.all_to_all_single(y, x, output_split_sizes=recv, input_split_sizes=send)
        received.append((recv, y))

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for step in range(2):
            with record_function(f"ProfilerStep#{step}"):  # the step markers a scheduled profiler writes
                for call in plan:
                    if call["step"] == step:
                        exchange(call)
    # what each sender put in its rows arrived from it: the exchange really moved these counts
    for recv, y in received:
        starts = [sum(recv[:s]) for s in range(world)]
        for s in range(world):
            assert bool((y[starts[s] : starts[s] + recv[s]] == float(s)).all())  # type: ignore[index]
    path = Path(out) / f"rank{rank}.pt.trace.json"
    prof.export_chrome_trace(str(path))
    with open(path, "rb") as src, gzip.open(f"{path}.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    path.unlink()
    dist.barrier()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    import torch
    import torch.multiprocessing as mp

    world, out = int(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(worker, args=(world, str(out), free_port()), nprocs=world)
    truth = {"world": world, "backend": "gloo", "torch": torch.__version__, "calls": calls(world)}
    Path(f"{out}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")


if __name__ == "__main__":
    main()
