"""The built-in MoE step under router skew: how much of its communication is waiting (spec §8 ledger).

Captures ``moeprof capture demo --router-skew S`` for each S (``--repeat`` times), analyzes each
run folder, and prints per run: the measured token imbalance (max/mean tokens per device, from
the manifest), the share of communication time spent waiting for the last member, the same for
the expert all-to-all alone, the waiting share of exposed communication, and the device that
arrives last most often with its share of the instances it took part in.

Default sizes make expert work large enough to stand above XLA:CPU's thread scheduling on a
small machine (4 virtual devices, expert FFN 1024): with 8 devices on 2 cores the scheduling of
the device threads dominates the arrival skew whatever the routing.

    python benchmarks/demo_skew.py --skews 0 2 4 8 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def capture(out: Path, skew: float, devices: int, expert_ffn: int) -> dict:
    cmd = [sys.executable, "-m", "moeprof", "capture", "demo", "--out", str(out), "--json",
           "--devices", str(devices), "--expert-ffn", str(expert_ffn), "--router-skew", str(skew)]  # fmt: skip
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def row(doc: dict) -> dict:
    total = doc["total"]
    a2a = [c for c in doc["collectives"] if c["kind"] == "all-to-all"]
    wait, transfer = sum(c["wait_ns"] for c in a2a), sum(c["transfer_ns"] for c in a2a)
    top = (doc.get("ledger") or {}).get("stragglers") or [{}]
    demo = (doc.get("manifest") or {}).get("demo") or {}
    return {
        "skew": demo.get("router_skew"),
        "imbalance": (demo.get("load") or {}).get("imbalance_max_over_mean"),
        "wait_share_of_comm": total["comm_wait_ns"] / total["comm_ns"],
        "wait_share_of_all_to_all": wait / (wait + transfer) if wait + transfer else 0.0,
        "wait_share_of_exposed": total["exposed_wait_ns"] / max(total["exposed_comm_ns"], 1),
        "straggler": top[0].get("device"),
        "straggler_last_share": top[0].get("last_share", 0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skews", type=float, nargs="+", default=[0, 4])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--expert-ffn", type=int, default=1024)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="moeprof-skew-"))
    print("skew  tokens max/mean  wait/comm  wait/all-to-all  wait/exposed  last most often (share)")
    for skew in args.skews:
        for i in range(args.repeat):
            r = row(capture(base / f"s{skew}-{i}", skew, args.devices, args.expert_ffn))
            print(
                f"{r['skew']:4}  {r['imbalance']:15.2f}  {r['wait_share_of_comm']:9.0%}  "
                f"{r['wait_share_of_all_to_all']:15.0%}  {r['wait_share_of_exposed']:12.0%}  "
                f"{r['straggler']} ({r['straggler_last_share']:.0%})",
                flush=True,
            )


if __name__ == "__main__":
    main()
