#!/usr/bin/env python3
"""Compiles library.cu to library.ptx with NVRTC 12.0 (PyPI's nvidia-cuda-nvrtc-cu12), for compute_70:
PTX ISA 8.0, which every driver of CUDA 12.0 or newer JIT-compiles for any GPU from Volta on (a
newer NVRTC writes a newer PTX ISA that older drivers refuse). recap-cuda embeds the PTX.

    python generate.py           # writes library.ptx
    python generate.py --check   # exits 1 when library.ptx is not what library.cu compiles to

NVRTC is found in the `nvidia` namespace package of the running Python (pip install
nvidia-cuda-nvrtc-cu12==12.0.76), else as libnvrtc.so on the library path. The PTX was made with the
NVRTC release in NVRTC_RELEASE; another release writes other PTX, so --check with another one
says so and exits 2.
"""

import ctypes
import glob
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "library.cu")
OUTPUT = os.path.join(HERE, "library.ptx")
NVRTC_RELEASE = (12, 0)
OPTIONS = ["--gpu-architecture=compute_70", "--std=c++17"]


def find_nvrtc():
    try:
        import nvidia

        for d in nvidia.__path__:
            for p in sorted(glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so.*"))):
                if "builtins" not in p:
                    return ctypes.CDLL(p)
    except ImportError:
        pass
    for name in ("libnvrtc.so", "libnvrtc.so.12"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    sys.exit("NVRTC not found: pip install nvidia-cuda-nvrtc-cu12==%d.%d.*" % NVRTC_RELEASE)


def compile_ptx(lib, source):
    def check(result, what):
        if result != 0:
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            sys.exit("%s: %s" % (what, lib.nvrtcGetErrorString(result).decode()))

    prog = ctypes.c_void_p()
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"library.cu", 0, None, None), "nvrtcCreateProgram")
    opts = (ctypes.c_char_p * len(OPTIONS))(*[o.encode() for o in OPTIONS])
    result = lib.nvrtcCompileProgram(prog, len(OPTIONS), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if result != 0:
        sys.exit("library.cu does not compile:\n" + log.value.decode(errors="replace"))
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def main():
    lib = find_nvrtc()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    release = (major.value, minor.value)
    with open(SOURCE) as f:
        ptx = compile_ptx(lib, f.read())
    if "--check" in sys.argv[1:]:
        if release != NVRTC_RELEASE:
            print("library.ptx was made by NVRTC %d.%d; this is %d.%d: not compared" % (NVRTC_RELEASE + release))
            sys.exit(2)
        with open(OUTPUT) as f:
            if f.read() != ptx:
                sys.exit("library.ptx is not what library.cu compiles to: run native-host/cuda/kernels/generate.py")
        print("library.ptx is what library.cu compiles to (NVRTC %d.%d)" % release)
        return
    with open(OUTPUT, "w") as f:
        f.write(ptx)
    print("wrote %s (NVRTC %d.%d, %s)" % (OUTPUT, release[0], release[1], " ".join(OPTIONS)))


if __name__ == "__main__":
    main()
