#!/bin/sh
# The CPU replay kernel benchmark beside its native anchor, in one run, then an output comparison.
#   THREADS=2 bench/native/run.sh        (from the repository root; RECAP_CORPUS as for the tests)
set -e
cd "$(dirname "$0")/../.."
THREADS=${THREADS:-2}
CORPUS=${RECAP_CORPUS:-../shared/corpus}
OUT=$(pwd)/target/bench-cpu
mkdir -p "$OUT"
g++ -O3 -march=x86-64-v3 -fopenmp -I "$CORPUS/nvcc" -o "$OUT/native" bench/native/kernels.cpp
RECAP_CORPUS=$(realpath "$CORPUS") cargo bench -p recap-shared --bench cpu_replay -- kernels --threads "$THREADS" --dump "$OUT"
OMP_NUM_THREADS=$THREADS "$OUT/native" "$OUT"
python3 bench/native/compare.py "$OUT"
