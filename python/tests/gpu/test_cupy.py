"""CuPy arrays as a replay's inputs and outputs (__cuda_array_interface__), and a CuPy raw
kernel captured in process."""

import os

import numpy as np
import pytest

# CuPy hands the driver cubins unless asked for PTX; with PTX the capture replays on the CPU too.
os.environ["CUPY_COMPILE_WITH_PTX"] = "1"
cupy = pytest.importorskip("cupy")

import recap

SOURCE = r"""
extern "C" __global__ void square(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}
"""


def test_a_cupy_kernel_is_captured_and_replays_with_cupy_arrays(tmp_path):
    cupy.cuda.set_allocator(None)  # each array its own allocation: what a binding names
    n = 4096
    kernel = cupy.RawKernel(SOURCE, "square")
    x = cupy.arange(n, dtype=cupy.float32)
    y = cupy.zeros(n, dtype=cupy.float32)
    kernel(((n + 255) // 256,), (256,), (x, y, cupy.int32(n)))
    cupy.cuda.runtime.deviceSynchronize()
    path = tmp_path / "cupy.recap"
    with recap.capture(path, inputs={"x": x}, outputs={"y": y}) as cap:
        kernel(((n + 255) // 256,), (256,), (x, y, cupy.int32(n)))
        cupy.cuda.runtime.deviceSynchronize()
    print(cap.report)
    a = recap.open(path)
    x2 = cupy.random.rand(n, dtype=cupy.float32)
    y2 = cupy.empty(n, dtype=cupy.float32)
    a.replayer("cuda").run(inputs={"x": x2}, outputs={"y": y2})
    np.testing.assert_allclose(cupy.asnumpy(y2), cupy.asnumpy(x2) ** 2, rtol=1e-6)
    assert a.replay("cpu", check=True).check.passed
