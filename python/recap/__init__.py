"""recap: capture GPU compute work once, replay it anywhere.

A ``.recap`` archive holds a piece of GPU work (PTX modules, kernels and their parameter layouts,
buffers with their initial and expected contents, and the ops: launches, copies, memsets,
device-side loops). This package opens, inspects, replays and writes archives from Python::

    import recap
    a = recap.open("step.recap")
    a.kernels                       # what ran
    r = a.replay("cpu", check=True)  # on any CPU, or "cuda" / "cuda:1"
    r.outputs["y"]                  # numpy arrays of each output's dtype and shape

    with recap.capture("step.recap", inputs={"x": x}, outputs={"y": y}):
        y = model(x)                # PyTorch, Triton, CuPy, numba or Warp work, recorded

Errors from recap itself are :class:`RecapError`, carrying recap's message.
"""

from ._recap import Buffer, Builder, RecapError, __version__
from ._archive import (
    Archive,
    Binding,
    CheckReport,
    Iteration,
    Kernel,
    Module,
    Op,
    OpTime,
    Param,
    Region,
    RegionCheck,
    StretchCheck,
    Replayer,
    ReplayResult,
    open,
)
from ._capture import CaptureReport, capture, interpose

__all__ = [
    "Archive",
    "Binding",
    "Buffer",
    "Builder",
    "CaptureReport",
    "CheckReport",
    "Iteration",
    "Kernel",
    "Module",
    "Op",
    "OpTime",
    "Param",
    "RecapError",
    "Region",
    "RegionCheck",
    "StretchCheck",
    "Replayer",
    "ReplayResult",
    "capture",
    "interpose",
    "open",
    "__version__",
]
