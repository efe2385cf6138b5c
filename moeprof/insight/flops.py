"""Model FLOPs per token of a (mixture-of-experts) transformer, device peaks, and MFU.

``flops_per_token`` counts the matmuls of one token's forward pass (2 FLOPs per
multiply-accumulate) item by item, each with its formula as a string a person can
check by hand; training is 3 × forward (the backward pass costs about twice the
forward: gradients for activations and for weights). Elementwise work (norms,
activations, softmax, RoPE, residuals) and activation recomputation are not
counted, as usual for model FLOPs utilization (MFU). ``docs/flops.md`` derives
every formula and works DeepSeek-V3 out.

``peak_for`` gives a GPU's dense (no 2:4 sparsity) tensor-core peaks (the presets of
``core/hardware.toml``) for a device name as nvidia-smi, JAX or ROCm spell it, and ``throughput_figures`` turns a
measured step into tokens/s, model TFLOPS per device and MFU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..core.hardware import match
from ..errors import InputError
from ..words import plural

FLOPS_SCHEMA = "moeprof.flops/1"
TRAINING_FACTOR = 3  # forward + backward, the backward ≈ 2 × forward

# DeepSeek-V3's config.json (huggingface.co/deepseek-ai/DeepSeek-V3), the fields the count reads
DEEPSEEK_V3_CONFIG: dict = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_shared_experts": 1,
    "moe_intermediate_size": 2048,
    "intermediate_size": 18432,
    "vocab_size": 129280,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "tie_word_embeddings": False,
    "num_nextn_predict_layers": 1,
}
PRESETS: dict[str, dict] = {"deepseek-v3": DEEPSEEK_V3_CONFIG}


@dataclass(frozen=True)
class ModelConfig:
    """The shapes that decide a transformer's matmul FLOPs.

    ``kv_lora_rank`` set means multi-head latent attention (MLA, DeepSeek-V2/V3);
    otherwise standard multi-head / grouped-query attention with ``head_dim``.
    ``shared_intermediate_size`` is the total width of the shared expert(s).
    """

    name: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int  # dense FFN width (the non-MoE layers)
    num_moe_layers: int = 0
    n_routed_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_intermediate_size: int = 0
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    tie_word_embeddings: bool = False
    mtp_layers: int = 0  # DeepSeek multi-token prediction modules: recorded, not counted
    sliding_window: int | None = None  # recorded, not modelled: attention counts as full causal

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @classmethod
    def from_hf(cls, raw: dict, name: str = "model", origin: str | Path | None = None) -> ModelConfig:
        """Read a HuggingFace-style ``config.json`` (dense, Mixtral/Qwen-MoE, DeepSeek-V2/V3)."""
        if not isinstance(raw, dict):
            raise InputError(origin, "config.json is not a JSON object")
        if "hidden_size" not in raw and isinstance(raw.get("text_config"), dict):
            raw = raw["text_config"]  # multimodal wrappers keep the language model one level down

        def get(*keys: str, default: object = None) -> object:
            for key in keys:
                if raw.get(key) is not None:
                    return raw[key]
            return default

        def need(*keys: str) -> int:
            value = get(*keys)
            if value is None:
                raise InputError(origin, f"config has no {keys[0]}")
            return _positive(value, keys[0], origin)

        hidden = need("hidden_size", "dim")
        layers = need("num_hidden_layers", "n_layers")
        vocab = need("vocab_size")
        heads = need("num_attention_heads", "n_heads")
        kv_heads = _positive(get("num_key_value_heads", default=heads), "num_key_value_heads", origin)
        head_dim = _positive(get("head_dim", default=hidden // heads), "head_dim", origin)
        experts = _count(get("n_routed_experts", "num_local_experts", "num_experts", default=0), "experts", origin)
        top_k = _count(get("num_experts_per_tok", "n_activated_experts", default=0), "num_experts_per_tok", origin)
        intermediate = get("intermediate_size", "inter_dim")
        if experts:
            if not top_k or top_k > experts:
                raise InputError(origin, f"num_experts_per_tok {top_k} is not within 1..{experts} experts")
            # Mixtral-style configs give the per-expert width as intermediate_size
            moe_inter = need("moe_intermediate_size", "moe_inter_dim", "intermediate_size")
            shared = get("shared_expert_intermediate_size")
            if shared is None:
                shared = _count(get("n_shared_experts", default=0), "n_shared_experts", origin) * moe_inter
            moe_layers = _moe_layer_count(raw, layers, origin)
        else:
            top_k = moe_inter = shared = moe_layers = 0
        if moe_layers < layers and intermediate is None:
            raise InputError(origin, "config has no intermediate_size for its dense FFN layers")
        kv_lora = get("kv_lora_rank")
        q_lora = get("q_lora_rank")
        return cls(
            name=name,
            hidden_size=hidden,
            num_layers=layers,
            vocab_size=vocab,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            intermediate_size=_count(intermediate or 0, "intermediate_size", origin),
            num_moe_layers=moe_layers,
            n_routed_experts=experts,
            experts_per_token=top_k,
            moe_intermediate_size=moe_inter,
            shared_intermediate_size=_count(shared, "shared_expert_intermediate_size", origin),
            q_lora_rank=None if not q_lora else _positive(q_lora, "q_lora_rank", origin),
            kv_lora_rank=None if kv_lora is None else _positive(kv_lora, "kv_lora_rank", origin),
            qk_nope_head_dim=_count(get("qk_nope_head_dim", default=0), "qk_nope_head_dim", origin),
            qk_rope_head_dim=_count(get("qk_rope_head_dim", default=0), "qk_rope_head_dim", origin),
            v_head_dim=_count(get("v_head_dim", default=0), "v_head_dim", origin),
            tie_word_embeddings=bool(get("tie_word_embeddings", default=False)),
            mtp_layers=_count(get("num_nextn_predict_layers", default=0), "num_nextn_predict_layers", origin),
            sliding_window=window if isinstance(window := get("sliding_window"), int) else None,
        )


def _count(value: object, key: str, origin: str | Path | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(origin, f"{key} must be a non-negative integer, not {value!r}")
    return value


def _positive(value: object, key: str, origin: str | Path | None) -> int:
    n = _count(value, key, origin)
    if n == 0:
        raise InputError(origin, f"{key} must be positive")
    return n


def _moe_layer_count(raw: dict, layers: int, origin: str | Path | None) -> int:
    """How many layers are MoE: DeepSeek (first_k_dense_replace, moe_layer_freq), Qwen (decoder_sparse_step)."""
    first_dense = _count(raw.get("first_k_dense_replace") or raw.get("n_dense_layers") or 0, "first_k_dense", origin)
    freq = raw.get("moe_layer_freq") or 1
    step = _positive(raw.get("decoder_sparse_step") or 1, "decoder_sparse_step", origin)
    mlp_only = set(raw.get("mlp_only_layers") or [])
    if isinstance(freq, list):  # Megatron-style per-layer pattern, e.g. [0]*3 + [1]*58
        if len(freq) != layers:
            raise InputError(origin, f"moe_layer_freq lists {len(freq)} layers, not {layers}")
        is_moe = [bool(f) for f in freq]
    else:
        freq = _positive(freq, "moe_layer_freq", origin)
        is_moe = [i >= first_dense and i % freq == 0 for i in range(layers)]
    return sum(1 for i in range(layers) if is_moe[i] and (i + 1) % step == 0 and i not in mlp_only)


def load_model_config(spec: str | Path) -> ModelConfig:
    """A preset name (``deepseek-v3``) or the path of a ``config.json`` (or of the folder holding it)."""
    key = str(spec).strip().lower().replace("_", "-")
    if key in PRESETS:
        return ModelConfig.from_hf(PRESETS[key], name=key)
    path = Path(spec)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise InputError(spec, f"not a preset ({', '.join(PRESETS)}) nor a readable config.json")
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(path, f"not valid JSON: {exc}") from None
    return ModelConfig.from_hf(raw, name=str(raw.get("_name_or_path") or path.parent.name or path.stem), origin=path)


# ----------------------------------------------------------------------------- FLOPs


@dataclass(frozen=True)
class FlopsItem:
    key: str
    label: str
    flops: float  # per token, forward or training as the breakdown says
    formula: str  # symbols, then the same with numbers; symbols are in FlopsBreakdown.symbols


@dataclass
class FlopsBreakdown:
    model: str
    seq_len: int
    training: bool
    items: list[FlopsItem]
    active_params: int
    total_params: int
    symbols: dict[str, int]
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> float:
        return sum(item.flops for item in self.items)

    def item(self, key: str) -> FlopsItem:
        return next(i for i in self.items if i.key == key)

    def to_dict(self) -> dict:
        total = self.total
        return {
            "schema": FLOPS_SCHEMA,
            "model": self.model,
            "seq_len": self.seq_len,
            "mode": "training" if self.training else "inference",
            "factor": TRAINING_FACTOR if self.training else 1,
            "flops_per_token": total,
            "items": [
                {
                    "key": i.key,
                    "label": i.label,
                    "flops": i.flops,
                    "share": i.flops / total if total else 0.0,
                    "formula": i.formula,
                }
                for i in self.items
            ],
            "active_params_per_token": self.active_params,
            "total_params": self.total_params,
            "symbols": self.symbols,
            "notes": self.notes,
        }


def _attention_weights(cfg: ModelConfig) -> dict[str, tuple[int, str, str]]:
    """Per-layer weights of the attention projections: key -> (count, symbols, numbers)."""
    h, nh = cfg.hidden_size, cfg.num_attention_heads
    if cfg.is_mla:
        r_kv, dn, dr, dv = cfg.kv_lora_rank or 0, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        if cfg.q_lora_rank:
            r_q = cfg.q_lora_rank
            q = (
                h * r_q + r_q * nh * (dn + dr),
                "h·r_q + r_q·n_h·(d_nope+d_rope)",
                f"{h}·{r_q} + {r_q}·{nh}·({dn}+{dr})",
            )
        else:
            q = (h * nh * (dn + dr), "h·n_h·(d_nope+d_rope)", f"{h}·{nh}·({dn}+{dr})")
        kv = (
            h * (r_kv + dr) + r_kv * nh * (dn + dv),
            "h·(r_kv+d_rope) + r_kv·n_h·(d_nope+d_v)",
            f"{h}·({r_kv}+{dr}) + {r_kv}·{nh}·({dn}+{dv})",
        )
        out = (nh * dv * h, "n_h·d_v·h", f"{nh}·{dv}·{h}")
    else:
        d, nkv = cfg.head_dim, cfg.num_key_value_heads
        q = (h * nh * d, "h·n_h·d_head", f"{h}·{nh}·{d}")
        kv = (2 * h * nkv * d, "2·h·n_kv·d_head", f"2·{h}·{nkv}·{d}")
        out = (nh * d * h, "n_h·d_head·h", f"{nh}·{d}·{h}")
    return {"attn_q": q, "attn_kv": kv, "attn_out": out}


def _ffn_weights(cfg: ModelConfig) -> dict[str, tuple[int, str, str]]:
    """Weights one token multiplies in the FFNs, whole model: key -> (count, symbols, numbers).

    Every FFN is SwiGLU (gate, up, down: 3 matmuls of h × width).
    """
    h, lm, ld = cfg.hidden_size, cfg.num_moe_layers, cfg.num_dense_layers
    k, f_moe, f_sh, e, f = (
        cfg.experts_per_token,
        cfg.moe_intermediate_size,
        cfg.shared_intermediate_size,
        cfg.n_routed_experts,
        cfg.intermediate_size,
    )
    return {
        "routed_experts": (lm * k * 3 * h * f_moe, "L_moe·k·3·h·f_moe", f"{lm}·{k}·3·{h}·{f_moe}"),
        "shared_experts": (lm * 3 * h * f_sh, "L_moe·3·h·f_shared", f"{lm}·3·{h}·{f_sh}"),
        "dense_ffn": (ld * 3 * h * f, "L_dense·3·h·f_dense", f"{ld}·3·{h}·{f}"),
        "router": (lm * h * e, "L_moe·h·E", f"{lm}·{h}·{e}"),
    }


def total_params(cfg: ModelConfig) -> int:
    """Matmul weights and embeddings of the main model (norms, biases and MTP modules left out)."""
    attn = cfg.num_layers * sum(w for w, _, _ in _attention_weights(cfg).values())
    h = cfg.hidden_size
    experts = cfg.num_moe_layers * (cfg.n_routed_experts * 3 * h * cfg.moe_intermediate_size)
    ffn = _ffn_weights(cfg)
    rest = ffn["shared_experts"][0] + ffn["dense_ffn"][0] + ffn["router"][0]
    embeddings = cfg.vocab_size * h * (1 if cfg.tie_word_embeddings else 2)
    return attn + experts + rest + embeddings


def active_params_per_token(cfg: ModelConfig) -> int:
    """Weights one token multiplies: attention, top-k + shared experts, dense FFNs, router, LM head.

    The input embedding is a lookup, not a matmul, so it is not counted (DeepSeek's
    36.6B for V3's main model counts the same way; its rounded "37B" adds the embedding).
    """
    attn = cfg.num_layers * sum(w for w, _, _ in _attention_weights(cfg).values())
    ffn = sum(w for w, _, _ in _ffn_weights(cfg).values())
    return attn + ffn + cfg.vocab_size * cfg.hidden_size


def flops_per_token(cfg: ModelConfig, seq_len: int, training: bool = True) -> FlopsBreakdown:
    """Model FLOPs one token costs, item by item (forward = 2 × MACs; training = 3 × forward)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be positive, not {seq_len}")
    factor = TRAINING_FACTOR if training else 1
    lead = f"{factor} × 2 × " if training else "2 × "
    h, L, nh = cfg.hidden_size, cfg.num_layers, cfg.num_attention_heads

    def item(key: str, label: str, macs: float, symbols: str, numbers: str) -> FlopsItem:
        return FlopsItem(key, label, float(factor * 2 * macs), f"{lead}{symbols} = {lead}{numbers}")

    items = []
    attn_labels = {
        "attn_q": "attention q projection" + (" (MLA down/up)" if cfg.is_mla and cfg.q_lora_rank else ""),
        "attn_kv": "attention kv projection" + (" (MLA down/up)" if cfg.is_mla else ""),
        "attn_out": "attention output projection",
    }
    for key, (weights, sym, num) in _attention_weights(cfg).items():
        items.append(item(key, attn_labels[key], L * weights, f"L·({sym})", f"{L}·({num})"))
    # scores q·kᵀ and probabilities·v; causal: a query sees on average half the sequence
    d_qk, d_v = (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim) if cfg.is_mla else (cfg.head_dim,) * 2
    items.append(
        item(
            "attn_scores",
            "attention scores and values (causal: S/2)",
            L * nh * (d_qk + d_v) * seq_len / 2,
            "L·n_h·(d_qk+d_v)·S/2",
            f"{L}·{nh}·({d_qk}+{d_v})·{seq_len}/2",
        )
    )
    labels = {
        "routed_experts": "routed experts (top-k, SwiGLU)",
        "shared_experts": "shared expert(s)",
        "dense_ffn": "dense FFN layers",
        "router": "router",
    }
    for key, (weights, sym, num) in _ffn_weights(cfg).items():
        if weights:
            items.append(item(key, labels[key], weights, sym, num))
    items.append(item("lm_head", "LM head", h * cfg.vocab_size, "h·V", f"{h}·{cfg.vocab_size}"))

    symbols = {"h": h, "L": L, "n_h": nh, "V": cfg.vocab_size, "S": seq_len}
    if cfg.num_moe_layers:
        symbols.update(
            L_moe=cfg.num_moe_layers,
            E=cfg.n_routed_experts,
            k=cfg.experts_per_token,
            f_moe=cfg.moe_intermediate_size,
            f_shared=cfg.shared_intermediate_size,
        )
    if cfg.num_dense_layers:
        symbols.update(L_dense=cfg.num_dense_layers, f_dense=cfg.intermediate_size)
    if cfg.is_mla:
        symbols.update(
            r_kv=cfg.kv_lora_rank or 0, d_nope=cfg.qk_nope_head_dim, d_rope=cfg.qk_rope_head_dim, d_v=cfg.v_head_dim
        )
        if cfg.q_lora_rank:
            symbols["r_q"] = cfg.q_lora_rank
    else:
        symbols.update(n_kv=cfg.num_key_value_heads, d_head=cfg.head_dim)

    notes = [
        "forward = 2 FLOPs per multiply-accumulate"
        + ("; training = 3 × forward (backward ≈ 2 × forward), no recomputation" if training else ""),
        "causal attention: each query attends to S/2 keys on average",
        "not counted: input embedding lookup, norms, activations, softmax, RoPE, biases",
    ]
    if cfg.mtp_layers:
        notes.append(f"{plural(cfg.mtp_layers, 'multi-token-prediction module')} in the config not counted")
    if cfg.sliding_window:
        notes.append(f"sliding_window {cfg.sliding_window} ignored: attention counted as full causal")
    return FlopsBreakdown(
        model=cfg.name,
        seq_len=seq_len,
        training=training,
        items=items,
        active_params=active_params_per_token(cfg),
        total_params=total_params(cfg),
        symbols=symbols,
        notes=notes,
    )


# ----------------------------------------------------------------------------- device peaks


@dataclass(frozen=True)
class DevicePeak:
    name: str
    bf16_tflops: float  # dense (no 2:4 sparsity) BF16/FP16 tensor core
    fp8_tflops: float | None  # dense FP8 tensor core (None: the GPU has none)
    source: str


def device_peak(device_kind: str | None) -> DevicePeak | None:
    """The preset for a device name such as "NVIDIA H100 80GB HBM3" (case-insensitive), or None.

    The figures are the GPU presets of ``core/hardware.toml`` (dense tensor-core peaks, their sources
    there); a variant whose peak differs and is not in the table (NVL/PCIe boards) is None.
    """
    if not device_kind:
        return None
    preset = match(device_kind).preset
    if preset is None:
        return None
    return DevicePeak(preset.name, preset.bf16_tflops, preset.fp8_tflops, preset.sources[0])


def dtype_kind(dtype: str) -> str | None:
    d = dtype.strip().lower()
    if d in ("bf16", "bfloat16", "fp16", "float16", "half"):
        return "bf16"  # FP16 and BF16 tensor-core peaks are equal on these devices
    if d.startswith(("fp8", "float8")) or "e4m3" in d or "e5m2" in d:
        return "fp8"
    return None


def peak_for(device_kind: str | None, dtype: str = "bf16") -> float | None:
    """Dense tensor-core peak TFLOPS of one device for ``dtype`` (bf16/fp16 or fp8), None when unknown."""
    peak = device_peak(device_kind)
    kind = dtype_kind(dtype)
    if peak is None or kind is None:
        return None
    return peak.bf16_tflops if kind == "bf16" else peak.fp8_tflops


def throughput_figures(
    tokens_per_step: int,
    step_seconds: float,
    flops_per_token: float,
    devices: int,
    device_kind: str | None,
    dtype: str = "bf16",
    peak_tflops: float | None = None,
) -> dict:
    """tokens/s, model TFLOPS per device and, where a peak is known (given or by device name), MFU."""
    if step_seconds <= 0:
        raise ValueError(f"step_seconds must be positive, not {step_seconds}")
    if devices < 1:
        raise ValueError(f"devices must be at least 1, not {devices}")
    tokens_per_second = tokens_per_step / step_seconds
    tflops = tokens_per_second * flops_per_token / devices / 1e12
    out: dict = {
        "tokens_per_second": tokens_per_second,
        "model_flops_per_token": flops_per_token,
        "tflops_per_device": tflops,
        "devices": devices,
    }
    peak = peak_tflops if peak_tflops is not None else peak_for(device_kind, dtype)
    if peak:
        out.update(peak_tflops=peak, dtype=dtype, mfu=tflops / peak)
        if peak_tflops is None and (preset := device_peak(device_kind)):
            out["peak_device"] = preset.name
    return out
