"""Benchmark: reading a large XPlane, against the floor of any Python reader built on jaxlib.

The floor is ``ProfileData.from_file`` plus touching every event's name and
duration from Python: what any tool reading XPlane through jaxlib must pay.
Each measurement runs in its own process; wall time, CPU time (user + system)
and peak RSS come from ``os.wait4`` for that process, and "work" is the CPU
time a process spends after its imports (it prints it itself). CPU times are
the comparison to trust on a shared machine: wall times follow its load.

* the wire decoder ``moeprof.readers.xplane_wire`` on each route this install
  has (``MOEPROF_XPLANE_DECODER``: numpy; numba, whose import and first call
  count in its work; native, the C kernels built at install) reading every
  event's name, start and end, then also the stats the XPlane reader needs,
  against the floor (targets: >= 3x faster, peak RSS <= 4x the file; the
  interpreter + imports baseline is printed too: numpy and the decoder, ~30 MiB,
  since the decoder loads without pandas);
* ``moeprof analyze --json`` against the floor (targets: <= 1.5x the floor's
  time, <= its peak RSS);
* ``moeprof annotate`` and ``moeprof report`` against ``analyze`` on the same
  trace (targets: <= 2x and <= 1.3x its wall time);
* start-up (``benchmarks/bench_startup.py``): ``moeprof --version`` (< 0.2 s)
  and ``analyze`` of a ~3 MB trace (< 0.6 s), medians of 5.

The run ends with one table of every goal: the figure, its target, met or not.

The generated trace is shaped like a real XLA GPU capture (``--shape xla``):
8 GPUs with a compute, a collective and a copy stream each (about 28% of
kernels are collectives or copies), the XLA stats on every kernel
(``correlation_id``, ``kernel_details``/``memcpy_details``, ``hlo_op``,
``hlo_module``, ``program_id``; strings as references the way XLA writes them),
the derived lines ``XLA Ops`` (whose event metadata carry the op's stats),
``XLA Modules`` and ``Steps``, and on the host a launch event per kernel plus
the ``StepTraceAnnotation`` of each step; fields in the order XLA's serializer
writes them. Per kernel there are three events (kernel, XLA op, launch), so
``--events 1000000`` holds ~333k kernels. ``--shape kernel-only`` keeps compute
kernels only (an easy input that hides costs). ``--shape one-step`` is a one-step capture of a large
job: one long step, every GPU running the same program (its collectives match across the 8 GPUs),
collectives on three streams (~18% of kernels), a copy stream; a projection's critical path spans the
whole step there, so it is the shape that shows what the projections and their output cost.

    python benchmarks/bench_xplane.py [--events 1000000] [--repeat 3] [--shape xla|kernel-only|one-step]
                                      [--keep out.xplane.pb] [--skip-analyze] [--skip-startup]

Measured (shared 2-core machine, load ~2.3, each command in its own process, medians of 3 with
the before and after code interleaved in one run; 1M events = 47.8 MiB, 10M = 440 MiB):

    work                          before (main 6f9ba0b)    after                  goal
    floor, 1M events              0.75 s, 540 MiB
    analyze, 1M                   2.09 s, 257 MiB          1.21 s, 243 MiB
      analyze / floor             2.80x                    1.63x (1.6-1.9x)       <= 1.5   not met
    annotate, 1M                  5.54 s                   2.07 s
      annotate / analyze          2.65x                    1.70x                  <= 2     met
    report, 1M                    2.29 s                   1.38 s
      report / analyze            1.09x                    1.14x                  <= 1.3   met
    10M: floor / analyze / annotate / report               10.4 / 8.6 s (0.82x the floor, 1.2 GiB
                                                           = 2.7x the file) / 15.6 s (1.82x) /
                                                           9.5 s (1.12x)
    moeprof --version             0.03 s                   0.02 s                 < 0.2    met
    analyze, 2.9 MiB real XPlane  0.70 s                   0.56 s                 < 0.6    met
    analyze, 0.7 MiB Kineto (ddp) 0.72 s                   0.56 s                 < 0.6    met
    analyze, 3.3 MiB generated    1.00 s                   0.67 s                 < 0.6    not met

Figures identical to before on every input compared (17 analyze JSONs, 10 annotated traces, 6
HTML reports). What is left of analyze's 1.6x at 1M events is mostly fixed cost: importing
pandas, pyarrow, typer and pydantic takes ~0.35 s where the floor imports jaxlib in ~0.13 s,
and the numpy wire decoder (~0.37 s of CPU with the reader's stats) is about the floor's own
work (0.5 s); at 10M events the numba decoder takes over and analyze beats the floor. The
numba decoder does not pay below ~96 MiB (its import and first dispatch cost ~0.6 s).

2026-12-02: the decoder loads without pandas (its baseline is ~30-40 MiB), a large plane's lines are
decoded on threads, and the numba kernels are ~2.8x faster (10M events: 3.2 s of CPU against numpy's
8.9 s), so they pay from ~56 MiB. The floor's own time at 10M events varies between runs on this
machine (10.0 s in one, 19.0-19.5 s in two others): compare figures of one run only.

Later on 2026-12-02: classification walks its rules once per distinct evidence tuple, and numba loads
without its BLAS probe in moeprof's own processes, so the CLI takes the numba route from 40 MiB.
1M events (medians of 3, two runs): floor 0.97-0.99 s, analyze 1.44-1.55 s (1.48x, 1.56x), 378-387
MiB; annotate 1.51-1.55x, report 1.18-1.27x. 1M compute kernels (59 MiB): 1.60x, annotate 1.93x.
10M events (one run): floor 15.9 s, 4.2 GiB; analyze 7.5 s (0.47x), 1.3 GiB; numba decoder with the
reader's stats 3.7x the floor in CPU after imports; annotate 2.16x analyze, report 1.18x. Then with
annotate's gzip through ISA-L: annotate / analyze 1.39x at 1M events (1.51-1.55x), 1.55x at 1M
compute kernels (1.93x), 1.88x at 10M (13.0 s against 6.9 s; floor 15.1 s).

Next session (2026-12-02, the machine idle and faster): 1M events analyze / floor 1.29x, 1.49x,
1.53x, 1.49x in four runs (floor 0.72-0.80 s); 1M compute kernels 1.57x. annotate writes events that
share a tail with one replace and no longer joins a device's text: 10M annotate / analyze 2.63x ->
1.54-1.58x (1.87 -> 1.46-1.55 GiB). 10M: analyze 0.27-0.31x the floor; the decoder with the reader's
stats 3.16-3.60x (numpy) and 5.2-6.7x (numba) faster than the floor in CPU after imports.

Native C kernels (next session, 2026-12-02; the machine ~1.5-2x slower than the day before: `import
pandas` 0.51 s, the floor at 1M 1.08-1.47 s; the runs round-robin since). Decoder with the reader's
stats vs the floor, CPU after imports: 1M events native 3.47x and 2.94x in two runs (0.28-0.34 s),
numpy 1.25-1.44x, numba 0.92-1.23x; 1M compute kernels native 3.40x; 10M native 9.74x (1.95 s against
19.0 s; 21.8x without stats), numba 8.12x, numpy 2.41x. analyze / floor at 1M: 0.86x and 1.60x in the
two runs; seven interleaved pairs: median 0.86x (the numpy route 1.07x); 10M 0.35x at 0.28 of the
floor's RSS. annotate / analyze 1.26-1.51x, report / analyze 1.25x (1.41x before arrival_skew ranked
its pairs first). A third run, round-robin: analyze / floor 1.25x (floor 1.27 s, analyze 1.59 s), RSS
0.50; native decoder 3.06x (5.08x without stats); annotate / analyze 1.20x, report / analyze 1.16x.

Without protobuf (next session, 2026-12-02): the plane's fields and stat metadata decoded like the event
metadata, names decoded by the C kernels, the stat slots not zeroed. A 1M read with the reader's stats
1,955M -> 1,545M instructions (valgrind). Two 1M runs: native decoder with stats 3.13x and 3.66x (0.25 s
against a floor of 0.77-0.92 s; 4.4-6.0x without stats); analyze / floor 1.38x and 1.26x, RSS 0.50;
annotate / analyze 1.18x, 1.43x; report / analyze 1.12x, 1.25x. 1M compute kernels: analyze 1.28x, the
decoder 3.34x. 10M: the decoder 12.3x (1.37 s against 16.9 s), analyze 0.35x at 0.28 of the floor's RSS.

2026-12-05, TPU planes read (issue 31; five op columns in the event table, a category field in the taxonomy,
the decoder route handed down per file): GPU input as fast as before. 1M events, CPU s (min of 3), two runs
each of main be72e35 and the branch, interleaved on a loaded 2-core machine (load 7): native decoder with
the reader's stats 0.20/0.21 before, 0.21/0.20 after; numpy 0.88/0.90, 0.91/0.87; analyze 2.55/2.54,
2.75/2.56; peak RSS 417/420, 415/418 MiB. Six interleaved `analyze --json` runs (user + sys): 2.36-2.74 s
before (median 2.66), 2.53-2.71 s after (median 2.60); peak RSS 423-428 MiB both.

Issue 32, the projection always on (2026-12-05; shared 2-core machine, uptime load 1.2-2.1, best of 3,
round-robin in one run; before = main be72e35, after = runs compacted, C edges, cheaper columns; "no
projection" = the same code with the replay columns and graph patched out):

    shape (--events 1000000)      floor    before             after              no projection
    kernel-only, wall / CPU       1.05 s   3.55 s (3.38x)     2.15 s (2.05x)     1.31 s (1.25x)
                                           3.65 s CPU          2.26 s CPU          1.41 s CPU
    kernel-only, peak RSS         654 MiB  704 MiB (1.08)     564 MiB (0.86)     458 MiB
    xla, wall / CPU               0.90 s   1.90 s (2.11x)     1.49 s (1.66x)     1.07 s (1.19x)
    xla, peak RSS                 540 MiB  418 MiB            317 MiB (0.59)     277 MiB

With --analyze-only the same day: kernel-only 1.99x wall, 2.09x CPU, RSS 0.86; xla 1.60x, 1.74x, 0.59.
What is left at 1M kernels (CPU in the process, quiet machine): the replay columns 0.10 s, the job's
graph 0.13 s (8 nodes: one run per device), the balance projection 0.27 s (its counterpart medians
0.10 s, the projected device figures 0.085 s, the critical path's 26,163 segments 0.035 s), the
critical path in the JSON 0.09 s.

Issue 32 item 4, after main merged balance-router, "what would it buy" (several projections per run), TPU
reading and scopes (2026-12-05; shared 2-core machine, uptime load 0.9-1.1, best of 3 round-robin, two runs
(ranges: the two runs; "no projection" in the second only); before = main 99ed2a3, after = branch
i32-cost; "no projection" = the same code with the replay columns and graph patched out). Every
`analyze --json` of the samples and shared traces byte-identical:

    shape (--events 1000000)      floor           before             after              no projection
    kernel-only, wall             0.97-0.99 s     2.57-2.91 s        1.94-2.11 s        1.42 s (1.44x)
                                                  (2.66-2.95x)       (2.00-2.14x)
    kernel-only, CPU              0.96-0.98 s     2.67-3.01 s        2.04-2.22 s        1.52 s (1.54x)
                                                  (2.77-3.06x)       (2.11-2.25x)
    kernel-only, peak RSS         653 MiB         590-594 (0.90)     593-600 (0.91)     491 MiB (0.75)
    xla, wall                     0.85-0.86 s     2.22-2.27 s        1.85 s             1.18 s (1.38x)
                                                  (2.59-2.67x)       (2.16-2.17x)
    xla, CPU                      0.85-0.86 s     2.35-2.40 s        1.98 s             1.31 s (1.53x)
                                                  (2.75-2.83x)       (2.32-2.34x)
    xla, peak RSS                 539 MiB         352-353 (0.65)     340-344 (0.64)     292 MiB (0.54)

What went: the balance-router projection is decided before its replay (a job with no routed-expert work,
both shapes here, no longer pays a replay, a critical path and per-device figures for a row it leaves out);
moe_roles tests each distinct name/opcode/kind/HLO op once (it hashed six columns of every row and ran
regexes per distinct tuple: 0.4 s of cProfile time at 1M kernels); the JSON's NaN cleaning keeps plain
values without a call each (the critical paths are tens of thousands of dicts); scopes group by an integer
code, not a string column; the §9 counterpart medians are computed once per job; the measured step spans
and a step's rows are kept; the measured step's bound is summed over arrays, not 26k PathSegments.
What is left above the floor at 1M kernels (py-spy, share of analyze's wall): the balance projection ~11%
(counterpart medians ~5%, its critical path's 26k PathSegments ~3.5%, projected device figures ~3%),
the replay columns ~5%, the job's graph ~4%, the launch-gaps opportunity's replay ~2%. Even the
"no projection" run is 1.38-1.54x the floor now (wall, CPU; both shapes: main grew scopes, TPU op
columns, FLOP tables since the 1.25x above): 1.5x with the projection on needs the always-on part near
zero, not trimmed.

The same day on the TPU machine's host (13 idle cores, JAX_PLATFORMS=cpu; best of 5, round-robin; before =
99ed2a3, after = main with i32-cost; floor 2.48 s at 1M kernels, 2.20 s at 1M events, its one core slower
than this project's):

    shape (--events 1000000)      before                          after
    kernel-only                   2.00x wall, 2.57x CPU, RSS 1.00  1.67x wall, 2.25x CPU, RSS 1.00
    xla                           1.91x wall, 2.62x CPU, RSS 0.75  1.63x wall, 2.33x CPU, RSS 0.73

Those runs imported moeprof from the checkout the device machine copies, on a file system slow to stat
(~0.1 ms a stat: 0.28 s of 2,900 import look-ups per `analyze`, none for the floor). 2026-12-06, on the
same host (floor 2.54 s at 1M kernels, 2.15 s at 1M events), each tree copied under /tmp, compiled, and
run from an empty folder, as an installed package is; before = 12c6591 (the code above), after = the XPlane
table without pandas' consolidating copy, the launch columns made with the table (the thread categorical),
the critical path's segments as named tuples built from columns and kept out of the JSON's NaN check,
numpy loaded with one OpenBLAS thread (1.2 s of CPU per process on 13 cores), opportunities merged
against the kept ones that share an op; every `analyze --json` of the 28 samples and shared inputs
byte-identical:

    shape (--events 1000000)      before                          after
    kernel-only                   1.55x wall, 2.10x CPU, RSS 1.00  1.41x wall, 1.44x CPU, RSS 0.86
                                                                   (median of 5: 1.44x wall)
    xla                           1.59x wall, 2.35x CPU, RSS 0.73  1.48x wall, 1.56x CPU, RSS 0.67
                                                                   (median of 5: 1.51x wall)

On this project's 2 shared cores the same day (best of 5; editable install, run from /tmp): kernel-only
2.08x -> 1.67x wall, 2.18x -> 1.67x CPU; xla 2.14x -> 1.94x wall, 2.28x -> 1.97x CPU: here the fixed cost
of importing pandas, pyarrow, typer and pydantic (~0.45 s) weighs more against a faster floor.

Issue 41 items 1-2 (2026-12-06; 2 shared cores, no accelerator, load 9-18; CPU user+sys best of 3, RSS
median, round-robin; before = 0360b42, after = the lean JSON, critical paths as numpy columns, projections
computed for what the output shows):

    input (1M events)    floor CPU/RSS     before --json           after --json            terminal  --no-projection
    one-step             0.99 s / 541 MiB  2.90 s 558 MiB 91.8 MB  1.84 s 319 MiB 0.59 MB  1.80 s    1.28 s
    xla                  0.98 s / 542 MiB  2.08 s 344 MiB 12.4 MB  1.81 s 343 MiB 0.64 MB  1.78 s    1.33 s
    kernel-only          1.13 s / 656 MiB  2.55 s 586 MiB  7.7 MB  2.37 s 586 MiB 0.07 MB  2.21 s    1.80 s
    one-step, 10M (once) 9.7 s / 4.2 GiB   25.0 s 4.5 GiB 924 MB   14.4 s 1.8 GiB 0.59 MB

Issue 41 items 3-4 (2026-12-06): ``benchmarks/bench_floor.py`` prints the issue's table (this benchmark's
one-step, xla and kernel-only shapes and bench_kineto's one-step shape, ``analyze --json`` against the floor
in CPU time and peak RSS, one run). Read every ratio against the floor on a machine without an accelerator:
on the TPU machine's host jaxlib starts the TPU runtime as the floor imports it (1.9-2.0 s even with
``JAX_PLATFORMS=cpu``), which inflates the floor and hides analyze's cost. 2 shared cores, best of 5,
before = main in the same run: one-step 1.87x -> 1.40x, xla 1.89x -> 1.48x, kernel-only 1.82x -> 1.41x
(CPU); peak RSS 0.59, 0.63, 0.92 of the floor's; one-step at 10M events 0.85x -> 0.66x.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make `synthetic` importable
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_startup import build_trace, compile_package, startup_figures  # noqa: E402
from benchmarks.bench_startup import goals as startup_goals  # noqa: E402
from synthetic.xplane_encode import Fields, stat, varint_bytes  # noqa: E402

T0_NS = 1_733_011_200_000_000_000  # lines carry wall-clock (epoch) timestamps, as XLA GPU captures do
MODULE = "jit_train_step"
PROGRAM_ID = 7
STEPS = 10

# (kernel name, HLO op prefix, category); {i} is the op's index
COMPUTE = [
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopB_NTN_{i}", "gemm_fusion_dot", "convolution"),
    ("loop_multiply_fusion_{i}", "loop_multiply_fusion", "loop fusion"),
    ("input_reduce_fusion_{i}", "input_reduce_fusion", "reduce"),
    ("triton_softmax_topk_router_{i}", "triton_softmax_fusion", "custom fusion"),
    (
        "void cutlass::device_kernel<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwd<{i}>>>(Params)",
        "custom-call",
        "custom-call",
    ),
]
COMPUTE_OPS = 600  # distinct compute ops (and kernel names)
COMM = [
    ("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "all-to-all"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all-gather-start"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "reduce-scatter"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "all-reduce-start"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "collective-permute-start"),
]
COPY = [("MemcpyD2D", "copy-start"), ("MemcpyH2D", ""), ("MemcpyD2H", "copy-start")]
LAYERS = 61  # distinct collective/copy ops per kind
STREAM_SHARE = (0.72, 0.20, 0.08)  # compute, collective, copy
# --shape one-step: a one-step capture of a large job (one long step, every GPU running the same program): a
# compute stream, collectives on three streams (~18% of kernels), a copy stream; role of each stream and share
ONE_STEP_ROLES = (0, 1, 1, 1, 2)  # 0 compute, 1 collective, 2 copy
ONE_STEP_SHARE = (0.78, 0.06, 0.06, 0.06, 0.04)
ONE_STEP_NAMES = (
    "Stream #13(Compute)", "Stream #21(Collective)", "Stream #22(Collective)", "Stream #23(Collective)",
    "Stream #35(MemcpyD2D)",
)  # fmt: skip
CHUNK = 200_000  # events encoded at a time


class _Plane:
    """One XPlane: metadata through the protobuf classes, lines' events through the vectorized encoder."""

    def __init__(self, plane_id: int, name: str) -> None:
        from moeprof.readers.xspace_proto import messages

        self.msg = messages()
        self.header = self.msg["XPlane"](id=plane_id, name=name)
        self.event_ids: dict[str, int] = {}
        self.stat_ids: dict[str, int] = {}
        self.lines: list[bytes] = []

    def event_id(self, name: str) -> int:
        if name not in self.event_ids:
            i = len(self.event_ids) + 1
            self.event_ids[name] = i
            self.header.event_metadata[i].id = i
            self.header.event_metadata[i].name = name
        return self.event_ids[name]

    def stat_id(self, name: str) -> int:
        if name not in self.stat_ids:
            i = len(self.stat_ids) + 1
            self.stat_ids[name] = i
            self.header.stat_metadata[i].id = i
            self.header.stat_metadata[i].name = name
        return self.stat_ids[name]

    def ids(self, names: list[str], stat: bool = False) -> np.ndarray:
        get = self.stat_id if stat else self.event_id
        return np.array([get(n) for n in names], dtype=np.int64)

    def add_line(self, line_id: int, name: str, events: list[Fields], display_name: str = "") -> None:
        head = self.msg["XLine"](id=line_id, display_id=line_id, name=name, display_name=display_name)
        head.timestamp_ns = T0_NS
        parts = [head.SerializeToString()]
        for chunk in events:
            parts.append(Fields(chunk.n).message(4, chunk).encode())
        self.lines.append(b"".join(parts))

    def to_bytes(self) -> bytes:
        """Fields in number order, as XLA's C++ serializer writes them: id, name, lines, then the metadata maps."""
        head = self.msg["XPlane"](id=self.header.id, name=self.header.name).SerializeToString()
        self.header.ClearField("id")
        self.header.ClearField("name")
        body = [head]
        for line in self.lines:
            body += [b"\x1a", varint_bytes(len(line)), line]
        body.append(self.header.SerializeToString())
        return b"".join(body)


def _chunks(n: int) -> list[slice]:
    return [slice(i, min(i + CHUNK, n)) for i in range(0, max(n, 1), CHUNK)] if n else []


def _events(mids: np.ndarray, start_ns: np.ndarray, dur_ns: np.ndarray) -> Fields:
    return Fields(len(mids)).varint(1, mids).varint(2, start_ns * 1000).varint(3, dur_ns * 1000)


def build(
    path: Path,
    n_events: int,
    gpus: int = 8,
    seed: int = 0,
    kernel_only: bool = False,
    one_step: bool = False,
    kernel_dense: bool = False,
) -> dict[str, int]:
    """Write the benchmark trace; returns counts by kind (for the tests that read it back).

    ``kernel_only``: compute kernels on one stream per GPU and nothing else (no
    collectives, copies, XLA Ops line or host launches): an easy input that
    hides the costs of the real shape, kept to show them apart. ``one_step``: one
    long step of a large job: every GPU runs the same sequence of kernels (the same
    program: its collectives match across GPUs), with collectives on three streams
    (~18% of kernels; :data:`ONE_STEP_SHARE`), durations and gaps of its own.
    ``kernel_dense``: the one-step program as a raw device capture holds it: every event a device kernel
    (no XLA Ops, XLA Modules or Steps lines, no host launches; the host's one StepTraceAnnotation marks the
    step), each kernel with the two stats CUPTI's tracer writes (``correlation_id`` and ``kernel_details``,
    a copy's ``memcpy_details``), no HLO stats.
    """
    rng = np.random.default_rng(seed)
    one_step = one_step or kernel_dense
    per_gpu = max(n_events // (gpus if kernel_only or kernel_dense else 3 * gpus), 1)
    n_steps = 1 if one_step else STEPS
    roles = np.array(ONE_STEP_ROLES if one_step else (0, 1, 2))  # each stream's role: identity but for one-step
    host = _Plane(1, "/host:CPU")
    counts = {"kernels": 0, "comm": 0, "copies": 0}
    step_windows_all = []
    with open(path, "wb") as out:
        planes = []
        for d in range(gpus):
            plane = _Plane(100 + d, f"/device:GPU:{d}")
            program = np.random.default_rng(seed + 7) if one_step else rng  # one-step: the same program everywhere
            if one_step:
                stream = program.choice(len(roles), per_gpu, p=ONE_STEP_SHARE)
            else:
                stream = rng.choice(
                    3, per_gpu, p=(1.0, 0.0, 0.0) if kernel_only else STREAM_SHARE
                )  # compute, coll., copy
            role = roles[stream]
            kind = np.where(
                role == 0,
                program.integers(0, len(COMPUTE), per_gpu),
                np.where(role == 1, program.integers(0, len(COMM), per_gpu), program.integers(0, len(COPY), per_gpu)),
            )
            op_index = np.where(
                role == 0, program.integers(0, COMPUTE_OPS, per_gpu), program.integers(0, LAYERS, per_gpu)
            )
            dur = np.where(role == 0, rng.integers(2_000, 40_000, per_gpu), rng.integers(5_000, 120_000, per_gpu))
            start = np.empty(per_gpu, dtype=np.int64)
            for s in range(len(roles)):  # kernels of one stream run one after another
                on = stream == s
                gaps = rng.integers(300, 4_000, int(on.sum()))
                start[on] = np.cumsum(gaps + dur[on]) - dur[on] + 1_000_000 + s * 777
            counts["kernels"] += per_gpu
            counts["comm"] += int((role == 1).sum())
            counts["copies"] += int((role == 2).sum())

            # distinct (kernel name, op) per (stream, kind, op index): names and stats are decided once per key
            key = (stream * 10 + kind) * 1000 + op_index
            keys, inverse = np.unique(key, return_inverse=True)
            k_stream, k_kind, k_op = keys // 10_000, (keys // 1000) % 10, keys % 1000
            names, ops, details = [], [], []
            for s, k, i in zip(roles[k_stream].tolist(), k_kind.tolist(), k_op.tolist()):
                if s == 0:
                    kname, op, _ = COMPUTE[k]
                    names.append(kname.format(i=i))
                    ops.append(f"{op}.{i}")
                    details.append(f"regs:{64 + 8 * (i % 16)} static_shared:0 grid:{132 * (1 + k)},1,1 block:384,1,1")
                elif s == 1:
                    kname, op = COMM[k]
                    names.append(kname)
                    ops.append(f"{op}.{i}")
                    details.append("regs:96 static_shared:0 grid:32,1,1 block:640,1,1")
                else:
                    kname, op = COPY[k]
                    names.append(kname)
                    ops.append(f"{op}.{i}" if op else "")
                    details.append("")
            name_ids = plane.ids(names)[inverse]
            op_refs = plane.ids([o or "-" for o in ops], stat=True)[inverse]
            has_op = np.array([bool(o) for o in ops])[inverse]
            detail_refs = plane.ids([dt or "-" for dt in details], stat=True)[inverse]
            corr = np.arange(per_gpu, dtype=np.int64) * gpus + d + 1_000_000
            sid = {n: plane.stat_id(n) for n in ("correlation_id", "kernel_details", "memcpy_details", "hlo_op")}
            sid.update({n: plane.stat_id(n) for n in ("hlo_module", "program_id", "context_id", "group_id")})
            sid.update({n: plane.stat_id(n) for n in ("step_num", "run_id", "hlo_category", "flops", "tf_op")})
            module_ref = plane.stat_id(MODULE)
            copy_sizes = [f"kind_src:device kind_dst:device size:{1 << (12 + j)} dest:0 async:1" for j in range(12)]
            copy_size = rng.integers(0, len(copy_sizes), per_gpu)
            # steps by time, as in a real capture: every stream's kernels of one step lie in its window (by
            # index, the slow collective stream's kernel k ran long after compute kernel k: steps overlapped)
            t0, t1 = int(start.min()), int((start + dur).max())
            step_of = np.minimum((start - t0) * n_steps // (t1 - t0 + 1), n_steps - 1)

            stream_names = (
                ONE_STEP_NAMES
                if one_step
                else ("Stream #13(Compute)", "Stream #21(Collective)", "Stream #35(MemcpyD2D)")
            )
            for s, sname in enumerate(stream_names):
                idx = np.flatnonzero(stream == s)
                idx = idx[np.argsort(start[idx], kind="stable")]
                if kernel_only and s:
                    continue
                chunks = []
                for c in _chunks(len(idx)):
                    j = idx[c]
                    n = len(j)
                    ev = _events(name_ids[j], start[j], dur[j])
                    ev.message(4, stat(sid["correlation_id"], n).varint(3, corr[j]))
                    if roles[s] == 2:
                        if not kernel_dense:
                            ev.message(4, stat(sid["context_id"], n).varint(3, 1))
                        cats = [t.encode() for t in copy_sizes]
                        ev.message(4, stat(sid["memcpy_details"], n).strings(5, cats, copy_size[j]))
                    else:
                        ev.message(4, stat(sid["kernel_details"], n).varint(7, detail_refs[j]))
                    if kernel_dense:
                        chunks.append(ev)
                        continue
                    op_here = has_op[j]
                    ev.message(4, stat(sid["hlo_op"], n).varint(7, op_refs[j]), present=op_here)
                    ev.message(4, stat(sid["hlo_module"], n).varint(7, module_ref), present=op_here)
                    ev.message(4, stat(sid["program_id"], n).varint(4, PROGRAM_ID), present=op_here)
                    chunks.append(ev)
                plane.add_line(s + 1, sname, chunks)

            if kernel_dense:  # a raw device capture: no derived lines, no host launches; the step's window
                step_windows_all.append((start.min(keepdims=True), (start + dur).max(keepdims=True)))
                planes.append(plane.to_bytes())
                continue
            # derived lines: the XLA op of every kernel (stats on the op's event metadata, as XLA writes them)
            op_names = [o or nm for o, nm in zip(ops, names)]
            op_ids = plane.ids(op_names)
            for key_i, (o, s) in enumerate(zip(op_names, roles[k_stream].tolist())):
                meta = plane.header.event_metadata[int(op_ids[key_i])]
                if len(meta.stats):
                    continue
                meta.stats.add(metadata_id=sid["program_id"]).int64_value = PROGRAM_ID
                category = ("collective" if s == 1 else "copy") if s else COMPUTE[k_kind[key_i]][2]
                meta.stats.add(metadata_id=sid["hlo_category"]).ref_value = plane.stat_id(category)
                meta.stats.add(metadata_id=sid["flops"]).uint64_value = 0 if s else 1 << (20 + key_i % 12)
                meta.stats.add(metadata_id=sid["tf_op"]).str_value = f"jit(train_step)/layer_{key_i % LAYERS}/{o}"
            order = np.argsort(start, kind="stable")
            chunks = []
            for c in _chunks(0 if kernel_only else per_gpu):
                j = order[c]
                ev = _events(op_ids[inverse[j]], start[j], dur[j])
                ev.message(4, stat(sid["group_id"], len(j)).varint(4, step_of[j]))
                chunks.append(ev)
            if not kernel_only:
                plane.add_line(90, "XLA Ops", chunks)
            lo = np.full(n_steps, np.iinfo(np.int64).max)
            hi = np.zeros(n_steps, dtype=np.int64)
            np.minimum.at(lo, step_of, start)
            np.maximum.at(hi, step_of, start + dur)
            step_windows_all.append((lo, hi))
            steps = np.arange(n_steps)
            module_ev = _events(np.full(n_steps, plane.event_id(f"{MODULE}({PROGRAM_ID})")), lo, hi - lo)
            module_ev.message(4, stat(sid["run_id"], n_steps).varint(4, steps + 100))
            plane.add_line(91, "XLA Modules", [module_ev])
            step_ev = _events(plane.ids([str(s) for s in range(n_steps)]), lo, hi - lo)
            step_ev.message(4, stat(sid["group_id"], n_steps).varint(4, steps))
            step_ev.message(4, stat(sid["step_num"], n_steps).varint(4, steps))
            plane.add_line(92, "Steps", [step_ev])
            planes.append(plane.to_bytes())

            # the host side: one launch per kernel on this GPU's launch thread
            launch_name = np.array([host.event_id(n) for n in ("cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpyAsync")])
            hs = {n: host.stat_id(n) for n in ("correlation_id", "device_id", "hlo_op", "hlo_module", "program_id")}
            host_op_refs = host.ids([o or "-" for o in ops], stat=True)[inverse]
            host_module = host.stat_id(MODULE)
            launch_start = start - rng.integers(4_000, 30_000, per_gpu)
            order = np.argsort(launch_start, kind="stable")
            chunks = []
            for c in _chunks(0 if kernel_only else per_gpu):
                j = order[c]
                n = len(j)
                ev = _events(launch_name[role[j]], launch_start[j], rng.integers(1_500, 4_000, n))
                ev.message(4, stat(hs["correlation_id"], n).varint(3, corr[j]))
                ev.message(4, stat(hs["device_id"], n).varint(3, d))
                op_here = has_op[j]
                ev.message(4, stat(hs["hlo_op"], n).varint(7, host_op_refs[j]), present=op_here)
                ev.message(4, stat(hs["hlo_module"], n).varint(7, host_module), present=op_here)
                ev.message(4, stat(hs["program_id"], n).varint(4, PROGRAM_ID), present=op_here)
                chunks.append(ev)
            if not kernel_only:
                host.add_line(40_000 + d, f"Host Threads/{40_000 + d}", chunks, display_name=f"gpu_launch_{d}")
        lo = np.min([w[0] for w in step_windows_all], axis=0)
        hi = np.max([w[1] for w in step_windows_all], axis=0)
        train = _events(np.full(n_steps, host.event_id("train")), lo - 20_000, hi - lo + 20_000)
        train.message(4, stat(host.stat_id("step_num"), n_steps).varint(4, np.arange(n_steps)))
        host.add_line(1, "python3", [train])
        for body in [host.to_bytes(), *planes]:
            out.write(b"\x0a" + varint_bytes(len(body)))
            out.write(body)
        host_name = b"bench0"
        out.write(b"\x22" + varint_bytes(len(host_name)) + host_name)
    if kernel_dense:
        counts["events"] = counts["kernels"] + n_steps
    else:
        counts["events"] = (1 if kernel_only else 3) * counts["kernels"] + gpus * 2 * n_steps + n_steps
    return counts


FLOOR = """
import sys, time
from jaxlib._profile_data import ProfileData
t0 = time.process_time()
n = 0
total = 0.0
for plane in ProfileData.from_file(sys.argv[1]).planes:
    for line in plane.lines:
        for ev in line.events:
            ev.name
            total += ev.duration_ns
            n += 1
print("work", time.process_time() - t0, n, total)
"""

DECODER = """
import os, sys, time
from moeprof.readers.xplane_wire import read_xspace
stats = sys.argv[2].split(",") if sys.argv[2] else ()
t0 = time.process_time()
space = read_xspace(sys.argv[1], stats=stats)
n = sum(len(line.start_ns) for plane in space.planes for line in plane.lines)
print("work", time.process_time() - t0, n)
if space.route != os.environ["MOEPROF_XPLANE_DECODER"]:
    sys.exit("the " + os.environ["MOEPROF_XPLANE_DECODER"] + " route did not load")
"""


BASELINE = """
from moeprof.readers import xplane_wire
print("work", 0.0)
"""

# the stats moeprof's XPlane reader needs (GPU kernels, step markers, CPU thunks)
READER_STATS = "hlo_op,hlo_module,program_id,step_num,device_ordinal,run_id"


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, float]:
    """Wall seconds, CPU seconds (user + system), peak RSS (MiB), and the work CPU seconds the child printed
    (its CPU time after its imports), of one child process."""
    # the child's output goes to files: a pipe read only after the child ends would block a large --json
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out_file, stderr=err_file, env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out_file.seek(0)
        err_file.seek(0)
        out_bytes, err_bytes = out_file.read(), err_file.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err_bytes.decode()[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    out = out_bytes.decode()
    work = next((float(line.split()[1]) for line in out.splitlines() if line.startswith("work ")), cpu)
    return wall, cpu, usage.ru_maxrss / 1024, work


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shape", choices=("xla", "kernel-only", "one-step", "kernel-dense"), default="xla")
    ap.add_argument("--keep", type=Path, help="also keep the generated trace here")
    ap.add_argument("--skip-analyze", action="store_true", help="measure only the decoder against the floor")
    ap.add_argument("--skip-startup", action="store_true", help="leave out the start-up figures")
    ap.add_argument(
        "--analyze-only",
        action="store_true",
        help="measure only analyze against the floor (no decoders, annotate, report)",
    )
    ap.add_argument("--build-only", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    compile_package()
    if args.build_only:
        built = build(
            args.build_only,
            args.events,
            kernel_only=args.shape == "kernel-only",
            one_step=args.shape == "one-step",
            kernel_dense=args.shape == "kernel-dense",
        )
        print(" ".join(f"{k}={v}" for k, v in built.items()))
        return
    with tempfile.TemporaryDirectory() as tmp:
        trace = args.keep or Path(tmp) / "bench.xplane.pb"
        t0 = time.perf_counter()
        # built in a child process: a forked child's peak RSS starts from its parent's (Linux carries the
        # high-water mark across exec), so the parent must stay small for the children's figures to be theirs
        built = subprocess.run(
            [sys.executable, __file__, "--build-only", str(trace), "--events", str(args.events), "--shape", args.shape],
            check=True,
            capture_output=True,
            text=True,
        )
        counts = {k: int(v) for k, v in (item.split("=") for item in built.stdout.split())}
        size_mib = trace.stat().st_size / 2**20
        print(
            f"built {counts['events']:,} events ({args.shape}: {counts['kernels']:,} kernels, {counts['comm']:,} "
            f"collectives, {counts['copies']:,} copies), {size_mib:.1f} MiB in {time.perf_counter() - t0:.1f} s"
        )
        py = sys.executable
        floor = "floor (ProfileData + name/duration of every event)"
        runs: dict[str, tuple[list[str], dict[str, str]]] = {
            "interpreter + decoder imports (baseline)": ([py, "-c", BASELINE], {}),
            floor: ([py, "-c", FLOOR, str(trace)], {}),
        }
        from moeprof.readers.xplane_wire import installed_routes

        routes = [] if args.analyze_only else installed_routes()
        for route in routes:
            env = {"MOEPROF_XPLANE_DECODER": route}
            runs[f"decoder, {route}: name/start/end"] = ([py, "-c", DECODER, str(trace), ""], env)
            runs[f"decoder, {route}: + reader stats"] = ([py, "-c", DECODER, str(trace), READER_STATS], env)
        missing = [r for r in ("numba", "native") if r not in routes]
        if missing and not args.analyze_only:
            print(f"(not measured: {', '.join(missing)}: not installed / not built here)")
        if not args.skip_analyze:
            runs["moeprof analyze --json"] = ([py, "-m", "moeprof", "analyze", str(trace), "--json"], {})
        if not args.skip_analyze and not args.analyze_only:
            out_dir = Path(tmp)
            annotated = str(out_dir / "annotated.trace.json.gz")
            runs["moeprof annotate"] = ([py, "-m", "moeprof", "annotate", str(trace), "-o", annotated], {})
            html = str(out_dir / "report.html")
            runs["moeprof report"] = ([py, "-m", "moeprof", "report", str(trace), "-o", html], {})
        # round-robin: each repeat runs every command once, so that a slow spell of a shared machine falls on
        # all of them rather than on one command's repeats (it moved analyze / floor by 0.4 here)
        samples: dict[str, list[tuple[float, float, float, float]]] = {label: [] for label in runs}
        for _ in range(args.repeat):
            for label, (cmd, env) in runs.items():
                samples[label].append(measure(cmd, env))
        results = {
            label: (*tuple(min(s[i] for s in got) for i in (0, 1, 3)), max(s[2] for s in got))
            for label, got in samples.items()
        }
        print(f"{'':52s} {'wall s':>8s} {'cpu s':>8s} {'work cpu s':>10s} {'peak RSS MiB':>13s} {'RSS/file':>9s}")
        for label, (wall, cpu, work, rss) in results.items():
            print(f"{label:52s} {wall:8.2f} {cpu:8.2f} {work:10.2f} {rss:13.0f} {rss / size_mib:9.2f}")
        base_rss = results["interpreter + decoder imports (baseline)"][3]
        fw, fc, fwork, fr = results[floor]
        print("(work = CPU seconds after imports; wall times depend on the machine's load, CPU times much less)")
        for label in [k for k in results if k.startswith("decoder")]:
            dw, dc, dwork, dr = results[label]
            print(
                f"{label}: floor/decoder work {fwork / dwork:.2f}x, process cpu {fc / dc:.2f}x, wall {fw / dw:.2f}x "
                f"(target >= 3); peak RSS {dr / size_mib:.2f}x the file, {(dr - base_rss) / size_mib:.2f}x above "
                "the baseline (target <= 4)"
            )
        # every goal of issue 12 in one table: (goal, figure, target, met)
        table: list[tuple[str, float, str, bool]] = []
        for route in [r for r in ("native", "numpy") if r in routes]:  # the default route, and the fallback
            dw, dc, dwork, dr = results[f"decoder, {route}: + reader stats"]
            ratio = fwork / dwork
            table.append((f"decoder ({route}, reader stats): floor/decoder work", ratio, ">= 3", ratio >= 3))
            rss = dr / size_mib
            table.append((f"decoder ({route}, reader stats): peak RSS / file", rss, "<= 4", rss <= 4))
        if not args.skip_analyze:
            mw, mc, _, mr = results["moeprof analyze --json"]
            print(
                f"moeprof analyze / floor: wall {mw / fw:.2f}, process cpu {mc / fc:.2f} (target <= 1.5); "
                f"peak RSS {mr / fr:.2f} (target <= 1); {mr / size_mib:.2f}x the file"
            )
            table.append(("analyze / floor, wall", mw / fw, "<= 1.5", mw / fw <= 1.5))
            table.append(("analyze / floor, process CPU", mc / fc, "<= 1.5", mc / fc <= 1.5))
            table.append(("analyze / floor, peak RSS", mr / fr, "<= 1", mr / fr <= 1))
            for command, target in (("annotate", 2.0), ("report", 1.3)) if not args.analyze_only else ():
                cw = results[f"moeprof {command}"][0]
                table.append((f"{command} / analyze, wall", cw / mw, f"<= {target}", cw / mw <= target))
        if not args.skip_startup:
            small = Path(tmp) / "startup_3mb.xplane.pb"
            build_trace(small)
            table += startup_goals(startup_figures([small], 5), [small])
        print(f"\n{'goal (issue 12)':60s} {'figure':>8s}  {'target':8s} result")
        for goal, value, target, met in table:
            print(f"{goal:60s} {value:8.2f}  {target:8s} {'met' if met else 'NOT MET'}")


if __name__ == "__main__":
    main()
