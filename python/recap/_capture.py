"""In-process capture: ``with recap.capture(path, inputs=..., outputs=...):`` records the CUDA
work that the code inside the block issues, whichever library issues it (PyTorch, Triton, CuPy,
numba, Warp), and writes one archive when the block ends.

How: recap's interposer (``librecap_intercept.so``, shipped in this package) is a library whose
SONAME is ``libcuda.so.1`` and which forwards every driver call to the real driver. glibc's
``dlopen`` matches an already-loaded library by SONAME, so once :func:`interpose` has loaded the
interposer with ``RTLD_GLOBAL``, every later ``dlopen("libcuda.so.1")`` (the CUDA runtime's,
PyTorch's, CuPy's) and every library linked against the driver gets the interposer. That only
works before anything has loaded the real driver, which :func:`interpose` checks in
``/proc/self/maps``: call it (or enter the first ``capture`` block) before the first CUDA call.
The interposer's control API (its ``control.rs``) then opens a range per block, names the arrays
given as bindings and returns the capture report, so several blocks in one process each write
their own archive.

What the interposer cannot record (machine-code-only kernels' PTX, calls it passes through) is in
:attr:`capture.report`; when a block could not be recorded in full, a warning says so.
"""

from __future__ import annotations

import ctypes
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from . import _array_types, _recap
from ._recap import RecapError

#: Overrides the interposer shipped in the package (the variable `recap capture` reads too).
INTERPOSER_ENV = "RECAP_INTERCEPT_LIB"
#: The real driver the interposer forwards to.
REAL_DRIVER_ENV = "RECAP_REAL_LIBCUDA"

_lib: Optional[ctypes.CDLL] = None


@dataclass(frozen=True)
class CaptureReport:
    """What a capture recorded, and what it could not."""

    #: Ops recorded, by kind (``launch``, ``copy``, ``upload``, ``memset`` ...).
    ops: Dict[str, int]
    #: Per kernel: ``name``, ``module``, ``launches``, ``ptx`` (whether PTX was found, so that the
    #: kernel replays on the CPU and on other GPUs), ``ptx_from``, ``cubins``, ``layout_from``.
    kernels: List[Dict[str, Any]]
    regions: int
    #: Driver calls made inside the block that passed through unrecorded, with how often.
    passed_through: Dict[str, int]
    #: What makes the archive an incomplete record of the block, with how often.
    incomplete: Dict[str, int]
    notes: List[str]
    #: The archive written, or None with ``error`` saying why.
    archive: Optional[str]
    error: Optional[str]
    #: The GPU architecture it ran on (``90`` for sm_90).
    sm: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)
    #: What the element-type inference after the block learnt (``typed_regions``,
    #: ``untyped_regions``, ``skipped``, ``stopped``, ``error``), as ``recap capture`` reports it.
    types: Optional[Dict[str, Any]] = None

    @property
    def kernels_without_ptx(self) -> List[str]:
        """Kernels recorded as machine code only (library kernels such as cuBLAS's ship no PTX):
        they replay on a GPU of the capture's architecture, not on the CPU."""
        return [k["name"] for k in self.kernels if not k.get("ptx")]

    @classmethod
    def _of(cls, raw: Dict[str, Any]) -> "CaptureReport":
        return cls(
            ops=dict(raw.get("ops", {})),
            kernels=list(raw.get("kernels", [])),
            regions=raw.get("regions", 0),
            passed_through=dict(raw.get("passed_through", {})),
            incomplete=dict(raw.get("incomplete", {})),
            notes=list(raw.get("notes", [])),
            archive=raw.get("archive"),
            error=raw.get("error"),
            sm=raw.get("sm", 0),
            raw=raw,
            types=raw.get("types"),
        )

    def __repr__(self) -> str:
        ops = ", ".join(f"{n} {k}" for k, n in self.ops.items()) or "no ops"
        where = self.archive or f"no archive: {self.error}"
        lines = [f"CaptureReport({ops}; {len(self.kernels)} kernels, {self.regions} regions -> {where})"]
        for k in self.kernels_without_ptx:
            lines.append(f"  {k}: machine code only (replays on sm_{self.sm} GPUs, not on the CPU)")
        for what, n in self.incomplete.items():
            lines.append(f"  incomplete: {what}" + (f" ({n}x)" if n > 1 else ""))
        return "\n".join(lines)


def _real_driver_loaded(interposer: Path, real: str) -> Optional[str]:
    """The path of a CUDA driver already mapped into this process (any ``libcuda.so*`` or the real
    driver's file), other than the interposer."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    ours = os.path.realpath(interposer)
    real = os.path.realpath(real)
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        path = parts[5].strip()
        resolved = os.path.realpath(path)
        if (os.path.basename(path).startswith("libcuda.so") or resolved == real) and resolved != ours:
            return path
    return None


def _interposer_path(explicit: Optional[str]) -> Path:
    if explicit:
        return Path(explicit)
    if os.environ.get(INTERPOSER_ENV):
        return Path(os.environ[INTERPOSER_ENV])
    return Path(__file__).with_name("librecap_intercept.so")


def interpose(interposer: Optional[str] = None, driver: Optional[str] = None) -> ctypes.CDLL:
    """Puts recap's interposer in front of the CUDA driver for the rest of this process.

    Must run before anything loads the driver (``import torch`` is fine; the first CUDA call is
    not). ``interposer`` defaults to the copy in this package (or ``$RECAP_INTERCEPT_LIB``),
    ``driver`` to the system's ``libcuda.so.1`` (or ``$RECAP_REAL_LIBCUDA``). It also sets
    ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` unless already set, so that each tensor is its own
    allocation, which is what a binding names. Calling it again returns the loaded interposer.
    """
    global _lib
    if _lib is not None:
        return _lib
    path = _interposer_path(interposer)
    if not path.is_file():
        raise RecapError(
            f"the interposer {path} is missing: install the package with `pip install ./python` or the wheel "
            f"`cargo xtask wheel` builds (both ship it), or build it with `cargo build --release -p recap-intercept` and point {INTERPOSER_ENV} at "
            "target/release/librecap_intercept.so"
        )
    real = driver or os.environ.get(REAL_DRIVER_ENV) or _recap.system_driver()
    if not real:
        raise RecapError("no CUDA driver (libcuda.so.1) found on this machine; name one with driver=")
    if not os.path.isfile(real):
        raise RecapError(f"the CUDA driver {real} does not exist")
    loaded = _real_driver_loaded(path, str(real))
    if loaded is not None:
        raise RecapError(
            f"the CUDA driver {loaded} is already loaded in this process, so recap cannot be put in front of it: "
            "call recap.interpose() (or enter recap.capture) before the first CUDA call, or run the script under "
            "`recap capture -- python SCRIPT`"
        )
    os.environ[REAL_DRIVER_ENV] = str(real)
    os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    lib.recap_control_error.restype = ctypes.c_char_p
    lib.recap_control_begin.argtypes = [ctypes.c_char_p]
    lib.recap_control_bind.argtypes = [
        ctypes.c_char_p,
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.c_size_t,
    ]
    lib.recap_control_end.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    _lib = lib
    return lib


def _device_array(name: str, value: Any) -> tuple:
    """(pointer, bytes, numpy type string, shape) of a GPU array, from ``__cuda_array_interface__``."""
    try:
        cai = value.__cuda_array_interface__
    except AttributeError:
        raise TypeError(
            f"binding {name}: a {type(value).__name__} is not a GPU array; capture binds arrays with "
            "__cuda_array_interface__ (torch CUDA tensors, CuPy, Warp, numba device arrays)"
        ) from None
    shape = tuple(int(d) for d in cai["shape"])
    typestr = cai["typestr"]
    item = int(typestr[2:])
    count = 1
    for d in shape:
        count *= d
    strides = cai.get("strides")
    if strides is not None:
        want, ok = item, True
        for d, s in zip(reversed(shape), reversed(strides)):
            if d > 1 and s != want:
                ok = False
            want *= d
        if not ok:
            raise RecapError(f"binding {name}: the array is not C-contiguous (strides {strides})")
    return int(cai["data"][0]), count * item, typestr, shape


class capture:
    """Records the CUDA work issued inside a ``with`` block into the archive at ``path``.

    ``inputs`` and ``outputs`` map binding names to GPU arrays (torch tensors, CuPy, Warp arrays):
    each becomes a named binding of the archive, with the array's dtype and shape. Arrays made
    inside the block are named with :meth:`input` / :meth:`output` before it ends. When the block
    ends the archive is written and :attr:`report` says what was recorded; a block the interposer
    could not record in full warns, and one with nothing recorded raises :class:`RecapError`.
    """

    def __init__(
        self,
        path: "str | os.PathLike[str]",
        inputs: Optional[Mapping[str, Any]] = None,
        outputs: Optional[Mapping[str, Any]] = None,
        *,
        interposer: Optional[str] = None,
        driver: Optional[str] = None,
        infer_types_seconds: float = 60.0,
        array_types: bool = True,
    ):
        self.path = os.fspath(path)
        #: As the block ends, the dtypes of the program's live device arrays (torch tensors,
        #: anything with ``__cuda_array_interface__``, JAX arrays) type the bytes they span that no
        #: PTX typed: those only machine code wrote (as ``recap capture`` does; False skips).
        self.array_types = array_types
        #: After the block, the archive's PTX replays once on the CPU for at most this long to
        #: learn each region's element types (as ``recap capture --infer-types-seconds``); 0 skips.
        self.infer_types_seconds = infer_types_seconds
        self._inputs = dict(inputs or {})
        self._outputs = dict(outputs or {})
        self._interposer = interposer
        self._driver = driver
        self._lib: Optional[ctypes.CDLL] = None
        #: The capture report, once the block has ended.
        self.report: Optional[CaptureReport] = None

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            assert self._lib is not None
            message = self._lib.recap_control_error().decode("utf-8", "replace")
            raise RecapError(f"capture {self.path}: {what}: {message}")

    def _bind(self, name: str, value: Any, direction: int) -> None:
        ptr, nbytes, typestr, shape = _device_array(name, value)
        dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
        assert self._lib is not None
        rc = self._lib.recap_control_bind(name.encode(), ptr, nbytes, direction, typestr.encode(), dims, len(shape))
        self._check(rc, f"binding {name}")

    def input(self, name: str, value: Any) -> None:
        """Names a GPU array as an input binding (its contents at first use are the archive's)."""
        self._bind(name, value, 0)

    def output(self, name: str, value: Any) -> None:
        """Names a GPU array as an output binding (its contents when the block ends are expected)."""
        self._bind(name, value, 1)

    def __enter__(self) -> "capture":
        self._lib = interpose(self._interposer, self._driver)
        self._check(self._lib.recap_control_begin(os.fsencode(self.path)), "beginning")
        try:
            for name, value in self._inputs.items():
                self.input(name, value)
        except BaseException:
            self._end()
            raise
        return self

    def _end(self) -> CaptureReport:
        assert self._lib is not None
        if self.array_types:
            _array_types.declare_arrays(self._lib)
        out = ctypes.c_char_p()
        self._check(self._lib.recap_control_end(ctypes.byref(out)), "ending")
        raw = json.loads((out.value or b"{}").decode("utf-8", "replace"))
        if raw.get("archive") and self.infer_types_seconds > 0:
            try:
                raw["types"] = json.loads(_recap.infer_types(raw["archive"], float(self.infer_types_seconds)))
            except RecapError as e:  # the archive stays as written, untyped
                raw["types"] = {"error": str(e)}
        self.report = CaptureReport._of(raw)
        return self.report

    def __exit__(self, kind, value, tb) -> bool:
        bound: Optional[BaseException] = None
        try:
            for name, array in self._outputs.items():
                self.output(name, array)
        except BaseException as e:  # the range must end whatever happens
            bound = e
        report = self._end()
        if kind is not None:
            return False
        if bound is not None:
            raise bound
        if report.error:
            raise RecapError(f"capture {self.path}: {report.error}")
        problems = list(report.incomplete)
        if problems:
            warnings.warn(
                f"capture {self.path} is incomplete: " + "; ".join(problems), RuntimeWarning, stacklevel=2
            )
        return False
