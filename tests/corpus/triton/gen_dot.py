#!/usr/bin/env python3
"""Writes the corpus cases of Triton kernels that use `tl.dot`, compiled for sm_80.

Each kernel is compiled with `triton.compile(..., target=GPUTarget("cuda", 80, 32))`, so its PTX
uses the sm_80 tensor-core path (`mma.sync`, `ldmatrix`, `cp.async`) whatever GPU this runs on.
The expected outputs come from running that very PTX on the GPU through the CUDA driver API (the
driver compiles sm_80 PTX for a newer GPU, e.g. an H100 or H200), and are checked against a torch
reference before anything is written.

Run on a machine with a CUDA GPU, Triton 3.6 and torch:

    python tests/corpus/triton/gen_dot.py            # writes tests/corpus/triton/tr_dot_*/
    python tests/corpus/triton/gen_dot.py --out DIR  # elsewhere

Each case folder holds case.json (the format `recap import-case` reads: buffers with their
initial and expected files, the PTX map, the launch), kernel.sm_80.ptx and the buffers as raw
little-endian files. The case names are added to index.json beside this script.
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
ARCH = 80


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

DTYPE = {torch.float16: ("f16", "*fp16"), torch.bfloat16: ("bf16", "*bf16"), torch.float32: ("f32", "*fp32")}


def compile_sm80(fn, signature, constexprs, num_warps, num_stages):
    sig = dict(signature)
    for k in constexprs:
        sig[k] = "constexpr"
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs)
    k = triton.compile(src, target=GPUTarget("cuda", ARCH, 32), options={"num_warps": num_warps, "num_stages": num_stages})
    ptx = k.asm["ptx"]
    for inst in ("mma.sync", "ldmatrix", "cp.async"):
        if inst not in ptx:
            print(f"  note: {fn.__name__}'s PTX has no {inst}", file=sys.stderr)
    return ptx, k.metadata.name, k.metadata.shared, num_warps * 32


def write_case(out, name, ptx, entry, grid, block, shared, buffers, args, tolerance, source):
    """`buffers`: (name, initial tensor, expected tensor); `args`: the launch's own arguments, a
    buffer name or (type, value)."""
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"kernel.sm_{ARCH}.ptx"), "w") as f:
        f.write(ptx)
    specs = []
    for bname, initial, expected in buffers:
        dtype = DTYPE[initial.dtype][0]
        for which, t in (("in", initial), ("out", expected)):
            with open(os.path.join(d, f"{bname}.{which}.bin"), "wb") as f:
                f.write(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
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
    declared = entry_param_types(ptx, entry)
    for _ in range(len(declared) - len(args)):
        params.append({"kind": "scalar", "type": "u64", "value": 0, "note": "Triton scratch pointer, unused: null"})
    case = {
        "name": name,
        "source": source,
        "ptx": {f"sm_{ARCH}": f"kernel.sm_{ARCH}.ptx"},
        "buffers": specs,
        "launches": [
            {
                "entry": entry,
                "grid": list(grid),
                "block": list(block),
                "dynamic_shared_bytes": shared,
                "params": params,
            }
        ],
        "tolerance": tolerance,
        "producer": f"triton {triton.__version__}",
        "expected_from": f"sm_{ARCH} PTX run through the driver API on {torch.cuda.get_device_name()}",
    }
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
    print(f"  wrote {d}")


def close(name, got, want, atol, rtol):
    err = (got.float() - want.float()).abs().max().item()
    if not torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol):
        raise RuntimeError(f"{name}: the GPU result is {err} away from torch's")
    print(f"  {name}: max difference from torch {err:.3g}")


def case_f16_masked(out):
    M, N, K, BM, BN, BK = 80, 72, 56, 32, 32, 32
    g = torch.Generator().manual_seed(1)
    a = (torch.randn(M, K, generator=g) / 4).half().cuda()
    b = (torch.randn(K, N, generator=g) / 4).half().cuda()
    c0 = torch.full((M, N), -1.0, dtype=torch.float16).cuda()
    c = c0.clone()
    ptx, entry, shared, threads = compile_sm80(
        dot_f16_masked,
        {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": BM, "BN": BN, "BK": BK},
        num_warps=4,
        num_stages=3,
    )
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN), 1)
    run_ptx(ptx, entry, grid, (threads, 1, 1), shared, [a, b, c, ("i32", M), ("i32", N), ("i32", K)])
    close("tr_dot_f16_masked", c, (a.float() @ b.float()).half(), atol=1e-2, rtol=1e-2)
    write_case(
        out,
        "tr_dot_f16_masked",
        ptx,
        entry,
        grid,
        (threads, 1, 1),
        shared,
        [("a", a, a), ("b", b, b), ("c", c0, c)],
        ["a", "b", "c", ("i32", M), ("i32", N), ("i32", K)],
        {"rtol": 1e-2, "atol": 1e-3},
        "triton (tests/corpus/triton/gen_dot.py: dot_f16_masked)",
    )


def case_bf16(out):
    M, N, K, BM, BN, BK = 64, 64, 128, 32, 32, 32
    g = torch.Generator().manual_seed(2)
    a = torch.randn(M, K, generator=g).bfloat16().cuda()
    b = torch.randn(K, N, generator=g).bfloat16().cuda()
    c0 = torch.zeros(M, N, dtype=torch.float32).cuda()
    c = c0.clone()
    ptx, entry, shared, threads = compile_sm80(
        dot_bf16,
        {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"},
        {"BM": BM, "BN": BN, "BK": BK},
        num_warps=4,
        num_stages=3,
    )
    grid = (M // BM, N // BN, 1)
    run_ptx(ptx, entry, grid, (threads, 1, 1), shared, [a, b, c, ("i32", M), ("i32", N), ("i32", K)])
    close("tr_dot_bf16", c, a.float() @ b.float(), atol=1e-3, rtol=1e-3)
    write_case(
        out,
        "tr_dot_bf16",
        ptx,
        entry,
        grid,
        (threads, 1, 1),
        shared,
        [("a", a, a), ("b", b, b), ("c", c0, c)],
        ["a", "b", "c", ("i32", M), ("i32", N), ("i32", K)],
        {"rtol": 1e-4, "atol": 1e-4},
        "triton (tests/corpus/triton/gen_dot.py: dot_bf16)",
    )


def case_attention(out):
    H, SEQ, D, BM, BN = 2, 64, 32, 32, 32
    g = torch.Generator().manual_seed(3)
    q = (torch.randn(H, SEQ, D, generator=g) / 2).half().cuda()
    k = (torch.randn(H, SEQ, D, generator=g) / 2).half().cuda()
    v = (torch.randn(H, SEQ, D, generator=g) / 2).half().cuda()
    o0 = torch.zeros(H, SEQ, D, dtype=torch.float16).cuda()
    l0 = torch.zeros(H, SEQ, dtype=torch.float32).cuda()
    o, lse = o0.clone(), l0.clone()
    scale = 1.0 / D**0.5
    ptx, entry, shared, threads = compile_sm80(
        attn_fwd,
        {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "L": "*fp32", "sm_scale": "fp32"},
        {"SEQ": SEQ, "D": D, "BM": BM, "BN": BN},
        num_warps=4,
        num_stages=2,
    )
    grid = (SEQ // BM, H, 1)
    run_ptx(ptx, entry, grid, (threads, 1, 1), shared, [q, k, v, o, lse, ("f32", scale)])
    ref = torch.softmax((q.float() @ k.float().transpose(1, 2)) * scale, dim=-1) @ v.float()
    close("tr_dot_attention", o, ref.half(), atol=1e-2, rtol=1e-2)
    write_case(
        out,
        "tr_dot_attention",
        ptx,
        entry,
        grid,
        (threads, 1, 1),
        shared,
        [("q", q, q), ("k", k, k), ("v", v, v), ("o", o0, o), ("lse", l0, lse)],
        ["q", "k", "v", "o", "lse", ("f32", scale)],
        {"rtol": 1e-2, "atol": 2e-3},
        "triton (tests/corpus/triton/gen_dot.py: attn_fwd)",
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=HERE, help="the corpus folder to write the cases into")
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # makes torch's primary context current for the driver calls
    names = []
    for make in (case_f16_masked, case_bf16, case_attention):
        print(make.__name__)
        make(args.out)
        names.append("tr_dot_" + make.__name__.removeprefix("case_"))
    index = os.path.join(args.out, "index.json")
    listed = json.load(open(index)) if os.path.exists(index) else []
    for n in names:
        if n not in listed:
            listed.append(n)
    with open(index, "w") as f:
        json.dump(listed, f, indent=1)


if __name__ == "__main__":
    main()
