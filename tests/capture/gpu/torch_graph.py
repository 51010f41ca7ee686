"""A PyTorch CUDA graph (`torch.cuda.graph`) for `recap capture`: a small MLP's forward pass
captured once (outside the range), then, between torch.cuda.profiler.start() and stop(), new
input copied into the graph's static input and the graph replayed twice. It checks the graph's
output against the eager model and prints one line."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda().eval()
static_in = torch.randn(32, 64, device="cuda")

with torch.no_grad():
    # Warm up on a side stream, as torch.cuda.graph asks: kernels loaded, cuBLAS handles made.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_in)

    inputs = [torch.randn(32, 64, device="cuda") for _ in range(2)]
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    outs = []
    for x in inputs:
        static_in.copy_(x)
        graph.replay()
        outs.append(static_out.clone())
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()

    worst = max((o - model(x)).abs().max().item() for o, x in zip(outs, inputs))
    assert worst < 1e-4, f"the graph's output differs from the eager model's by {worst}"
    print(f"torch_graph: ok {sum(o.sum().item() for o in outs):.4f}")
