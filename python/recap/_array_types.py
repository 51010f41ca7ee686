"""The element type of every live device array of a Python program, named to recap's interposer
as a recorded range ends (shared/src/archive/declared.rs says what for).

Two ways in: `with recap.capture(...)` names them as its block ends (`_capture.py`), and
`recap capture` writes this file as `sitecustomize.py` into a folder it puts first on PYTHONPATH,
so Python imports it at start-up in place of any other `sitecustomize`; the one it hides is
imported right after, as if this one were not there, and the interposer calls back as the range
ends. Nothing here changes what the program computes: it only reads arrays' addresses, sizes
and dtypes, and only when recap's interposer asks, as the range ends (and once more as Python
exits, for a range still open then). Any error is swallowed: the capture then has fewer types.
"""
import ctypes
import sys


def _chain():
    """Imports the sitecustomize this one hides, if there is one."""
    import importlib
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.get("sitecustomize")
    saved = list(sys.path)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        sys.modules.pop("sitecustomize", None)
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as e:  # as Python's own site.py does with a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}", file=sys.stderr)
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


# numpy type strings (the array interface's `typestr`) as recap's element types: complex numbers
# are pairs of floats, booleans bytes.
_TYPESTR = {
    "f2": "f16", "f4": "f32", "f8": "f64", "c8": "f32", "c16": "f64",
    "i1": "i8", "u1": "i8", "b1": "i8", "i2": "i16", "u2": "i16",
    "i4": "i32", "u4": "i32", "i8": "i64", "u8": "i64",
}
_TORCH = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
    "complex64": "f32", "complex128": "f64", "int8": "i8", "uint8": "i8", "bool": "i8",
    "int16": "i16", "uint16": "i16", "int32": "i32", "uint32": "i32", "int64": "i64", "uint64": "i64",
}
# JAX and numpy dtype names that the type strings miss.
_NAMED = dict(_TORCH, bfloat16="bf16")


def _span(ptr, shape, strides, itemsize):
    """The first byte and the byte count an array's elements cover (strides in bytes or None)."""
    if any(int(n) == 0 for n in shape):
        return ptr, 0
    if strides is None:
        count = 1
        for n in shape:
            count *= int(n)
        return ptr, count * itemsize
    lo = hi = 0
    for n, s in zip(shape, strides):
        reach = (int(n) - 1) * int(s)
        if reach < 0:
            lo += reach
        else:
            hi += reach
    return ptr + lo, hi - lo + itemsize


def _has_own(o, name):
    """Whether `o`'s own attributes (its instance dictionary) hold `name`, found without running
    any of its code (no `__getattr__`)."""
    try:
        return name in object.__getattribute__(o, "__dict__")
    except Exception:
        return False


def _arrays():
    """(pointer, bytes, element type, what) of every live device array the program holds."""
    import gc

    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None)
    strided = getattr(torch, "strided", None)
    for o in gc.get_objects():
        try:
            # The object's type, not isinstance: isinstance reads `__class__`, which runs code on
            # proxies (torch's deprecated `torch.distributed.reduce_op` warns when touched).
            if tensor is not None and issubclass(type(o), tensor):
                if not o.is_cuda or o.layout != strided or o.is_quantized:
                    continue
                name = str(o.dtype).replace("torch.", "")
                ty = _TORCH.get(name)
                if ty is None:
                    continue
                size = o.element_size()
                ptr, nbytes = _span(o.data_ptr(), o.shape, [s * size for s in o.stride()], size)
                yield ptr, nbytes, ty, "torch." + name
            elif hasattr(type(o), "__cuda_array_interface__") or _has_own(o, "__cuda_array_interface__"):
                cai = o.__cuda_array_interface__
                typestr = cai["typestr"]
                ty = _TYPESTR.get(typestr.lstrip("<>|="))
                if ty is None or typestr.startswith(">"):
                    continue
                ptr, nbytes = _span(cai["data"][0], cai["shape"], cai.get("strides"), int(typestr[2:]))
                yield ptr, nbytes, ty, typestr
        except Exception:
            continue
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "live_arrays"):
        for a in jax.live_arrays():
            try:
                name = str(a.dtype)
                ty = _NAMED.get(name)
                if ty is None:
                    continue
                for shard in a.addressable_shards:
                    data = shard.data
                    if data.devices().pop().platform != "gpu":
                        continue
                    yield data.unsafe_buffer_pointer(), data.nbytes, ty, "jax." + name
            except Exception:
                continue


def declare_arrays(lib):
    """Names every live device array to the interposer `lib` (its `recap_declare`)."""
    declare = lib.recap_declare
    declare.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p]
    declare.restype = ctypes.c_int
    try:
        for ptr, nbytes, ty, what in _arrays():
            if ptr and nbytes > 0:
                declare(ptr, nbytes, ty.encode(), what.encode())
    except Exception:
        pass


def _install():
    import atexit
    import ctypes

    import os

    if "RECAP_REAL_LIBCUDA" not in os.environ:
        return  # not under recap capture
    # The interposer, loaded now (the program loads the same file later, as libcuda.so.1): by
    # its own path where recap named it, else through the folder recap put first on the path.
    try:
        lib = ctypes.CDLL(os.environ.get("RECAP_INTERPOSER") or "libcuda.so.1")
        lib.recap_declare  # noqa: B018 (only there in recap's interposer)
        set_declarer = lib.recap_set_declarer
        gather = lib.recap_gather_declared
    except (AttributeError, OSError):
        return  # a driver that is not recap's interposer
    callback = ctypes.CFUNCTYPE(None)(lambda: declare_arrays(lib))
    set_declarer.argtypes = [ctypes.c_void_p]
    set_declarer(ctypes.cast(callback, ctypes.c_void_p))

    def at_exit():
        # Last of the exit handlers, while arrays in module globals are alive: a range still open
        # gets their types now; after this, Python is gone and must not be called.
        gather()
        set_declarer(None)

    atexit.register(at_exit)
    # The callback must outlive every call the interposer makes to it.
    sys.modules[__name__].__dict__["_recap_callback"] = callback


if __name__ == "sitecustomize":
    _chain()
    try:
        _install()
    except Exception:
        pass
