"""Shared fixtures: the repository's own PTX (the examples' kernels, written by NVRTC) and
archives built from it with the CPU builder, so every test runs without a GPU."""

from pathlib import Path

import numpy as np
import pytest

import recap

ROOT = Path(__file__).resolve().parents[2]
BASICS_PTX = ROOT / "native-host" / "recap" / "examples" / "kernels" / "basics.ptx"
GOLDEN = ROOT / "tests" / "golden"

N = 300


@pytest.fixture(scope="session")
def basics_ptx() -> str:
    return BASICS_PTX.read_text()


def build_axpy(path: Path, ptx: str, x: np.ndarray, y: np.ndarray, a: float = 2.0) -> Path:
    """An archive of `y = a * x + y` over n float32s, x an input and y in and out."""
    b = recap.Builder("cpu")
    xb = b.array("x", x)
    yb = b.array("y", y)
    b.load_ptx("basics", ptx)
    n = x.size
    b.launch("axpy", (n + 127) // 128, 128, [xb, yb, np.float32(a), np.uint32(n)])
    b.save(path, inputs=[("x", xb), ("y", yb)], outputs=[("y", yb)])
    return path


@pytest.fixture
def axpy_archive(tmp_path, basics_ptx):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(N).astype(np.float32)
    y = rng.standard_normal(N).astype(np.float32)
    return build_axpy(tmp_path / "axpy.recap", basics_ptx, x, y), x, y
