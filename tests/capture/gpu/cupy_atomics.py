"""Float atomics in a CuPy raw kernel, for `recap capture`: a weighted 2-D histogram (atomicAdd on
float bins) and a block-partial dot product finished with one atomicAdd per block, the two common
ways CUDA C++ kernels in Python reduce. The kernels compile in a warm-up pass; between
cupy.cuda.profiler.start() and stop() one pass of both. It checks against NumPy in float64 and prints
one line."""
import cupy as cp
import numpy as np
from cupy.cuda import profiler

src = r'''
extern "C" __global__ void hist2d(const float* x, const float* y, const float* w, float* bins, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int bx = min(63, max(0, (int)((x[i] + 4.0f) * 8.0f)));
        int by = min(63, max(0, (int)((y[i] + 4.0f) * 8.0f)));
        atomicAdd(&bins[by * 64 + bx], w[i]);
    }
}
extern "C" __global__ void dot(const float* a, const float* b, float* out, int n) {
    __shared__ float part[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = i < n ? a[i] * b[i] : 0.0f;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
'''
mod = cp.RawModule(code=src)
hist2d, dot = mod.get_function("hist2d"), mod.get_function("dot")
n = 1 << 20
rng = cp.random.default_rng(0)
x, y = rng.standard_normal(n, dtype=cp.float32), rng.standard_normal(n, dtype=cp.float32)
w = rng.random(n, dtype=cp.float32)
bins = cp.zeros(64 * 64, dtype=cp.float32)
out = cp.zeros(1, dtype=cp.float32)


def run():
    bins.fill(0)
    out.fill(0)
    hist2d(((n + 255) // 256,), (256,), (x, y, w, bins, cp.int32(n)))
    dot(((n + 255) // 256,), (256,), (x, y, out, cp.int32(n)))


run()
cp.cuda.runtime.deviceSynchronize()
profiler.start()
run()
cp.cuda.runtime.deviceSynchronize()
profiler.stop()
fx, fy = x.get(), y.get()
hx, hy, hw = fx.astype(np.float64), fy.astype(np.float64), w.get().astype(np.float64)
# The bins as the kernel computes them, in float32, so that values on a bin's edge land alike.
bx = np.clip(((fx + np.float32(4)) * np.float32(8)).astype(np.int64), 0, 63)
by = np.clip(((fy + np.float32(4)) * np.float32(8)).astype(np.int64), 0, 63)
want = np.zeros(64 * 64)
np.add.at(want, by * 64 + bx, hw)
assert np.allclose(bins.get(), want, rtol=1e-4, atol=1e-3), "histogram is off"
assert abs(out.get()[0] - np.dot(hx, hy)) < 1e-2 * max(1.0, abs(np.dot(hx, hy))), "dot is off"
print(f"cupy_atomics: ok {float(out.get()[0]):.4f}")
