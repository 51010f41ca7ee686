"""A Triton kernel that moves its tiles with the Hopper tensor memory accelerator (TMA), for
`recap capture`: host-side tensor descriptors (`TensorDescriptor`, which Triton's launcher encodes
with cuTensorMapEncodeTiled and passes as 128-byte kernel parameters), launched twice between
torch.cuda.profiler.start() and stop() on two different tensors. It checks its results and prints
one line."""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def scale_tiles(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    tile = in_desc.load([m, n])
    out_desc.store([m, n], tile * 2.0 + 1.0)


def run(x, out, BM=64, BN=64):
    in_desc = TensorDescriptor.from_tensor(x, block_shape=[BM, BN])
    out_desc = TensorDescriptor.from_tensor(out, block_shape=[BM, BN])
    grid = (x.shape[0] // BM, x.shape[1] // BN)
    scale_tiles[grid](in_desc, out_desc, BM=BM, BN=BN)


torch.manual_seed(0)
a = torch.randn(256, 256, device="cuda")
b = torch.randn(128, 512, device="cuda")
out_a = torch.empty_like(a)
out_b = torch.empty_like(b)
run(a, out_a)  # compiled and loaded outside the range
torch.cuda.synchronize()
torch.cuda.profiler.start()
run(a, out_a)
run(b, out_b)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
for x, out in ((a, out_a), (b, out_b)):
    assert torch.equal(out, x * 2.0 + 1.0), "the TMA kernel's output is wrong"
print(f"triton_tma: ok {out_a.sum().item() + out_b.sum().item():.4f}")
