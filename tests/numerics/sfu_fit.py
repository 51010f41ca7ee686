#!/usr/bin/env python3
"""Fits the special-function unit's tables from the probe's dense dumps (run_sfu_probe.sh's
dumps-*.tar, unpacked in DIR) and writes shared/src/ptx/numerics/sfu_tables/<name>.sfu.

Each table is a function of an integer index i (the input's significand bits, with the exponent's
parity for the square roots, or ex2's fixed-point fraction) giving the raw f32 bits of the result
for one reference binade. It is stored as a piecewise quadratic in i (2^m segments, f64
coefficients, evaluated by Horner's rule and rounded to the nearest integer) plus the per-index
residual (the hardware's bits minus the quadratic's), a small integer that is 0 for about 99% of
inputs, zstd-compressed. shared/src/ptx/numerics/sfu.rs evaluates it the same way.

Usage: tests/numerics/sfu_fit.py DIR"""
import glob
import lzma
import struct
import subprocess
import sys

import numpy as np

SEG_BITS = 7


def dump(d, name, first):
    p = "%s/dump_%s_%08x.d32.xz" % (d, name, first)
    return np.cumsum(np.frombuffer(lzma.open(p).read(), dtype=np.int32).astype(np.int64)) & 0xFFFFFFFF


def fit(y, m):
    n = int(np.log2(len(y))) - m
    dx = np.arange(1 << n, dtype=np.float64)
    coef = np.zeros((1 << m, 3))
    res = np.zeros(len(y), np.int64)
    for s in range(1 << m):
        seg = y[s << n:(s + 1) << n]
        c2, c1, c0 = np.polyfit(dx, seg.astype(np.float64), 2)
        q = c0 + dx * (c1 + dx * c2)
        res[s << n:(s + 1) << n] = seg - np.floor(q + 0.5).astype(np.int64)
        coef[s] = (c0, c1, c2)
    assert res.min() >= -128 and res.max() <= 127
    return coef, res


def write(out, name, y):
    coef, res = fit(y, SEG_BITS)
    z = subprocess.run(["zstd", "-19", "-q", "-c"], input=res.astype(np.int8).tobytes(),
                       capture_output=True, check=True).stdout
    n = int(np.log2(len(y)))
    with open("%s/%s.sfu" % (out, name), "wb") as f:
        f.write(b"SFUT" + struct.pack("<III", 1, n, SEG_BITS))
        f.write(coef.astype("<f8").tobytes())
        f.write(struct.pack("<I", len(z)) + z)
    nz = int((res != 0).sum())
    print("%s: 2^%d entries, %d residuals non-zero (%.2f%%), %d bytes compressed" %
          (name, n, nz, 100.0 * nz / len(y), len(z)))


def main():
    d = sys.argv[1]
    out = "shared/src/ptx/numerics/sfu_tables"
    # MUFU.RCP on [1, 2).
    write(out, "rcp", dump(d, "rcp.approx.ftz.f32", 0x3F800000))
    # MUFU.RSQ and MUFU.SQRT on [1, 4): index (exponent parity << 23) | significand.
    write(out, "rsq", dump(d, "rsqrt.approx.ftz.f32", 0x3F800000))
    write(out, "sqrt", dump(d, "sqrt.approx.ftz.f32", 0x3F800000))
    # MUFU.EX2 on [1, 2): index the 23-bit fixed-point fraction, bits relative to 2^1.
    write(out, "ex2", dump(d, "ex2.approx.ftz.f32", 0x3F800000) - 0x40000000 + 0x3F800000)


if __name__ == "__main__":
    main()
