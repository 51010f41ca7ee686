"""A jitted JAX training step with `jax.grad` for `recap capture`: a two-layer MLP regression, its
loss's gradient and an SGD update in one `jax.jit` function (XLA fuses the elementwise work and calls
cuBLAS for the matmuls, and may run the step as a CUDA graph). Compiled before the range; the range is
marked with cuProfilerStart/Stop through ctypes (JAX has no profiler-range call of its own). It checks
that the step lowered the loss and prints one line."""
import ctypes
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

libcuda = ctypes.CDLL("libcuda.so.1")


def loss(params, x, y):
    w1, b1, w2, b2 = params
    h = jax.nn.gelu(x @ w1 + b1)
    return jnp.mean((h @ w2 + b2 - y) ** 2)


@jax.jit
def train_step(params, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    return [p - 0.05 * g for p, g in zip(params, grads)], value


k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)
params = [
    jax.random.normal(k1, (32, 64)) * 0.2,
    jnp.zeros(64),
    jax.random.normal(k2, (64, 8)) * 0.2,
    jnp.zeros(8),
]
x = jax.random.normal(k3, (128, 32))
y = jnp.sin(x[:, :8]) + 0.1 * jax.random.normal(k4, (128, 8))
warm, _ = train_step(params, x, y)  # compile outside the range
jax.block_until_ready(warm)
libcuda.cuProfilerStart()
new_params, before = train_step(params, x, y)
jax.block_until_ready(new_params)
libcuda.cuProfilerStop()
after = loss(new_params, x, y)
assert float(after) < float(before), (float(before), float(after))
print(f"jax_grad: ok loss {float(before):.5f} -> {float(after):.5f}")
