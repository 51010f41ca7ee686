"""Type stubs of the native module ``recap._recap`` (Rust, pyo3). Use the ``recap`` package's
wrappers: these are the plain-data calls underneath them."""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

__version__: str

class RecapError(Exception):
    """An error from recap: a bad archive, a failed replay, input that does not fit a region."""

def open(source: Union[str, os.PathLike[str], bytes]) -> Archive: ...
def system_driver() -> Optional[str]: ...

class Archive:
    @property
    def source(self) -> str: ...
    def info(self) -> Dict[str, Any]: ...
    def modules(self) -> List[Dict[str, Any]]: ...
    def kernels(self) -> List[Dict[str, Any]]: ...
    def regions(self) -> List[Dict[str, Any]]: ...
    def bindings(self) -> List[Tuple[str, str, str]]: ...
    def ops(self) -> List[Dict[str, Any]]: ...
    def ptx(self, kernel: str) -> str: ...
    def initial(self, name: str) -> np.ndarray: ...
    def expected(self, name: str) -> np.ndarray: ...
    def replayer(
        self, device: str = "cpu", *, engine: str = "jit", threads: int = 0, budget: Optional[int] = None
    ) -> Replayer: ...

class Replayer:
    @property
    def device(self) -> str: ...
    @property
    def archive(self) -> Archive: ...
    def run(
        self,
        inputs: Optional[Mapping[str, Any]] = None,
        iterations: int = 1,
        check: bool = False,
        outputs: Optional[Mapping[str, Any]] = None,
    ) -> Dict[str, Any]: ...
    def serve(
        self,
        inputs: Optional[Dict[str, Any]] = None,
        outputs: Optional[Dict[str, Any]] = None,
        stream: Optional[int] = None,
        zero_copy: bool = False,
    ) -> Dict[str, Any]: ...

class Buffer:
    """A buffer of an archive being built: a region with its name, dtype and shape."""

    @property
    def name(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> List[int]: ...

Dims = Union[int, Sequence[int]]
Arg = Union[Buffer, Tuple[Buffer, int], int, float, np.generic]

class Builder:
    """Builds one archive from numpy arrays and PTX text through recap's capture API.

    Make every buffer first (:meth:`array`, :meth:`zeros`), load PTX, then record ops
    (:meth:`launch`, :meth:`copy`, :meth:`fill`, :meth:`while_nonzero`, :meth:`if_nonzero`) and
    :meth:`save`. On ``device="cpu"`` no GPU is needed.
    """

    def __init__(self, device: str = "cpu") -> None: ...
    @property
    def device(self) -> str: ...
    def array(self, name: str, array: Any) -> Buffer:
        """A buffer holding a copy of ``array`` (its dtype and shape)."""
    def zeros(self, name: str, shape: Dims, dtype: Any = "float32") -> Buffer:
        """A zeroed buffer of ``shape`` and numpy ``dtype``."""
    def load_ptx(self, name: str, ptx: str) -> List[str]:
        """Loads a PTX module; returns its kernels' names."""
    def launch(self, kernel: str, grid: Dims, block: Dims, args: List[Arg], shared_bytes: int = 0) -> None:
        """Records a launch: a Buffer is a pointer, ``(Buffer, byte_offset)`` a pointer into it, a
        numpy scalar its bytes, an int or float the parameter's size."""
    def copy(self, src: Buffer, dst: Buffer) -> None:
        """Records a copy of all of ``src`` into ``dst`` (the same size in bytes)."""
    def fill(self, buffer: Buffer, value: Any) -> None:
        """Records a fill of every element with ``value`` (converted to the buffer's dtype)."""
    def while_nonzero(self, cond: Buffer, body: Any, max_iterations: int = 0) -> None:
        """Records ``while cond[0] != 0: body(builder)``, tested on the device; ``cond`` is uint32."""
    def if_nonzero(self, cond: Buffer, body: Any) -> None:
        """Records ``if cond[0] != 0: body(builder)``, tested on the device; ``cond`` is uint32."""
    def save(
        self,
        path: Union[str, os.PathLike[str]],
        inputs: Sequence[Tuple[str, Buffer]],
        outputs: Sequence[Tuple[str, Buffer]],
        expected: bool = True,
        rtol: Optional[float] = None,
        atol: Optional[float] = None,
    ) -> None:
        """Writes the archive; with ``expected``, runs the graph once first and keeps the outputs'
        results as the expected state (exact, or within ``rtol``/``atol``)."""
    def read(self, buffer: Buffer) -> np.ndarray:
        """A buffer's current contents (outside a recording)."""
