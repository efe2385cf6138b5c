"""``Trace``: one trace file as read: the event table plus what the file says about itself.

Every reader returns a ``Trace``; every later stage (classification, link
attribution, measurement) takes one and returns a new value. Metadata travels
with the events (hosts and devices, HLO modules, process groups, step markers,
format, framework, job identity), so the per-file map and the cross-file merge
(the ledger, the fleet) see the same facts, whichever route called them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .events import categorical
from .traffic import empty_splits

if TYPE_CHECKING:
    from .hlo import HloModule

FRAMEWORKS = ("jax", "tensorflow", "pytorch", "unknown")

# step / module markers: ranges that delimit executions, never device activity
MARKER_COLUMNS: dict[str, str] = {
    "host": "str",
    "device": "str",  # "" = every device of the host (a host-side step range)
    "kind": "str",  # step | module | module_launch | module_run (module executions, by their evidence)
    "name": "str",
    "start_ns": "int64",
    "end_ns": "int64",
    "number": "int64",  # the step number the marker carries (-1: none; numbered by order)
}
MARKER_KINDS = ("step", "module", "module_launch", "module_run")
# what a device is, as its reader read it (a GPU plane, a TPU chip's plane, a CPU device of a CPU capture): one
# fact, recorded where the device is named, never told from the name afterwards
GPU, TPU, CPU = "GPU", "TPU", "CPU"
DEVICE_KINDS = (GPU, TPU, CPU)
_TRAILING_NUMBER = re.compile(r"(\d+)\s*$")


def trailing_number(text: str) -> int:
    """The number that ends a marker's name ("ProfilerStep#12" -> 12), -1 if none; more than 18 digits
    (past int64) are no step number."""
    m = _TRAILING_NUMBER.search(text)
    return int(m.group(1)) if m and len(m.group(1)) <= 18 else -1


def make_markers(
    *,
    host: object,
    device: object,
    kind: object,
    name: object,
    start_ns: object,
    end_ns: object,
    number: object = -1,
) -> pd.DataFrame:
    """A marker table from columns (scalars are repeated)."""
    columns = {
        "host": host,
        "device": device,
        "kind": kind,
        "name": name,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "number": number,
    }
    lengths = {len(v) for v in columns.values() if not np.isscalar(v) and v is not None}  # type: ignore[arg-type]
    n = lengths.pop() if lengths else 0
    data: dict[str, Any] = {}
    for col, dtype in MARKER_COLUMNS.items():
        value = columns[col]
        if dtype == "str":
            data[col] = categorical(value, n)
        elif np.isscalar(value):
            data[col] = np.full(n, value, dtype=np.int64)
        else:
            data[col] = np.asarray(value, dtype=np.int64)
    return pd.DataFrame(data)


def empty_markers() -> pd.DataFrame:
    return make_markers(host="", device="", kind="", name="", start_ns=np.zeros(0, np.int64), end_ns=0)


@dataclass(frozen=True)
class Job:
    """Who this file is within its job, where the format says."""

    rank: int | None = None  # global rank of a one-rank file (Kineto)
    world_size: int | None = None  # ranks in the job (Kineto distributedInfo)
    gpus_per_node: int | None = None  # devices per node the file states or the user gave
    hosts: tuple[str, ...] = ()  # host names the file names (XPlane XSpace.hostnames, Nsight Hostname)
    identity: str = ""  # what makes files of one job recognizable as one (e.g. a process group config hash)


@dataclass(frozen=True)
class Trace:
    """The events of one trace file and its metadata.

    ``events`` holds device activity only (kernels, copies, memsets), one row
    each, with the columns of :mod:`moeprof.core.events`; ``markers`` the step
    and module ranges (:data:`MARKER_COLUMNS`).
    """

    events: pd.DataFrame
    path: str
    format: str  # xplane | chrome | kineto | nsys | nsys-parquet
    markers: pd.DataFrame = field(default_factory=empty_markers)
    framework: str = "unknown"  # jax | tensorflow | pytorch | unknown
    # distinct names of host-side ranges (CPU ops, user annotations, NVTX): what the host says it did
    annotations: tuple[str, ...] = ()
    hlo: Mapping[tuple[str, int], HloModule] = field(default_factory=dict)  # (module, program id) -> HLO
    process_groups: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # name -> global ranks
    job: Job = field(default_factory=Job)
    warnings: tuple[str, ...] = ()
    dropped_activities: int = 0  # device activities the reader dropped as unplaceable (readers.base.screen_times)
    # the devices this file holds, even those that ran nothing (device -> global id)
    devices: Mapping[str, int] = field(default_factory=dict)
    device_models: Mapping[str, str] = field(default_factory=dict)  # device -> GPU model, where the file says
    device_kinds: Mapping[str, str] = field(default_factory=dict)  # device -> GPU | TPU | CPU (DEVICE_KINDS)
    # device -> the peaks its plane states (TPU planes: "tflops" from peak_teraflops_per_second, "hbm_gbps"
    # from peak_hbm_bw_gigabytes_per_second); they come before any preset's
    device_peaks: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # host synchronizations that waited for a device (cudaDeviceSynchronize, ...): device, thread, start_ns,
    # end_ns; what the §9 replay moves a host's later launches with
    host_syncs: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["device", "thread", "start_ns", "end_ns"])
    )
    # the longest duration (ns) of each host-side communication range the reader keeps (Kineto: DeepSeek's
    # "dispatch(F)"): how long the CPU stayed inside it, evidence that it waited there
    host_range_ns: Mapping[str, int] = field(default_factory=dict)
    # what the host's kernel launches say of the device activity (readers.kineto.launch_facts): launches, those
    # with no activity in the file, those inside a stream capture (recording a graph: they do not run) and
    # the call that opened it; empty where the reader does not read launches
    launches: Mapping[str, Any] = field(default_factory=dict)
    # spec §11: the all-to-all calls whose per-peer split sizes the file records (core.traffic.SPLIT_COLUMNS),
    # one row per call; a host-only trace (a CPU gloo job) may hold these and no device activity
    alltoall_splits: pd.DataFrame = field(default_factory=empty_splits)

    def replace(self, **changes: Any) -> Trace:
        return replace(self, **changes)

    def kind_of(self, device: str) -> str:
        """The device's kind (:data:`DEVICE_KINDS`) as its reader recorded it; "" where none did."""
        return str(self.device_kinds.get(device, ""))

    @property
    def device_names(self) -> list[str]:
        if self.devices:
            return list(self.devices)
        return [str(d) for d in pd.unique(self.events["device"].to_numpy(dtype=object))]
