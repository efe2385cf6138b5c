"""Spec §11, expert load: the tokens a run routed to each expert of each layer, and what a MoE engineer reads
from them (share of the layer, max/mean, hot and dead experts, percentiles, tokens dropped for capacity).

Two sources give the same long table (:class:`RoutedLoad`, one row per (step, layer, expert[, device])):

* the run folder's manifest (:func:`manifest_load`: ``demo.records[i].expert_load[layer][expert]``, the
  per-step routed assignments before any drop; ``device_load`` the rows each device's experts kept;
  ``tokens_dropped`` the drops of all layers; the capacity from ``model``);
* ``--expert-load FILE`` (``readers.expert_load``: step, layer, expert, tokens and optionally device).

:func:`manifest_load` is the one reader of a manifest's load: whatever else needs the routed rows or the drops
of a demo run (the §9 router term, MFU on useful work) calls it.
:func:`expert_load_figures` makes the JSON's ``expert_load`` object from either source; the reports only print it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import pandas as pd

LOAD_COLUMNS = ("step", "layer", "expert", "device", "tokens")  # device -1: not given
HOT_OVER_MEAN = 2.0  # spec §11: an expert with at least this many times the layer's mean is hot
PERCENTILES = (50, 90, 99)  # of tokens per expert within a layer (numpy's linear interpolation)
# the first lines speak of the load where a layer has a hot or dead expert, or drops reach this share
DROPS_MATTER = 0.01
SOURCES = ("manifest", "file")
# what a count is, per source: a demo manifest counts (token, k) assignments; a log counts what its framework does
UNITS = {"manifest": "(token, k) assignments", "file": "tokens"}


@dataclass(frozen=True)
class RoutedLoad:
    """Tokens routed per (step, layer, expert[, device]) as a run recorded them, and its capacity facts.

    ``frame`` (:data:`LOAD_COLUMNS`): ``tokens`` routed there in that step ((token, k) assignments, before any
    drop); ``device`` the device that logged the row (-1 where the source gives none). ``kept`` (step, layer,
    device, rows): the rows each device's experts computed on, where the source says (a manifest's
    ``device_load``); ``dropped`` (step, layer, dropped): assignments dropped for capacity per layer, where known;
    ``dropped_total`` (step -> all layers), where only the total is known."""

    frame: pd.DataFrame
    source: str  # SOURCES
    origin: str  # where it was read: the manifest's or the file's path
    experts: int  # experts per layer (the manifest's, else the largest id + 1)
    top_k: int | None = None
    devices: int | None = None  # devices of the expert axis (None: not said)
    tokens_per_device: int | None = None  # tokens per device per step, where the source says
    capacity_factor: float | None = None
    kept: pd.DataFrame | None = None
    dropped: pd.DataFrame | None = None
    dropped_total: Mapping[int, float] | None = None

    @property
    def capacity(self) -> int | None:
        """Rows per (source device, expert) a capacity run keeps: ``ceil(cf · T · K / E)``, at least 1
        (MaxText's; ``moeprof.demo.model._dims``); None where the run is dropless or a figure is missing."""
        if self.capacity_factor is None or not self.tokens_per_device or not self.top_k or not self.experts:
            return None
        return max(1, math.ceil(self.capacity_factor * self.tokens_per_device * self.top_k / self.experts))

    @property
    def steps(self) -> int:
        return int(self.frame["step"].nunique()) if len(self.frame) else 0

    def per_layer_expert(self) -> np.ndarray:
        """``[layer, expert]``: tokens per step, the mean over the steps (devices summed)."""
        layers = int(self.frame["layer"].max()) + 1 if len(self.frame) else 0
        out = np.zeros((layers, self.experts), dtype=np.float64)
        if not len(self.frame):
            return out
        np.add.at(
            out,
            (self.frame["layer"].to_numpy(np.int64), self.frame["expert"].to_numpy(np.int64)),
            self.frame["tokens"].to_numpy(np.float64),
        )
        return out / max(self.steps, 1)

    def per_step_layer_expert(self) -> tuple[np.ndarray, np.ndarray]:
        """``[step, layer, expert]`` tokens (devices summed) and the step numbers, in order."""
        steps = np.sort(self.frame["step"].unique()) if len(self.frame) else np.zeros(0, np.int64)
        layers = int(self.frame["layer"].max()) + 1 if len(self.frame) else 0
        out = np.zeros((steps.size, layers, self.experts), dtype=np.float64)
        if steps.size:
            s = np.searchsorted(steps, self.frame["step"].to_numpy(np.int64))
            np.add.at(
                out,
                (s, self.frame["layer"].to_numpy(np.int64), self.frame["expert"].to_numpy(np.int64)),
                self.frame["tokens"].to_numpy(np.float64),
            )
        return out, steps

    def device_rows(self, devices: int | None = None) -> np.ndarray | None:
        """``[layer, device]``: rows each device's experts computed per step (mean over steps), where known:
        the kept rows a manifest records, else the routed rows of the experts each device holds (experts laid
        out in contiguous blocks over ``devices``, default the source's, as expert parallelism places them),
        else None."""
        if self.kept is not None and len(self.kept) and devices in (None, int(self.kept["device"].max()) + 1):
            layers = int(self.kept["layer"].max()) + 1
            n_dev = int(self.kept["device"].max()) + 1
            out = np.zeros((layers, n_dev), dtype=np.float64)
            np.add.at(
                out,
                (self.kept["layer"].to_numpy(np.int64), self.kept["device"].to_numpy(np.int64)),
                self.kept["rows"].to_numpy(np.float64),
            )
            return out / max(int(self.kept["step"].nunique()), 1)
        devices = devices or self.devices
        if not devices or self.experts % devices:
            return None
        per_expert = self.per_layer_expert()
        return per_expert.reshape(per_expert.shape[0], devices, self.experts // devices).sum(axis=2)


def _ints(value: Any) -> list[int] | None:
    return (
        [int(v) for v in value] if isinstance(value, list) and all(isinstance(v, int | float) for v in value) else None
    )


def manifest_load(manifest: Mapping[str, Any] | None, origin: str = "manifest.json") -> RoutedLoad | None:
    """The routed load a run folder's manifest records (a ``capture demo`` run), None where it records none.

    Per profiled step ``demo.records[i]``: ``expert_load[layer][expert]`` (routed (token, k) assignments, before
    any drop), ``device_load[layer][device]`` (the rows each device's experts kept) and ``tokens_dropped`` (all
    layers); the run's ``model``: experts, top_k, tokens_per_device, capacity_factor, devices. A layer's drops are
    its routed rows less its kept ones (their sum over layers is ``tokens_dropped``)."""
    demo = (manifest or {}).get("demo")
    if not isinstance(demo, Mapping):
        return None
    model = (manifest or {}).get("model") or {}
    records = [
        r for r in demo.get("records") or () if isinstance(r, Mapping) and isinstance(r.get("expert_load"), list)
    ]
    rows: list[tuple[int, int, int, float]] = []
    kept: list[tuple[int, int, int, float]] = []
    totals: dict[int, float] = {}
    for i, record in enumerate(records):
        step = int(record["step"]) if isinstance(record.get("step"), int) else i
        for layer, per_expert in enumerate(record["expert_load"]):
            values = _ints(per_expert)
            if values is None:
                return None
            rows.extend((step, layer, e, float(v)) for e, v in enumerate(values))
        for layer, per_device in enumerate(record.get("device_load") or ()):
            values = _ints(per_device)
            if values is not None:
                kept.extend((step, layer, d, float(v)) for d, v in enumerate(values))
        if isinstance(record.get("tokens_dropped"), int | float):
            totals[step] = float(record["tokens_dropped"])
    if not rows:
        # a manifest without per-step records: the mean load it summarizes (demo.load), as one step
        per_layer = (demo.get("load") or {}).get("tokens_per_expert")
        if not isinstance(per_layer, list) or not per_layer:
            return None
        for layer, per_expert in enumerate(per_layer):
            if not isinstance(per_expert, list):
                return None
            rows.extend((0, layer, e, float(v)) for e, v in enumerate(per_expert) if isinstance(v, int | float))
    frame = pd.DataFrame(rows, columns=["step", "layer", "expert", "tokens"])
    frame.insert(3, "device", np.int64(-1))
    experts = int(model.get("experts") or 0) or int(frame["expert"].max()) + 1
    kept_frame = pd.DataFrame(kept, columns=["step", "layer", "device", "rows"]) if kept else None
    capacity_factor = model.get("capacity_factor")
    dropped = None
    if kept_frame is not None and capacity_factor is not None:
        routed = frame.groupby(["step", "layer"], as_index=False)["tokens"].sum()
        computed = kept_frame.groupby(["step", "layer"], as_index=False)["rows"].sum()
        joined = routed.merge(computed, on=["step", "layer"], how="inner")
        dropped = pd.DataFrame(
            {"step": joined["step"], "layer": joined["layer"], "dropped": joined["tokens"] - joined["rows"]}
        )
    devices = (manifest or {}).get("devices") or {}
    n_devices = model.get("devices") or devices.get("count")
    return RoutedLoad(
        frame=frame[list(LOAD_COLUMNS)],
        source="manifest",
        origin=origin,
        experts=experts,
        top_k=int(model["top_k"]) if isinstance(model.get("top_k"), int) else None,
        devices=int(n_devices) if isinstance(n_devices, int) and n_devices > 0 else None,
        tokens_per_device=int(model["tokens_per_device"]) if isinstance(model.get("tokens_per_device"), int) else None,
        capacity_factor=float(capacity_factor) if isinstance(capacity_factor, int | float) else None,
        kept=kept_frame,
        dropped=dropped,
        dropped_total=totals if capacity_factor is not None and totals else None,
    )


# ---------------------------------------------------------------- the figures (the JSON's expert_load)


class LoadLayer(TypedDict, total=False):
    """One layer of ``expert_load.layers``."""

    layer: int
    tokens_per_expert: list[float]  # per step, the mean over the steps
    share: list[float]  # of the layer's tokens
    tokens: float  # the layer's, per step
    mean: float  # per expert
    max_over_mean: float
    hottest: int
    hot: list[int]  # experts with >= HOT_OVER_MEAN x the mean
    dead: list[int]  # experts with no token in any step
    p50: float
    p90: float
    p99: float
    cv: float  # std / mean of tokens per expert
    max_over_mean_per_step: list[float]
    dropped: float | None  # assignments dropped for capacity per step (None: not known)
    dropped_share: float | None  # of the layer's routed assignments
    dropped_per_expert: list[float]  # per step; one source device only (see expert_load_figures)


class ExpertLoad(TypedDict, total=False):
    """``expert_load`` (spec §11)."""

    source: str  # manifest | file
    origin: str
    unit: str
    steps: int
    experts: int
    top_k: int
    devices: int
    capacity_factor: float
    capacity: int  # rows per (source device, expert)
    layers: list[LoadLayer]
    tokens: float  # routed assignments per step, all layers
    max_over_mean: float  # the worst layer's
    worst_layer: int
    dropped: float  # per step, all layers (None: not a capacity run, or not known)
    dropped_share: float
    dropped_per_step: list[float]
    device_rows: list[list[float]]  # [layer][device], per step
    device_max_over_mean: list[float]  # per layer


def _round(x: float, digits: int = 4) -> float:
    return float(round(float(x), digits))


def expert_load_figures(load: RoutedLoad) -> ExpertLoad:
    """Spec §11's figures of ``load``: per layer and expert, tokens per step (the mean over the steps), share of
    the layer, ``max/mean``, hot (>= 2x the mean) and dead (no token in any step) experts, the p50/p90/p99 of
    tokens per expert, and, for capacity runs, the tokens dropped per layer and step. Per-expert drops are
    ``max(0, tokens − C)`` per step only where one source device routed every token (a one-device expert axis):
    with several sources the capacity binds per (source device, expert), whose rows the manifest does not
    record."""
    per_step, steps = load.per_step_layer_expert()
    mean = per_step.mean(axis=0) if steps.size else np.zeros((0, load.experts))
    capacity = load.capacity
    one_source = load.devices == 1
    dropped_by_layer: dict[int, float] = {}
    if load.dropped is not None and len(load.dropped):
        by_layer = load.dropped.groupby("layer")["dropped"].sum() / max(steps.size, 1)
        dropped_by_layer = {int(str(k)): float(v) for k, v in by_layer.items()}
    layers: list[LoadLayer] = []
    for layer in range(mean.shape[0]):
        row = mean[layer]
        total = float(row.sum())
        avg = total / row.size if row.size else 0.0
        step_totals = per_step[:, layer, :].sum(axis=1)
        step_means = step_totals / max(row.size, 1)
        ratios = np.where(
            step_means > 0, per_step[:, layer, :].max(axis=1) / np.where(step_means > 0, step_means, 1), 0
        )
        entry: LoadLayer = {
            "layer": layer,
            "tokens_per_expert": [_round(v, 3) for v in row.tolist()],
            "share": [_round(v / total, 6) if total else 0.0 for v in row.tolist()],
            "tokens": _round(total, 3),
            "mean": _round(avg, 3),
            "max_over_mean": _round(row.max() / avg) if avg else 0.0,
            "hottest": int(np.argmax(row)) if row.size else 0,
            "hot": [int(e) for e in np.flatnonzero(row >= HOT_OVER_MEAN * avg)] if avg else [],
            "dead": [int(e) for e in np.flatnonzero(per_step[:, layer, :].sum(axis=0) == 0)],
            **{f"p{q}": _round(np.percentile(row, q), 3) for q in PERCENTILES},  # type: ignore[typeddict-item]
            "cv": _round(row.std() / avg) if avg else 0.0,
            "max_over_mean_per_step": [_round(r) for r in ratios.tolist()],
            "dropped": None,
            "dropped_share": None,
        }
        if layer in dropped_by_layer:
            entry["dropped"] = _round(dropped_by_layer[layer], 3)
            entry["dropped_share"] = _round(dropped_by_layer[layer] / total, 6) if total else 0.0
        if capacity is not None and one_source:
            entry["dropped_per_expert"] = [
                _round(v, 3) for v in np.maximum(per_step[:, layer, :] - capacity, 0).mean(axis=0).tolist()
            ]
        layers.append(entry)
    out: ExpertLoad = {
        "source": load.source,
        "origin": load.origin,
        "unit": f"{count_word(load.source)} per step, the mean over {steps.size} step{'s' if steps.size != 1 else ''}",
        "steps": int(steps.size),
        "experts": load.experts,
        "layers": layers,
        "tokens": _round(float(mean.sum()), 3),
    }
    if layers:
        worst = max(layers, key=lambda entry: entry["max_over_mean"])
        out["max_over_mean"] = worst["max_over_mean"]
        out["worst_layer"] = worst["layer"]
    for key, value in (("top_k", load.top_k), ("devices", load.devices), ("capacity_factor", load.capacity_factor)):
        if value is not None:
            out[key] = value  # type: ignore[literal-required]
    if capacity is not None:
        out["capacity"] = capacity
    totals = _dropped_per_step(load, steps)
    if totals is not None:
        out["dropped_per_step"] = [_round(v, 3) for v in totals.tolist()]
        out["dropped"] = _round(float(totals.mean()), 3)
        out["dropped_share"] = _round(float(totals.mean()) / float(mean.sum()), 6) if mean.sum() else 0.0
    rows = load.device_rows()
    if rows is not None and rows.shape[1] > 1:
        out["device_rows"] = [[_round(v, 3) for v in r] for r in rows.tolist()]
        out["device_max_over_mean"] = [_round(r.max() / r.mean()) if r.mean() else 0.0 for r in rows]
    return out


def _dropped_per_step(load: RoutedLoad, steps: np.ndarray) -> np.ndarray | None:
    """Assignments dropped per step, all layers (the per-layer drops summed, else the source's totals)."""
    if load.dropped is not None and len(load.dropped):
        per = load.dropped.groupby("step")["dropped"].sum()
        return per.reindex(steps, fill_value=0.0).to_numpy(np.float64)
    if load.dropped_total:
        return np.array([float(load.dropped_total.get(int(s), 0.0)) for s in steps.tolist()], dtype=np.float64)
    return None


def count_word(source: object) -> str:
    """What the counts of a load ``source`` are, in words ("(token, k) assignments", "tokens")."""
    return UNITS.get(str(source), "tokens")


def load_matters(section: Mapping[str, Any] | None) -> bool:
    """Whether the first lines speak of the load: a hot or dead expert in some layer, or capacity drops of at
    least :data:`DROPS_MATTER` of the routed assignments."""
    if not section:
        return False
    if any(layer.get("hot") or layer.get("dead") for layer in section.get("layers") or ()):
        return True
    share = section.get("dropped_share")
    return isinstance(share, int | float) and share >= DROPS_MATTER
