#!/bin/sh
# Triton's fp16 matrix products (`tl.dot` as `mma.sync`) replayed on the CPU, each beside numpy's
# float32 matmul of the same shapes (the BLAS floor), on the same cores, in one run:
# `triton_matmul_f16` (the kernel Triton's JIT builds for sizes divisible by 16: cp.async, 16-byte
# loads) and `triton_matmul_f16_masked` (every load masked, one fp16 element at a time).
#   THREADS=2 SIZE=1024 bench/cpu/triton_matmul.sh      (from the repository root; needs numpy)
#   KERNELS=triton_matmul_f16 bench/cpu/triton_matmul.sh (one of them)
set -e
cd "$(dirname "$0")/../.."
threads=${THREADS:-2}
size=${SIZE:-1024}
kernels=${KERNELS:-"triton_matmul_f16 triton_matmul_f16_masked"}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo bench -p recap-shared --bench cpu_replay --no-run 2>/dev/null
uptime
for kernel in $kernels; do
  line=$(cargo bench -q -p recap-shared --bench cpu_replay -- "$kernel" --size "$size" --threads "$threads" --dump "$out" 2>/dev/null)
  echo "$line"
  OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads \
    python3 bench/cpu/matmul_floor.py "$out" "$size" "$line" "$kernel"
done
uptime
