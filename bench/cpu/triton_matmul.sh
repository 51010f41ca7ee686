#!/bin/sh
# Triton's fp16 matrix product (`tl.dot` as `mma.sync`) replayed on the CPU beside numpy's float32
# matmul of the same shapes (the BLAS floor), on the same cores, in one run.
#   THREADS=2 SIZE=1024 bench/cpu/triton_matmul.sh      (from the repository root; needs numpy)
set -e
cd "$(dirname "$0")/../.."
threads=${THREADS:-2}
size=${SIZE:-1024}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo bench -p recap-shared --bench cpu_replay --no-run 2>/dev/null
uptime
line=$(cargo bench -q -p recap-shared --bench cpu_replay -- triton_matmul_f16 --size "$size" --threads "$threads" --dump "$out" 2>/dev/null)
echo "$line"
OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads \
  python3 bench/cpu/matmul_floor.py "$out" "$size" "$line"
uptime
