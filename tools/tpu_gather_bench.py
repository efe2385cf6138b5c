"""Time the token movement's building blocks on one accelerator: a row gather (by a permutation, sorted, with
repeats; with and without index hints), a scatter-add and a scatter-set of the same rows, the inverse gather that
replaces a permutation's scatter-add backward, and a gather before a matmul, against a copy of the same bytes.

    python tools/tpu_gather_bench.py [ROWS] [HIDDEN]

The figures behind the TPU token-movement remedy (``tpu-onchip-glue`` in moeprof/insight/remedies.toml: on a TPU
v5e, 32,768 x 2,048 bf16, a gather 1.145 ms whatever the order or hints, a copy 0.430 ms). Each op is jitted,
run once, then timed as the mean of 30 calls between two ``block_until_ready``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

CALLS = 30


def timed(name: str, fn: Callable[..., Any], *args: Any, moved_bytes: int) -> float:
    """Mean seconds of one call of ``jit(fn)(*args)``; prints it with the rows' read+write rate."""
    compiled = jax.jit(fn)
    jax.block_until_ready(compiled(*args))
    started = time.perf_counter()
    for _ in range(CALLS):
        out = compiled(*args)
    jax.block_until_ready(out)
    seconds = (time.perf_counter() - started) / CALLS
    print(f"{name:50s} {seconds * 1e3:8.3f} ms {moved_bytes / seconds / 1e9:7.1f} GB/s", flush=True)
    return seconds


def main(rows: int, hidden: int) -> dict[str, float]:
    x = jax.random.normal(jax.random.key(0), (rows, hidden), jnp.bfloat16)
    perm = jax.random.permutation(jax.random.key(1), rows).astype(jnp.int32)
    ordered = jnp.arange(rows, dtype=jnp.int32)
    repeated = jnp.sort(jax.random.randint(jax.random.key(2), (rows,), 0, rows // 2)).astype(jnp.int32)
    inverse = jnp.zeros_like(perm).at[perm].set(jnp.arange(rows, dtype=jnp.int32))
    zeros = jnp.zeros_like(x)
    w = jax.random.normal(jax.random.key(3), (hidden, hidden // 2), jnp.bfloat16)
    moved = 2 * x.size * x.dtype.itemsize  # the rows read and written once
    hints = {"unique_indices": True, "mode": "promise_in_bounds"}
    cases: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
        "copy x * 1 (HBM reference)": (lambda x: x * jnp.bfloat16(1), (x,)),
        "gather x[perm]": (lambda x, i: x[i], (x, perm)),
        "gather x[perm], index hints": (lambda x, i: x.at[i].get(**hints), (x, perm)),
        "gather x[arange] (sorted)": (lambda x, i: x[i], (x, ordered)),
        "gather x[arange], sorted index hints": (
            lambda x, i: x.at[i].get(indices_are_sorted=True, **hints),
            (x, ordered),
        ),
        "gather x[repeated] (sorted, repeats)": (lambda x, i: x[i], (x, repeated)),
        "scatter-add zeros.at[perm].add(x)": (lambda z, i, x: z.at[i].add(x), (zeros, perm, x)),
        "scatter-add, index hints": (lambda z, i, x: z.at[i].add(x, **hints), (zeros, perm, x)),
        "scatter-set, index hints": (lambda z, i, x: z.at[i].set(x, **hints), (zeros, perm, x)),
        "inverse gather x[inverse] (a permutation's backward)": (lambda x, i: x[i], (x, inverse)),
        "matmul x @ w": (lambda x, w: x @ w, (x, w)),
        "gather then matmul x[perm] @ w": (lambda x, i, w: x[i] @ w, (x, perm, w)),
    }
    print(f"{jax.devices()[0].device_kind}: {rows} x {hidden} {x.dtype}, mean of {CALLS} calls")
    return {name: timed(name, fn, *args, moved_bytes=moved) * 1e3 for name, (fn, args) in cases.items()}


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(main(*(sizes + [32768, 2048][len(sizes) :])), indent=1))
