"""The serving path (`Replayer.serve`) of a CUDA replayer without a GPU: recap's CPU driver stands
behind the driver API (RECAP_TEST_CPUDRIVER, which `cargo xtask test` sets), so the graph the
serving path builds (memcpy nodes around the archive's nodes, their exec updates, kernel parameter
updates for zero_copy) really runs. Each test is a fresh process (serve_cpudriver.py) whose
library path finds that driver as `libcuda.so` and `libcuda.so.1`."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import recap
from conftest import N, build_axpy

HERE = Path(__file__).resolve().parent
CPUDRIVER = os.environ.get("RECAP_TEST_CPUDRIVER")

needs_driver = pytest.mark.skipif(
    not CPUDRIVER, reason="set RECAP_TEST_CPUDRIVER to librecap_cpudriver.so (cargo build -p recap-cpudriver)"
)


@pytest.fixture
def served(tmp_path, basics_ptx):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    archive = build_axpy(tmp_path / "axpy.recap", basics_ptx, x, y)
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libcuda.so", "libcuda.so.1"):
        (lib / name).symlink_to(CPUDRIVER)

    def run(mode):
        env = dict(os.environ, LD_LIBRARY_PATH=str(lib))
        out = subprocess.run(
            [sys.executable, str(HERE / "serve_cpudriver.py"), str(archive), mode],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout + out.stderr

    return run


@needs_driver
def test_serving_gives_the_bytes_a_replay_gives(served):
    served("same")


@needs_driver
def test_a_changed_input_or_output_pointer_is_honoured(served):
    served("pointers")


@needs_driver
def test_zero_copy_points_the_kernels_at_the_callers_arrays_and_refuses_by_name(served):
    served("zero_copy")


@needs_driver
def test_state_the_call_does_not_give_carries_over_from_call_to_call(served):
    served("state")


@needs_driver
def test_arrays_that_do_not_fit_are_refused_by_binding_name(served):
    served("refusals")


@needs_driver
def test_tensors_are_read_as_torch_exposes_them_and_checked_once_each(served):
    served("torchlike")


def test_serving_on_the_cpu_is_a_replays_outputs(tmp_path, basics_ptx):
    x = np.arange(N, dtype=np.float32)
    y = np.ones(N, np.float32)
    rep = recap.open(build_axpy(tmp_path / "cpu.recap", basics_ptx, x, y)).replayer("cpu")
    np.testing.assert_array_equal(rep.serve({"x": x})["y"], 2.0 * x + y)
    with pytest.raises(ValueError, match="zero_copy binds GPU arrays in place"):
        rep.serve({"x": x}, zero_copy=True)
