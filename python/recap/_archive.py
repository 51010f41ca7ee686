"""Archives as Python objects: what :func:`open` returns and what a replay gives back.

The native module (``recap._recap``) reads and validates the archive and runs replays; this file
turns what it hands back (dicts, lists, numpy arrays) into small frozen dataclasses whose reprs
read well in a notebook, and documents every field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _recap

PathOrBytes = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


@dataclass(frozen=True)
class Module:
    """A PTX module (with the machine code, per GPU architecture, the capture kept)."""

    id: int
    name: str
    #: Size of the PTX text in bytes (0 when the module ships machine code only).
    ptx_bytes: int
    #: Architectures of the cubins kept, e.g. ``[90]`` for sm_90.
    cubins: List[int]
    #: Names of its kernels.
    kernels: List[str]


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the PTX ``.entry`` declares it."""

    name: str
    offset: int
    size: int
    align: int
    #: ``"pointer"`` (relocated to a region at replay) or ``"value"``.
    kind: str


@dataclass(frozen=True)
class Kernel:
    """A kernel: an entry point of a module, with its parameter layout."""

    id: int
    name: str
    module: str
    params: List[Param]

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}:{p.kind[0]}{p.size}" for p in self.params)
        return f"Kernel({self.name!r} in {self.module}, params=[{params}])"


@dataclass(frozen=True)
class Region:
    """A buffer of the archive: its size, element type, shape and which contents it carries."""

    id: int
    name: str
    size: int
    align: int
    #: recap's type name (``f32``, ``u8``, ``bytes``, ``bf16`` ...).
    dtype: str
    #: The numpy dtype its arrays come out as (bf16 as ``uint16``, its raw bits).
    numpy_dtype: np.dtype
    shape: Tuple[int, ...]
    scratch: bool
    device: int
    has_initial: bool
    has_expected: bool
    tolerance: Optional[str]
    #: The typed layout, ``(type, bytes)`` per stretch in address order (``f32``, ``i32``,
    #: ``untyped`` ...), from the PTX stores that wrote it; empty where the archive has none.
    types: List[Tuple[str, int]] = field(default_factory=list)
    #: The spread of the program's repeated runs at capture (``recap capture --repeat-range``),
    #: ``(offset, length, ulps, abs, elements)`` per stretch.
    spread: List[Tuple[int, int, int, float, int]] = field(default_factory=list)

    def __repr__(self) -> str:
        extra = "".join(
            s
            for s, on in ((", initial", self.has_initial), (", expected", self.has_expected), (", scratch", self.scratch))
            if on
        )
        return f"Region({self.name!r}, {self.dtype}{list(self.shape)}, {self.size} bytes{extra})"


@dataclass(frozen=True)
class Binding:
    """A named input or output: the names a replay's ``inputs`` and ``outputs`` use."""

    name: str
    region: str
    #: ``"in"``, ``"out"`` or ``"inout"``.
    direction: str


@dataclass(frozen=True)
class Op:
    """One op in archive order. ``depth`` counts the while/if bodies it is inside."""

    id: int
    kind: str
    label: str
    depth: int
    device: int
    #: Kind-specific fields: ``kernel``, ``grid``, ``block``, ``shared_bytes`` for a launch;
    #: ``src``, ``dst``, ``bytes`` for a copy; ``region``, ``bytes``, ``width``, ``pattern`` for a
    #: memset; ``region``, ``body_len``, ``max_iterations`` for while/if.
    detail: Dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        if self.kind == "launch":
            d = self.detail
            grid, block = tuple(d["grid"]), tuple(d["block"])
            return f"Op({self.id}: launch {d['kernel']} grid={grid} block={block})"
        return f"Op({self.id}: {'  ' * self.depth}{self.label})"


@dataclass(frozen=True)
class OpTime:
    """A top-level op's time in one iteration (a while/if counts with its whole body)."""

    op: int
    kind: str
    name: Optional[str]
    time_ms: float


@dataclass(frozen=True)
class Iteration:
    """One replay of every op."""

    time_ms: float
    ops: int
    launches: int
    #: PTX instructions the CPU executed (0 on a GPU).
    instructions: int
    #: Launches the CPU ran as native code (the rest were interpreted).
    native_launches: int
    #: Per-op times where the engine reports ops (the CPU does; a CUDA graph runs whole), for the
    #: first 100 iterations of a run and every 100th after (empty for the others).
    op_times: List[OpTime]

    def __repr__(self) -> str:
        return f"Iteration({self.time_ms:.3f} ms, {self.ops} ops, {self.launches} launches)"


@dataclass(frozen=True)
class StretchCheck:
    """The verdict on one stretch of a region: bytes of one element type."""

    #: Byte offset in the region and length in bytes.
    offset: int
    len: int
    #: ``f32``, ``f16``, ``bf16``, ``f64``, ``i8``..``i64``, ``ptr`` or ``untyped``.
    ty: str
    #: Where the type came from: ``ptx`` (the last store to it), ``declared`` (the region's
    #: dtype) or ``none`` (judged byte for byte).
    typed_by: str
    #: ``exact``, ``within`` (some elements differ, all within tolerance) or ``differ``.
    outcome: str
    elements: int
    #: Elements not bit-equal to the expected state, and those outside the tolerance.
    inexact: int
    differing: int
    #: ``{"ulps", "rtol", "atol"}`` for floats, ``None`` for exact types.
    tolerance: Optional[Dict[str, float]]
    max_ulps: int
    max_abs: float
    max_rel: float
    #: The first element outside the tolerance: ``index`` (in the stretch's type), ``offset``
    #: (bytes), ``got`` and ``want`` formatted as the type.
    first: Optional[Dict[str, Any]]
    #: Set when replays disagreed with each other here: ``{"ulps", "abs", "elements"}``.
    spread: Optional[Dict[str, Any]]
    #: Set when the archive records that the program's own repeated runs disagreed here
    #: (``recap capture --repeat-range``), in the same form.
    recorded_spread: Optional[Dict[str, Any]] = None

    @property
    def nondeterministic(self) -> bool:
        return self.spread is not None or self.recorded_spread is not None


@dataclass(frozen=True)
class RegionCheck:
    """The verdict on one region that has an expected state."""

    name: str
    passed: bool
    stretches: List[StretchCheck]
    #: Set when the comparison could not be made at all.
    error: Optional[str]
    #: recap's one-line verdict, as ``recap replay --check`` prints it.
    line: str

    @property
    def outcome(self) -> str:
        """``exact``, ``within`` or ``differ``: the worst of its stretches."""
        if not self.passed:
            return "differ"
        return "exact" if all(s.outcome == "exact" for s in self.stretches) else "within"

    @property
    def nondeterministic(self) -> bool:
        return any(s.nondeterministic for s in self.stretches)

    @property
    def elements(self) -> int:
        return sum(s.elements for s in self.stretches)

    @property
    def mismatches(self) -> int:
        return sum(s.differing for s in self.stretches)

    @property
    def first_mismatch(self) -> Optional[Dict[str, Any]]:
        return next((s.first for s in self.stretches if s.first is not None), None)

    def __repr__(self) -> str:
        return f"RegionCheck({self.line!r})"


@dataclass(frozen=True)
class CheckReport:
    """The final regions judged against the archive's expected state."""

    #: ``exact``, ``within`` (all passed, some only within tolerance), ``failed``, or
    #: ``nothing_to_check`` (the archive holds no expected state: not a pass).
    state: str
    regions: List[RegionCheck]
    #: Whole replays judged together.
    replays: int = 1

    @property
    def passed(self) -> bool:
        """True when at least one region was checked and every one passed."""
        return self.state in ("exact", "within")

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        if self.state == "nothing_to_check":
            return "CheckReport(nothing to check: the archive holds no expected state)"
        failed = sum(not r.passed for r in self.regions)
        head = {"exact": "PASS (exact)", "within": "PASS (within tolerance)"}.get(self.state, "FAIL")
        lines = "".join(f"\n  {r.line}" for r in self.regions)
        return f"CheckReport({head}: {len(self.regions) - failed} of {len(self.regions)} regions pass){lines}"


def _check_report(raw: str) -> CheckReport:
    v = json.loads(raw)
    regions = []
    for r in v["regions"]:
        stretches = [
            StretchCheck(
                offset=s["offset"],
                len=s["len"],
                ty=s["ty"],
                typed_by=s["typed_by"],
                outcome=s["outcome"],
                elements=s["elements"],
                inexact=s["inexact"],
                differing=s["differing"],
                tolerance=s.get("tolerance"),
                max_ulps=s["max_ulps"],
                max_abs=s["max_abs"],
                max_rel=s["max_rel"],
                first=s.get("first"),
                spread=s.get("spread"),
                recorded_spread=s.get("recorded_spread"),
            )
            for s in r["stretches"]
        ]
        line = f"{'PASS' if r['passed'] else 'FAIL'} {r['name']}: {r['detail']}"
        error = None if r["stretches"] or r["passed"] else r["detail"]
        regions.append(RegionCheck(r["name"], r["passed"], stretches, error, line))
    return CheckReport(state=v["state"], regions=regions, replays=v.get("replays", 1))


@dataclass(frozen=True)
class ReplayResult:
    """What a replay gives back."""

    #: Every output binding's final contents: numpy arrays of the region's dtype and shape, or the
    #: GPU array passed in ``outputs=`` that received it.
    outputs: Dict[str, Any]
    iterations: List[Iteration]
    #: The check, when asked for (``check=True``).
    check: Optional[CheckReport]

    @property
    def times_ms(self) -> List[float]:
        """Each iteration's time in milliseconds (a GPU's device time)."""
        return [i.time_ms for i in self.iterations]

    def __repr__(self) -> str:
        outs = ", ".join(f"{k}: {_describe(v)}" for k, v in self.outputs.items())
        times = self.times_ms
        med = sorted(times)[len(times) // 2]
        verdicts = {"exact": "PASS (exact)", "within": "PASS (within tolerance)", "nothing_to_check": "nothing to check"}
        check = "" if self.check is None else f", check={verdicts.get(self.check.state, 'FAIL')}"
        return f"ReplayResult({len(times)} iterations, median {med:.3f} ms{check}, outputs={{{outs}}})"


def _describe(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"{v.dtype}{list(v.shape)}"
    return type(v).__name__


def _result(raw: Dict[str, Any]) -> ReplayResult:
    iterations = [
        Iteration(
            time_ms=i["time_ms"],
            ops=i["ops"],
            launches=i["launches"],
            instructions=i["instructions"],
            native_launches=i["native_launches"],
            op_times=[OpTime(*t) for t in i["op_times"]],
        )
        for i in raw["iterations"]
    ]
    check = None
    if raw["check"] is not None:
        check = _check_report(raw["check"])
    return ReplayResult(outputs=dict(raw["outputs"]), iterations=iterations, check=check)


class Replayer:
    """An archive loaded on one device, kept for repeated replays with new inputs.

    Loading compiles the modules and allocates the regions (on a GPU: instantiates the CUDA graph)
    once; every :meth:`run` then costs a replay, not a rebuild: the serving path.
    """

    def __init__(self, native: _recap.Replayer):
        self._native = native

    @property
    def device(self) -> str:
        """``cpu``, ``cuda`` or ``cuda:N``."""
        return self._native.device

    def run(
        self,
        inputs: Optional[Mapping[str, Any]] = None,
        iterations: int = 1,
        check: bool = False,
        outputs: Optional[Mapping[str, Any]] = None,
    ) -> ReplayResult:
        """Replays ``iterations`` times, each from the initial state with ``inputs`` written first.

        ``inputs`` maps binding (or region) names to arrays of the region's dtype and shape (or
        its element count, flat): numpy arrays, anything numpy can convert, and on a CUDA device
        GPU arrays (``__cuda_array_interface__`` or DLPack: torch, CuPy, Warp), copied device to
        device. ``outputs`` may map output names to GPU arrays that receive the results in place;
        the rest come back as numpy arrays. The GIL is released meanwhile; Ctrl-C cancels.
        One call runs at most 100000 iterations (each comes back in ``iterations``); a larger
        count is a ``ValueError``.
        """
        raw = self._native.run(
            inputs=dict(inputs) if inputs else None,
            iterations=iterations,
            check=check,
            outputs=dict(outputs) if outputs else None,
        )
        return _result(raw)

    __call__ = run

    def serve(
        self,
        inputs: Optional[Mapping[str, Any]] = None,
        outputs: Optional[Mapping[str, Any]] = None,
        *,
        stream: Optional[int] = None,
        zero_copy: bool = False,
    ) -> Dict[str, Any]:
        """One step of the serving path: ``inputs`` in, the archive's work, the outputs out.

        On a CUDA device this is ONE graph launch, ordered on ``stream`` (a ``CUstream`` handle
        as an integer; by default the current torch or CuPy stream of the first GPU array given,
        else the replayer's own, which is waited for), with no wait unless an output comes back
        to the host. Device inputs and outputs are copies inside that graph, updated per call;
        with ``zero_copy=True`` the kernels read and write the given GPU arrays themselves, which
        must then match their regions' dtype, shape and alignment and be C-contiguous (refused
        by name otherwise, as are archives whose regions' addresses live anywhere but in kernel
        parameters). Every call starts from the archive's initial state, as :meth:`run` does.

        Returns every output binding: the GPU array given for it in ``outputs``, or a numpy
        array. On the CPU this is :meth:`run`'s outputs.
        """
        if not self.device.startswith("cuda"):
            if zero_copy:
                raise ValueError("zero_copy binds GPU arrays in place: it needs a CUDA device")
            return self.run(inputs=inputs, outputs=outputs).outputs
        if stream is None:
            stream = _current_stream(inputs, outputs)
        if inputs is not None and not isinstance(inputs, dict):
            inputs = dict(inputs)
        if outputs is not None and not isinstance(outputs, dict):
            outputs = dict(outputs)
        return self._native.serve(inputs, outputs, stream, zero_copy)

    def __repr__(self) -> str:
        return f"Replayer({self._native.archive.source!r} on {self.device})"


def _current_stream(*groups: Optional[Mapping[str, Any]]) -> Optional[int]:
    """The current stream of the library that owns the first GPU array among ``groups``: torch's
    (``torch.cuda.current_stream``) or CuPy's; None when no array is a torch tensor or CuPy array."""
    for group in groups:
        for v in (group or {}).values():
            module = type(v).__module__
            if module.startswith("torch") and getattr(v, "is_cuda", False):
                import torch

                raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
                if raw is not None:
                    return raw(v.get_device())
                return torch.cuda.current_stream(v.device).cuda_stream
            if module.startswith("cupy"):
                import cupy

                return cupy.cuda.get_current_stream().ptr
    return None


class Archive:
    """An opened, validated archive. Tables are lists of plain dataclasses."""

    def __init__(self, native: _recap.Archive):
        self._native = native
        info = native.info()
        #: Format version ``(major, minor)``.
        self.version: Tuple[int, int] = tuple(info["version"])  # type: ignore[assignment]
        #: Size of the archive in bytes.
        self.size: int = info["size"]
        #: The producer's metadata (``producer``, ``device``, a capture's report ...).
        self.meta: Dict[str, str] = dict(info["meta"])
        #: Logical devices of a multi-device archive, ``(name, sm)``; empty for one device.
        self.devices: List[Tuple[str, int]] = [tuple(d) for d in info["devices"]]  # type: ignore[misc]
        self.modules: List[Module] = [Module(**m) for m in native.modules()]
        self.kernels: List[Kernel] = [
            Kernel(id=k["id"], name=k["name"], module=k["module"], params=[Param(*p) for p in k["params"]])
            for k in native.kernels()
        ]
        self.regions: List[Region] = [
            Region(
                id=r["id"],
                name=r["name"],
                size=r["size"],
                align=r["align"],
                dtype=r["dtype"],
                numpy_dtype=np.dtype(r["numpy_dtype"]),
                shape=tuple(r["shape"]),
                scratch=r["scratch"],
                device=r["device"],
                has_initial=r["has_initial"],
                has_expected=r["has_expected"],
                tolerance=r["tolerance"],
                types=[tuple(t) for t in r["types"]],  # type: ignore[misc]
                spread=[tuple(s) for s in r["spread"]],  # type: ignore[misc]
            )
            for r in native.regions()
        ]
        self.bindings: List[Binding] = [Binding(*b) for b in native.bindings()]
        base = ("id", "kind", "label", "depth", "device")
        self.ops: List[Op] = [
            Op(**{k: o[k] for k in base}, detail={k: v for k, v in o.items() if k not in base})
            for o in native.ops()
        ]

    @property
    def source(self) -> str:
        """The file it was opened from, or ``<bytes>``."""
        return self._native.source

    def ptx(self, kernel: str) -> str:
        """The PTX text of the module holding ``kernel`` (a kernel or module name)."""
        return self._native.ptx(kernel)

    def initial(self, name: str) -> np.ndarray:
        """A region's (or binding's) initial contents, with its dtype and shape."""
        return self._native.initial(name)

    def expected(self, name: str) -> np.ndarray:
        """A region's (or binding's) expected final contents, with its dtype and shape."""
        return self._native.expected(name)

    def replayer(
        self, device: str = "cpu", *, engine: str = "jit", threads: int = 0, budget: Optional[int] = None
    ) -> Replayer:
        """Loads the archive on ``device`` (``cpu``, ``cuda``, ``cuda:N``) for repeated :meth:`Replayer.run`.

        On the CPU, ``engine`` is ``jit`` (native code where a kernel allows), ``jit-scalar`` or
        ``interp``; ``threads`` 0 uses every core; ``budget`` bounds the PTX instructions one
        iteration may execute.
        """
        return Replayer(self._native.replayer(device, engine=engine, threads=threads, budget=budget))

    def replay(
        self,
        device: str = "cpu",
        inputs: Optional[Mapping[str, Any]] = None,
        iterations: int = 1,
        check: bool = False,
        outputs: Optional[Mapping[str, Any]] = None,
        **options: Any,
    ) -> ReplayResult:
        """Loads the archive on ``device`` and replays it once or ``iterations`` times.

        See :meth:`Replayer.run` for ``inputs`` and ``outputs``; ``options`` go to :meth:`replayer`.
        ``check=True`` judges the final regions against the archive's expected state.
        """
        return self.replayer(device, **options).run(inputs, iterations=iterations, check=check, outputs=outputs)

    def __repr__(self) -> str:
        producer = self.meta.get("producer", "unknown producer")
        return (
            f"Archive({self.source!r}: {len(self.modules)} modules, {len(self.kernels)} kernels, "
            f"{len(self.regions)} regions, {len(self.bindings)} bindings, {len(self.ops)} ops; {producer})"
        )

    def _repr_markdown_(self) -> str:
        lines = [f"**{self.source}** — format {self.version[0]}.{self.version[1]}, {self.size} bytes"]
        if self.bindings:
            lines.append("\n| binding | direction | region | dtype | shape |\n|---|---|---|---|---|")
            by_name = {r.name: r for r in self.regions}
            for b in self.bindings:
                r = by_name[b.region]
                lines.append(f"| {b.name} | {b.direction} | {b.region} | {r.dtype} | {list(r.shape)} |")
        lines.append(f"\n{len(self.kernels)} kernels: " + ", ".join(k.name for k in self.kernels))
        lines.append(f"\n{len(self.ops)} ops")
        return "\n".join(lines)


def open(source: PathOrBytes) -> Archive:  # noqa: A001 - the package's verb, as in `recap.open`
    """Opens an archive from a path or from its bytes, validating all of its structure.

    Raises :class:`RecapError` naming the section, byte offset and reason when it is not a valid
    archive.
    """
    if isinstance(source, (bytearray, memoryview)):
        source = bytes(source)
    return Archive(_recap.open(source))
