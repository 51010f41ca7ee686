"""`torch.compile(mode="reduce-overhead")` for `recap capture`: inductor's Triton kernels recorded
into a CUDA graph by PyTorch's CUDA graph trees. Called three times before the range (warm-up,
recording, first replay); between torch.cuda.profiler.start() and stop() the input is changed in place
with `x.mul_(0.5)` (an eager kernel outside the graph) and the compiled function runs once more, which
replays the graph (`cuGraphLaunch` of a graph instantiated before the range). It checks against eager
arithmetic and prints one line."""
import torch

torch.manual_seed(0)
w = torch.randn(128, 128, device="cuda") * 0.05
b = torch.randn(128, device="cuda")


def f(x):
    h = torch.relu(x @ w + b)
    return torch.softmax(h * 2.0, dim=-1) + h.sum(dim=-1, keepdim=True) * 1e-3


compiled = torch.compile(f, mode="reduce-overhead")
x = torch.randn(256, 128, device="cuda")
for _ in range(3):
    compiled(x)
torch.cuda.synchronize()
torch.cuda.profiler.start()
x.mul_(0.5)
y = compiled(x).clone()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
torch.testing.assert_close(y, f(x), rtol=1e-4, atol=1e-5)
print(f"torch_compile_graphs: ok {y.sum().item():.4f}")
