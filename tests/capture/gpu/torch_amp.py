"""One mixed-precision PyTorch training step for `recap capture`, between torch.cuda.profiler.start()
and stop(): a small convolutional classifier (Conv2d, BatchNorm2d, ReLU, max pooling, a linear head)
under `torch.autocast("cuda", dtype=torch.float16)`, the loss scaled by `torch.amp.GradScaler`
(unscale before clipping, the inf/NaN check, the scale's update) and SGD with momentum and Nesterov.
The warm-up step before the range loads the kernels and picks cuDNN's algorithms. Every kernel is
PyTorch's, cuDNN's or cuBLAS's machine code: the CPU replays from recorded effects. It checks the
scaler's state and the loss and prints one line."""
import torch
import torch.nn as nn

torch.manual_seed(0)
torch.backends.cudnn.benchmark = False
model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
    nn.Flatten(), nn.Linear(32, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
scaler = torch.amp.GradScaler("cuda", init_scale=1024.0)
images = torch.randn(16, 3, 32, 32, device="cuda")
labels = torch.randint(0, 10, (16,), device="cuda")


def train_step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
    scaler.step(opt)
    scaler.update()
    return loss.detach()


train_step()  # warm up outside the range
torch.cuda.synchronize()
torch.cuda.profiler.start()
loss = train_step()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
assert torch.isfinite(loss).item(), loss
# No overflow at this scale: the step is taken and the scale stays (growth only after 2000 steps).
assert scaler.get_scale() == 1024.0, scaler.get_scale()
print(f"torch_amp: ok loss {loss.item():.5f} scale {scaler.get_scale():.0f}")
