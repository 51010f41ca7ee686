#!/bin/sh
# On an H100/H200 machine with CUDA: compiles probe.ptx with ptxas at -O0..-O3 and with
# --fmad=false, compiles nvcc_probe.cu to PTX, disassembles every cubin, runs every kernel from
# each cubin and from the PTX (the driver's JIT), and leaves all of it in the folder $1.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
w=$1
mkdir -p "$w"
cp "$here/probe.ptx" "$here/kernels.txt" "$w/"
nvcc -ptx -arch=sm_90 -o "$w/nvcc_probe.ptx" "$here/nvcc_probe.cu"
grep -o 'entry [a-z0-9_]*' "$w/nvcc_probe.ptx" | sed 's/entry \(.*\)/\1 f32/' > "$w/nvcc_kernels.txt"
for src in probe nvcc_probe; do
    for o in 0 1 2 3; do
        ptxas -arch=sm_90 -O$o "$w/$src.ptx" -o "$w/${src}_O$o.cubin"
    done
    ptxas -arch=sm_90 --fmad=false "$w/$src.ptx" -o "$w/${src}_nofmad.cubin"
    for c in "$w/${src}"_*.cubin; do
        cuobjdump -sass "$c" > "${c%.cubin}.sass"
    done
done
python3 "$here/run_probe.py" "$w" "$w/kernels.txt" probe_O3.cubin probe_O0.cubin probe_nofmad.cubin probe.ptx
python3 "$here/run_probe.py" "$w" "$w/nvcc_kernels.txt" nvcc_probe_O3.cubin nvcc_probe_nofmad.cubin nvcc_probe.ptx
