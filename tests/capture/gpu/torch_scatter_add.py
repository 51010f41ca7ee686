"""Float atomics as PyTorch uses them, for `recap capture`: a graph-network style aggregation
(`index_add_` of edge messages into their destination nodes), a histogram of weights
(`scatter_add_`) and an embedding-bag backward (`EmbeddingBag` with mode="sum": its weight gradient
is accumulated with atomics). All three sum floats in the order the GPU's blocks happen to run, so
two plain runs of this program differ in the last bits. Warm-up before the range; between
torch.cuda.profiler.start() and stop() one pass of the three. It checks against float64 sums on the
host and prints one line."""
import torch

torch.manual_seed(0)
nodes, edges, dim = 4096, 65536, 64
src = torch.randint(0, nodes, (edges,), device="cuda")
dst = torch.randint(0, nodes, (edges,), device="cuda")
feat = torch.randn(nodes, dim, device="cuda")
bins = torch.randint(0, 256, (1 << 20,), device="cuda")
weights = torch.rand(1 << 20, device="cuda")
bag = torch.nn.EmbeddingBag(10000, 32, mode="sum").cuda()
tokens = torch.randint(0, 10000, (8192,), device="cuda")
offsets = torch.arange(0, 8192, 16, device="cuda")


def step():
    agg = torch.zeros(nodes, dim, device="cuda").index_add_(0, dst, feat[src])
    hist = torch.zeros(256, device="cuda").scatter_add_(0, bins, weights)
    bag.zero_grad(set_to_none=False)
    bag(tokens, offsets).square().sum().backward()
    return agg, hist, bag.weight.grad


step()
torch.cuda.synchronize()
torch.cuda.profiler.start()
agg, hist, grad = step()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
want_agg = torch.zeros(nodes, dim, dtype=torch.float64).index_add_(0, dst.cpu(), feat.cpu().double()[src.cpu()])
want_hist = torch.zeros(256, dtype=torch.float64).scatter_add_(0, bins.cpu(), weights.cpu().double())
assert torch.allclose(agg.cpu().double(), want_agg, rtol=1e-4, atol=1e-4), "index_add_ is off"
assert torch.allclose(hist.cpu().double(), want_hist, rtol=1e-4), "scatter_add_ is off"
print(f"torch_scatter_add: ok {hist.sum().item():.3f} {grad.abs().sum().item():.3f}")
