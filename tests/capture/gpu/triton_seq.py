"""A sequence of Triton kernels for `recap capture`: compiled and warmed up before the range, then
run between torch.cuda.profiler.start() and stop(). Prints one line and checks against torch."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * scale + shift, mask=mask)


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


def step(x, y, out, scaled, sums, rows, cols):
    n = x.numel()
    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
    scale_shift_kernel[(triton.cdiv(n, 1024),)](out, scaled, n, 0.5, 1.0, BLOCK=1024)
    row_sum_kernel[(rows,)](scaled, sums, cols, BLOCK=triton.next_power_of_2(cols))


rows, cols = 64, 100
x = torch.arange(rows * cols, device="cuda", dtype=torch.float32) * 0.25
y = torch.ones(rows * cols, device="cuda", dtype=torch.float32)
out, scaled = torch.empty_like(x), torch.empty_like(x)
sums = torch.empty(rows, device="cuda", dtype=torch.float32)
step(x, y, out, scaled, sums, rows, cols)  # compile and load outside the range
torch.cuda.synchronize()
torch.cuda.profiler.start()
step(x, y, out, scaled, sums, rows, cols)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
want = ((x + y) * 0.5 + 1.0).reshape(rows, cols).sum(dim=1)
assert torch.allclose(sums, want, rtol=1e-5), (sums, want)
print(f"triton_seq: ok {sums.sum().item():.3f}")
