"""Replays on the CPU from Python: outputs, times, the check, new inputs, and errors."""

import _thread
import signal
import threading

import numpy as np
import pytest

import recap
from conftest import N


def test_a_replay_returns_outputs_times_and_the_check(axpy_archive):
    path, x, y = axpy_archive
    r = recap.open(path).replay("cpu", iterations=3, check=True)
    assert set(r.outputs) == {"y"}
    out = r.outputs["y"]
    assert out.dtype == np.float32 and out.shape == (N,)
    np.testing.assert_allclose(out, 2.0 * x + y, rtol=1e-6)
    assert len(r.iterations) == 3 and all(t > 0 for t in r.times_ms)
    # Every iteration starts from the initial state, so each computes the same thing once.
    assert all(i.launches == 1 for i in r.iterations)
    ((op, kind, name),) = {(t.op, t.kind, t.name) for i in r.iterations for t in i.op_times}
    assert (op, kind, name) == (0, "launch", "axpy")
    assert r.check is not None and r.check.passed
    assert [c.name for c in r.check.regions] == ["y"]
    assert r.check.regions[0].line.startswith("PASS y")
    assert "check=PASS" in repr(r)


def test_new_inputs_change_the_outputs_and_fail_the_check(axpy_archive):
    path, x, y = axpy_archive
    x2 = np.arange(N, dtype=np.float32)
    r = recap.open(path).replay("cpu", inputs={"x": x2}, check=True)
    np.testing.assert_allclose(r.outputs["y"], 2.0 * x2 + y, rtol=1e-6)
    assert not r.check.passed
    assert r.check.regions[0].mismatches > 0
    assert "FAIL" in repr(r.check)


def test_a_replayer_serves_many_calls_without_reloading(axpy_archive):
    path, x, y = axpy_archive
    rep = recap.open(path).replayer("cpu", engine="interp")
    assert rep.device == "cpu"
    for k in range(4):
        xs = np.full(N, float(k), dtype=np.float32)
        ys = np.linspace(0, 1, N, dtype=np.float32)
        out = rep.run({"x": xs, "y": ys}).outputs["y"]
        np.testing.assert_allclose(out, 2.0 * xs + ys, rtol=1e-6)


def test_every_engine_gives_the_same_bytes(axpy_archive):
    a = recap.open(axpy_archive[0])
    outs = [a.replay("cpu", engine=e).outputs["y"] for e in ("jit", "jit-scalar", "interp")]
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()


def test_inputs_are_checked_against_the_region_before_anything_runs(axpy_archive):
    a = recap.open(axpy_archive[0])
    with pytest.raises(recap.RecapError, match="input x.*f4|input x.*float|x"):
        a.replay("cpu", inputs={"x": np.zeros(N, dtype=np.float64)})
    with pytest.raises(recap.RecapError, match="input x"):
        a.replay("cpu", inputs={"x": np.zeros(N + 1, dtype=np.float32)})
    with pytest.raises(recap.RecapError, match="nope"):
        a.replay("cpu", inputs={"nope": np.zeros(3)})
    # A flat list is converted to the region's dtype.
    r = a.replay("cpu", inputs={"x": [1.0] * N, "y": [0.0] * N})
    np.testing.assert_array_equal(r.outputs["y"], np.full(N, 2.0, dtype=np.float32))


def test_huge_iteration_counts_are_refused_before_anything_is_allocated(axpy_archive):
    a = recap.open(axpy_archive[0])
    # Sized up front, 10**9 iterations asked for tens of gigabytes and aborted the interpreter.
    for n in (10**9, 100_001, 2**40):
        with pytest.raises(ValueError, match=f"iterations={n} is more than the 100000 one call runs"):
            a.replay("cpu", iterations=n)
    r = a.replayer("cpu")
    with pytest.raises(ValueError, match="at least 1"):
        r.run(iterations=-3)
    # The replayer still serves a call after the refusals.
    assert len(r.run(iterations=2).iterations) == 2


def test_a_long_run_keeps_per_op_times_for_the_sampled_iterations_only(axpy_archive):
    r = recap.open(axpy_archive[0]).replay("cpu", iterations=250, check=True)
    assert r.check.passed and len(r.iterations) == 250
    assert all(i.launches == 1 and i.time_ms > 0 for i in r.iterations)
    sampled = [k for k, i in enumerate(r.iterations) if i.op_times]
    assert sampled == list(range(100)) + [100, 200]


def test_devices_are_checked(axpy_archive):
    a = recap.open(axpy_archive[0])
    with pytest.raises(ValueError, match="unknown device"):
        a.replayer("tpu")
    with pytest.raises(ValueError, match="engine"):
        a.replayer("cpu", engine="fast")
    with pytest.raises(ValueError, match="iterations"):
        a.replay("cpu", iterations=0)


def test_cuda_without_a_gpu_is_a_clear_error(axpy_archive):
    try:
        rep = recap.open(axpy_archive[0]).replayer("cuda")
    except recap.RecapError as e:
        assert "cuda" in str(e).lower()
    else:  # a machine with a GPU: the same replay works there
        np.testing.assert_allclose(rep.run().outputs["y"], recap.open(axpy_archive[0]).expected("y"), rtol=1e-6)


def test_a_cpu_replay_refuses_arrays_in_gpu_memory(axpy_archive):
    class FakeGpuArray:
        __cuda_array_interface__ = {"shape": (N,), "typestr": "<f4", "data": (1 << 40, False), "version": 3}

    with pytest.raises(recap.RecapError, match="GPU memory"):
        recap.open(axpy_archive[0]).replay("cpu", inputs={"x": FakeGpuArray()})


def test_the_instruction_budget_stops_a_cpu_replay(axpy_archive):
    with pytest.raises(recap.RecapError, match="budget|instructions"):
        recap.open(axpy_archive[0]).replay("cpu", budget=10)


def test_ctrl_c_cancels_a_running_replay(tmp_path, basics_ptx):
    # A device-side loop that never ends: count_up leaves the flag set while counter < limit.
    b = recap.Builder("cpu")
    counter = b.zeros("counter", 1, np.uint32)
    flag = b.array("flag", np.ones(1, dtype=np.uint32))
    b.load_ptx("basics", basics_ptx)
    b.while_nonzero(flag, lambda b: b.launch("count_up", 1, 1, [counter, flag, np.uint32(0xFFFFFFFF)]))
    path = tmp_path / "forever.recap"
    b.save(path, inputs=[], outputs=[("counter", counter)], expected=False)
    rep = recap.open(path).replayer("cpu", engine="interp")
    # A process started in the background by a non-interactive shell inherits SIGINT ignored, and
    # Python then installs no handler of its own, which makes interrupt_main do nothing: install
    # Python's default one for the test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            rep.run()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
