"""A jitted JAX function for `recap capture`; the range is marked with cuProfilerStart/Stop
through ctypes (JAX has no profiler-range call of its own)."""
import ctypes
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax
import jax.numpy as jnp

libcuda = ctypes.CDLL("libcuda.so.1")


@jax.jit
def f(x, w):
    return jnp.tanh(x @ w).sum(axis=1) * 0.5 + 1.0


x = jnp.arange(64 * 32, dtype=jnp.float32).reshape(64, 32) / 1000.0
w = jnp.ones((32, 16), dtype=jnp.float32) * 0.01
f(x, w).block_until_ready()  # compile outside the range
libcuda.cuProfilerStart()
y = f(x, w).block_until_ready()
libcuda.cuProfilerStop()
print(f"jax_jit: ok {float(y.sum()):.4f}")
