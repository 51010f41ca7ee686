"""Triton layer norm, forward and backward, as Triton's fused layer-norm tutorial writes it, for `recap
capture`: the backward kernel accumulates each row group's partial dW and dB under a spin lock
(`tl.atomic_cas` on a lock word, `tl.atomic_xchg` to release, a count word that says whether the group
was written yet), and the kernel that reduces those partial sums to the final dW and dB is chosen by
`triton.autotune` among four block shapes. Autotuning, compilation and loading happen in the warm-up
pass before the range; between torch.cuda.profiler.start() and stop(): the forward pass, the zeroed
lock buffer, the backward kernel and the autotuned reduction. It checks against torch's layer norm and
prints one line."""
import torch
import triton
import triton.language as tl


@triton.jit
def ln_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    w = tl.load(W + cols, mask=mask)
    b = tl.load(B + cols, mask=mask)
    tl.store(Y + cols, xc * rstd * w + b, mask=mask)


@triton.jit
def ln_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP_SIZE_M: tl.constexpr,
                    BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    # Rows share GROUP_SIZE_M partial sums; each group's lock word, then its count word.
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = dy.to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(Lock, 0)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32}, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 64}, num_warps=4),
        triton.Config({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 32}, num_warps=8),
        triton.Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 128}, num_warps=4),
    ],
    key=["M", "N"],
)
@triton.jit
def ln_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.0)
        db += tl.load(DB + offs, mask=mask, other=0.0)
    tl.store(FINAL_DW + cols, tl.sum(dw, axis=0), mask=cols < N)
    tl.store(FINAL_DB + cols, tl.sum(db, axis=0), mask=cols < N)


def layer_norm_fwd_bwd(x, w, b, dy, eps=1e-5):
    M, N = x.shape
    BLOCK = triton.next_power_of_2(N)
    num_warps = min(max(BLOCK // 256, 1), 8)
    y = torch.empty_like(x)
    mean = torch.empty(M, device=x.device, dtype=torch.float32)
    rstd = torch.empty(M, device=x.device, dtype=torch.float32)
    ln_fwd[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, eps, BLOCK_SIZE=BLOCK, num_warps=num_warps)
    GROUP_SIZE_M = 32
    locks = torch.zeros(2 * GROUP_SIZE_M, dtype=torch.int32, device=x.device)
    partial_dw = torch.zeros((GROUP_SIZE_M, N), dtype=x.dtype, device=x.device)
    partial_db = torch.zeros((GROUP_SIZE_M, N), dtype=x.dtype, device=x.device)
    dx = torch.empty_like(dy)
    dw = torch.empty(N, dtype=w.dtype, device=w.device)
    db = torch.empty(N, dtype=w.dtype, device=w.device)
    ln_bwd_dx_fused[(M,)](dx, dy, partial_dw, partial_db, x, w, mean, rstd, locks, x.stride(0), N,
                          GROUP_SIZE_M=GROUP_SIZE_M, BLOCK_SIZE_N=BLOCK, num_warps=num_warps)
    ln_bwd_dwdb[lambda meta: (triton.cdiv(N, meta["BLOCK_SIZE_N"]),)](partial_dw, partial_db, dw, db,
                                                                        min(GROUP_SIZE_M, M), N)
    return y, dx, dw, db


torch.manual_seed(0)
M, N = 256, 384
x = torch.randn(M, N, device="cuda")
w = torch.rand(N, device="cuda") + 0.5
b = torch.randn(N, device="cuda") * 0.1
dy = torch.randn(M, N, device="cuda") * 0.1
layer_norm_fwd_bwd(x, w, b, dy)  # autotune, compile and load outside the range
torch.cuda.synchronize()
torch.cuda.profiler.start()
y, dx, dw, db = layer_norm_fwd_bwd(x, w, b, dy)
torch.cuda.synchronize()
torch.cuda.profiler.stop()

xr, wr, br = (t.clone().requires_grad_(True) for t in (x, w, b))
yr = torch.nn.functional.layer_norm(xr, (N,), wr, br, eps=1e-5)
yr.backward(dy)
for got, want, name in ((y, yr, "y"), (dx, xr.grad, "dx"), (dw, wr.grad, "dw"), (db, br.grad, "db")):
    torch.testing.assert_close(got, want.detach(), rtol=1e-4, atol=1e-4, msg=name)
print(f"triton_layernorm: ok dw {dw.sum().item():.4f} db {db.sum().item():.4f}")
