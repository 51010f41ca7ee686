"""A two-GPU PyTorch step for `recap capture` (pipeline style, two H200s of one host): between
torch.cuda.profiler.start() and stop() the first stage (a Linear layer and GELU) runs on cuda:0, its
activations are copied to cuda:1 (`.to("cuda:1", non_blocking=True)`, a peer copy), and the second
stage (a Linear layer, a softmax and a row sum) runs there. The warm-up pass before the range loads
every kernel on both GPUs and enables peer access. It checks against the same stages on one GPU and
prints one line. Exits with a message when fewer than two GPUs are visible."""
import sys

import torch

if torch.cuda.device_count() < 2:
    sys.exit("torch_two_gpu: needs two GPUs")
torch.manual_seed(0)
stage0 = torch.nn.Linear(256, 512).to("cuda:0")
stage1 = torch.nn.Linear(512, 64).to("cuda:1")
x = torch.randn(128, 256, device="cuda:0")


def step():
    with torch.no_grad():
        h = torch.nn.functional.gelu(stage0(x))
        h1 = h.to("cuda:1", non_blocking=True)
        p = torch.softmax(stage1(h1), dim=-1)
        return p, p.sum(dim=0)


step()  # warm up on both GPUs outside the range
torch.cuda.synchronize("cuda:0")
torch.cuda.synchronize("cuda:1")
torch.cuda.profiler.start()
p, col = step()
torch.cuda.synchronize("cuda:0")
torch.cuda.synchronize("cuda:1")
torch.cuda.profiler.stop()
with torch.no_grad():
    want = torch.softmax(stage1(torch.nn.functional.gelu(stage0.to("cuda:1")(x.to("cuda:1")))), dim=-1)
torch.testing.assert_close(p, want, rtol=1e-4, atol=1e-5)
print(f"torch_two_gpu: ok {col.sum().item():.3f}")
