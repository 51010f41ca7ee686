"""A PyTorch MLP step captured in process: its matmuls run in cuBLAS, whose kernels ship machine
code only (no PTX), so the archive replays on a GPU of the capture's architecture and the report
names those kernels; on the CPU the replay refuses them by name."""

import numpy as np
import pytest
import torch

import recap


@pytest.fixture
def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128), torch.nn.Tanh()
    ).cuda()
    model.eval()
    return model


def test_an_mlp_step_is_captured_and_replays_on_the_gpu_with_new_inputs(tmp_path, mlp):
    x = torch.randn(64, 256, device="cuda")
    with torch.no_grad():
        mlp(x)  # cuBLAS's handle and workspace, and the kernels' modules, before the range
    torch.cuda.synchronize()
    path = tmp_path / "mlp.recap"
    with torch.no_grad(), recap.capture(path, inputs={"x": x}) as cap:
        y = mlp(x)
        torch.cuda.synchronize()
        cap.output("y", y)
    report = cap.report
    print(report)
    assert report.archive == str(path), report
    assert report.ops.get("launch", 0) >= 4, report.ops
    print("kernels without PTX (library machine code):", report.kernels_without_ptx)

    a = recap.open(path)
    print(a)
    assert {"x", "y"} <= {b.name for b in a.bindings}
    r = a.replay("cuda", check=True)
    print(r, r.check)
    # y's region is judged against the captured result (other regions, cuBLAS's workspace among
    # them, are printed above).
    y_region = next(b.region for b in a.bindings if b.name == "y")
    assert [c.passed for c in r.check.regions if c.name == y_region] == [True], r.check
    np.testing.assert_allclose(r.outputs["y"], y.cpu().numpy(), rtol=1e-5, atol=1e-5)

    # The serving path: one instantiated graph, new inputs and outputs device to device.
    rep = a.replayer("cuda")
    for _ in range(3):
        x2 = torch.randn(64, 256, device="cuda")
        out = torch.empty(64, 128, device="cuda")
        res = rep.run(inputs={"x": x2}, outputs={"y": out})
        assert res.outputs["y"] is out
        with torch.no_grad():
            want = mlp(x2)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
    print("replayer times (ms):", res.times_ms)

    if report.kernels_without_ptx:
        with pytest.raises(recap.RecapError, match="no PTX"):
            a.replay("cpu")
    else:
        assert a.replay("cpu", check=True).check.passed
