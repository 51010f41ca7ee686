"""`torch.compile` (the default mode: inductor's generated Triton kernels) for `recap capture`: a small
MLP block with LayerNorm and GELU, compiled and run forward and backward twice before the range (the
second run takes the compiled graphs); between torch.cuda.profiler.start() and stop() one more forward
and backward pass. Inductor's kernels are Triton's, compiled into inductor's cache folders; the
matmuls stay cuBLAS's. It checks against the eager model and prints one line."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.down(nn.functional.gelu(self.up(self.norm(x))))
        return (x + h).square().mean(dim=-1)


net = Net().cuda()
compiled = torch.compile(net)
x = torch.randn(64, 256, device="cuda")


def step(fn):
    net.zero_grad(set_to_none=False)
    y = fn(x)
    y.sum().backward()
    return y.detach(), net.up.weight.grad.clone()


for _ in range(2):  # compile, then run the compiled graphs once, outside the range
    step(compiled)
torch.cuda.synchronize()
torch.cuda.profiler.start()
y, grad = step(compiled)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
y_eager, grad_eager = step(net)
torch.testing.assert_close(y, y_eager, rtol=1e-4, atol=1e-4)
torch.testing.assert_close(grad, grad_eager, rtol=1e-3, atol=1e-3)
print(f"torch_compile: ok {y.sum().item():.4f}")
