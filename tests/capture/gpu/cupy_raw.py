"""A CuPy RawKernel pipeline for `recap capture`, between cupy.cuda.profiler start and stop."""
import os

# CuPy compiles to a cubin by default (the archive then replays on a GPU of this architecture
# only); with this it loads PTX, which the CPU replays too.
os.environ.setdefault("CUPY_COMPILE_WITH_PTX", "1")
import cupy as cp  # noqa: E402
from cupy.cuda import profiler  # noqa: E402

src = r"""
extern "C" __global__ void blur(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i > 0 && i < n - 1) y[i] = 0.25f * x[i - 1] + 0.5f * x[i] + 0.25f * x[i + 1];
    else if (i < n) y[i] = x[i];
}
extern "C" __global__ void relu_scale(float* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(y[i], 0.0f) * s;
}
"""
module = cp.RawModule(code=src)
blur, relu_scale = module.get_function("blur"), module.get_function("relu_scale")
n = 1 << 15
x = cp.sin(cp.arange(n, dtype=cp.float32) * 0.01)
y = cp.empty_like(x)
blur((n // 256,), (256,), (x, y, cp.int32(n)))  # compile and load outside the range
cp.cuda.runtime.deviceSynchronize()
profiler.start()
for _ in range(3):
    blur((n // 256,), (256,), (x, y, cp.int32(n)))
    relu_scale((n // 256,), (256,), (y, cp.float32(2.0), cp.int32(n)))
    x, y = y, x
cp.cuda.runtime.deviceSynchronize()
profiler.stop()
print(f"cupy_raw: ok {float(x.sum()):.4f}")
