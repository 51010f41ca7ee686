"""GPU tests of the Python package, for an H100/H200 machine with PyTorch, Triton and CuPy.

They need the installed wheel (`cargo xtask wheel` builds it, the interposer inside; install it
with `pip install --no-deps target/wheels/recap-*.whl`) and run with `python -m pytest -v
python/tests/gpu`. The interposer has to be in front of the driver before anything initialises
CUDA, so it is put there here, before any test module imports torch.
"""

import recap

recap.interpose()
