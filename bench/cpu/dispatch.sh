#!/bin/sh
# Launch dispatch of the CPU replay beside NVIDIA Warp's CPU graph replay, in one run, alternating.
#   bench/cpu/dispatch.sh      (from the repository root; needs `pip install warp-lang==1.19.0`)
set -e
cd "$(dirname "$0")/../.."
cargo bench -p recap-shared --bench cpu_replay --no-run 2>/dev/null
uptime
for round in 1 2 3; do
  cargo bench -q -p recap-shared --bench cpu_replay -- dispatch --engine jit 2>/dev/null
  cargo bench -q -p recap-shared --bench cpu_replay -- dispatch --engine interp 2>/dev/null
  python3 bench/cpu/warp_dispatch.py 2>/dev/null | tail -n 1
done
uptime
