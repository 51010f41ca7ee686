"""Device arrays as a Python framework holds them, for `recap capture`'s array types: one
allocation holding an f32 array, an i32 array and an i16 view over the f32 array's first 8 bytes
(the two disagree there), filled by host-to-device copies only, so no PTX types the bytes. The
arrays expose `__cuda_array_interface__` as CuPy's and Numba's do. The range is the program's
cuProfilerStart/cuProfilerStop; the arrays are alive as it ends. Prints one line, and what the
environment's own sitecustomize (if any) left in RECAP_TEST_CHAINED."""
import ctypes
import ctypes.util
import os
import struct

lib = ctypes.CDLL(ctypes.util.find_library("cuda"))
lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]


def check(what, code):
    if code != 0:
        raise SystemExit(f"{what} failed: CUresult {code}")


class DeviceArray:
    """A framework's array: a pointer, a shape and a numpy type string."""

    def __init__(self, ptr, count, typestr):
        self.ptr, self.count, self.typestr = ptr, count, typestr

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.count,), "typestr": self.typestr, "data": (self.ptr, False), "version": 3}


check("cuInit", lib.cuInit(0))
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
check("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(dev), 0))
check("cuDevicePrimaryCtxRetain", lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
check("cuCtxSetCurrent", lib.cuCtxSetCurrent(ctx))
base = ctypes.c_uint64()
check("cuMemAlloc", lib.cuMemAlloc_v2(ctypes.byref(base), 4096))
floats = DeviceArray(base.value, 256, "<f4")
ints = DeviceArray(base.value + 1024, 256, "<i4")
view = DeviceArray(base.value, 4, "<i2")

check("cuProfilerStart", lib.cuProfilerStart())
data = struct.pack("<256f", *[i * 0.25 for i in range(256)]) + struct.pack("<256i", *range(-128, 128))
buf = ctypes.create_string_buffer(data, len(data))
check("cuMemcpyHtoD", lib.cuMemcpyHtoD_v2(base.value, buf, len(data)))
check("cuCtxSynchronize", lib.cuCtxSynchronize())
check("cuProfilerStop", lib.cuProfilerStop())
print(f"array_types: ok {os.environ.get('RECAP_TEST_CHAINED', '-')}")
