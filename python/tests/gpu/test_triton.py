"""A Triton kernel captured in process, saved, replayed on CUDA with new inputs from torch
tensors (device to device), and replayed on the CPU from its PTX."""

import numpy as np
import torch
import triton
import triton.language as tl

import recap


@triton.jit
def scaled_add(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + y, mask=mask)


def test_a_triton_kernel_replays_on_cuda_with_torch_inputs_and_on_the_cpu(tmp_path):
    n = 10_000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    grid = (triton.cdiv(n, 1024),)
    scaled_add[grid](x, y, out, n, 0.5, BLOCK=1024)  # compiled and loaded before the range
    torch.cuda.synchronize()
    path = tmp_path / "triton.recap"
    with recap.capture(path, inputs={"x": x, "y": y}, outputs={"out": out}) as cap:
        scaled_add[grid](x, y, out, n, 0.5, BLOCK=1024)
        torch.cuda.synchronize()
    print(cap.report)
    assert cap.report.kernels_without_ptx == [], cap.report

    a = recap.open(path)
    print(a, a.kernels)
    (k,) = a.kernels
    assert "scaled_add" in k.name

    x2 = torch.randn(n, device="cuda")
    y2 = torch.randn(n, device="cuda")
    out2 = torch.zeros(n, device="cuda")
    r = a.replayer("cuda").run(inputs={"x": x2, "y": y2}, outputs={"out": out2})
    torch.testing.assert_close(out2, 0.5 * x2 + y2)
    print("cuda:", r)

    # The same through DLPack alone (as JAX arrays and others offer it).
    class DLPackOnly:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, stream=None):
            return self.t.__dlpack__()

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    out3 = torch.zeros(n, device="cuda")
    a.replayer("cuda").run(inputs={"x": DLPackOnly(y2), "y": DLPackOnly(x2)}, outputs={"out": out3})
    torch.testing.assert_close(out3, 0.5 * y2 + x2)

    r = a.replay("cpu", check=True)
    print("cpu:", r, r.check)
    assert r.check.passed, r.check
    np.testing.assert_allclose(r.outputs["out"], out.cpu().numpy(), rtol=1e-6)
    r = a.replay("cpu", inputs={"x": x2.cpu().numpy(), "y": y2.cpu().numpy()})
    np.testing.assert_allclose(r.outputs["out"], (0.5 * x2 + y2).cpu().numpy(), rtol=1e-5, atol=1e-6)
