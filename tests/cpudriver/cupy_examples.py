"""CuPy examples on recap's CPU driver, each checked against numpy.

    CUPY_COMPILE_WITH_PTX=1 recap run --cpu -- python tests/cpudriver/cupy_examples.py [NAME...]

One line per example, PASS or FAIL with the exception's first line (then its traceback); the exit
status is 1 when any failed. With cupy-cuda13x 14.2 (or cupy-cuda12x) none runs on the CPU driver
yet: CuPy's runtime calls go through libcudart, whose first call asks the driver for private
export tables (`cuGetExportTable`) and fails with cudaErrorNotSupported without them
(docs/CPU-DRIVER.md, "CuPy"). The same script runs unchanged on a GPU.
"""
import sys, traceback
import numpy as np
import cupy as cp

def elementwise():
    k = cp.ElementwiseKernel('float32 x, float32 y', 'float32 z', 'z = x * 2 + y', 'axpy2')
    x = cp.arange(1000, dtype=cp.float32); y = cp.ones(1000, dtype=cp.float32)
    assert np.array_equal(cp.asnumpy(k(x, y)), np.arange(1000, dtype=np.float32) * 2 + 1)

def ufuncs():
    x = cp.linspace(0, 1, 4096, dtype=cp.float64)
    got = cp.asnumpy(cp.exp(x) + cp.sqrt(x))
    want = np.exp(np.linspace(0, 1, 4096)) + np.sqrt(np.linspace(0, 1, 4096))
    assert np.allclose(got, want, rtol=1e-15, atol=0), np.abs(got - want).max()

def reduction():
    k = cp.ReductionKernel('float32 x', 'float32 y', 'x * x', 'a + b', 'y = sqrt(a)', '0', 'l2norm')
    x = cp.arange(100000, dtype=cp.float32).reshape(100, 1000)
    got = cp.asnumpy(k(x, axis=1))
    want = np.sqrt((np.arange(100000, dtype=np.float64).reshape(100, 1000) ** 2).sum(axis=1))
    assert np.allclose(got, want, rtol=1e-5), np.abs(got / want - 1).max()

def sum_mean():
    x = cp.arange(1 << 20, dtype=cp.int64)
    assert int(x.sum()) == (1 << 20) * ((1 << 20) - 1) // 2
    assert float(cp.arange(10, dtype=cp.float32).mean()) == 4.5

def rawkernel():
    k = cp.RawKernel(r'''
extern "C" __global__ void mul(const float* a, const float* b, float* c, int n) {
    int i = blockDim.x * blockIdx.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i];
}''', 'mul')
    n = 10000
    a = cp.arange(n, dtype=cp.float32); b = cp.full(n, 3, dtype=cp.float32); c = cp.empty_like(a)
    k(((n + 255) // 256,), (256,), (a, b, c, cp.int32(n)))
    assert np.array_equal(cp.asnumpy(c), np.arange(n, dtype=np.float32) * 3)

def rawmodule():
    m = cp.RawModule(code=r'''
template<typename T> __global__ void fill(T* x, T v, int n) { int i = threadIdx.x + blockIdx.x * blockDim.x; if (i < n) x[i] = v; }
''', options=('-std=c++17',), name_expressions=['fill<double>'])
    k = m.get_function('fill<double>')
    x = cp.zeros(300, dtype=cp.float64)
    k((2,), (256,), (x, cp.float64(2.5), cp.int32(300)))
    assert float(x.sum()) == 750.0

def fuse():
    @cp.fuse()
    def f(x, y): return cp.sin(x) * y + 1
    x = cp.linspace(0, 3, 512, dtype=cp.float32); y = cp.ones(512, dtype=cp.float32)
    assert np.allclose(cp.asnumpy(f(x, y)), np.sin(np.linspace(0, 3, 512, dtype=np.float32)) + 1, atol=1e-6)

def sort_cumsum():
    x = cp.array(np.random.default_rng(1).permutation(5000).astype(np.int32))
    assert np.array_equal(cp.asnumpy(cp.sort(x)), np.arange(5000))
    assert int(cp.cumsum(cp.ones(3000, dtype=cp.int32))[-1]) == 3000

def matmul():
    a = cp.arange(64 * 32, dtype=cp.float32).reshape(64, 32) / 100; b = cp.ones((32, 16), dtype=cp.float32)
    got = cp.asnumpy(a @ b)
    assert np.allclose(got, cp.asnumpy(a).sum(axis=1, keepdims=True) * np.ones((1, 16)), rtol=1e-5)

def random():
    x = cp.random.default_rng(0).random(1000)
    assert 0 <= float(x.min()) and float(x.max()) < 1

examples = [elementwise, ufuncs, reduction, sum_mean, rawkernel, rawmodule, fuse, sort_cumsum, matmul, random]
only = sys.argv[1:]
failed = 0
for ex in examples:
    if only and ex.__name__ not in only: continue
    try:
        ex(); print(f"PASS {ex.__name__}", flush=True)
    except Exception as e:
        failed += 1
        print(f"FAIL {ex.__name__}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
        traceback.print_exc()
sys.exit(1 if failed else 0)
