#!/bin/sh
# Builds and runs the tensor-core probes on an H100/H200 machine and packs the hardware's outputs.
# Usage (from the repository root): tests/numerics/run_probe.sh OUTDIR
# OUTDIR receives probe-1.tgz .. probe-4.tgz (each two forms' <form>.out and <form>.in: a file
# stays under 16 MiB) and probe.log. Each probe is built and run on its own, so that one failing
# leaves the other's outputs.
set -u
out=${1:?usage: run_probe.sh OUTDIR}
here=$(dirname "$0")
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
work=$(mktemp -d)
mkdir -p "$work/out" "$out"
{
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
  "$nvcc" --version | tail -1
  for p in mma_probe wgmma_probe; do
    if "$nvcc" -O2 -gencode arch=compute_90a,code=sm_90a -o "$work/$p" "$here/$p.cu"; then
      "$work/$p" "$work/out" || echo "$p: failed with status $?"
    else
      echo "$p: build failed"
    fi
  done
} 2>&1 | tee "$out/probe.log"
ls -l "$work/out" >>"$out/probe.log"
n=1
for pair in "m16n8k16_f32_f16 m16n8k16_f32_bf16" "m16n8k8_f32_tf32 m16n8k16_f16_f16" \
  "m16n8k8_f32_f16 m16n8k8_f32_bf16" "m64n8k16_f32_f16 m64n8k16_f32_bf16"; do
  files=""
  for f in $pair; do
    for e in out in; do
      [ -f "$work/out/$f.$e" ] && files="$files $f.$e"
    done
  done
  [ -n "$files" ] && tar czf "$out/probe-$n.tgz" -C "$work/out" $files
  n=$((n + 1))
done
