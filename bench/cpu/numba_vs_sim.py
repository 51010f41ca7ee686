"""numba-cuda kernels on recap's CPU driver against numba's own simulator (NUMBA_ENABLE_CUDASIM=1).

Run it twice, once each way, and compare the `kernel seconds` lines:
    recap run --cpu -- target/numba-venv/bin/python bench/cpu/numba_vs_sim.py
    NUMBA_ENABLE_CUDASIM=1 target/numba-venv/bin/python bench/cpu/numba_vs_sim.py
Each kernel runs once to compile (not timed), then `REPEAT` times; the time is the best run, with
the copies in and out outside it. Every result is checked against numpy, so both ways compute the
same thing. Sizes are small enough for the simulator, which runs each thread as a Python thread."""
import math
import os
import time

import numpy as np
from numba import cuda

REPEAT = 3


@cuda.jit
def saxpy(out, a, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@cuda.jit
def histogram(counts, values):
    i = cuda.grid(1)
    if i < values.size:
        cuda.atomic.add(counts, values[i] % counts.size, 1)


TILE = 16


@cuda.jit
def matmul(c, a, b):
    sa = cuda.shared.array((TILE, TILE), dtype=np.float32)
    sb = cuda.shared.array((TILE, TILE), dtype=np.float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = np.float32(0.0)
    for k in range(a.shape[1] // TILE):
        sa[ty, tx] = a[y, k * TILE + tx]
        sb[ty, tx] = b[k * TILE + ty, x]
        cuda.syncthreads()
        for j in range(TILE):
            acc += sa[ty, j] * sb[j, tx]
        cuda.syncthreads()
    c[y, x] = acc


@cuda.jit
def mandelbrot(out, iterations):
    x, y = cuda.grid(2)
    h, w = out.shape
    if x < w and y < h:
        c = complex(-2.0 + 3.0 * x / w, -1.5 + 3.0 * y / h)
        z = 0j
        n = 0
        while n < iterations and abs(z) <= 2.0:
            z = z * z + c
            n += 1
        out[y, x] = n


def timed(launch):
    launch()
    cuda.synchronize()
    best = math.inf
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        launch()
        cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    rng = np.random.default_rng(1)
    results = []

    n = 1 << 14
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    dx, dy, dout = cuda.to_device(x), cuda.to_device(y), cuda.device_array(n, np.float32)
    t = timed(lambda: saxpy[(n + 255) // 256, 256](dout, np.float32(2.0), dx, dy))
    assert np.allclose(dout.copy_to_host(), 2 * x + y)
    results.append((f"saxpy n={n}", t))

    values = rng.integers(0, 1 << 20, 1 << 14, dtype=np.int32)
    dvalues, dcounts = cuda.to_device(values), cuda.to_device(np.zeros(64, np.int32))
    t = timed(lambda: histogram[(values.size + 255) // 256, 256](dcounts, dvalues))
    assert dcounts.copy_to_host().sum() == values.size * (REPEAT + 1)
    results.append((f"histogram n={values.size} (atomics)", t))

    m = 64
    a, b = rng.random((m, m), dtype=np.float32), rng.random((m, m), dtype=np.float32)
    da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.device_array((m, m), np.float32)
    t = timed(lambda: matmul[(m // TILE, m // TILE), (TILE, TILE)](dc, da, db))
    assert np.allclose(dc.copy_to_host(), a @ b, rtol=1e-4)
    results.append((f"matmul {m}x{m} (shared memory, barriers)", t))

    out = cuda.device_array((64, 64), np.int32)
    t = timed(lambda: mandelbrot[(4, 4), (16, 16)](out, 200))
    assert out.copy_to_host().max() == 200
    results.append(("mandelbrot 64x64, 200 iterations", t))

    mode = "simulator" if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else "device"
    for name, t in results:
        print(f"{mode}: {name}: kernel seconds {t:.6f}")


main()
