"""GPU and TPU presets as data (``hardware.toml``): compute peaks, scale-up fabric and NIC bandwidth, fabric latencies.

A trace names its chips (Kineto ``deviceProperties``, Nsight ``TARGET_INFO_GPU``, an XPlane device
plane's stats, a TPU plane's ``device_type_string``); :func:`match` maps such a name to a preset, and says
why where it cannot (a variant whose figures the table lacks, or a model it does not hold). Every figure
carries its source in the table, and a test checks that none is missing.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class Fabric:
    """A link between devices as the cost model sees it: its name on screen and one hop's latency."""

    key: str  # nvlink | xgmi | ib | ici | dcn
    name: str  # on screen: NVLink, xGMI, InfiniBand, ICI, DCN
    long_name: str
    hop_latency_us: float | None  # None: not known (TPU fabrics): no latency knee
    source: str
    domain: str = "domain"  # what one scale-up domain of this fabric is called: an NVLink domain, an ICI slice


@dataclass(frozen=True)
class ChipPreset:
    name: str
    vendor: str
    bf16_tflops: float  # dense tensor-core peak (FP16 where the GPU has no BF16)
    fp8_tflops: float | None
    scale_up: str  # fabric key of the scale-up domain: nvlink | xgmi | ici
    scale_up_gbps: float | None  # per GPU, one direction; None: no scale-up fabric on this board
    scale_out_gbps: float | None  # scale-out per chip (a GPU's NIC), one direction, on the reference system
    sources: tuple[str, ...]
    patterns: tuple[re.Pattern[str], ...]
    scale_out: str = "ib"  # fabric key of scale-out: ib (a NIC per GPU) | dcn (TPU slices)
    hbm_gbps: float | None = None  # HBM bandwidth per chip (the TPU presets state it)

    @property
    def is_tpu(self) -> bool:
        return self.scale_up == "ici"

    def link_peaks(self) -> dict[str, float]:
        """Peak GB/s of the analysis's links: ``nvlink`` is the scale-up domain's fabric (xGMI on AMD)."""
        peaks = {"nvlink": self.scale_up_gbps, "ib": self.scale_out_gbps}
        return {k: v for k, v in peaks.items() if v}


@dataclass(frozen=True)
class Variant:
    """Names of a chip whose figures differ from its preset's and are not in the table."""

    patterns: tuple[re.Pattern[str], ...]
    reason: str


@dataclass(frozen=True)
class Vendor:
    """A GPU vendor, told from a name a trace carries even where no preset matches, and its scale-up fabric."""

    name: str  # as presets spell it: AMD, NVIDIA
    scale_up: str  # fabric key: xgmi | nvlink
    patterns: tuple[re.Pattern[str], ...]


@dataclass(frozen=True)
class HardwareTable:
    gpus: tuple[ChipPreset, ...]
    variants: tuple[Variant, ...]
    fabrics: dict[str, Fabric]
    base_latency_us: float
    base_latency_source: str
    tpus: tuple[ChipPreset, ...] = ()
    tpu_variants: tuple[Variant, ...] = ()
    vendors: tuple[Vendor, ...] = ()

    @property
    def chips(self) -> tuple[ChipPreset, ...]:
        """Every preset, GPUs first: what a name is matched against."""
        return (*self.gpus, *self.tpus)


def _patterns(values: list[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(v) for v in values)


@cache
def table() -> HardwareTable:
    """The presets of ``moeprof/core/hardware.toml``, read once."""
    doc = tomllib.loads(resources.files("moeprof.core").joinpath("hardware.toml").read_text(encoding="utf-8"))
    fabrics = {
        key: Fabric(
            key,
            f["name"],
            f.get("long_name", f["name"]),
            float(f["hop_latency_us"]) if "hop_latency_us" in f else None,
            f["source"],
            f.get("domain", "domain"),
        )
        for key, f in doc["fabric"].items()
    }

    def preset(g: dict) -> ChipPreset:
        return ChipPreset(
            name=g["name"],
            vendor=g["vendor"],
            bf16_tflops=float(g["bf16_tflops"]),
            fp8_tflops=float(g["fp8_tflops"]) if "fp8_tflops" in g else None,
            scale_up=g["scale_up"],
            scale_up_gbps=float(g["scale_up_gbps"]) if "scale_up_gbps" in g else None,
            scale_out_gbps=float(g["scale_out_gbps"]) if "scale_out_gbps" in g else None,
            sources=tuple(g["sources"]),
            patterns=_patterns(g["match"]),
            scale_out=g.get("scale_out", "ib"),
            hbm_gbps=float(g["hbm_gbps"]) if "hbm_gbps" in g else None,
        )

    model = doc["model"]
    return HardwareTable(
        gpus=tuple(preset(g) for g in doc["gpu"]),
        variants=tuple(Variant(_patterns(v["match"]), v["reason"]) for v in doc.get("variant", [])),
        fabrics=fabrics,
        base_latency_us=float(model["base_latency_us"]),
        base_latency_source=model["source"],
        tpus=tuple(preset(g) for g in doc.get("tpu", [])),
        tpu_variants=tuple(Variant(_patterns(v["match"]), v["reason"]) for v in doc.get("tpu_variant", [])),
        vendors=tuple(Vendor(name, v["scale_up"], _patterns(v["match"])) for name, v in doc.get("vendor", {}).items()),
    )


def _normal(name: str) -> str:
    # "NVIDIA_H100" and "nvidia h100" alike: an underscore joins words for \b
    return name.lower().replace("_", " ").strip()


@dataclass(frozen=True)
class Match:
    """What a chip name resolves to: a preset, or why none (``note``)."""

    name: str
    preset: ChipPreset | None
    note: str = ""


@cache
def match(name: str) -> Match:
    """The preset for a chip name as a trace (or ``--chip``) spells it, case-insensitive."""
    text = _normal(name)
    t = table()
    for variant in (*t.variants, *t.tpu_variants):
        if any(p.search(text) for p in variant.patterns):
            return Match(name, None, f"{name}: no preset ({variant.reason})")
    for chip in t.chips:
        if any(p.search(text) for p in chip.patterns):
            return Match(name, chip)
    what = "TPU" if re.search(r"\btpu", text) else "GPU"
    return Match(name, None, f"{name}: no preset for this {what} (presets: {', '.join(preset_names())})")


def preset_names() -> list[str]:
    return [g.name for g in table().chips]


def fabric(key: str) -> Fabric:
    return table().fabrics[key]


def scale_up_name(preset: ChipPreset | None) -> str:
    """What the scale-up fabric is called on screen: NVLink, xGMI on AMD, ICI on a TPU."""
    return fabric(preset.scale_up).name if preset is not None else "NVLink"


def scale_out_name(preset: ChipPreset | None) -> str:
    """What the scale-out fabric is called on screen: InfiniBand, DCN between TPU slices."""
    return fabric(preset.scale_out).name if preset is not None else "InfiniBand"


def is_tpu_job(kinds: Iterable[str]) -> bool:
    """Whether a job's devices are TPU chips, every one of them (``kinds``: each device's kind as its reader
    recorded it, ``Trace.device_kinds``' values)."""
    named = list(kinds)
    return bool(named) and all(k == "TPU" for k in named)


def is_cpu_job(kinds: Iterable[str]) -> bool:
    """Whether a job's devices are CPU devices (XLA:CPU's virtual devices, a capture without an accelerator),
    every one of them (``kinds`` as for :func:`is_tpu_job`)."""
    named = list(kinds)
    return bool(named) and all(k == "CPU" for k in named)


# the fabric pair of a TPU job: scale-up within a slice, scale-out between slices (the analysis keeps the keys
# "nvlink" and "ib" for them, as for every job: spec §7's comm_nvlink_ns is the scale-up fabric's time)
TPU_FABRICS = ("ici", "dcn")
# a CPU job's: the host's memory between the threads of one process, the network between processes
CPU_FABRICS = ("host", "host_network")


def fabric_text(text: str, scale_up: str = "NVLink", scale_out: str = "InfiniBand", domain: str = "domain") -> str:
    """``text`` written for NVLink and InfiniBand, said with the job's own fabric names: "NVLink domain",
    "NVLink" and a link value "nvlink" take the scale-up fabric's name (xGMI, ICI; a TPU's domain is an ICI
    slice), "InfiniBand", "IB" and "ib" the scale-out one's (DCN). Unchanged for NVLink and InfiniBand."""
    if scale_up != "NVLink":
        text = text.replace("NVLink domain", f"{scale_up} {domain}").replace("NVLink", scale_up)
        text = text.replace("nvlink", scale_up.lower())
    if scale_out != "InfiniBand":
        text = text.replace("InfiniBand", scale_out)
        text = re.sub(r"\bIB\b", scale_out, text)
        text = re.sub(r"\bib\b", scale_out.lower(), text)
    return text


@cache
def vendor_of(name: str) -> Vendor | None:
    """The vendor a GPU name says (first of the table's vendors that matches), or None."""
    text = _normal(name)
    return next((v for v in table().vendors if any(p.search(text) for p in v.patterns)), None)


def vendor_named(name: str) -> Vendor | None:
    """The table's vendor of that name (a preset's ``vendor``), or None."""
    return next((v for v in table().vendors if v.name == name), None)
