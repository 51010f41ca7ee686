"""01: build an archive from numpy arrays and PTX on the CPU, open it, look inside, replay it.

    python python/examples/01_axpy_cpu.py [--device cpu|cuda]

Exits 0 only when its own checks pass. The kernel is `axpy` (y = a * x + y) from the
repository's checked-in PTX, `native-host/recap/examples/kernels/basics.ptx`.
"""

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import recap

PTX = Path(__file__).resolve().parents[2] / "native-host" / "recap" / "examples" / "kernels" / "basics.ptx"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="where to replay: cpu, cuda or cuda:N")
    device = parser.parse_args().device

    n = 1 << 16
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)

    # 1. Build: buffers first, then the ops, then save (the expected state comes from one CPU run).
    b = recap.Builder("cpu")
    xb, yb = b.array("x", x), b.array("y", y)
    b.load_ptx("basics", PTX.read_text())
    b.launch("axpy", n // 256, 256, [xb, yb, np.float32(3.0), np.uint32(n)])
    path = Path(tempfile.mkdtemp()) / "axpy.recap"
    b.save(path, inputs=[("x", xb), ("y", yb)], outputs=[("y", yb)])

    # 2. Look.
    a = recap.open(path)
    print(a)
    print(a.kernels)
    print(a.bindings)

    # 3. Replay, checked against the expected state, then with new inputs through a replayer.
    r = a.replay(device, iterations=5, check=True)
    print(r)
    print(r.check)
    rep = a.replayer(device)
    x2 = np.ones(n, np.float32)
    out = rep.run({"x": x2}).outputs["y"]
    ok = r.check.passed and np.allclose(out, 3.0 * x2 + y, rtol=1e-6)
    print("01_axpy_cpu:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
