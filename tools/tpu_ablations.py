"""Capture an ablation set of the demo step on one accelerator, every configuration in one process.

Each configuration is what ``moeprof capture demo OPTIONS`` captures (the same ``run_demo``, the same
run folder and manifest), but the chip is opened once for all of them: on a TPU v5e opening it costs
about 15 s a program, and each ``capture demo`` starts one. Between configurations the compiled
programs are dropped (``jax.clear_caches``), so a capture's HLO metadata holds its own program.

    python tools/tpu_ablations.py OUT 'base:' 'topk1:--top-k 1' 'cap2:--capacity-factor 2.0' ...

Each argument after OUT is ``NAME:OPTIONS`` (the options of ``capture demo``); it writes ``OUT/NAME/`` with
``trace/`` and ``manifest.json`` (no ``analysis.json``: run ``moeprof analyze OUT/NAME`` where the analysis
is wanted) and prints one line a configuration. A configuration that fails is reported and skipped.
"""

from __future__ import annotations

import gc
import shlex
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from moeprof.capture.demo import demo_manifest
from moeprof.capture.runfolder import MANIFEST, TRACE_DIR, write_json
from moeprof.demo.config import FIELDS, OPTION_NAMES, checked, from_fields, sized_for

FLAGS = {"--skip-one-device-exchange": "skip_one_device_exchange"}
FIELD_OF_OPTION = {option: field for field, option in OPTION_NAMES.items()}


def parse(options: str) -> dict[str, Any]:
    """``capture demo``'s options as config fields (numbers as numbers)."""
    words = shlex.split(options)
    given: dict[str, Any] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word in FLAGS:
            given[FLAGS[word]] = True
            i += 1
            continue
        if word not in FIELD_OF_OPTION or i + 1 >= len(words):
            sys.exit(f"unknown option or missing value: {word!r} in {options!r}")
        value: Any = words[i + 1]
        for kind in (int, float):
            try:
                value = kind(value)
                break
            except ValueError:
                continue
        given[FIELD_OF_OPTION[word]] = value
        i += 2
    unknown = set(given) - FIELDS
    if unknown:
        sys.exit(f"not demo settings: {sorted(unknown)}")
    return given


def main(out: Path, specs: list[str]) -> int:
    import jax

    from moeprof.demo.model import make_mesh, run_demo

    platform = jax.devices()[0].platform
    failed = 0
    for spec in specs:
        name, _, options = spec.partition(":")
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        given = sized_for(platform, {"expert_ffn": 1024, **parse(options)})  # capture demo's own default FFN
        started = time.perf_counter()
        try:
            config = from_fields(given)
            checked(config, make_mesh(config).size, OPTION_NAMES)
            result = run_demo(config, folder / TRACE_DIR)
            doc = result.to_dict(include_hlo=False)
            manifest = demo_manifest(doc, ["moeprof", "capture", "demo", *shlex.split(options)])
            manifest["captured_with"] = "tools/tpu_ablations.py: every configuration of the set in one process"
            write_json(folder / MANIFEST, manifest)
            steps = [r.wall_seconds * 1e3 for r in result.records]
            print(
                f"{name}: {time.perf_counter() - started:.1f} s (compile {result.compile_seconds:.1f} s); "
                f"step wall ms {min(steps):.2f}-{max(steps):.2f}, mean {sum(steps) / len(steps):.2f}; "
                f"dropped {result.records[-1].tokens_dropped}",
                flush=True,
            )
        except Exception:
            failed += 1
            (folder / "error.txt").write_text(traceback.format_exc())
            print(f"{name}: FAILED after {time.perf_counter() - started:.1f} s", flush=True)
            print(traceback.format_exc()[-3000:], flush=True)
        jax.clear_caches()
        gc.collect()
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
