"""numba CUDA kernels for `recap capture`, between cuda.profile_start() and profile_stop()."""
import numpy as np

# numba-cuda 0.30 still names np.row_stack, which numpy 2.4 removed.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
from numba import cuda  # noqa: E402


@cuda.jit
def saxpy(y, x, a):
    i = cuda.grid(1)
    if i < y.size:
        y[i] = a * x[i] + y[i]


@cuda.jit
def clamp_count(y, lo, hi, counts):
    i = cuda.grid(1)
    if i < y.size:
        v = min(max(y[i], lo), hi)
        y[i] = v
        if v == hi:
            cuda.atomic.add(counts, 0, 1)


n = 1 << 14
x = cuda.to_device(np.arange(n, dtype=np.float32) * 0.5)
y = cuda.to_device(np.ones(n, dtype=np.float32))
counts = cuda.to_device(np.zeros(1, dtype=np.int32))
saxpy[n // 128, 128](y, x, 2.0)  # compile and load outside the range
clamp_count[n // 128, 128](y, 0.0, 1e9, counts)
cuda.synchronize()
cuda.profile_start()
saxpy[n // 128, 128](y, x, 2.0)
clamp_count[n // 128, 128](y, 0.0, 5000.0, counts)
cuda.synchronize()
cuda.profile_stop()
got = y.copy_to_host()
want = np.minimum(1.0 + 2.0 * 2.0 * np.arange(n, dtype=np.float32) * 0.5, 5000.0).astype(np.float32)
assert np.array_equal(got, want)
print(f"numba_kernels: ok {int(counts.copy_to_host()[0])}")
