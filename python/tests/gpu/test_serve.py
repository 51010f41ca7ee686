"""The serving path on a GPU: a Triton kernel captured in process, then `Replayer.serve` with torch
tensors that change from call to call (the graph's memcpy nodes updated), zero-copy (its kernel
nodes updated), on a stream of the caller's, and with the result to the host."""

import numpy as np
import pytest
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


@pytest.fixture(scope="module")
def replayer(tmp_path_factory):
    n = 4096
    x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
    grid = (triton.cdiv(n, 1024),)
    scaled_add[grid](x, y, out, n, 0.5, BLOCK=1024)
    torch.cuda.synchronize()
    path = tmp_path_factory.mktemp("serve") / "scaled_add.recap"
    with recap.capture(path, inputs={"x": x, "y": y}, outputs={"out": out}):
        scaled_add[grid](x, y, out, n, 0.5, BLOCK=1024)
        torch.cuda.synchronize()
    return recap.open(path).replayer("cuda"), n


def test_serving_follows_new_tensors_every_call(replayer):
    rep, n = replayer
    xs = [torch.randn(n, device="cuda") for _ in range(3)]
    ys = [torch.randn(n, device="cuda") for _ in range(3)]
    outs = [torch.zeros(n, device="cuda") for _ in range(3)]
    for i in [0, 1, 2, 1, 0]:
        got = rep.serve({"x": xs[i], "y": ys[i]}, {"out": outs[i]})
        assert got["out"] is outs[i]
        torch.testing.assert_close(outs[i], 0.5 * xs[i] + ys[i])
    host = rep.serve({"x": xs[2], "y": ys[0]})["out"]
    assert isinstance(host, np.ndarray)
    np.testing.assert_allclose(host, (0.5 * xs[2] + ys[0]).cpu().numpy(), rtol=1e-6)


def test_zero_copy_on_the_callers_stream(replayer):
    rep, n = replayer
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            out = torch.empty(n, device="cuda")
            rep.serve({"x": x, "y": y}, {"out": out}, zero_copy=True)
            torch.testing.assert_close(out, 0.5 * x + y)
    with pytest.raises(recap.RecapError, match="input x"):
        rep.serve({"x": torch.randn(n + 1, device="cuda")}, zero_copy=True)
