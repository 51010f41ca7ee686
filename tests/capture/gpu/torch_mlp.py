"""One training step of a small PyTorch MLP (eager: cuBLAS matmuls, PyTorch's own kernels) for
`recap capture`, between torch.cuda.profiler.start() and stop()."""
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


train_step()  # warm up: kernels loaded, cuBLAS handles and workspaces made outside the range
torch.cuda.synchronize()
torch.cuda.profiler.start()
loss = train_step()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print(f"torch_mlp: ok {loss.item():.5f}")
