#!/bin/sh
# The CPU replay kernel benchmark (native code and interpreter) beside its native anchor, in one
# run, then an output comparison.
#   THREADS=2 bench/native/run.sh        (from the repository root; RECAP_CORPUS as for the tests)
set -e
cd "$(dirname "$0")/../.."
THREADS=${THREADS:-2}
ENGINES=${ENGINES:-jit jit-scalar interp}
CORPUS=${RECAP_CORPUS:-tests/corpus}
OUT=$(pwd)/target/bench-cpu
mkdir -p "$OUT"
g++ -O3 -march=x86-64-v3 -fopenmp -I "$CORPUS/nvcc" -o "$OUT/native" bench/native/kernels.cpp
cargo bench -p recap-shared --bench cpu_replay --no-run 2>/dev/null
uptime
for engine in $ENGINES; do
  mkdir -p "$OUT/$engine"
  RECAP_CORPUS=$(realpath "$CORPUS") cargo bench -q -p recap-shared --bench cpu_replay -- kernels \
    --threads "$THREADS" --engine "$engine" --dump "$OUT/$engine" 2>/dev/null
done
OMP_NUM_THREADS=$THREADS OMP_WAIT_POLICY=passive "$OUT/native" "$OUT"
uptime
for engine in $ENGINES; do
  echo "$engine:"
  python3 bench/native/compare.py "$OUT/$engine" "$OUT"
done
