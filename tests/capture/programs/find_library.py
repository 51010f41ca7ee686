"""Finds the CUDA driver as Python libraries do (ctypes.util.find_library("cuda"), then
ctypes.CDLL of the name it gives) and prints what the device says of itself, one `key value` line
each; with `--limits` it also allocates past the device memory and loads PTX for a newer target.

The driver answers in CUresult codes; every call's code is printed, nothing is assumed."""
import ctypes
import ctypes.util
import sys

name = ctypes.util.find_library("cuda")
print("find_library", name)
lib = ctypes.CDLL(name)
c_int, c_size_t, c_u64 = ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64
print("cuInit", lib.cuInit(0))
dev = c_int()
print("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(dev), 0))
text = ctypes.create_string_buffer(64)
lib.cuDeviceGetName(text, 64, dev)
print("name", text.value.decode())
major, minor = c_int(), c_int()
lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
print("compute_capability", f"{major.value}.{minor.value}")
total = c_size_t()
lib.cuDeviceTotalMem_v2(ctypes.byref(total), dev)
print("total_memory", total.value)
if "--limits" in sys.argv:
    ctx = ctypes.c_void_p()
    print("cuDevicePrimaryCtxRetain", lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    print("cuCtxSetCurrent", lib.cuCtxSetCurrent(ctx))
    ptr = c_u64()
    print("alloc_all", lib.cuMemAlloc_v2(ctypes.byref(ptr), c_size_t(total.value)))
    print("alloc_past", lib.cuMemAlloc_v2(ctypes.byref(ptr), c_size_t(total.value + 1)))
    module = ctypes.c_void_p()
    ptx = b".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n"
    print("load_sm_90", lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(ptx)))
