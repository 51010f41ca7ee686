#!/bin/sh
# Builds and runs the special-function probe on an H100/H200 machine and packs what it wrote.
# Usage (from the repository root): tests/numerics/run_sfu_probe.sh OUTDIR
# OUTDIR receives sfu.tar (hashes.txt, the sample's outputs, the 16-bit forms, the probe's SASS,
# probe.log) and dumps-N.tar (the dense ranges, each as first differences of the output bits,
# int32, xz-compressed: they compress to a few MiB where the raw outputs would not come back).
set -u
out=${1:?usage: run_sfu_probe.sh OUTDIR}
here=$(dirname "$0")
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
work=$(mktemp -d)
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  "$nvcc" --version | tail -1
  "$nvcc" -O3 -arch=sm_90 -o "$work/sfu_probe" "$here/sfu_probe.cu" || echo "build failed"
  "${CUOBJDUMP:-/usr/local/cuda/bin/cuobjdump}" -sass "$work/sfu_probe" | grep -v '^\s*/\*[0-9a-f]*\*/\s*$' >"$work/sass.txt"
  python3 "$here/sfu_sample.py" "$work/sfu_sample.u32"
  "$work/sfu_probe" "$work" "$work/sfu_sample.u32" || echo "sfu_probe: failed with status $?"
} >"$work/probe.log" 2>&1
cat "$work/probe.log"
xz -T0 -6 "$work/sass.txt"
python3 - "$work" <<'PY'
import glob, sys
import numpy as np
for p in glob.glob(sys.argv[1] + "/dump_*.u32"):
    a = np.fromfile(p, dtype=np.uint32).astype(np.int64)
    np.diff(a, prepend=0).astype(np.int32).tofile(p[:-4] + ".d32")
PY
(cd "$work" && xz -T0 -9 dump_*.d32 && ls -l) >>"$work/probe.log" 2>&1
(cd "$work" && tar cf "$out/sfu.tar" hashes.txt sample_*.bin half_*.u32 sass.txt.xz probe.log)
# Pack the dumps into tars of at most about 15 MiB.
n=1; size=0; list=""
for f in "$work"/dump_*.d32.xz; do
  s=$(stat -c %s "$f")
  if [ -n "$list" ] && [ $((size + s)) -gt 15000000 ]; then
    tar cf "$out/dumps-$n.tar" -C "$work" $list; n=$((n + 1)); size=0; list=""
  fi
  list="$list $(basename "$f")"; size=$((size + s))
done
[ -n "$list" ] && tar cf "$out/dumps-$n.tar" -C "$work" $list
ls -l "$out"
