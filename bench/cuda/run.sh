#!/usr/bin/env bash
# The GPU tests and the CUDA benchmark beside CUDA's own floor and PyTorch, in one run on one GPU.
#   bench/cuda/run.sh OUT_DIR        (repository root, on an H100/H200 machine, after gpu-pack has
#                                     staged binaries, test executables, corpus and floor in .gpu/)
# Order: GPU tests first (their output is part of the record), then floor and recap in turn three times,
# the WHILE part alone in a fresh process, PyTorch, and the SM clock sampled throughout.
set -uo pipefail
out=${1:?usage: bench/cuda/run.sh OUT_DIR}
mkdir -p "$out"
gpu=.gpu
export RECAP_CORPUS=$gpu/corpus RECAP_BIN=$gpu/bin/recap
log() { echo "== $* ($(date -u +%H:%M:%S))"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,temperature.gpu,power.draw --format=csv,noheader -lms 200 \
  >"$out/clocks.csv" 2>/dev/null &
clocks=$!

log "GPU tests"
e2e=$(ls $gpu/tests/e2e-* | head -1)
# The fault test poisons its process's context, so it runs alone.
"$e2e" gpu:: --include-ignored --test-threads=1 --skip a_kernel_fault 2>&1 | tee "$out/tests.txt"
"$e2e" gpu::a_kernel_fault --include-ignored --test-threads=1 2>&1 | tee -a "$out/tests.txt"
"$e2e" host::cuda capture:: --include-ignored --test-threads=1 2>&1 | grep -E "^test |test result" | tee -a "$out/tests.txt"
for c in $gpu/corpus/*/*/; do
  for mode in graph stream; do
    for ptx in "$c"*.ptx; do
      name=$(basename "$c")-$(basename "$ptx" .ptx)
      $gpu/bin/recap import-case "$c" --ptx "$(basename "$ptx" .ptx | sed 's/.*\.//')" -o "/tmp/$name.recap" >/dev/null
      printf '%-40s %-6s ' "$name" "$mode"
      $gpu/bin/recap replay "/tmp/$name.recap" --device cuda --mode "$mode" --check 2>&1 | tail -1
    done
  done
done | tee "$out/corpus.txt"

log "floor build"
nvcc -O3 -arch=sm_90 -o /tmp/graph_floor $gpu/bench/graph_floor.cu
cat >/tmp/inc.cu <<'EOF'
__global__ void inc(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
EOF
nvcc -O3 -arch=sm_90 -ptx -o /tmp/inc.ptx /tmp/inc.cu
nvcc -O3 -arch=sm_90 -cubin -o /tmp/inc.cubin /tmp/inc.cu
outside=(--ptx /tmp/inc.ptx --kernel _Z3incPfi --cubin /tmp/inc.cubin)

# Both pinned to one core: the host cost of a launch call moves by up to 2x between processes
# otherwise (1.2-2.5 us for one node, in the floor and in recap alike).
for round in 1 2 3; do
  log "floor round $round"
  taskset -c 3 /tmp/graph_floor | tee "$out/floor$round.txt"
  log "recap round $round"
  taskset -c 3 $gpu/bin/recap bench cuda --json "$out/recap$round.json" "${outside[@]}" | tee "$out/recap$round.txt"
done
log "recap WHILE alone"
$gpu/bin/recap bench cuda --only while "${outside[@]}" | tee "$out/recap-while.txt"
log "PyTorch"
python3 $gpu/bench/torch_graph.py | tee "$out/torch.txt"
kill $clocks 2>/dev/null
log "done"
