"""Run by `cargo xtask test` with the wheel installed into a fresh virtual environment, from
outside the repository: the installed package alone must import, carry its type stubs and the
interposer, build an archive on the CPU, and replay and check it."""

import sys
import tempfile
from pathlib import Path

import numpy as np

import recap

package = Path(recap.__file__).parent
assert "site-packages" in str(package), f"recap imported from {package}, not the installed wheel"
for name in ("py.typed", "_recap.pyi", "librecap_intercept.so"):
    assert (package / name).is_file(), f"the wheel lacks recap/{name}"

with tempfile.TemporaryDirectory() as tmp:
    b = recap.Builder("cpu")
    x = b.array("x", np.arange(16, dtype=np.float32).reshape(4, 4))
    y = b.zeros("y", (4, 4))
    b.copy(x, y)
    b.fill(x, 0.0)
    path = Path(tmp) / "smoke.recap"
    b.save(path, inputs=[("x", x)], outputs=[("y", y)])
    a = recap.open(path)
    r = a.replay("cpu", check=True)
    assert r.check.passed, r.check
    assert r.outputs["y"].shape == (4, 4) and r.outputs["y"][3, 3] == 15.0
    try:
        recap.open(b"garbage")
    except recap.RecapError as e:
        assert str(e), "an empty message"
    else:
        sys.exit("garbage opened as an archive")
print(f"wheel smoke test: ok ({recap.__version__}, {package})")
