"""A transformer block's forward and backward pass in bf16 for `recap capture`, between
torch.cuda.profiler.start() and stop(): multi-head causal self-attention through
`torch.nn.functional.scaled_dot_product_attention` (the flash-attention kernels on an H100/H200),
rotary-free, with a fused QKV projection, an output projection, RMSNorm and a SwiGLU MLP, then the
backward pass of a mean-square loss. The warm-up pass before the range loads the kernels. Every kernel
is PyTorch's or cuBLAS's machine code: the CPU replays from recorded effects. It checks the attention
against the unfused softmax(QK^T/sqrt(d))V in fp32 and prints one line."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16
batch, seq, heads, hd = 4, 128, 8, 64
d = heads * hd


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.norm2 = nn.RMSNorm(d)
        self.gate_up = nn.Linear(d, 2 * 2 * d, bias=False)
        self.down = nn.Linear(2 * d, d, bias=False)

    def attention(self, x):
        q, k, v = self.qkv(x).view(batch, seq, 3, heads, hd).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v)

    def forward(self, x):
        a, qkv = self.attention(self.norm1(x))
        x = x + self.proj(a.transpose(1, 2).reshape(batch, seq, d))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up), a, qkv


block = Block().to(dev, dt)
x = torch.randn(batch, seq, d, device=dev, dtype=dt, requires_grad=True)
target = torch.randn(batch, seq, d, device=dev, dtype=dt)


def step():
    block.zero_grad(set_to_none=False)
    x.grad = None
    y, a, qkv = block(x)
    loss = F.mse_loss(y.float(), target.float())
    loss.backward()
    return loss.detach(), a.detach(), [t.detach() for t in qkv]


step()  # warm up outside the range
torch.cuda.synchronize()
torch.cuda.profiler.start()
loss, a, (q, k, v) = step()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
scores = (q.float() @ k.float().transpose(-1, -2)) / hd**0.5
scores = scores.masked_fill(torch.ones(seq, seq, device=dev, dtype=torch.bool).triu(1), float("-inf"))
want = scores.softmax(-1) @ v.float()
err = ((a.float() - want).norm() / want.norm()).item()
assert err < 1e-2, err
assert torch.isfinite(x.grad).all().item()
print(f"torch_sdpa: ok loss {loss.item():.5f} attention rel err {err:.2e}")
