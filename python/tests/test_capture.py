"""In-process capture with `with recap.capture(...)`: the interposer in front of recap's CPU
stand-in for the CUDA driver (`librecap_cpudriver.so`), driven by a Python program on the driver
API through ctypes, in a fresh process per test. The archives it writes are opened and replayed
on the CPU here.

The interposer is the one the installed package ships (or RECAP_INTERCEPT_LIB), the CPU driver
comes from RECAP_TEST_CPUDRIVER (`cargo xtask test` sets it); without them the tests are skipped,
naming what to build."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import recap

HERE = Path(__file__).resolve().parent
SHIPPED = Path(recap.__file__).with_name("librecap_intercept.so")
INTERPOSER = os.environ.get("RECAP_INTERCEPT_LIB") or (str(SHIPPED) if SHIPPED.is_file() else None)
CPUDRIVER = os.environ.get("RECAP_TEST_CPUDRIVER")

needs_libs = pytest.mark.skipif(
    not (INTERPOSER and CPUDRIVER),
    reason="set RECAP_TEST_CPUDRIVER to librecap_cpudriver.so (cargo build -p recap-cpudriver), and "
    "RECAP_INTERCEPT_LIB to librecap_intercept.so where the installed package ships none",
)


def program(tmp_path, mode):
    env = {k: v for k, v in os.environ.items() if k not in ("RECAP_INTERCEPT_LIB", "RECAP_REAL_LIBCUDA")}
    out = subprocess.run(
        [sys.executable, str(HERE / "capture_driver_api.py"), INTERPOSER, CPUDRIVER, str(tmp_path), mode],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip().splitlines()[-1]


@needs_libs
def test_each_with_block_writes_its_own_archive_with_named_bindings(tmp_path):
    reports = json.loads(program(tmp_path, "blocks"))
    assert len(reports) == 2
    xs = np.arange(1000, dtype=np.float32)
    for i, rep in enumerate(reports):
        assert rep["error"] is None and rep["incomplete"] == {}, rep
        assert rep["ops"] == {"launch": 1}
        assert [k["name"] for k in rep["kernels"]] == ["axpy"] and rep["kernels"][0]["ptx"]
        a = recap.open(rep["archive"])
        assert a.source.endswith(f"block{i}.recap")
        assert sorted((b.name, b.direction) for b in a.bindings) == [("x", "in"), ("y", "inout")]
        y = next(r for r in a.regions if r.name == next(b.region for b in a.bindings if b.name == "y"))
        assert (y.dtype, y.shape) == ("f32", (1000,))
        # The block's end learnt the types the PTX stores: y holds f32 from its axpy store.
        assert rep["types"]["typed_regions"] >= 1 and rep["types"]["error"] is None, rep["types"]
        assert y.types == [("f32", 4000)] and y.spread == [], y
        # The block's end named the live arrays' dtypes (x and y, f32).
        assert "2 stretches (8000 bytes) typed by the program's arrays as the range ended: <f4 ×2" in rep["notes"]
        r = a.replay("cpu", check=True)
        assert r.check.passed, r.check
        np.testing.assert_allclose(r.outputs["y"], rep["a"] * xs + 1.0, rtol=1e-6)
        # New inputs through the recorded bindings.
        r = a.replay("cpu", inputs={"x": np.ones(1000, np.float32), "y": np.zeros(1000, np.float32)})
        np.testing.assert_allclose(r.outputs["y"], np.full(1000, rep["a"], np.float32))


@needs_libs
def test_interposing_after_the_driver_is_loaded_is_refused(tmp_path):
    line = program(tmp_path, "late")
    assert line.startswith("refused: ") and "already loaded" in line, line


def test_a_missing_interposer_or_driver_is_named_before_anything_loads(tmp_path):
    with pytest.raises(recap.RecapError, match="interposer .*nowhere.so is missing"):
        recap.interpose(interposer=str(tmp_path / "nowhere.so"))
    if INTERPOSER:
        with pytest.raises(recap.RecapError, match="driver .*nodriver.so does not exist"):
            recap.interpose(interposer=INTERPOSER, driver=str(tmp_path / "nodriver.so"))


def test_capture_binds_gpu_arrays_only():
    from recap._capture import _device_array

    with pytest.raises(TypeError, match="binding x: a ndarray is not a GPU array"):
        _device_array("x", np.zeros(3))


def test_the_array_scan_runs_no_code_of_the_objects_it_passes(monkeypatch):
    """The scan of live arrays looks at every object in the process: it must not run their code.
    A proxy whose `__class__` has code (torch's deprecated `torch.distributed.reduce_op` warns
    there) is passed over without running it, and a tensor subclass still counts as a tensor."""
    import types

    from recap._array_types import _arrays

    ran, seen = [], []

    class Tensor:
        is_cuda = False

    class Proxy:
        @property
        def __class__(self):
            ran.append(self)
            return Tensor

    class Seen(Tensor):
        @property
        def is_cuda(self):
            seen.append(self)
            return False

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Tensor=Tensor, strided=object()))
    held = [Proxy(), Seen()]
    assert list(_arrays()) == []
    assert ran == [], "the proxy's __class__ ran"
    assert seen == [held[1]], "a subclass of the tensor type is looked at as a tensor"
