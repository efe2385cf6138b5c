"""Options that change how traces are read and attributed (shared by the library and the CLI)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# the HTML report's raw events kept one by one (~12 bytes each once base64'd: ~3 MB of raw events at most)
RAW_EVENTS_CAP = 250_000
# diff's explanation: the parts its terminal table shows, largest change first (the rest in one row)
EXPLAIN_TOP_PARTS = 12


@dataclass(frozen=True)
class LoadOptions:
    rules: Path | None = None  # extra taxonomy rules (TOML), tried before the defaults
    gpus_per_node: int | None = None  # devices per host where a trace does not say (Kineto: deviceProperties, else 8)
    nvlink_domain_size: int | None = None  # global ranks per NVLink domain (NVL72: 72); default one host
    run: str | None = None  # TensorBoard log dir: which plugins/profile/<run> (default newest)
    step_marker: str | None = None  # regex: ranges (NVTX, annotations) it matches are steps
    # XPlane: read hlo_op/hlo_module of every compute kernel too (slower; the analysis needs them on comm only)
    all_kernel_stats: bool = False
    # XPlane: threads decoding a file's lines at once. None: the cores this process may use (at most
    # workers.DECODE_THREADS_CAP) when it reads alone; the analysis gives each worker of a pool its share
    decode_threads: int | None = None


@dataclass(frozen=True)
class StepOptions:
    """Which steps the figures measure (spec §5); the default is the whole trace."""

    selection: str | None = None  # "A:B" step positions, half-open
    skip_first: int = 0
    marker: str | None = None  # regex on step marker names (NVTX ranges, annotations)


@dataclass(frozen=True)
class ExecOptions:
    """Where the per-file map runs, and what a bad file does to the run."""

    jobs: int | None = None  # local worker processes (default: one per core, at most one per file)
    scheduler: str | None = None  # a dask.distributed scheduler address or file (default: $MOEPROF_SCHEDULER)
    skip_bad: bool = False  # analyze the other files and list the bad ones, instead of stopping
