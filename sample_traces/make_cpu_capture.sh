#!/usr/bin/env bash
# Re-capture sample_traces/cpu_moe_8dev: a real XLA:CPU profile of moeprof's built-in MoE step
# (8 virtual devices, dispatch/combine all-to-all, FSDP all-gather/reduce-scatter), kept small.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf sample_traces/cpu_moe_8dev
moeprof capture demo --out sample_traces/cpu_moe_8dev --devices 8 --expert-ffn 128 --steps 2 --warmup 1 \
  --tokens 64 --experts 8 --layers 1 --json > /dev/null
# xprof writes a trace-viewer JSON beside the XPlane; the XPlane alone is the sample
find sample_traces/cpu_moe_8dev -name '*.trace.json.gz' -delete
du -sh sample_traces/cpu_moe_8dev
