"""The demo step's settings and their checks, without jax: the CLI checks a config before it starts the
child that imports jax (seconds), and names its options in what it refuses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal


class DemoConfigError(ValueError):
    """A config the demo step cannot run; the message lists every problem."""


@dataclass
class DemoConfig:
    """Model, routing and run settings; defaults give the 16-expert, 2-layer demo."""

    devices: int | None = None  # None: every jax device
    experts: int = 16
    top_k: int = 2
    tokens_per_device: int = 256
    hidden: int = 64
    expert_ffn: int = 128
    shared_expert: bool = True  # one dense expert of width expert_ffn, DeepSeek style
    layers: int = 2
    activation: Literal["swiglu", "gelu"] = "swiglu"
    router: Literal["softmax", "sigmoid"] = "sigmoid"
    n_groups: int | None = None  # group-limited routing: experts split into n_groups groups
    topk_groups: int | None = None  # ... and each token picks experts only from its best topk_groups groups
    aux_free_bias: bool = True  # DeepSeek-V3 auxiliary-loss-free balancing bias (selection only)
    bias_update_rate: float = 1e-3  # gamma in b_i += gamma * sign(mean_load - load_i)
    capacity_factor: float | None = None  # None: dropless; float: pad each expert to capacity, drop overflow
    router_skew: float = 0.0  # logit ramp from +skew (expert 0) to -skew (last expert): hot experts, hot devices
    a2a: Literal["auto", "ragged", "padded"] = "auto"  # dropless dispatch; auto picks ragged where supported
    expert_compute: Literal["auto", "ragged_dot", "tiled"] = "auto"  # auto: ragged_dot on accelerators, else tiled
    expert_tile_rows: int = 64  # rows per tile of the tiled expert computation
    # token movement, two levers on the permutations around the experts (default: the plain program):
    # "gather": each permutation's backward gathers by the inverse permutation (custom_vjp) where autodiff
    # writes a scatter-add, and the k copies of a token are summed after a gather
    permute_backward: Literal["scatter", "gather"] = "scatter"
    # with one device on the expert axis: no dispatch/combine exchange and no re-sort of the received rows
    # (both are copies inside the device there): the sorted tokens feed the grouped GEMM directly
    skip_one_device_exchange: bool = False
    dtype: Literal["float32", "bfloat16"] = "float32"
    # the host waits for the step's results every sync_every steps (and after the last): 1 blocks on each
    # step, as a loop that reads its loss back every step does, so the host dispatches each next step only
    # after the last one ended and the chip idles meanwhile; N lets the host run up to N steps ahead
    sync_every: int = 1
    steps: int = 5
    warmup_steps: int = 2
    # None: 0.08 / sqrt(hidden), Adam's step the same fraction of a weight's initial scale (1/sqrt(fan-in)) at
    # every width: 1e-2 at the CPU's 64, 1.8e-3 at the accelerators' 2048 (a fixed 1e-2 there diverged on a TPU
    # v5e within 3 steps, its router collapsing onto 2 of 16 experts; docs/capture.md)
    learning_rate: float | None = None
    seed: int = 0


# On an accelerator the sizes the user left unset take these: bf16 and a model wide and long enough that
# one step keeps the chip busy (DemoConfig's CPU sizes leave a TPU v5e mostly idle; docs/capture.md has the
# measurements). XLA:CPU keeps DemoConfig's small defaults: the tests and the README's quick demo use them.
ACCELERATOR_DEFAULTS: dict[str, Any] = {
    "dtype": "bfloat16",
    "hidden": 2048,
    "tokens_per_device": 16384,
    "expert_ffn": 1024,
    "layers": 3,
}


def sized_for(platform: str, given: dict[str, Any]) -> dict[str, Any]:
    """The config fields to run with on ``platform``: what was given, and on an accelerator (not cpu) the
    accelerator sizes for the fields it leaves out."""
    return dict(given) if platform.lower() == "cpu" else {**ACCELERATOR_DEFAULTS, **given}


# what a field is called where the user set it: the library's field names by default, `capture demo`'s options
# from the CLI (its child reports the checks that need the device count in the same words)
OPTION_NAMES: dict[str, str] = {
    "devices": "--devices",
    "experts": "--experts",
    "top_k": "--top-k",
    "tokens_per_device": "--tokens",
    "hidden": "--hidden",
    "expert_ffn": "--expert-ffn",
    "layers": "--layers",
    "router": "--router",
    "capacity_factor": "--capacity-factor",
    "dtype": "--dtype",
    "router_skew": "--router-skew",
    "expert_compute": "--expert-compute",
    "permute_backward": "--permute-backward",
    "sync_every": "--sync-every",
    "steps": "--steps",
    "warmup_steps": "--warmup",
    "seed": "--seed",
}
FIELDS = frozenset(f.name for f in fields(DemoConfig))
_CHOICES: dict[str, tuple[str, ...]] = {
    "activation": ("swiglu", "gelu"),
    "router": ("softmax", "sigmoid"),
    "a2a": ("auto", "ragged", "padded"),
    "expert_compute": ("auto", "ragged_dot", "tiled"),
    "permute_backward": ("scatter", "gather"),
    "dtype": ("float32", "bfloat16"),
}
_AT_LEAST_ONE = (
    "experts",
    "top_k",
    "tokens_per_device",
    "hidden",
    "expert_ffn",
    "layers",
    "steps",
    "expert_tile_rows",
    "sync_every",
)


def learning_rate_of(cfg: DemoConfig) -> float:
    """The Adam learning rate the step runs with: the config's, else 0.08 / sqrt(hidden)."""
    return cfg.learning_rate if cfg.learning_rate is not None else 0.08 / math.sqrt(cfg.hidden)


def config_problems(cfg: DemoConfig, n_devices: int | None = None, names: Mapping[str, str] | None = None) -> list[str]:
    """What keeps ``cfg`` from running, in the words of ``names`` (field -> what the user calls it); the checks
    that need the device count run only where ``n_devices`` is given."""

    def name(field: str) -> str:
        return (names or {}).get(field, field)

    problems = []
    for field, choices in _CHOICES.items():
        if getattr(cfg, field) not in choices:
            listed = ", ".join(choices[:-1]) + " or " + choices[-1]
            problems.append(f"{name(field)} must be {listed} (got {getattr(cfg, field)!r})")
    for field in _AT_LEAST_ONE:
        value = getattr(cfg, field)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{name(field)} must be a whole number >= 1 (got {value!r})")
    if cfg.learning_rate is not None and not (math.isfinite(cfg.learning_rate) and cfg.learning_rate > 0):
        problems.append(f"{name('learning_rate')} must be a number > 0 (got {cfg.learning_rate!r})")
    if not isinstance(cfg.warmup_steps, int) or cfg.warmup_steps < 0:
        problems.append(f"{name('warmup_steps')} must be a whole number >= 0 (got {cfg.warmup_steps!r})")
    if cfg.devices is not None and (not isinstance(cfg.devices, int) or cfg.devices < 1):
        problems.append(f"{name('devices')} must be a whole number >= 1 (got {cfg.devices!r})")
    if problems:  # the checks below compare these values
        return problems
    E, K = cfg.experts, cfg.top_k
    if K > E:
        problems.append(f"{name('top_k')} ({K}) must be at most {name('experts')} ({E})")
    if (cfg.n_groups is None) != (cfg.topk_groups is None):
        problems.append("set both n_groups and topk_groups, or neither")
    if cfg.n_groups is not None and cfg.topk_groups is not None:
        if cfg.n_groups < 1 or E % cfg.n_groups or not 1 <= cfg.topk_groups <= cfg.n_groups:
            problems.append("n_groups must divide experts and 1 <= topk_groups <= n_groups")
        elif cfg.topk_groups * (E // cfg.n_groups) < K:
            problems.append("topk_groups groups hold fewer than top_k experts")
        elif cfg.router == "sigmoid" and E // cfg.n_groups < 2:
            problems.append("sigmoid group scores sum each group's top-2, so groups need >= 2 experts")
    if cfg.capacity_factor is not None and not (math.isfinite(cfg.capacity_factor) and cfg.capacity_factor > 0):
        problems.append(
            f"{name('capacity_factor')} must be a number > 0 (got {cfg.capacity_factor!r}; leave it out "
            "for dropless routing)"
        )
    if not math.isfinite(cfg.router_skew) or cfg.router_skew < 0:
        problems.append(f"{name('router_skew')} must be a finite number >= 0 (got {cfg.router_skew!r})")
    if n_devices is not None:
        D = n_devices
        if E % D:
            problems.append(f"{name('experts')} ({E}) must be a multiple of the devices ({D})")
        if cfg.hidden % D or cfg.expert_ffn % D:
            problems.append(
                f"{name('hidden')} ({cfg.hidden}) and {name('expert_ffn')} ({cfg.expert_ffn}) must be multiples of "
                f"the devices ({D}): every weight is split over them (FSDP)"
            )
    return problems


def checked(cfg: DemoConfig, n_devices: int | None = None, names: Mapping[str, str] | None = None) -> DemoConfig:
    """``cfg``, or :class:`DemoConfigError` naming every problem."""
    problems = config_problems(cfg, n_devices, names)
    if problems:
        raise DemoConfigError("; ".join(problems))
    return cfg


def from_fields(given: Mapping[str, Any]) -> DemoConfig:
    """A config of the known fields of ``given`` (a manifest's model, the CLI's options)."""
    return DemoConfig(**{k: v for k, v in given.items() if k in FIELDS})
