"""The Python serving path against PyTorch's own, on an H100/H200 machine (run by hand).

Two programs, each a step a server would run per request, captured with ``recap.capture``:
  gelu   one Triton kernel, y = gelu(x + b) over 256x384 float32 (b a captured constant)
  mlp    a 10-layer torch MLP (Linear 384->384 and ReLU, batch 256): 20 kernels, cuBLAS's among them

and per program, in ONE process, the median time per call of:
  eager          the program itself, its kernels launched one by one
  torch graph    ``static_x.copy_(x); graph.replay(); out.copy_(static_y)`` (a torch.cuda.CUDAGraph)
  recap serve    ``replayer.serve({"x": x}, {"y": out})``: one graph launch, copies inside it
  recap zero     the same with ``zero_copy=True``: the kernels read x and write out in place
  recap run      ``replayer.run(...)``, the measuring path (restores, times, waits), for reference
and with the result to the host (numpy): torch graph + ``static_y.cpu().numpy()`` against serve
with no output array (page-locked buffer, one wait).

Each call alternates between two input tensors (and two output tensors), so the serving path's
per-call pointer updates are part of what is timed. A timing is a batch of calls ended by
``torch.cuda.synchronize()``, divided by the batch size; the median over batches is reported.
Every variant's result is checked against eager before it is timed.

The captures run in a child process (the interposer stays in front of the driver for the rest of
a process, and would otherwise sit under every variant timed here); both processes build the same
weights from the same seed.

  python bench/python/serving.py [--out results.json] [--batches 41] [--calls 100]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEED = 1234
M, N = 256, 384
LAYERS = 10


def build(torch, triton, tl):
    """The two programs, their inputs and outputs, from SEED."""

    @triton.jit
    def gelu_bias(x_ptr, b_ptr, y_ptr, n_cols, total, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < total
        x = tl.load(x_ptr + offs, mask=mask) + tl.load(b_ptr + offs % n_cols, mask=mask)
        y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
        tl.store(y_ptr + offs, y, mask=mask)

    torch.manual_seed(SEED)
    b = torch.randn(N, device="cuda")
    mlp = torch.nn.Sequential(*[m for _ in range(LAYERS) for m in (torch.nn.Linear(N, N), torch.nn.ReLU())]).cuda()
    mlp.eval()

    def gelu(x, y):
        gelu_bias[(triton.cdiv(M * N, 1024),)](x, b, y, N, M * N, BLOCK=1024)

    return {"gelu": gelu, "mlp": mlp}, b


def capture(out_dir):
    import recap

    recap.interpose()
    import torch
    import triton
    import triton.language as tl

    programs, _ = build(torch, triton, tl)
    x = torch.randn(M, N, device="cuda")
    y = torch.empty(M, N, device="cuda")
    programs["gelu"](x, y)
    with torch.no_grad():
        programs["mlp"](x)
    torch.cuda.synchronize()
    with recap.capture(Path(out_dir) / "gelu.recap", inputs={"x": x}, outputs={"y": y}) as cap:
        programs["gelu"](x, y)
        torch.cuda.synchronize()
    print("gelu:", cap.report.ops, "without PTX:", cap.report.kernels_without_ptx, flush=True)
    with torch.no_grad(), recap.capture(Path(out_dir) / "mlp.recap", inputs={"x": x}) as cap:
        out = programs["mlp"](x)
        torch.cuda.synchronize()
        cap.output("y", out)
    print("mlp:", cap.report.ops, "without PTX:", len(cap.report.kernels_without_ptx), flush=True)


def median_us(torch, fn, batches, calls):
    for _ in range(max(3, batches // 4)):
        fn()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per_call)


def measure(args, tmp):
    import torch
    import triton
    import triton.language as tl

    import recap

    programs, _ = build(torch, triton, tl)
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "programs": {}}
    for name in ("gelu", "mlp"):
        prog, model = programs["gelu"], programs["mlp"]

        def eager_fresh(x):
            if name == "gelu":
                y = torch.empty(M, N, device="cuda")
                prog(x, y)
                return y
            with torch.no_grad():
                return model(x)

        xs = [torch.randn(M, N, device="cuda") for _ in range(2)]
        outs = [torch.empty(M, N, device="cuda") for _ in range(2)]
        wants = [eager_fresh(x) for x in xs]
        tol = dict(rtol=1e-5, atol=1e-5) if name == "gelu" else dict(rtol=1e-3, atol=1e-3)
        row = {}

        # torch's CUDA graph with the same copies.
        static_x = torch.randn(M, N, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                static_y = eager_fresh(static_x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = eager_fresh(static_x)

        rep = recap.open(tmp / f"{name}.recap").replayer("cuda")
        k = [0]

        def nxt():
            k[0] ^= 1
            return k[0]

        def eager():
            i = nxt()
            if name == "gelu":
                prog(xs[i], outs[i])
            else:
                with torch.no_grad():
                    model(xs[i])

        def torch_graph():
            i = nxt()
            static_x.copy_(xs[i])
            graph.replay()
            outs[i].copy_(static_y)

        def serve():
            i = nxt()
            rep.serve({"x": xs[i]}, {"y": outs[i]})

        def zero():
            i = nxt()
            rep.serve({"x": xs[i]}, {"y": outs[i]}, zero_copy=True)

        def run():
            i = nxt()
            rep.run(inputs={"x": xs[i]}, outputs={"y": outs[i]})

        def torch_graph_host():
            i = nxt()
            static_x.copy_(xs[i])
            graph.replay()
            return static_y.cpu().numpy()

        def serve_host():
            i = nxt()
            return rep.serve({"x": xs[i]})["y"]

        variants = [
            ("eager", eager),
            ("torch graph", torch_graph),
            ("recap serve", serve),
            ("recap zero", zero),
            ("recap run", run),
            ("torch graph to numpy", torch_graph_host),
            ("recap serve to numpy", serve_host),
        ]
        for label, fn in variants:
            try:
                # Checked first: both inputs, each into its own output.
                for i in range(2):
                    outs[i].zero_()
                    k[0] = i ^ 1
                    got = fn()
                    torch.cuda.synchronize()
                    if label.endswith("numpy"):
                        got = torch.from_numpy(got).cuda()
                    elif label == "eager" and name == "mlp":
                        got = wants[i]
                    else:
                        got = outs[i]
                    torch.testing.assert_close(got, wants[i], **tol)
                row[label] = round(median_us(torch, fn, args.batches, args.calls), 2)
            except Exception as e:  # noqa: BLE001 - one variant's failure is a result to report
                row[label] = f"failed: {type(e).__name__}: {e}"
            print(f"{name:5} {label:22} {row[label]}", flush=True)
        g = row.get("torch graph")
        for label in ("recap serve", "recap zero"):
            if isinstance(g, float) and isinstance(row.get(label), float):
                row[f"{label} / torch graph"] = round(row[label] / g, 3)
        if isinstance(row.get("torch graph to numpy"), float) and isinstance(row.get("recap serve to numpy"), float):
            row["recap serve to numpy / torch graph to numpy"] = round(
                row["recap serve to numpy"] / row["torch graph to numpy"], 3
            )
        results["programs"][name] = row
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--batches", type=int, default=41)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--capture-into", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.capture_into:
        capture(args.capture_into)
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, __file__, "--capture-into", tmp], check=True)
        results = measure(args, Path(tmp))
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
