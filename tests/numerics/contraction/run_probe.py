#!/usr/bin/env python3
"""Runs the contraction probe's kernels on the GPU (CuPy) from each cubin in a folder and from
the PTX itself (the driver's JIT), over the seeded inputs shared/src/ptx/tests/contraction.rs
regenerates, and writes the outputs: `outputs_<variant>.bin`, kernel after kernel in the order
of `kernels.txt`, 2*N elements each, little-endian."""
import sys

import cupy as cp
import numpy as np

N = 256
SEED = 0x636F6E7472616374
M64 = (1 << 64) - 1


def mix(x):
    """splitmix64's output function of counter x."""
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def inputs(t):
    """Buffers a, b, c, d: magnitudes in [2^-7, 2^7), random signs and mantissas."""
    bufs = []
    for k in range(4):
        zs = [mix(SEED + k * N + i) for i in range(N)]
        if t == "f32":
            bits = [((z >> 63) << 31) | ((120 + (z >> 32) % 14) << 23) | (z & 0x7FFFFF) for z in zs]
            bufs.append(np.array(bits, dtype=np.uint32).view(np.float32))
        else:
            bits = [((z >> 63) << 63) | ((1016 + ((z >> 52) & 0x7FF) % 14) << 52) | (z & ((1 << 52) - 1)) for z in zs]
            bufs.append(np.array(bits, dtype=np.uint64).view(np.float64))
    return bufs


def run(module_path, kernels):
    mod = cp.RawModule(path=module_path)
    out = bytearray()
    for name, t in kernels:
        a, b, c, d = (cp.asarray(x) for x in inputs(t))
        o = cp.zeros(2 * N, dtype=np.float32 if t == "f32" else np.float64)
        mod.get_function(name)((N // 128,), (128,), (a, b, c, d, o, np.uint32(N)))
        cp.cuda.runtime.deviceSynchronize()
        out += o.get().tobytes()
    return bytes(out)


def main():
    folder, listing = sys.argv[1], sys.argv[2]
    kernels = [tuple(line.split()) for line in open(listing) if line.strip()]
    for variant in sys.argv[3:]:
        path = f"{folder}/{variant}"
        data = run(path, kernels)
        with open(f"{folder}/outputs_{variant.replace('.', '_')}.bin", "wb") as f:
            f.write(data)
        print(variant, len(data), "bytes")


if __name__ == "__main__":
    main()
