"""A Python program on the CUDA driver API (through ctypes) that records its work with
`recap.capture`: run by test_capture.py in a fresh process, since interposing lasts for the rest
of a process. Arguments: INTERPOSER DRIVER OUT_DIR MODE.

Modes:
  blocks        two `with recap.capture` blocks, each writing its own archive of an axpy launch
                over bindings x (in) and y (in and out); prints each report as JSON
  late          the real driver is loaded before recap.interpose(): prints the error
"""

import ctypes
import json
import sys
from ctypes import byref, c_int, c_uint32, c_uint64, c_void_p, c_float
from pathlib import Path

import numpy as np

import recap

interposer, driver, out_dir, mode = sys.argv[1:5]
ROOT = Path(__file__).resolve().parents[2]
PTX = (ROOT / "native-host" / "recap" / "examples" / "kernels" / "basics.ptx").read_bytes() + b"\0"
N = 1000

if mode == "late":
    ctypes.CDLL(driver, mode=ctypes.RTLD_GLOBAL)
    try:
        recap.interpose(interposer, driver)
    except recap.RecapError as e:
        print(f"refused: {e}")
    sys.exit(0)

recap.interpose(interposer, driver)
# The name the CUDA runtime asks for: glibc hands back the interposer, matched by its SONAME.
cu = ctypes.CDLL("libcuda.so.1")


def ck(result, what):
    if result != 0:
        raise SystemExit(f"{what}: CUresult {result}")


class DeviceArray:
    """A float32 array in device memory, as a GPU library exposes one."""

    def __init__(self, n):
        self.ptr = c_uint64()
        ck(cu.cuMemAlloc_v2(byref(self.ptr), c_uint64(4 * n)), "cuMemAlloc")
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "typestr": "<f4",
            "data": (self.ptr.value, False),
            "version": 3,
            "strides": None,
        }

    def upload(self, host):
        ck(cu.cuMemcpyHtoD_v2(self.ptr, host.ctypes.data_as(c_void_p), c_uint64(host.nbytes)), "cuMemcpyHtoD")

    def download(self, n):
        host = np.empty(n, np.float32)
        ck(cu.cuMemcpyDtoH_v2(host.ctypes.data_as(c_void_p), self.ptr, c_uint64(host.nbytes)), "cuMemcpyDtoH")
        return host


ck(cu.cuInit(0), "cuInit")
dev = c_int()
ck(cu.cuDeviceGet(byref(dev), 0), "cuDeviceGet")
ctx = c_void_p()
ck(cu.cuCtxCreate_v2(byref(ctx), 0, dev), "cuCtxCreate")
module = c_void_p()
ck(cu.cuModuleLoadData(byref(module), ctypes.c_char_p(PTX)), "cuModuleLoadData")
axpy = c_void_p()
ck(cu.cuModuleGetFunction(byref(axpy), module, b"axpy"), "cuModuleGetFunction")

results = []
for block, a in enumerate((2.0, -0.5)):
    x, y = DeviceArray(N), DeviceArray(N)
    xs = np.arange(N, dtype=np.float32)
    ys = np.full(N, 1.0, np.float32)
    x.upload(xs)
    y.upload(ys)
    path = Path(out_dir) / f"block{block}.recap"
    with recap.capture(path, inputs={"x": x, "y": y}, outputs={"y": y}) as cap:
        args = [c_uint64(x.ptr.value), c_uint64(y.ptr.value), c_float(a), c_uint32(N)]
        params = (c_void_p * 4)(*[ctypes.cast(byref(v), c_void_p) for v in args])
        ck(cu.cuLaunchKernel(axpy, (N + 255) // 256, 1, 1, 256, 1, 1, 0, None, params, None), "cuLaunchKernel")
        ck(cu.cuCtxSynchronize(), "cuCtxSynchronize")
    got = y.download(N)
    assert np.allclose(got, a * xs + ys), "the program's own result"
    results.append({"archive": cap.report.archive, "ops": cap.report.ops, "error": cap.report.error,
                    "incomplete": cap.report.incomplete, "kernels": cap.report.kernels, "a": a,
                    "types": cap.report.types, "notes": cap.report.notes})
print(json.dumps(results))
