"""One eager PyTorch training step with AdamW for `recap capture`, between torch.cuda.profiler.start()
and stop(): a small pre-norm residual MLP (LayerNorm, GELU, dropout) on a token batch, cross-entropy
with label smoothing, gradient clipping by total norm, and AdamW (PyTorch's default multi-tensor
`foreach` kernels) with weight decay. The warm-up step before the range loads the kernels and creates
the optimizer state. Every kernel is PyTorch's or cuBLAS's machine code: the CPU replays from
recorded effects. It checks that the step lowered the loss on the batch and prints one line."""
import torch
import torch.nn as nn

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(self.down(nn.functional.gelu(self.up(self.norm(x)))))


vocab, d, classes = 1000, 128, 16
model = nn.Sequential(nn.Embedding(vocab, d), Block(d, 4 * d), Block(d, 4 * d), nn.LayerNorm(d)).cuda()
head = nn.Linear(d, classes).cuda()
params = list(model.parameters()) + list(head.parameters())
opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)
tokens = torch.randint(0, vocab, (32, 24), device="cuda")
labels = torch.randint(0, classes, (32,), device="cuda")


def loss_fn():
    return nn.functional.cross_entropy(head(model(tokens).mean(dim=1)), labels, label_smoothing=0.1)


def train_step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
    opt.step()
    return loss.detach()


train_step()  # warm up outside the range: kernels loaded, cuBLAS workspace and AdamW state made
torch.cuda.synchronize()
torch.cuda.profiler.start()
loss = train_step()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
model.eval()
with torch.no_grad():
    after = loss_fn().item()
assert after < loss.item(), (loss.item(), after)
print(f"torch_adamw: ok loss {loss.item():.5f} -> {after:.5f}")
