"""A small, real, dropless MoE training step (DeepSeek-V3 / MaxText shaped) to profile.

Import this module only after :func:`moeprof.demo.configure_host_devices` when
virtual CPU devices are wanted: jax reads ``XLA_FLAGS`` once.

Model: ``layers`` residual blocks ``h += moe(norm(h)) + shared_expert(norm(h))``
on random token activations, trained by Adam to regress a fixed nonlinear target
(no embedding, no attention). One 1-D mesh axis ``"ep"`` carries both kinds of
parallelism, as in MaxText's expert-parallel + FSDP setup:

* routed expert weights ``[E, ...]`` are split over ``ep`` (expert parallelism);
  tokens travel to their experts by all-to-all and come back the same way;
* every other weight is split over ``ep`` on its first dimension (FSDP): the
  forward all-gathers it inside ``shard_map`` and autodiff turns that all-gather
  into a reduce-scatter of its gradient.

One MoE layer on one device: router -> top-k -> sort the (token, k) assignments
by expert id -> dispatch all-to-all -> sort the received rows by local expert ->
grouped GEMM (``ragged_dot``) -> SwiGLU/GELU -> ``ragged_dot`` -> undo the local
sort -> combine all-to-all -> un-sort -> weight by router probabilities.

On XLA:CPU ``ragged_dot`` costs the same whatever the group sizes, so there the
experts run as a loop over fixed-size row tiles, as many as the rows received
(:func:`tiled_expert_ffn`): a device that gets more tokens does more work, and a
skewed router (``router_skew``) makes a slow device, as on real hardware.
"""

from __future__ import annotations

import functools
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, ParamSpec, TypeVar

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..words import plural
from .config import DemoConfig, DemoConfigError, config_problems, learning_rate_of

AXIS = "ep"

# Platforms whose XLA backend implements the ``ragged-all-to-all`` HLO op.
RAGGED_ALL_TO_ALL_PLATFORMS = frozenset({"gpu", "cuda", "rocm", "tpu"})
# What the padded fallback is, for the manifest. XLA:CPU fails to compile
# ragged-all-to-all ("not supported by XLA:CPU ThunkEmitter").
PADDED_ALL_TO_ALL_NOTE = (
    "fixed-size all_to_all: each source sends one buffer per destination device, padded to "
    "tokens_per_device*top_k rows (the dropless worst case); used where ragged_all_to_all is unsupported (CPU)"
)
RAGGED_ALL_TO_ALL_NOTE = "ragged_all_to_all: each source sends exactly the rows routed to each destination"
CAPACITY_ALL_TO_ALL_NOTE = "fixed-size all_to_all of per-expert buffers padded to capacity; overflow tokens are dropped"

# Name scope of the MoE layer (dispatch, experts, combine), in the HLO op metadata.
MOE_SCOPE = "moe"
CallArgs = ParamSpec("CallArgs")
Result = TypeVar("Result")
# Name scope of the routed experts' computation (forward and backward), in the HLO op metadata.
EXPERT_SCOPE = "moe_experts"
# Name scopes of the rest of the step, as a trace's per-scope table shows them (core.scopes)
DISPATCH_SCOPE, COMBINE_SCOPE, OPTIMIZER_SCOPE = "dispatch", "combine", "optimizer"

# Keys of the routed-expert weights (split by expert); all other weights are FSDP-split.
EXPERT_KEYS = frozenset({"w_gate", "w_up", "w_down"})

Params = list[dict[str, jax.Array]]
A2AImpl = Literal["ragged", "padded", "capacity"]
ExpertImpl = Literal["ragged_dot", "tiled"]

# Where ragged_dot is a grouped GEMM whose cost follows the group sizes. XLA:CPU lowers it to a
# dense dot per group over the whole buffer, so skewed routing would cost every device the same.
GROUPED_GEMM_PLATFORMS = frozenset({"gpu", "cuda", "rocm", "tpu"})
EXPERT_IMPL_NOTES = {
    "ragged_dot": "jax.lax.ragged_dot grouped GEMMs (the backend's grouped GEMM)",
    "tiled": "a while loop over fixed-size row tiles, as many as the rows each expert received: "
    "expert work follows the routing (ragged_dot on XLA:CPU costs the same whatever the group sizes)",
}


@dataclass(frozen=True)
class _Dims:
    """Sizes derived from a validated config and the device count."""

    D: int  # devices on the ep axis
    E: int
    El: int  # experts per device
    K: int
    T: int  # tokens per device
    H: int
    F: int
    L: int
    C: int  # capacity per (source device, expert); 0 when dropless

    @property
    def rows(self) -> int:
        return self.T * self.K


@dataclass
class StepRecord:
    """Correctness gates of one profiled step, as plain Python data."""

    step: int
    loss: float
    expert_load: list[list[int]]  # [layer][expert]: (token, k) assignments routed there, before any drop
    device_load: list[list[int]]  # [layer][device]: rows that device's experts computed on (kept assignments)
    balance_max_over_mean: list[float]  # per layer, of expert_load
    device_max_over_mean: list[float]  # per layer, of device_load
    load_cv: list[float]  # per layer: std / mean of expert_load
    tokens_dropped: int  # (token, k) assignments dropped for capacity, all layers
    nonfinite: bool  # loss, gradients or updated parameters not all finite
    wall_seconds: float


@dataclass
class DemoResult:
    config: DemoConfig
    records: list[StepRecord]
    tokens_per_second: float
    hlo_text: str  # compiled (optimised) HLO of the train step
    model_flops_per_token: float
    active_params_per_token: int
    a2a_impl: str  # "ragged" | "padded" | "capacity"
    a2a_note: str
    expert_impl: str  # "ragged_dot" | "tiled"
    expert_note: str
    expert_scope: str  # the name scope of the experts' computation in the HLO metadata
    expert_ops: list[str]  # top-level HLO instructions of that computation: the names its trace events carry
    load: dict[str, Any]  # load_summary(records, config)
    jax_version: str
    jaxlib_version: str
    platform: str
    device_kind: str
    device_count: int
    xla_flags: str
    compile_seconds: float
    warmup_seconds: float
    total_seconds: float
    trace_dir: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def to_dict(self, include_hlo: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not include_hlo:
            out.pop("hlo_text")
        return out


# ---------------------------------------------------------------- config


def _dims(cfg: DemoConfig, n_devices: int) -> _Dims:
    D, E, K, H, F = n_devices, cfg.experts, cfg.top_k, cfg.hidden, cfg.expert_ffn
    problems = config_problems(cfg, n_devices)
    if problems:
        raise DemoConfigError("invalid DemoConfig: " + "; ".join(problems))
    # capacity per (source device, expert), MaxText-style: factor x the balanced share
    C = 0 if cfg.capacity_factor is None else max(1, math.ceil(cfg.capacity_factor * cfg.tokens_per_device * K / E))
    return _Dims(D=D, E=E, El=E // D, K=K, T=cfg.tokens_per_device, H=H, F=F, L=cfg.layers, C=C)


def ragged_all_to_all_supported(platform: str) -> bool:
    return platform.lower() in RAGGED_ALL_TO_ALL_PLATFORMS


def resolve_a2a(cfg: DemoConfig, platform: str) -> A2AImpl:
    """Which dispatch the step uses on ``platform``."""
    if cfg.capacity_factor is not None:
        return "capacity"
    if cfg.a2a == "auto":
        return "ragged" if ragged_all_to_all_supported(platform) else "padded"
    return cfg.a2a


def resolve_expert_impl(cfg: DemoConfig, platform: str) -> ExpertImpl:
    """How the step computes its experts on ``platform``."""
    if cfg.expert_compute == "auto":
        return "ragged_dot" if platform.lower() in GROUPED_GEMM_PLATFORMS else "tiled"
    return cfg.expert_compute


def _a2a_note(impl: A2AImpl) -> str:
    return {"ragged": RAGGED_ALL_TO_ALL_NOTE, "padded": PADDED_ALL_TO_ALL_NOTE, "capacity": CAPACITY_ALL_TO_ALL_NOTE}[
        impl
    ]


def make_mesh(cfg: DemoConfig) -> Mesh:
    devices = jax.devices()
    n = len(devices) if cfg.devices is None else cfg.devices
    if not 1 <= n <= len(devices):
        raise ValueError(f"asked for {cfg.devices} devices, {len(devices)} present")
    return Mesh(np.array(devices[:n]), (AXIS,))


def active_params_per_token(cfg: DemoConfig) -> int:
    """Weights one token multiplies through: router + top_k routed experts + the shared expert, per layer.

    Norm scales are left out (no matmul); there is no attention or embedding.
    """
    ffn = (3 if cfg.activation == "swiglu" else 2) * cfg.hidden * cfg.expert_ffn
    per_layer = cfg.hidden * cfg.experts + cfg.top_k * ffn + (ffn if cfg.shared_expert else 0)
    return cfg.layers * per_layer


def model_flops_per_token(cfg: DemoConfig) -> float:
    """6 x active params per token (2 forward + 4 backward per multiply-add); attention-free."""
    return 6.0 * active_params_per_token(cfg)


# ---------------------------------------------------------------- parameters


def _normal(key: jax.Array, shape: tuple[int, ...], fan_in: int, scale: float = 1.0) -> jax.Array:
    return scale * jax.random.normal(key, shape, jnp.float32) / math.sqrt(fan_in)


def init_params(cfg: DemoConfig, key: jax.Array) -> Params:
    """Float32 master weights, full (unsharded) shapes; shard with :func:`param_specs`."""
    H, F, E = cfg.hidden, cfg.expert_ffn, cfg.experts
    swiglu = cfg.activation == "swiglu"
    params: Params = []
    for layer_key in jax.random.split(key, cfg.layers):
        k = jax.random.split(layer_key, 7)
        # output projections start at half scale so the initial residual stream stays near the input
        layer = {"norm": jnp.ones((H,), jnp.float32), "router": _normal(k[0], (H, E), H)}
        layer["w_up"] = _normal(k[1], (E, H, F), H)
        layer["w_down"] = _normal(k[2], (E, F, H), F, 0.5)
        if swiglu:
            layer["w_gate"] = _normal(k[3], (E, H, F), H)
        if cfg.shared_expert:
            layer["shared_up"] = _normal(k[4], (H, F), H)
            layer["shared_down"] = _normal(k[5], (F, H), F, 0.5)
            if swiglu:
                layer["shared_gate"] = _normal(k[6], (H, F), H)
        params.append(layer)
    return params


def param_specs(params: Params) -> list[dict[str, P]]:
    # every weight is split on dim 0: experts for routed weights (EP), rows for the rest (FSDP)
    return [{name: P(AXIS) for name in layer} for layer in params]


def _skew(cfg: DemoConfig) -> jax.Array:
    # linear ramp from +skew (expert 0) to -skew (last expert)
    return cfg.router_skew * jnp.linspace(1.0, -1.0, cfg.experts, dtype=jnp.float32)


# ---------------------------------------------------------------- routing


def route(h: jax.Array, w_router: jax.Array, bias: jax.Array, cfg: DemoConfig) -> tuple[jax.Array, jax.Array]:
    """Expert ids ``[T, K]`` (int32) and combine weights ``[T, K]`` (float32) for tokens ``h [T, H]``."""
    logits = jnp.dot(h.astype(jnp.float32), w_router.astype(jnp.float32)) + _skew(cfg)  # router in fp32, as DeepSeek
    scores = jax.nn.sigmoid(logits) if cfg.router == "sigmoid" else jax.nn.softmax(logits, axis=-1)
    # the balancing bias steers selection only; combine weights use the raw scores (DeepSeek-V3)
    select = jax.lax.stop_gradient(scores + bias if cfg.aux_free_bias else scores)
    if cfg.n_groups is not None and cfg.topk_groups is not None:
        T, E, G = h.shape[0], cfg.experts, cfg.n_groups
        grouped = select.reshape(T, G, E // G)
        # DeepSeek-V3 scores a group by the sum of its top-2 (sigmoid); V2 by its max (softmax)
        group_score = jax.lax.top_k(grouped, 2)[0].sum(-1) if cfg.router == "sigmoid" else grouped.max(-1)
        _, best = jax.lax.top_k(group_score, cfg.topk_groups)
        keep = jax.nn.one_hot(best, G, dtype=jnp.bool_).any(axis=1)  # [T, G]
        select = jnp.where(jnp.repeat(keep, E // G, axis=1), select, -jnp.inf)
    _, ids = jax.lax.top_k(select, cfg.top_k)
    weights = jnp.take_along_axis(scores, ids, axis=1)
    weights = weights / (weights.sum(axis=1, keepdims=True) + 1e-20)  # norm_topk_prob
    return ids.astype(jnp.int32), weights


def capacity_keep(ids: jax.Array, n_experts: int, capacity: int) -> jax.Array:
    """``[T, K]`` bool: the assignment fits its expert's capacity on this device.

    Earlier tokens win (a stable sort by expert keeps token order), as in MaxText.
    """
    onehot = jax.nn.one_hot(ids.reshape(-1), n_experts, dtype=jnp.int32)
    position = ((jnp.cumsum(onehot, axis=0) - 1) * onehot).sum(axis=1)
    return (position < capacity).reshape(ids.shape)


# ---------------------------------------------------------------- expert compute


def _expert_ffn(
    xs: jax.Array, w: dict[str, jax.Array], group_sizes: jax.Array, activation: str, impl: ExpertImpl, tile: int
) -> jax.Array:
    """This device's experts on rows ``xs`` sorted by local expert; rows past ``sum(group_sizes)`` come out zero."""
    with jax.named_scope(EXPERT_SCOPE):  # in each op's metadata: how a trace reader finds the expert work
        if impl == "tiled":
            return tiled_expert_ffn(xs, w, group_sizes, activation, tile)
        return ragged_expert_ffn(xs, w, group_sizes, activation)


def ragged_expert_ffn(xs: jax.Array, w: dict[str, jax.Array], group_sizes: jax.Array, activation: str) -> jax.Array:
    """Grouped GEMMs by ``ragged_dot`` (a grouped GEMM on GPU; a dense dot per group over every row on XLA:CPU)."""
    up = jax.lax.ragged_dot(xs, w["w_up"], group_sizes)
    if activation == "swiglu":
        act = jax.nn.silu(jax.lax.ragged_dot(xs, w["w_gate"], group_sizes)) * up
    else:
        act = jax.nn.gelu(up)
    return jax.lax.ragged_dot(act, w["w_down"], group_sizes)


def _ffn_tile(x: jax.Array, w: dict[str, jax.Array], activation: str) -> jax.Array:
    # one expert's FFN on one tile of rows
    up = x @ w["w_up"]
    act = jax.nn.silu(x @ w["w_gate"]) * up if activation == "swiglu" else jax.nn.gelu(up)
    return act @ w["w_down"]


def tile_schedule(group_sizes: jax.Array, tile: int, max_tiles: int) -> tuple[jax.Array, ...]:
    """Fixed-size row tiles covering each group of a group-sorted buffer, as a grouped GEMM walks it.

    Returns (tiles in use, group of each tile slot, its first row, the end row of its group); slots
    past the count in use are never visited. ``max_tiles`` must be ``>= rows / tile + groups``.
    """
    tiles_per_group = (group_sizes + tile - 1) // tile
    tiles_end = jnp.cumsum(tiles_per_group)
    rows_start = _exclusive_cumsum(group_sizes)
    slot = jnp.arange(max_tiles, dtype=jnp.int32)
    # a comparison count rather than searchsorted, which XLA:CPU runs as a while loop of its own
    group = jnp.minimum((slot[:, None] >= tiles_end[None, :]).sum(axis=1, dtype=jnp.int32), group_sizes.shape[0] - 1)
    first = rows_start[group] + (slot - (tiles_end - tiles_per_group)[group]) * tile
    return tiles_end[-1], group, first, (rows_start + group_sizes)[group]


def _tiled_fold(
    xs: jax.Array,
    w: dict[str, jax.Array],
    group_sizes: jax.Array,
    tile: int,
    body: Callable[[dict[str, jax.Array], jax.Array, jax.Array, jax.Array, Any], Any],
    init: Any,
) -> Any:
    """Run ``body(expert_weights, group, first_row, group_end_row, carry)`` for each tile in use, in order.

    The loop's trip count is the number of tiles the real group sizes need, so a device that
    received more rows runs more tiles: the work follows the routing, as in a grouped GEMM.
    """
    n_groups = group_sizes.shape[0]
    n_tiles, group, first, end = tile_schedule(group_sizes, tile, -(-xs.shape[0] // tile) + n_groups)

    def step(j: jax.Array, carry: Any) -> Any:
        g = group[j]
        w_g = {name: jax.lax.dynamic_index_in_dim(v, g, keepdims=False) for name, v in w.items()}
        return body(w_g, g, first[j], end[j], carry)

    return jax.lax.fori_loop(0, n_tiles, step, init)


def _per_device_zeros(shape: tuple[int, ...], dtype: Any) -> jax.Array:
    """Zeros typed as varying over the ``ep`` axis inside ``shard_map``: the output buffer of a
    ``ragged_all_to_all``, whose result takes the buffer's type. Left unvarying, the rows received are
    typed as the same on every device, and a loop over them whose body mixes in this device's expert
    weights (the tiled experts) changes its carry's type: JAX refuses it (seen on a TPU)."""
    return jax.lax.pcast(jnp.zeros(shape, dtype), (AXIS,), to="varying")


def _pad_rows(a: jax.Array, tile: int) -> jax.Array:
    # room for a tile that starts near the end, so dynamic_slice never clamps (and shifts) it
    return jnp.concatenate([a, jnp.zeros((tile, *a.shape[1:]), a.dtype)])


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def tiled_expert_ffn(
    xs: jax.Array, w: dict[str, jax.Array], group_sizes: jax.Array, activation: str, tile: int
) -> jax.Array:
    """The experts' FFN over row tiles bounded by the real group sizes (a while loop, not a fixed-shape dot).

    Same result as :func:`ragged_expert_ffn`; the cost grows with ``sum(group_sizes)``, not with
    the buffer. Differentiated by a hand-written backward that walks the same tiles (a while
    loop with a data-dependent trip count has no automatic reverse mode).
    """
    return _tiled_forward(xs, w, group_sizes, activation, tile)


def _tiled_forward(
    xs: jax.Array, w: dict[str, jax.Array], group_sizes: jax.Array, activation: str, tile: int
) -> jax.Array:
    rows = xs.shape[0]
    xp = _pad_rows(xs, tile)
    valid_in_tile = jnp.arange(tile, dtype=jnp.int32)

    def body(w_g: dict[str, jax.Array], g: jax.Array, start: jax.Array, end: jax.Array, out: jax.Array) -> jax.Array:
        y = _ffn_tile(jax.lax.dynamic_slice_in_dim(xp, start, tile), w_g, activation).astype(out.dtype)
        keep = (start + valid_in_tile < end)[:, None]  # the tile's tail belongs to the next group or padding
        old = jax.lax.dynamic_slice_in_dim(out, start, tile)
        return jax.lax.dynamic_update_slice_in_dim(out, jnp.where(keep, y, old), start, 0)

    # zeros_like keeps the input's shard_map varying-axis type, as the loop carry requires
    out = jnp.zeros_like(xp, shape=(rows + tile, w["w_down"].shape[-1]))
    return _tiled_fold(xs, w, group_sizes, tile, body, out)[:rows]


def _tiled_fwd(
    xs: jax.Array, w: dict[str, jax.Array], group_sizes: jax.Array, activation: str, tile: int
) -> tuple[jax.Array, tuple[jax.Array, dict[str, jax.Array], jax.Array]]:
    # keep only the inputs: the backward recomputes each tile's activations (as flash-style kernels do)
    return _tiled_forward(xs, w, group_sizes, activation, tile), (xs, w, group_sizes)


def _tiled_bwd(
    activation: str, tile: int, res: tuple[jax.Array, dict[str, jax.Array], jax.Array], dy: jax.Array
) -> tuple[jax.Array, dict[str, jax.Array], None]:
    with jax.named_scope(EXPERT_SCOPE):  # the backward is traced outside the forward's scope
        return _tiled_backward(activation, tile, res, dy)


def _tiled_backward(
    activation: str, tile: int, res: tuple[jax.Array, dict[str, jax.Array], jax.Array], dy: jax.Array
) -> tuple[jax.Array, dict[str, jax.Array], None]:
    xs, w, group_sizes = res
    rows = xs.shape[0]
    xp, dyp = _pad_rows(xs, tile), _pad_rows(dy, tile)
    valid_in_tile = jnp.arange(tile, dtype=jnp.int32)

    def body(w_g: dict[str, jax.Array], g: jax.Array, start: jax.Array, end: jax.Array, carry: Any) -> Any:
        dx, dw = carry
        keep = (start + valid_in_tile < end)[:, None]
        # rows outside the group get a zero cotangent, so they add nothing to the weight gradients
        dy_t = jnp.where(keep, jax.lax.dynamic_slice_in_dim(dyp, start, tile), 0)
        _, vjp = jax.vjp(lambda x, wg: _ffn_tile(x, wg, activation), jax.lax.dynamic_slice_in_dim(xp, start, tile), w_g)
        dx_t, dw_g = vjp(dy_t.astype(xs.dtype))
        old = jax.lax.dynamic_slice_in_dim(dx, start, tile)
        dx = jax.lax.dynamic_update_slice_in_dim(dx, jnp.where(keep, dx_t.astype(dx.dtype), old), start, 0)
        dw = {name: dw[name].at[g].add(dw_g[name].astype(jnp.float32)) for name in dw}
        return dx, dw

    init = (jnp.zeros_like(xp), {name: jnp.zeros_like(v, jnp.float32) for name, v in w.items()})
    dx, dw = _tiled_fold(xs, w, group_sizes, tile, body, init)
    return dx[:rows], {name: dw[name].astype(w[name].dtype) for name in w}, None


tiled_expert_ffn.defvjp(_tiled_fwd, _tiled_bwd)


def _dense_ffn(h: jax.Array, w_up: jax.Array, w_down: jax.Array, w_gate: jax.Array | None) -> jax.Array:
    up = h @ w_up
    act = jax.nn.silu(h @ w_gate) * up if w_gate is not None else jax.nn.gelu(up)
    return act @ w_down


def _exclusive_cumsum(x: jax.Array, axis: int = -1) -> jax.Array:
    return jnp.cumsum(x, axis=axis) - x


def _gather_rows(x: jax.Array, index: jax.Array, inverse: jax.Array) -> jax.Array:
    # the plain program's permutation: autodiff differentiates it by a scatter-add
    return x[index]


def _inverse_permutation(p: jax.Array) -> jax.Array:
    # inverse[p[i]] = i: a scatter of int32 positions, cheaper than a second sort
    return jnp.zeros_like(p).at[p].set(jnp.arange(p.shape[0], dtype=p.dtype))


@jax.custom_vjp
def permute_rows(x: jax.Array, index: jax.Array, inverse: jax.Array) -> jax.Array:
    """``x[index]`` for a permutation ``index`` whose inverse is ``inverse``; its backward is the gather
    ``dy[inverse]``, where autodiff of a gather writes a scatter-add (it cannot know that no two rows
    land on one)."""
    return x[index]


def _permute_rows_fwd(x: jax.Array, index: jax.Array, inverse: jax.Array) -> tuple[jax.Array, tuple[Any, ...]]:
    return x[index], (index, inverse)


def _permute_rows_bwd(res: tuple[Any, ...], dy: jax.Array) -> tuple[jax.Array, None, None]:
    _, inverse = res
    return dy[inverse], None, None


permute_rows.defvjp(_permute_rows_fwd, _permute_rows_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def replicate_rows(h: jax.Array, order: jax.Array, inverse: jax.Array, k: int) -> jax.Array:
    """``h[order // k]``: each token's ``k`` copies in the sorted order ``order`` (a permutation of the
    ``T * k`` assignments, ``inverse`` its inverse). Backward: the copies' cotangents gathered back to
    (token, k) order and summed over k, where autodiff writes a scatter-add."""
    return h[order // k]


def _replicate_rows_fwd(
    h: jax.Array, order: jax.Array, inverse: jax.Array, k: int
) -> tuple[jax.Array, tuple[Any, ...]]:
    return h[order // k], (order, inverse)


def _replicate_rows_bwd(k: int, res: tuple[Any, ...], dy: jax.Array) -> tuple[jax.Array, None, None]:
    _, inverse = res
    per_assignment = dy[inverse].reshape(-1, k, dy.shape[-1])
    return per_assignment.sum(axis=1, dtype=jnp.float32).astype(dy.dtype), None, None


replicate_rows.defvjp(_replicate_rows_fwd, _replicate_rows_bwd)


def _local_expert_order(row_expert: jax.Array) -> tuple[jax.Array, jax.Array]:
    # stable sort so padding (key El) goes last and rows keep source order within an expert
    perm = jnp.argsort(row_expert, stable=True)
    inverse = jnp.zeros_like(perm).at[perm].set(jnp.arange(perm.shape[0], dtype=perm.dtype))
    return perm, inverse


def _in_moe_scope(fn: Callable[CallArgs, Result]) -> Callable[CallArgs, Result]:
    """Run inside the ``moe`` named scope: the layer's dispatch/combine all-to-all and expert work carry
    it in their HLO op_name, as MaxText's MoeBlock does, so a trace reader knows the exchange is MoE."""

    @functools.wraps(fn)
    def wrapped(*args: CallArgs.args, **kwargs: CallArgs.kwargs) -> Result:
        with jax.named_scope(MOE_SCOPE):
            return fn(*args, **kwargs)

    return wrapped


@_in_moe_scope
def _moe_local(
    h: jax.Array,
    w_router: jax.Array,
    w_experts: dict[str, jax.Array],
    bias: jax.Array,
    cfg: DemoConfig,
    dims: _Dims,
    impl: A2AImpl,
    expert_impl: ExpertImpl,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Routed-expert output ``[T, H]`` on one device, inside ``shard_map``.

    ``w_router`` is the full router, ``w_experts`` this device's ``El`` experts.
    Also returns the global per-expert load ``[E]``, the global dropped count, and
    the rows this device's experts computed on (``[1]``: the group sizes it fed to
    its expert computation, so what the routing really gave this device).
    """
    D, E, El, K, T, H, C = dims.D, dims.E, dims.El, dims.K, dims.T, dims.H, dims.C
    me = jax.lax.axis_index(AXIS)
    with jax.named_scope("router"):
        ids, weights = route(h, w_router, bias, cfg)
    flat_e = ids.reshape(-1)
    order = jnp.argsort(flat_e, stable=True)  # sorted slot -> assignment (t * K + k)
    sorted_e = flat_e[order]
    permute: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
    if cfg.permute_backward == "gather":
        unsort = _inverse_permutation(order)
        x_sorted = replicate_rows(h, order, unsort, K)  # [T*K, H]
        permute = permute_rows
    else:
        unsort = None  # sorted in the combine's scope, where the plain program has always had it
        x_sorted = h[order // K]  # [T*K, H]
        permute = _gather_rows
    counts = jnp.bincount(flat_e, length=E).astype(jnp.int32)  # this device's load per expert
    rank = jnp.arange(T * K, dtype=jnp.int32) - _exclusive_cumsum(counts)[sorted_e]  # position within expert
    load = jax.lax.psum(counts, AXIS)
    dropped = jnp.zeros((), jnp.int32)
    tile = cfg.expert_tile_rows

    if impl == "capacity":
        keep = rank < C
        dropped = jax.lax.psum(jnp.sum(~keep, dtype=jnp.int32), AXIS)
        # one buffer of C rows per expert; layout [dest device, local expert, C] == [expert, C]
        dest_row = jnp.where(keep, sorted_e * C + rank, E * C)  # E * C is out of range: dropped
        with jax.named_scope(DISPATCH_SCOPE):
            send = jnp.zeros((E * C, H), h.dtype).at[dest_row].add(x_sorted, mode="drop")
            recv = jax.lax.all_to_all(send.reshape(D, El * C, H), AXIS, 0, 0, tiled=True)
        xs = recv.reshape(D, El, C, H).transpose(1, 0, 2, 3).reshape(El * D * C, H)
        ys = _expert_ffn(xs, w_experts, jnp.full((El,), D * C, jnp.int32), cfg.activation, expert_impl, tile)
        # the buffers are full-size whatever the routing; the rows that carry a kept assignment:
        kept_from = jax.lax.all_gather(jnp.minimum(counts, C), AXIS)  # [src, E]
        received = jax.lax.dynamic_slice_in_dim(kept_from, me * El, El, axis=1).sum()
        with jax.named_scope(COMBINE_SCOPE):
            back = ys.reshape(El, D, C, H).transpose(1, 0, 2, 3).reshape(D, El * C, H)
            ret = jax.lax.all_to_all(back, AXIS, 0, 0, tiled=True).reshape(E * C, H)
            y_sorted = ret.at[dest_row].get(mode="fill", fill_value=0)
    elif D == 1 and cfg.skip_one_device_exchange:
        # one device holds every expert: the rows sorted by expert are already the grouped GEMM's input
        group_sizes = counts
        received = group_sizes.sum()
        y_sorted = _expert_ffn(x_sorted, w_experts, group_sizes, cfg.activation, expert_impl, tile)
    else:
        all_counts = jax.lax.all_gather(counts, AXIS)  # [D, E]: every device's load per expert
        counts_from = jax.lax.dynamic_slice_in_dim(all_counts, me * El, El, axis=1)  # [src, local expert]
        group_sizes = counts_from.sum(axis=0)
        received = group_sizes.sum()
        dev_of = sorted_e // El  # destination device of each sorted row
        dev_counts = counts.reshape(D, El).sum(axis=1)
        dev_starts = _exclusive_cumsum(dev_counts)
        if impl == "padded":
            # B rows per destination: enough for every assignment of this device (dropless worst case)
            B = T * K
            dest_row = dev_of * B + jnp.arange(T * K, dtype=jnp.int32) - dev_starts[dev_of]
            with jax.named_scope(DISPATCH_SCOPE):
                send = jnp.zeros((D * B, H), h.dtype).at[dest_row].add(x_sorted)
                recv = jax.lax.all_to_all(send.reshape(D, B, H), AXIS, 0, 0, tiled=True).reshape(D * B, H)
            # local expert of received row (src, j); El marks padding
            j = jnp.arange(B, dtype=jnp.int32)
            ends = jnp.cumsum(counts_from, axis=1)  # [D, El]
            row_expert = (j[None, :, None] >= ends[:, None, :]).sum(axis=2, dtype=jnp.int32).reshape(D * B)
            perm, inverse = _local_expert_order(row_expert)
            ys = _expert_ffn(permute(recv, perm, inverse), w_experts, group_sizes, cfg.activation, expert_impl, tile)
            with jax.named_scope(COMBINE_SCOPE):
                back = permute(ys, inverse, perm).reshape(D, B, H)
                ret = jax.lax.all_to_all(back, AXIS, 0, 0, tiled=True).reshape(D * B, H)
                y_sorted = ret[dest_row]
        else:
            # exact-size exchange; S[s, d] = rows device s sends to device d
            S = all_counts.reshape(D, D, El).sum(axis=2)
            recv_sizes = S[:, me]
            recv_base = _exclusive_cumsum(recv_sizes)  # where source s's rows land here
            out_offsets = _exclusive_cumsum(S, axis=0)[me]  # where my rows land on each destination
            R = D * T * K  # dropless worst case: every device sends everything here
            with jax.named_scope(DISPATCH_SCOPE):
                recv = jax.lax.ragged_all_to_all(
                    x_sorted, _per_device_zeros((R, H), h.dtype), dev_starts, dev_counts, out_offsets, recv_sizes,
                    axis_name=AXIS,
                )  # fmt: skip
            # received rows are source-major, expert-minor: segment (s, e) ends at cumsum over that order
            ends = jnp.cumsum(counts_from.reshape(-1))
            segment = (jnp.arange(R, dtype=jnp.int32)[:, None] >= ends[None, :]).sum(axis=1, dtype=jnp.int32)
            row_expert = jnp.where(segment < D * El, segment % El, El)
            perm, inverse = _local_expert_order(row_expert)
            ys = _expert_ffn(permute(recv, perm, inverse), w_experts, group_sizes, cfg.activation, expert_impl, tile)
            back = permute(ys, inverse, perm)
            # send each source's rows home, to where they sat in its sorted buffer
            home_offsets = _exclusive_cumsum(S, axis=1)[:, me]
            with jax.named_scope(COMBINE_SCOPE):
                y_sorted = jax.lax.ragged_all_to_all(
                    back, _per_device_zeros((T * K, H), h.dtype), recv_base, recv_sizes, home_offsets, dev_counts,
                    axis_name=AXIS,
                )  # fmt: skip

    # un-sort back to (token, k) and weight by the router
    with jax.named_scope(COMBINE_SCOPE):
        y_assign = permute(y_sorted, jnp.argsort(order) if unsort is None else unsort, order).reshape(T, K, H)
        out = jnp.einsum("tk,tkh->th", weights, y_assign.astype(jnp.float32))
    return out, load, dropped, received.astype(jnp.int32).reshape(1)


def _gather_fsdp(w: jax.Array) -> jax.Array:
    # forward all-gather of an FSDP shard; its transpose is the gradient's reduce-scatter
    return jax.lax.all_gather(w, AXIS, axis=0, tiled=True)


def _rms_norm(h: jax.Array, scale: jax.Array) -> jax.Array:
    return h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6) * scale


def _local_loss(
    params: Params,
    bias: jax.Array,
    x: jax.Array,
    y: jax.Array,
    cfg: DemoConfig,
    dims: _Dims,
    impl: A2AImpl,
    expert_impl: ExpertImpl,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Per-device forward and global mean-squared error, inside ``shard_map``."""
    dt = jnp.dtype(cfg.dtype)
    h = x
    loads, dropped, received = [], [], []
    for index, (layer, layer_bias) in enumerate(zip(params, bias, strict=True)):
        with jax.named_scope(f"layer{index}"):  # a trace's per-scope table folds them into layer*
            # norm and router stay float32 (routing decisions are precision-sensitive); matmul weights go to dt
            full = {name: _gather_fsdp(w) for name, w in layer.items() if name not in EXPERT_KEYS}
            experts = {name: w.astype(dt) for name, w in layer.items() if name in EXPERT_KEYS}
            hn = _rms_norm(h, full["norm"]).astype(dt)
            out, load, drop, rows = _moe_local(hn, full["router"], experts, layer_bias, cfg, dims, impl, expert_impl)
            if cfg.shared_expert:
                with jax.named_scope("shared_expert"):
                    gate = full["shared_gate"].astype(dt) if "shared_gate" in full else None
                    shared = _dense_ffn(hn, full["shared_up"].astype(dt), full["shared_down"].astype(dt), gate)
                out = out + shared.astype(jnp.float32)
            h = h + out  # residual stream stays float32
        loads.append(load)
        dropped.append(drop)
        received.append(rows)
    sq = jnp.sum(jnp.square(h - y))
    loss = jax.lax.psum(sq, AXIS) / (dims.D * dims.T * dims.H)
    aux = {"load": jnp.stack(loads), "dropped": jnp.sum(jnp.stack(dropped)), "device_rows": jnp.stack(received)}
    return loss, aux


# ---------------------------------------------------------------- train step


def _adam(params: Params, grads: Params, opt: dict[str, Any], lr: float) -> tuple[Params, dict[str, Any]]:
    b1, b2, eps = 0.9, 0.999, 1e-8
    count = opt["count"] + 1
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, opt["mu"], grads)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, opt["nu"], grads)
    c1 = 1 - b1 ** count.astype(jnp.float32)
    c2 = 1 - b2 ** count.astype(jnp.float32)
    new = jax.tree.map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, mu, nu)
    return new, {"count": count, "mu": mu, "nu": nu}


def _all_finite(tree: Any) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def make_train_step(
    cfg: DemoConfig, mesh: Mesh, params: Params, impl: A2AImpl, expert_impl: ExpertImpl
) -> Callable[..., Any]:
    """``step(params, opt, bias, x, y) -> (params, opt, bias, metrics)``, un-jitted.

    ``metrics["load"]`` is ``[layers, experts]`` and ``metrics["device_rows"]``
    ``[layers, devices]``: the (token, k) assignments each expert, and each device's
    experts, received in this step's forward.
    """
    dims = _dims(cfg, mesh.size)
    specs = param_specs(params)
    loss_fn = jax.shard_map(
        lambda p, b, x, y: _local_loss(p, b, x, y, cfg, dims, impl, expert_impl),
        mesh=mesh,
        in_specs=(specs, P(), P(AXIS), P(AXIS)),
        out_specs=(P(), {"load": P(), "dropped": P(), "device_rows": P(None, AXIS)}),
    )

    def step(
        params: Params, opt: dict[str, Any], bias: jax.Array, x: jax.Array, y: jax.Array
    ) -> tuple[Params, dict[str, Any], jax.Array, dict[str, jax.Array]]:
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, bias, x, y)
        with jax.named_scope(OPTIMIZER_SCOPE):
            new_params, new_opt = _adam(params, grads, opt, learning_rate_of(cfg))
        new_bias = bias
        if cfg.aux_free_bias:
            # DeepSeek-V3: raise the bias of under-loaded experts, lower it for over-loaded ones
            load = aux["load"].astype(jnp.float32)
            new_bias = bias + cfg.bias_update_rate * jnp.sign(load.mean(axis=1, keepdims=True) - load)
        nonfinite = ~(jnp.isfinite(loss) & _all_finite(grads) & _all_finite(new_params))
        metrics = {
            "loss": loss,
            "load": aux["load"],
            "device_rows": aux["device_rows"],
            "dropped": aux["dropped"],
            "nonfinite": nonfinite,
        }
        return new_params, new_opt, new_bias, metrics

    return step


def make_batch(cfg: DemoConfig, n_devices: int, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Random token activations and a fixed nonlinear regression target, full ``[D*T, H]`` shapes."""
    kx, ka = jax.random.split(key)
    x = jax.random.normal(kx, (n_devices * cfg.tokens_per_device, cfg.hidden), jnp.float32)
    teacher = jax.random.normal(ka, (cfg.hidden, cfg.hidden), jnp.float32) / math.sqrt(cfg.hidden)
    return x, x + jnp.tanh(x @ teacher)


def initial_state(cfg: DemoConfig, mesh: Mesh) -> tuple[Params, dict[str, Any], jax.Array, jax.Array, jax.Array]:
    """Parameters, Adam state, routing bias and the batch, placed on ``mesh``, made by one compiled program.

    One program rather than op-by-op: eager jax compiles every small op separately,
    which took longer than compiling the train step on a 2-core machine.
    """
    dims = _dims(cfg, mesh.size)
    sharded = NamedSharding(mesh, P(AXIS))
    replicated = NamedSharding(mesh, P())

    def make() -> tuple[Params, dict[str, Any], jax.Array, jax.Array, jax.Array]:
        key_params, key_data = jax.random.split(jax.random.key(cfg.seed))
        params = init_params(cfg, key_params)
        # mu and nu are separate outputs, so separate buffers: all three are donated to the step
        zeros = jax.tree.map(jnp.zeros_like, params)
        opt = {"count": jnp.zeros((), jnp.int32), "mu": zeros, "nu": jax.tree.map(jnp.zeros_like, params)}
        x, y = make_batch(cfg, mesh.size, key_data)
        return params, opt, jnp.zeros((dims.L, dims.E), jnp.float32), x, y

    shapes = jax.eval_shape(make)
    shardings = (
        jax.tree.map(lambda _: sharded, shapes[0]),
        {
            "count": replicated,
            "mu": jax.tree.map(lambda _: sharded, shapes[1]["mu"]),
            "nu": jax.tree.map(lambda _: sharded, shapes[1]["nu"]),
        },
        replicated,
        sharded,
        sharded,
    )
    return jax.jit(make, out_shardings=shardings)()


def _balance(load: list[int] | list[float]) -> tuple[float, float]:
    arr = np.asarray(load, dtype=np.float64)
    mean = arr.mean()
    if mean == 0:
        return 0.0, 0.0
    return float(arr.max() / mean), float(arr.std() / mean)


_HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = .*\bop_name=\"([^\"]*)\"")
# instructions that move no data and so leave no event of their own in a trace
_NO_EVENT = re.compile(r"^(get-tuple-element|bitcast|tuple|parameter|constant)(\.\d+)?$")


def expert_op_names(hlo_text: str) -> list[str]:
    """Names of the entry computation's instructions inside the experts' name scope.

    A trace names a device event after its top-level HLO instruction, so these names
    pick the expert computation out of a trace of this step (the tiled path: its while
    loops, one per layer and direction, and the small fusions that plan their tiles).
    """
    entry = hlo_text.find("\nENTRY ")
    if entry < 0:
        return []
    names = []
    for line in hlo_text[entry:].splitlines()[1:]:
        if line.startswith("}"):
            break
        m = _HLO_INSTRUCTION.match(line)
        if m and f"/{EXPERT_SCOPE}/" in m.group(2) and not _NO_EVENT.match(m.group(1)):
            names.append(m.group(1))
    return names


def load_summary(records: list[StepRecord], config: DemoConfig) -> dict[str, Any]:
    """The routing the profiled steps really had, per step on average (units: (token, k) assignments).

    ``imbalance_max_over_mean`` is the hottest device's share of the expert rows over the
    mean device's, all layers together: how much longer its expert work is than a balanced one.
    """
    per_expert = np.mean([r.expert_load for r in records], axis=0)  # [layer, expert]
    per_device = np.mean([r.device_load for r in records], axis=0)  # [layer, device]
    total = per_device.sum(axis=0)
    return {
        "router_skew": config.router_skew,
        "unit": "(token, k) assignments per step, mean over the profiled steps",
        "tokens_per_expert": per_expert.round(3).tolist(),
        "tokens_per_device": per_device.round(3).tolist(),
        "device_max_over_mean_per_layer": [_balance(row)[0] for row in per_device],
        "imbalance_max_over_mean": _balance(total)[0],
        "hottest_device": int(np.argmax(total)),
    }


def run_demo(
    config: DemoConfig, trace_dir: Path | None = None, progress: Callable[[str], None] | None = None
) -> DemoResult:
    """Compile the train step, run warmup steps, then ``steps`` profiled steps.

    With ``trace_dir`` the profiled steps run under ``jax.profiler.trace``, each
    inside ``StepTraceAnnotation("train", step_num=i)`` and blocked on before the
    annotation closes, so a step's span covers its device work. ``progress`` is
    told each phase as it starts (one short line).
    """
    say = progress or (lambda _message: None)
    t_start = time.perf_counter()
    config = replace(config, learning_rate=learning_rate_of(config))  # the manifest records the rate it ran with
    mesh = make_mesh(config)
    dims = _dims(config, mesh.size)
    device = mesh.devices.flat[0]
    impl = resolve_a2a(config, device.platform)
    expert_impl = resolve_expert_impl(config, device.platform)

    say("initializing parameters and data")
    params, opt, bias, x, y = initial_state(config, mesh)

    step_fn = jax.jit(make_train_step(config, mesh, params, impl, expert_impl), donate_argnums=(0, 1, 2))
    say(f"compiling the train step ({mesh.size} x {device.platform}, {expert_impl} experts)")
    t0 = time.perf_counter()
    compiled = step_fn.lower(params, opt, bias, x, y).compile()
    compile_seconds = time.perf_counter() - t0
    hlo_text = compiled.as_text() or ""

    t0 = time.perf_counter()
    if config.warmup_steps:
        say(f"warm-up: {plural(config.warmup_steps, 'step')}, not profiled")
    for _ in range(config.warmup_steps):
        params, opt, bias, metrics = compiled(params, opt, bias, x, y)
    jax.block_until_ready((params, opt, bias))
    warmup_seconds = time.perf_counter() - t0

    raw: list[tuple[dict[str, Any], float]] = []

    def profiled_steps() -> None:
        nonlocal params, opt, bias
        for i in range(config.steps):
            say(f"profiling step {i + 1}/{config.steps}")
            # a step that does not wait returns once it is dispatched: its wall time is the dispatch's, and the
            # step that waits next carries the rest (their sum is the steps' wall time)
            waits = (i + 1) % config.sync_every == 0 or i + 1 == config.steps
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                t = time.perf_counter()
                params, opt, bias, metrics = compiled(params, opt, bias, x, y)
                if waits:
                    jax.block_until_ready((params, opt, bias, metrics))
                elapsed = time.perf_counter() - t
            raw.append((metrics, elapsed))

    t0 = time.perf_counter()
    if trace_dir is not None:
        Path(trace_dir).mkdir(parents=True, exist_ok=True)
        with jax.profiler.trace(str(trace_dir)):
            profiled_steps()
            say("writing the trace")
    else:
        profiled_steps()
    profiled_seconds = time.perf_counter() - t0

    records = []
    for i, (metrics, elapsed) in enumerate(raw):
        m = jax.device_get(metrics)
        load = [[int(v) for v in row] for row in np.asarray(m["load"])]
        device_load = [[int(v) for v in row] for row in np.asarray(m["device_rows"])]
        stats = [_balance(row) for row in load]
        records.append(
            StepRecord(
                step=i,
                loss=float(m["loss"]),
                expert_load=load,
                device_load=device_load,
                balance_max_over_mean=[s[0] for s in stats],
                device_max_over_mean=[_balance(row)[0] for row in device_load],
                load_cv=[s[1] for s in stats],
                tokens_dropped=int(m["dropped"]),
                nonfinite=bool(m["nonfinite"]),
                wall_seconds=elapsed,
            )
        )
    step_seconds = sum(r.wall_seconds for r in records)
    return DemoResult(
        config=config,
        records=records,
        tokens_per_second=dims.D * dims.T * config.steps / step_seconds if step_seconds > 0 else 0.0,
        hlo_text=hlo_text,
        model_flops_per_token=model_flops_per_token(config),
        active_params_per_token=active_params_per_token(config),
        a2a_impl=impl,
        a2a_note=_a2a_note(impl),
        expert_impl=expert_impl,
        expert_note=EXPERT_IMPL_NOTES[expert_impl],
        expert_scope=EXPERT_SCOPE,
        expert_ops=expert_op_names(hlo_text),
        load=load_summary(records, config),
        jax_version=jax.__version__,
        jaxlib_version=jaxlib.__version__,
        platform=device.platform,
        device_kind=device.device_kind,
        device_count=mesh.size,
        xla_flags=os.environ.get("XLA_FLAGS", ""),
        compile_seconds=compile_seconds,
        warmup_seconds=warmup_seconds,
        total_seconds=time.perf_counter() - t_start,
        trace_dir=None if trace_dir is None else str(trace_dir),
        timings={"profiled_seconds": profiled_seconds, "step_seconds": step_seconds},
    )


# ---------------------------------------------------------------- independent check


def sharded_moe(
    layer: dict[str, jax.Array], bias: jax.Array, h: jax.Array, cfg: DemoConfig, mesh: Mesh, a2a: A2AImpl | None = None
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Routed-expert output of one layer for normalised tokens ``h [D*T, H]``, through the real dispatch path.

    ``layer`` holds full-shape weights (as from :func:`init_params`). Returns
    (output ``[D*T, H]``, load ``[E]``, dropped count). Jitted and traceable, so it
    can be differentiated. Also returns the rows each device's experts computed on ``[D]``.
    """
    dims = _dims(cfg, mesh.size)
    platform = mesh.devices.flat[0].platform
    impl = a2a or resolve_a2a(cfg, platform)
    expert_impl = resolve_expert_impl(cfg, platform)
    experts = {name: w for name, w in layer.items() if name in EXPERT_KEYS}

    def local(router: jax.Array, experts: dict[str, jax.Array], b: jax.Array, hh: jax.Array) -> Any:
        return _moe_local(hh, _gather_fsdp(router), experts, b, cfg, dims, impl, expert_impl)

    fn = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P(AXIS), {k: P(AXIS) for k in experts}, P(), P(AXIS)),
        out_specs=(P(AXIS), P(), P(), P(AXIS)),
    )
    return fn(layer["router"], experts, bias, h)


def dense_reference_moe(
    layer: dict[str, jax.Array], bias: jax.Array, h: jax.Array, cfg: DemoConfig, n_devices: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The same layer computed densely: every expert on every token, masked by the routing.

    No sorting, no collectives. Tokens ``[i*T, (i+1)*T)`` belong to device ``i``,
    which matters only for capacity drops.
    """
    dims = _dims(cfg, n_devices)
    ids, weights = route(h, layer["router"], bias, cfg)
    if cfg.capacity_factor is not None:
        keep = jax.vmap(lambda i: capacity_keep(i, dims.E, dims.C))(ids.reshape(dims.D, dims.T, dims.K))
        keep = keep.reshape(ids.shape)
    else:
        keep = jnp.ones(ids.shape, jnp.bool_)
    n = h.shape[0]
    combine = jnp.zeros((n, dims.E), jnp.float32).at[jnp.arange(n)[:, None], ids].add(jnp.where(keep, weights, 0.0))
    up = jnp.einsum("nh,ehf->nef", h, layer["w_up"])
    if cfg.activation == "swiglu":
        act = jax.nn.silu(jnp.einsum("nh,ehf->nef", h, layer["w_gate"])) * up
    else:
        act = jax.nn.gelu(up)
    every = jnp.einsum("nef,efh->neh", act, layer["w_down"])
    load = jnp.zeros((dims.E,), jnp.int32).at[ids.reshape(-1)].add(1)
    return jnp.einsum("ne,neh->nh", combine, every.astype(jnp.float32)), load, jnp.sum(~keep, dtype=jnp.int32)
