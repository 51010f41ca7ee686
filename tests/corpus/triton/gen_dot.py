#!/usr/bin/env python3
"""Writes the corpus cases of Triton kernels that use `tl.dot`, compiled for sm_80 and sm_90.

Each kernel is compiled twice with `triton.compile(..., target=GPUTarget("cuda", ARCH, 32))`,
whatever GPU this runs on: for sm_80 its PTX uses the Ampere tensor-core path (`mma.sync`,
`ldmatrix`, `cp.async`), for sm_90 the Hopper one (`wgmma`, and `stmatrix`, `mbarrier` where
Triton uses them; `.target sm_90a`). Both PTX files are run on the GPU through the CUDA driver API
(the driver compiles sm_80 PTX for a newer GPU), each result is checked against a torch reference
and the two against each other, and the sm_90 run's outputs are the case's expected buffers.

The fp8 matmul exists only for sm_90 (Triton has no fp8 `tl.dot` for sm_80); its case has only
the sm_90 PTX.

Run on an H100 or H200 with Triton 3.6 and torch 2.11:

    python tests/corpus/triton/gen_dot.py            # writes tests/corpus/triton/tr_dot_*/
    python tests/corpus/triton/gen_dot.py --out DIR  # elsewhere

Each case folder holds case.json (the format `recap import-case` reads: buffers with their
initial and expected files, the PTX map with a key per target, the launch), kernel.sm_80.ptx,
kernel.sm_90.ptx and the buffers as raw little-endian files. The case names are added to
index.json beside this script. At the end the script prints every file it wrote.
"""

import argparse
import ctypes
import json
import os
import re
import sys

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

HERE = os.path.dirname(os.path.abspath(__file__))
ARCHS = (80, 90)
# The instructions each target's tensor-core path is expected to use (a missing one is noted).
EXPECT = {80: ("mma.sync", "ldmatrix", "cp.async"), 90: ("wgmma", "stmatrix", "mbarrier")}
WRITTEN = []


@triton.jit
def dot_f16_masked(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # C (M x N, fp16) = A (M x K, fp16, row-major) @ B (K x N, fp16, row-major), fp32 accumulation;
    # M, N and K are not multiples of the blocks, so every load and the store are masked.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + rn[None, :], mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def dot_f16(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # C (M x N, fp16) = A (M x K, fp16) @ B (K x N, fp16), fp32 accumulation, as Triton's JIT
    # compiles it for operands whose sizes are multiples of 16 (1024 and the like): with no mask,
    # aligned pointers and divisible strides it loads 16 bytes at a time, through cp.async on sm_80.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


@triton.jit
def dot_bf16(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # C (M x N, fp32) = A (M x K, bf16) @ B (K x N, bf16), fp32 accumulation, whole blocks.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def dot_fp8(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # C (M x N, fp32) = A (M x K, e4m3) @ B (K x N, e4m3), fp32 accumulation, whole blocks.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
        b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr, L, sm_scale, SEQ: tl.constexpr, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # Flash attention forward, non-causal: per head, O = softmax(Q K^T * sm_scale) V with the online
    # softmax; Q, K, V, O are (heads, SEQ, D) fp16; L (heads, SEQ) fp32 keeps the log-sum-exp.
    start_m = tl.program_id(0)
    head = tl.program_id(1)
    base = head * SEQ * D
    rm = start_m * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :])
    m_i = tl.zeros((BM,), dtype=tl.float32) - float("inf")
    l_i = tl.zeros((BM,), dtype=tl.float32) + 1.0
    acc = tl.zeros((BM, D), dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    for start_n in range(0, SEQ, BN):
        cols = start_n + rn
        k = tl.load(k_ptr + base + cols[None, :] * D + rd[:, None])
        qk = tl.dot(q, k) * qk_scale
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_ptr + base + cols[:, None] * D + rd[None, :])
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(L + head * SEQ + rm, m_i + tl.math.log2(l_i))
    tl.store(o_ptr + base + rm[:, None] * D + rd[None, :], acc.to(tl.float16))


# --- the CUDA driver, for running the sm_80 PTX itself ------------------------------------------

_cuda = None


def cuda():
    global _cuda
    if _cuda is None:
        _cuda = ctypes.CDLL("libcuda.so.1")
        _cuda.cuModuleLoadData.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
        _cuda.cuModuleGetFunction.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_char_p]
        _cuda.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        _cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        _cuda.cuCtxSynchronize.argtypes = []
    return _cuda


def check(what, r):
    if r != 0:
        raise RuntimeError(f"{what} failed with CUresult {r}")


def entry_param_types(ptx, name):
    """The `.param` types of entry `name`, in order (`u64`, `u32`, `f32`...)."""
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(([^)]*)\)", ptx)
    if not m:
        raise RuntimeError(f"no .entry {name} in the PTX")
    return re.findall(r"\.param\s+\.(\w+)", m.group(1))


def run_ptx(ptx, name, grid, block, shared, args):
    """Launches entry `name` of `ptx` through the driver. `args` are the kernel's own arguments
    (torch tensors or (type, value) scalars); the parameters the PTX declares past them are
    Triton's scratch pointers, passed as null."""
    drv = cuda()
    torch.cuda.synchronize()
    mod = ctypes.c_void_p()
    check("cuModuleLoadData", drv.cuModuleLoadData(ctypes.byref(mod), ptx.encode() + b"\0"))
    fn = ctypes.c_void_p()
    check("cuModuleGetFunction", drv.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()))
    if shared > 48 * 1024:
        # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check("cuFuncSetAttribute", drv.cuFuncSetAttribute(fn, 8, shared))
    types = entry_param_types(ptx, name)
    if len(types) < len(args):
        raise RuntimeError(f"{name}: the PTX declares {len(types)} parameters for {len(args)} arguments")
    values = []
    for ty, a in zip(types, list(args) + [None] * (len(types) - len(args))):
        if a is None:
            values.append(ctypes.c_uint64(0))
        elif isinstance(a, torch.Tensor):
            values.append(ctypes.c_uint64(a.data_ptr()))
        elif ty == "f32":
            values.append(ctypes.c_float(a[1]))
        elif ty in ("u32", "b32", "s32"):
            values.append(ctypes.c_int32(a[1]))
        else:
            values.append(ctypes.c_uint64(a[1]))
    ptrs = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    check("cuLaunchKernel", drv.cuLaunchKernel(fn, *grid, *block, shared, None, ptrs, None))
    check("cuCtxSynchronize", drv.cuCtxSynchronize())


# --- cases ----------------------------------------------------------------------------------------

DTYPE = {
    torch.float16: ("f16", "*fp16"),
    torch.bfloat16: ("bf16", "*bf16"),
    torch.float32: ("f32", "*fp32"),
    torch.float8_e4m3fn: ("u8", "*fp8e4nv"),
}


def compile_for(arch, fn, signature, constexprs, num_warps, num_stages):
    """PTX of `fn` for `arch`: (ptx, entry, shared bytes, threads per block)."""
    sig = dict(signature)
    for k in constexprs:
        sig[k] = "constexpr"
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs)
    k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, "num_stages": num_stages})
    ptx = k.asm["ptx"]
    for inst in EXPECT[arch]:
        if inst not in ptx:
            print(f"  note: {fn.__name__}'s sm_{arch} PTX has no {inst}", file=sys.stderr)
    return ptx, k.metadata.name, k.metadata.shared, num_warps * 32


def specialized_for(arch, fn, args, constexprs, num_warps, num_stages):
    """PTX of `fn` as Triton's JIT compiles it when called with `args` (its specialization of
    pointer alignment and of integers divisible by 16 included), for `arch` whatever GPU this is:
    (ptx, entry, shared bytes, threads per block)."""
    drv = triton.runtime.driver.active
    real = drv.get_current_target
    drv.get_current_target = lambda: GPUTarget("cuda", arch, 32)
    try:
        # A fresh JIT function, whose cache holds no kernel of another target.
        k = triton.jit(fn.fn).warmup(*args, **constexprs, num_warps=num_warps, num_stages=num_stages, grid=(1,))
    finally:
        drv.get_current_target = real
    ptx = k.asm["ptx"]
    for inst in EXPECT[arch]:
        if inst not in ptx:
            print(f"  note: {fn.__name__}'s sm_{arch} PTX has no {inst}", file=sys.stderr)
    return ptx, k.metadata.name, k.metadata.shared, num_warps * 32


def compile_all(fn, signature, constexprs, num_warps, num_stages, archs=ARCHS):
    """`{arch: (ptx, entry, shared, threads)}` for every target of `archs`; the targets must agree
    on the entry's name, its parameters and the block size, as one case.json launch serves all."""
    out = {a: compile_for(a, fn, signature, constexprs, num_warps, num_stages) for a in archs}
    targets_agree(fn.__name__, out)
    return out


def targets_agree(name, compiled):
    """Raises unless every target of `compiled` (`{arch: (ptx, entry, shared, threads)}`) has the
    first one's entry name, parameters and block size."""
    archs = list(compiled)
    first = compiled[archs[0]]
    for a, (ptx, entry, _, threads) in compiled.items():
        if entry != first[1] or threads != first[3]:
            raise RuntimeError(f"{name}: sm_{a} compiles to {entry} with {threads} threads, not {first[1]}")
        if entry_param_types(ptx, entry) != entry_param_types(first[0], entry):
            raise RuntimeError(f"{name}: sm_{a}'s PTX declares other parameters than sm_{archs[0]}'s")


def run_all(compiled, grid, outputs, args):
    """Runs every target's PTX on fresh copies of `outputs` (the tensors it writes, by their place
    in `args`) and gives `{arch: [result per output]}`."""
    results = {}
    for arch, (ptx, entry, shared, threads) in compiled.items():
        run_args = list(args)
        fresh = []
        for i in outputs:
            t = args[i].clone()
            run_args[i] = t
            fresh.append(t)
        run_ptx(ptx, entry, grid, (threads, 1, 1), shared, run_args)
        results[arch] = fresh
    return results


def write_case(out, name, compiled, grid, buffers, args, tolerance, source):
    """`compiled`: `{arch: (ptx, entry, shared, threads)}`; `buffers`: (name, initial tensor,
    expected tensor); `args`: the launch's own arguments, a buffer name or (type, value). The
    launch asks for the most shared memory any target's kernel uses."""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    ptx_map = {}
    for arch, (ptx, _, _, _) in compiled.items():
        path = os.path.join(d, f"kernel.sm_{arch}.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        ptx_map[f"sm_{arch}"] = f"kernel.sm_{arch}.ptx"
        WRITTEN.append(path)
    any_ptx, entry, _, threads = next(iter(compiled.values()))
    shared = max(c[2] for c in compiled.values())
    specs = []
    for bname, initial, expected in buffers:
        dtype = DTYPE[initial.dtype][0]
        for which, t in (("in", initial), ("out", expected)):
            path = os.path.join(d, f"{bname}.{which}.bin")
            with open(path, "wb") as f:
                f.write(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
            WRITTEN.append(path)
        specs.append(
            {
                "name": bname,
                "dtype": dtype,
                "count": initial.numel(),
                "initial": f"{bname}.in.bin",
                "expected": f"{bname}.out.bin",
                "shape": list(initial.shape),
            }
        )
    params = []
    for a in args:
        if isinstance(a, str):
            params.append({"kind": "buffer", "name": a})
        else:
            params.append({"kind": "scalar", "type": a[0], "value": a[1]})
    declared = entry_param_types(any_ptx, entry)
    for _ in range(len(declared) - len(args)):
        params.append({"kind": "scalar", "type": "u64", "value": 0, "note": "Triton scratch pointer, unused: null"})
    expected_arch = max(compiled)
    case = {
        "name": name,
        "source": source,
        "ptx": ptx_map,
        "buffers": specs,
        "launches": [
            {
                "entry": entry,
                "grid": list(grid),
                "block": [threads, 1, 1],
                "dynamic_shared_bytes": shared,
                "params": params,
            }
        ],
        "tolerance": tolerance,
        "producer": f"triton {triton.__version__}",
        "expected_from": f"sm_{expected_arch} PTX run through the driver API on {torch.cuda.get_device_name()}",
        "targets_checked": [f"sm_{a}" for a in compiled],
    }
    path = os.path.join(d, "case.json")
    with open(path, "w") as f:
        json.dump(case, f, indent=1)
    WRITTEN.append(path)
    print(f"  wrote {d} (PTX for {', '.join(ptx_map)}; {shared} bytes of shared memory)")


def close(name, got, want, atol, rtol):
    err = (got.float() - want.float()).abs().max().item()
    if not torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol):
        raise RuntimeError(f"{name}: the GPU result is {err} away from torch's")
    print(f"  {name}: max difference from torch {err:.3g}")


def agree(name, results, atol, rtol):
    """Every target's results close to torch's (checked by the caller) and to each other."""
    archs = sorted(results)
    for a in archs[1:]:
        for i, (x, y) in enumerate(zip(results[archs[0]], results[a])):
            close(f"{name} output {i}: sm_{archs[0]} against sm_{a}", x, y, atol, rtol)


def case_f16_masked(out):
    M, N, K, BM, BN, BK = 80, 72, 56, 64, 32, 32
    g = torch.Generator().manual_seed(1)
    a = (torch.randn(M, K, generator=g) / 4).half().cuda()
    b = (torch.randn(K, N, generator=g) / 4).half().cuda()
    c0 = torch.full((M, N), -1.0, dtype=torch.float16).cuda()
    compiled = compile_all(
        dot_f16_masked,
        {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": BM, "BN": BN, "BK": BK},
        num_warps=4,
        num_stages=3,
    )
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN), 1)
    args = [a, b, c0, ("i32", M), ("i32", N), ("i32", K)]
    results = run_all(compiled, grid, [2], args)
    for arch, (c,) in results.items():
        close(f"tr_dot_f16_masked sm_{arch}", c, (a.float() @ b.float()).half(), atol=1e-2, rtol=1e-2)
    agree("tr_dot_f16_masked", results, atol=2e-3, rtol=1e-2)
    write_case(
        out,
        "tr_dot_f16_masked",
        compiled,
        grid,
        [("a", a, a), ("b", b, b), ("c", c0, results[max(results)][0])],
        ["a", "b", "c", ("i32", M), ("i32", N), ("i32", K)],
        {"rtol": 1e-2, "atol": 1e-3},
        "triton (tests/corpus/triton/gen_dot.py: dot_f16_masked)",
    )


def case_f16(out):
    # Blocks of 128x128, K in steps of 32, 4 warps (each a 64x64 tile), 4 stages: one of the
    # configurations Triton's matmul tutorial tunes over for fp16 on the GPU.
    M, N, K, BM, BN, BK = 256, 256, 256, 128, 128, 32
    g = torch.Generator().manual_seed(5)
    a = (torch.randn(M, K, generator=g) / 4).half().cuda()
    b = (torch.randn(K, N, generator=g) / 4).half().cuda()
    c0 = torch.full((M, N), -1.0, dtype=torch.float16).cuda()
    args = [a, b, c0, ("i32", M), ("i32", N), ("i32", K)]
    jit_args = [a, b, c0, M, N, K]
    constexprs = {"BM": BM, "BN": BN, "BK": BK}
    compiled = {arch: specialized_for(arch, dot_f16, jit_args, constexprs, 4, 4) for arch in ARCHS}
    targets_agree("dot_f16", compiled)
    grid = (M // BM, N // BN, 1)
    results = run_all(compiled, grid, [2], args)
    for arch, (c,) in results.items():
        close(f"tr_dot_f16 sm_{arch}", c, (a.float() @ b.float()).half(), atol=1e-2, rtol=1e-2)
    agree("tr_dot_f16", results, atol=2e-3, rtol=1e-2)
    write_case(
        out,
        "tr_dot_f16",
        compiled,
        grid,
        [("a", a, a), ("b", b, b), ("c", c0, results[max(results)][0])],
        ["a", "b", "c", ("i32", M), ("i32", N), ("i32", K)],
        {"rtol": 1e-2, "atol": 1e-3},
        "triton (tests/corpus/triton/gen_dot.py: dot_f16)",
    )


def case_bf16(out):
    M, N, K, BM, BN, BK = 128, 64, 128, 64, 64, 32
    g = torch.Generator().manual_seed(2)
    a = torch.randn(M, K, generator=g).bfloat16().cuda()
    b = torch.randn(K, N, generator=g).bfloat16().cuda()
    c0 = torch.zeros(M, N, dtype=torch.float32).cuda()
    compiled = compile_all(
        dot_bf16,
        {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": BM, "BN": BN, "BK": BK},
        num_warps=4,
        num_stages=3,
    )
    grid = (M // BM, N // BN, 1)
    args = [a, b, c0, ("i32", M), ("i32", N), ("i32", K)]
    results = run_all(compiled, grid, [2], args)
    for arch, (c,) in results.items():
        close(f"tr_dot_bf16 sm_{arch}", c, a.float() @ b.float(), atol=1e-3, rtol=1e-3)
    agree("tr_dot_bf16", results, atol=1e-4, rtol=1e-4)
    write_case(
        out,
        "tr_dot_bf16",
        compiled,
        grid,
        [("a", a, a), ("b", b, b), ("c", c0, results[max(results)][0])],
        ["a", "b", "c", ("i32", M), ("i32", N), ("i32", K)],
        {"rtol": 1e-4, "atol": 1e-4},
        "triton (tests/corpus/triton/gen_dot.py: dot_bf16)",
    )


def case_fp8(out):
    M, N, K, BM, BN, BK = 64, 64, 128, 64, 64, 64
    g = torch.Generator().manual_seed(4)
    a = (torch.randn(M, K, generator=g) / 2).to(torch.float8_e4m3fn).cuda()
    b = (torch.randn(K, N, generator=g) / 2).to(torch.float8_e4m3fn).cuda()
    c0 = torch.zeros(M, N, dtype=torch.float32).cuda()
    compiled = compile_all(
        dot_fp8,
        {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": BM, "BN": BN, "BK": BK},
        num_warps=4,
        num_stages=2,
        archs=(90,),
    )
    grid = (M // BM, N // BN, 1)
    args = [a, b, c0, ("i32", M), ("i32", N), ("i32", K)]
    results = run_all(compiled, grid, [2], args)
    (c,) = results[90]
    close("tr_dot_fp8 sm_90", c, a.float() @ b.float(), atol=1e-3, rtol=1e-3)
    write_case(
        out,
        "tr_dot_fp8",
        compiled,
        grid,
        [("a", a, a), ("b", b, b), ("c", c0, c)],
        ["a", "b", "c", ("i32", M), ("i32", N), ("i32", K)],
        {"rtol": 1e-4, "atol": 1e-4},
        "triton (tests/corpus/triton/gen_dot.py: dot_fp8)",
    )


def case_attention(out):
    H, SEQ, D, BM, BN = 2, 128, 32, 64, 32
    g = torch.Generator().manual_seed(3)
    q = (torch.randn(H, SEQ, D, generator=g) / 2).half().cuda()
    k = (torch.randn(H, SEQ, D, generator=g) / 2).half().cuda()
    v = (torch.randn(H, SEQ, D, generator=g) / 2).half().cuda()
    o0 = torch.zeros(H, SEQ, D, dtype=torch.float16).cuda()
    l0 = torch.zeros(H, SEQ, dtype=torch.float32).cuda()
    scale = 1.0 / D**0.5
    compiled = compile_all(
        attn_fwd,
        {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "L": "*fp32", "sm_scale": "fp32"},
        {"SEQ": SEQ, "D": D, "BM": BM, "BN": BN},
        num_warps=4,
        num_stages=2,
    )
    grid = (SEQ // BM, H, 1)
    args = [q, k, v, o0, l0, ("f32", scale)]
    results = run_all(compiled, grid, [3, 4], args)
    ref = torch.softmax((q.float() @ k.float().transpose(1, 2)) * scale, dim=-1) @ v.float()
    for arch, (o, _) in results.items():
        close(f"tr_dot_attention sm_{arch}", o, ref.half(), atol=1e-2, rtol=1e-2)
    agree("tr_dot_attention", results, atol=2e-3, rtol=1e-2)
    o, lse = results[max(results)]
    write_case(
        out,
        "tr_dot_attention",
        compiled,
        grid,
        [("q", q, q), ("k", k, k), ("v", v, v), ("o", o0, o), ("lse", l0, lse)],
        ["q", "k", "v", "o", "lse", ("f32", scale)],
        {"rtol": 1e-2, "atol": 2e-3},
        "triton (tests/corpus/triton/gen_dot.py: attn_fwd)",
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=HERE, help="the corpus folder to write the cases into")
    p.add_argument("--only", action="append", metavar="CASE", help="write only this case (tr_dot_f16...); may repeat")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # makes torch's primary context current for the driver calls
    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    names = []
    failed = []
    makers = (case_f16_masked, case_f16, case_bf16, case_attention, case_fp8)
    known = ["tr_dot_" + m.__name__.removeprefix("case_") for m in makers]
    for name in args.only or []:
        if name not in known:
            sys.exit(f"--only {name}: no such case (the cases are {', '.join(known)})")
    for make in makers:
        if args.only and "tr_dot_" + make.__name__.removeprefix("case_") not in args.only:
            continue
        print(make.__name__)
        try:
            make(args.out)
        except Exception as e:  # one case that cannot be made does not stop the others
            print(f"  FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            failed.append(make.__name__)
            continue
        names.append("tr_dot_" + make.__name__.removeprefix("case_"))
    index = os.path.join(args.out, "index.json")
    listed = json.load(open(index)) if os.path.exists(index) else []
    for n in names:
        if n not in listed:
            listed.append(n)
    with open(index, "w") as f:
        json.dump(listed, f, indent=1)
    WRITTEN.append(index)
    print(f"\nwrote {len(WRITTEN)} files for {len(names)} case(s):")
    for path in WRITTEN:
        print(f"  {os.path.relpath(path)}")
    if failed:
        sys.exit(f"not written: {', '.join(failed)}")


if __name__ == "__main__":
    main()
