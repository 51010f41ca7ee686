"""PyTorch marking its phases with NVTX ranges, for `recap capture --range nvtx:NAME`: a warm-up
step, then one training step of a small MLP inside `torch.cuda.nvtx.range_push("train_step")`, then
an evaluation pass inside `nvtx.annotate("eval", domain="recap")` when the `nvtx` package is there.

  recap capture --range nvtx:train_step -o step.recap -- python torch_nvtx.py
  recap capture --range nvtx:train_step --record-effects -o step_fx.recap -- python torch_nvtx.py
  recap capture --range nvtx:eval@recap -o eval.recap -- python torch_nvtx.py

Every kernel here is PyTorch's or cuBLAS's machine code; with --record-effects the CPU replays
(`recap replay --check --engine jit`) go through from what each launch wrote."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64, device="cuda")
target = torch.randint(0, 10, (32,), device="cuda")


def train_step():
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.functional.cross_entropy(model(x), target)
    loss.backward()
    opt.step()
    return loss


torch.cuda.nvtx.range_push("warmup")
train_step()  # kernels loaded, cuBLAS handles and workspaces made outside the recorded range
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()

torch.cuda.nvtx.range_push("train_step")
loss = train_step()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()

evaluated = "skipped (no nvtx package)"
try:
    import nvtx
except ImportError:
    nvtx = None
if nvtx is not None:
    with nvtx.annotate("eval", domain="recap"):
        with torch.no_grad():
            evaluated = f"{model(x).argmax(dim=1).sum().item()}"
        torch.cuda.synchronize()

print(f"torch_nvtx: ok {loss.item():.5f} eval {evaluated}")
