#!/usr/bin/env python3
"""Regenerates the checked-in PTX beside this script from its CUDA C sources with NVRTC.

Needs libnvrtc (pip install nvidia-cuda-nvrtc-cu12, or a CUDA toolkit). The PTX targets
compute_75 so that every GPU from Turing on JIT-compiles it, and the CPU executor runs it."""
import ctypes, glob, os, sys

def find_nvrtc():
    names = ["libnvrtc.so", "libnvrtc.so.12", "libnvrtc.so.13"]
    try:
        import nvidia.cuda_nvrtc as pkg
        names = [os.path.join(list(pkg.__path__)[0], "lib", n) for n in names] + names
    except ImportError:
        pass
    for n in names:
        try:
            return ctypes.CDLL(n)
        except OSError:
            continue
    sys.exit("libnvrtc not found")

nvrtc = find_nvrtc()
here = os.path.dirname(os.path.abspath(__file__))
for cu in sorted(glob.glob(os.path.join(here, "*.cu"))):
    src = open(cu, "rb").read()
    prog = ctypes.c_void_p()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(cu).encode(), 0, None, None) == 0
    opts = [b"--gpu-architecture=compute_75", b"--std=c++17"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        sys.exit(f"{cu}: {log.value.decode()}")
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetPTX(prog, ptx)
    out = cu[:-3] + ".ptx"
    open(out, "w").write(ptx.value.decode())
    print(f"{os.path.basename(out)}: {len(ptx.value)} bytes")
