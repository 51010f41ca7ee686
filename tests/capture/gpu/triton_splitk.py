"""A split-K matmul in Triton, for `recap capture`: each program computes a tile's partial product
over one slice of K and adds it into C with `tl.atomic_add`, so C's sums come in whatever order the
slices finish: the result varies in its last bits from run to run, as split-K GEMMs do. The kernel
is compiled in a warm-up pass; between torch.cuda.profiler.start() and stop(): C zeroed and the
split-K launch. It checks against torch.matmul and prints one line."""
import torch
import triton
import triton.language as tl


@triton.jit
def matmul_splitk(A, B, C, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    grid_n = tl.cdiv(N, BN)
    pm, pn = pid // grid_n, pid % grid_n
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = pid_k * BK + tl.arange(0, BK)
    a = A + rm[:, None] * sam + rk[None, :] * sak
    b = B + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK * SPLIT)):
        kk = k * BK * SPLIT + pid_k * BK + tl.arange(0, BK)
        x = tl.load(a, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        y = tl.load(b, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
        a += BK * SPLIT * sak
        b += BK * SPLIT * sbk
    c = C + rm[:, None] * scm + rn[None, :] * scn
    tl.atomic_add(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


torch.manual_seed(0)
M, N, K, SPLIT = 256, 256, 4096, 8
a = torch.randn(M, K, device="cuda", dtype=torch.float16)
b = torch.randn(K, N, device="cuda", dtype=torch.float16)
c = torch.zeros(M, N, device="cuda", dtype=torch.float32)


def run():
    c.zero_()
    grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64), SPLIT)
    matmul_splitk[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BM=64, BN=64, BK=32, SPLIT=SPLIT)


run()
torch.cuda.synchronize()
torch.cuda.profiler.start()
run()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
want = (a.float() @ b.float())
assert torch.allclose(c, want, rtol=1e-2, atol=1e-1), f"max err {(c - want).abs().max().item()}"
print(f"triton_splitk: ok {c.sum().item():.3f}")
