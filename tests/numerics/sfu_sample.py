#!/usr/bin/env python3
"""Writes sfu_sample.u32: the 16,384 f32 inputs (raw bits, little-endian) on which the special-
function probe records the hardware's outputs for CI (sfu_probe.cu's sample_*.bin).

Special values (zeros, infinities, NaNs, the subnormal and normal extremes), every power of two and
its neighbours, the interpolation segments' boundaries in [0.5, 4), the f32 values nearest k*pi/2
and their neighbours (sin, cos), the integers in [-160, 160] and their neighbours (ex2's exponent
boundaries, overflow and underflow), then uniformly random bits (splitmix64, seed 0x5F0)."""
import math
import struct
import sys

N = 16384


def f2b(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


out = []
seen = set()


def add(b):
    b &= 0xFFFFFFFF
    if b not in seen:
        seen.add(b)
        out.append(b)


for b in [0, 1, 0x7FFFFF, 0x800000, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF]:
    add(b)
    add(b | 0x80000000)
for e in range(256):
    for m in (0, 1, 0x7FFFFF):
        add(e << 23 | m)
        add(0x80000000 | e << 23 | m)
for e in (126, 127, 128):
    for p in range(128):
        add(e << 23 | p << 16)
        add((e << 23 | p << 16) - 1)
for k in range(1, 65):
    b = f2b(k * math.pi / 2)
    for d in (-1, 0, 1):
        add(b + d)
        add((b + d) | 0x80000000)
for i in range(-160, 161):
    b = f2b(float(i))
    for d in (-1, 0, 1):
        add(b + d if i != 0 else d & 0xFFFFFFFF)

s = 0x5F0


def splitmix():
    global s
    s = (s + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = s
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


while len(out) < N:
    add(splitmix() >> 32)
path = sys.argv[1] if len(sys.argv) > 1 else "sfu_sample.u32"
with open(path, "wb") as f:
    f.write(struct.pack("<%dI" % N, *out[:N]))
