#!/usr/bin/env python3
"""Generate NVIDIA Warp graph-capture (.wrp, APIC format v18) fixtures on a CPU-only machine.

Requires ``pip install warp-lang==1.19.0`` (CPU capture + NVRTC PTX generation work without a GPU).
Run from anywhere:  python3 tests/wrp/generate.py

``generate.py --add NAME...`` writes only the named fixtures (and their modules' PTX) and adds them to
manifest.json, leaving every other file as it is.

``generate.py --out DIR`` run with an older release's Python writes that release's captures into DIR
(saxpy_1k, multi_ops, plain_ops, particles, control_flow; sm_90 PTX only; no golden JSON, as
wrp_dump.py reads format 18 only). generate_versions.py does so for every release from 1.13.0, each in
its own virtual environment. What a release cannot write is listed under "not_written" in DIR's
manifest.json, and where Warp's own replay of a saved file differs from the numpy reference (Warp 1.13
does not record fill_), "warp_replay_differs_from_numpy" says which outputs: the .out.npy files are
always Warp's replay of the saved file.

For every fixture NAME it writes, next to this script:
  NAME.wrp + NAME_modules/      Warp's own capture_save() output (device "cpu", target_arch 0,
                                modules are host ELF .o files made by Warp's LLVM backend)
  NAME.<param>.in.npy           contents of each named input/output before the replay
  NAME.<param>.out.npy          contents after ONE replay of the *saved file*
                                (wp.capture_load -> wp.capture_launch -> Graph.get_param)
  NAME.expected.json            the file decoded by wrp_dump.py (independent reader), for parser goldens
  ptx/                          wp.compile_aot_module(..., use_ptx=True) output for the same Warp
                                modules (block_dim=256 CUDA variant, so a different *module* hash;
                                kernel mangled names match, see manifest.json "ptx")
  manifest.json                 index of everything above

Also asserts that (a) replaying the live capture, (b) replaying the loaded file and (c) a numpy
reference agree, so the .out.npy files are trustworthy.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import sys

import numpy as np
import warp as wp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import wrp_dump  # noqa: E402

# Where this run writes (``--out DIR``): the Warp 1.19 fixtures live in tests/wrp/ itself, every older
# release's in tests/wrp/warp-<version>/ (generate_versions.py runs this script once per release).
OUT = HERE
if sys.argv[1:2] == ["--out"]:
    OUT = os.path.abspath(sys.argv[2])
    del sys.argv[1:3]
    os.makedirs(OUT, exist_ok=True)
# The 1.19 fixtures carry sm_75 and sm_90 PTX; older releases' only sm_90, which keeps them small.
PTX_ARCHS = [75, 90] if OUT == HERE else [90]
DEV = "cpu"
# Fixtures that are ALSO written as a synthetic CUDA-flavoured .wrp (see save_as_cuda_ptx()).
SYNTHETIC_CUDA = ["saxpy_1k", "multi_ops", "particles", "control_flow"] if OUT == HERE else []
SYNTHETIC_ARCH = 90

wp.config.quiet = True
wp.init()

# ---------------------------------------------------------------------------------------------
# Kernels.  One Warp module per fixture (module="..." string) so each capture has its own
# module hash / _modules file; "multi_ops" uses two modules.
# ---------------------------------------------------------------------------------------------


@wp.kernel(module="wrp_saxpy")
def saxpy(a: float, x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = a * x[i] + y[i]


@wp.struct
class Params:
    scale: float
    offset: wp.vec3
    count: int
    weights: wp.array(dtype=float)


@wp.kernel(module="wrp_multi_a")
def scale_kernel(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * s


@wp.kernel(module="wrp_multi_a")
def grid2d_kernel(m: wp.array2d(dtype=float), bias: float):
    i, j = wp.tid()
    m[i, j] = m[i, j] + float(i) * 10.0 + float(j) + bias


@wp.kernel(module="wrp_multi_b")
def struct_kernel(p: Params, pts: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    w = p.weights[i % p.count]
    out[i] = pts[i] * (p.scale * w) + p.offset


@wp.kernel(module="wrp_multi_b")
def add_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):
    i = wp.tid()
    c[i] = a[i] + b[i]


@wp.struct
class Small:
    scale: float
    offset: wp.vec3
    count: int


@wp.kernel(module="wrp_plain")
def small_struct_kernel(p: Small, pts: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = pts[i] * (p.scale * float(i % p.count)) + p.offset


@wp.kernel(module="wrp_plain")
def plain_grid2d(m: wp.array2d(dtype=float), bias: float):
    i, j = wp.tid()
    m[i, j] = m[i, j] + float(i) * 10.0 + float(j) + bias


@wp.kernel(module="wrp_particles")
def apply_gravity(v: wp.array(dtype=wp.vec3), g: wp.vec3, dt: float):
    i = wp.tid()
    v[i] = v[i] + g * dt


@wp.kernel(module="wrp_particles")
def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), dt: float):
    i = wp.tid()
    x[i] = x[i] + v[i] * dt


@wp.kernel(module="wrp_particles")
def collide_ground(
    x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), restitution: float, bounces: wp.array(dtype=wp.int32)
):
    i = wp.tid()
    p = x[i]
    if p[1] < 0.0:
        x[i] = wp.vec3(p[0], -p[1], p[2])
        vel = v[i]
        v[i] = wp.vec3(vel[0], -vel[1] * restitution, vel[2])
        wp.atomic_add(bounces, 0, 1)


@wp.kernel(module="wrp_control")
def add_one(x: wp.array(dtype=float)):
    i = wp.tid()
    x[i] = x[i] + 1.0


@wp.kernel(module="wrp_control")
def dec_counter(counter: wp.array(dtype=wp.int32), parity: wp.array(dtype=wp.int32)):
    c = counter[0] - 1
    counter[0] = c
    parity[0] = c % 2


@wp.kernel(module="wrp_control")
def double_it(y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] * 2.0


@wp.kernel(module="wrp_control")
def add_hundred(y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] + 100.0


@wp.kernel(module="wrp_library")
def make_keys(keys: wp.array(dtype=wp.int32), vals: wp.array(dtype=wp.int32), n: int):
    i = wp.tid()
    keys[i] = (i * 7919) % 97
    vals[i] = i


@wp.kernel(module="wrp_library_more")
def negate_tail(x: wp.array(dtype=wp.int32), first: int):
    i = wp.tid()
    if i >= first:
        x[i] = -x[i]


@wp.kernel(module="wrp_grad")
def sq_loss(x: wp.array(dtype=float), loss: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(loss, 0, x[i] * x[i])


FIXTURES = {}
# What this script writes with Warp 1.19 into tests/wrp/ itself.
LATEST_RELEASE = ["saxpy_1k", "multi_ops", "particles", "control_flow", "library_ops", "library_more", "backward"]
# What generate_versions.py writes with each release before 1.19 (a release that records no library
# routines lists library_ops and library_more under not_written).
OLDER_RELEASES = ["saxpy_1k", "multi_ops", "plain_ops", "particles", "control_flow", "library_ops", "library_more"]


def fixture(fn):
    FIXTURES[fn.__name__] = fn
    return fn


# Each fixture function returns dict(graph, inputs, outputs, reference, modules, notes).
# ``reference`` maps param name -> numpy array expected after one replay (or None = not checked).


@fixture
def saxpy_1k():
    n = 1024
    x = wp.array(np.arange(n, dtype=np.float32) * 0.5, dtype=float, device=DEV)
    y = wp.array(np.linspace(-1.0, 1.0, n, dtype=np.float32), dtype=float, device=DEV)
    x0, y0 = x.numpy().copy(), y.numpy().copy()
    wp.load_module(wp.get_module("wrp_saxpy"), device=DEV)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        wp.launch(saxpy, dim=n, inputs=[2.0, x, y], device=DEV)
    return dict(
        graph=cap.graph,
        inputs={"x": x, "y": y},
        outputs={"y": y},  # y is both input and output -> two binding records named "y"
        reference={"x": x0, "y": np.float32(2.0) * x0 + y0},
        modules=["wrp_saxpy"],
        notes="one launch; y listed in both inputs and outputs (duplicate binding name)",
    )


@fixture
def multi_ops():
    n = 256
    rng = np.random.default_rng(1)
    a = wp.array(rng.standard_normal(n).astype(np.float32), dtype=float, device=DEV)
    b = wp.zeros(n, dtype=float, device=DEV)
    c = wp.zeros(n, dtype=float, device=DEV)
    big = wp.array(np.full(2 * n, -1.0, dtype=np.float32), dtype=float, device=DEV)
    m = wp.array(rng.standard_normal((8, 16)).astype(np.float32), dtype=float, device=DEV)
    pts = wp.array(rng.standard_normal((64, 3)).astype(np.float32), dtype=wp.vec3, device=DEV)
    vout = wp.zeros(64, dtype=wp.vec3, device=DEV)
    weights = wp.array(np.array([0.5, 1.0, 2.0, 4.0], dtype=np.float32), dtype=float, device=DEV)
    ints = wp.array(np.arange(32, dtype=np.int32), dtype=wp.int32, device=DEV)
    p = Params()
    p.scale = 3.0
    p.offset = wp.vec3(1.0, 2.0, 3.0)
    p.count = 4
    p.weights = weights

    init = {k: v.numpy().copy() for k, v in dict(a=a, b=b, c=c, big=big, m=m, pts=pts, vout=vout, ints=ints).items()}
    for mod in ("wrp_multi_a", "wrp_multi_b"):
        wp.load_module(wp.get_module(mod), device=DEV)

    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        wp.launch(scale_kernel, dim=n, inputs=[a, 0.5, b], device=DEV)  # b = a*0.5
        wp.copy(c, b)  # full copy        -> MEMCPY_D2D
        wp.copy(big, c, dest_offset=n // 2, src_offset=8, count=64)  # partial copy with offsets
        b.zero_()  # -> MEMSET value 0
        b.fill_(1.25)  # -> MEMTILE srcsize 4
        wp.launch(add_kernel, dim=n, inputs=[b, c, c], device=DEV)  # c = 1.25 + a*0.5 (in place)
        wp.launch(grid2d_kernel, dim=(8, 16), inputs=[m, 0.25], device=DEV)  # 2-D launch
        vout.fill_(wp.vec3(9.0, 8.0, 7.0))  # -> MEMTILE srcsize 12
        wp.launch(struct_kernel, dim=48, inputs=[p, pts, vout], device=DEV)  # struct by value, partial dim
        ints.fill_(7)  # MEMTILE int32

    # numpy reference
    ra = init["a"]
    rb = np.full(n, 1.25, dtype=np.float32)
    rc = rb + ra * np.float32(0.5)
    rbig = init["big"].copy()
    rbig[n // 2 : n // 2 + 64] = (ra * np.float32(0.5))[8 : 8 + 64]
    ii, jj = np.meshgrid(np.arange(8), np.arange(16), indexing="ij")
    rm = init["m"] + ii.astype(np.float32) * 10.0 + jj.astype(np.float32) + np.float32(0.25)
    rv = np.tile(np.array([9.0, 8.0, 7.0], dtype=np.float32), (64, 1))
    w = np.array([0.5, 1.0, 2.0, 4.0], dtype=np.float32)
    for i in range(48):
        rv[i] = init["pts"][i] * (np.float32(3.0) * w[i % 4]) + np.array([1, 2, 3], dtype=np.float32)
    return dict(
        graph=cap.graph,
        inputs={"a": a, "m": m, "pts": pts},
        outputs={"b": b, "c": c, "big": big, "m_out": m, "vout": vout, "ints": ints},
        reference={"a": ra, "b": rb, "c": rc, "big": rbig, "m": rm, "m_out": rm, "pts": init["pts"], "vout": rv,
                   "ints": np.full(32, 7, dtype=np.int32)},
        modules=["wrp_multi_a", "wrp_multi_b"],
        notes="two modules; 1-D and 2-D launches, struct-by-value param with nested array, full/partial copies, "
              "memset, memtile (4/12-byte values)",
    )


@fixture
def plain_ops():
    n = 32
    rng = np.random.default_rng(3)
    a = wp.array(rng.standard_normal(n).astype(np.float32), dtype=float, device=DEV)
    b = wp.zeros(n, dtype=float, device=DEV)
    c = wp.array(np.full(2 * n, -1.0, dtype=np.float32), dtype=float, device=DEV)
    m = wp.array(rng.standard_normal((4, 8)).astype(np.float32), dtype=float, device=DEV)
    pts = wp.array(rng.standard_normal((16, 3)).astype(np.float32), dtype=wp.vec3, device=DEV)
    vout = wp.zeros(16, dtype=wp.vec3, device=DEV)
    ints = wp.array(np.arange(8, dtype=np.int32), dtype=wp.int32, device=DEV)
    p = Small()
    p.scale = 2.0
    p.offset = wp.vec3(1.0, 2.0, 3.0)
    p.count = 3
    init = {k: v.numpy().copy() for k, v in dict(a=a, m=m, pts=pts).items()}
    wp.load_module(wp.get_module("wrp_plain"), device=DEV)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        wp.copy(b, a)  # full copy
        wp.copy(c, a, dest_offset=n, src_offset=4, count=8)  # partial copy with offsets
        a.zero_()  # memset 0
        b.fill_(1.5)  # a 4-byte fill
        vout.fill_(wp.vec3(9.0, 8.0, 7.0))  # a 12-byte fill
        ints.fill_(7)
        wp.launch(plain_grid2d, dim=(4, 8), inputs=[m, 0.25], device=DEV)  # 2-D launch
        wp.launch(small_struct_kernel, dim=12, inputs=[p, pts, vout], device=DEV)  # struct by value, partial dim
    rc = np.full(2 * n, -1.0, dtype=np.float32)
    rc[n : n + 8] = init["a"][4:12]
    ii, jj = np.meshgrid(np.arange(4), np.arange(8), indexing="ij")
    rm = init["m"] + ii.astype(np.float32) * 10.0 + jj.astype(np.float32) + np.float32(0.25)
    rv = np.tile(np.array([9.0, 8.0, 7.0], dtype=np.float32), (16, 1))
    for i in range(12):
        rv[i] = init["pts"][i] * (np.float32(2.0) * np.float32(i % 3)) + np.array([1, 2, 3], dtype=np.float32)
    return dict(
        graph=cap.graph,
        inputs={"a": a, "m": m, "pts": pts},
        outputs={"b": b, "c": c, "m_out": m, "vout": vout, "ints": ints},
        reference={"a": np.zeros(n, np.float32), "b": np.full(n, 1.5, np.float32), "c": rc, "m": rm, "m_out": rm,
                   "pts": init["pts"], "vout": rv, "ints": np.full(8, 7, dtype=np.int32)},
        modules=["wrp_plain"],
        notes="full/partial copies, memset, fills of 4 and 12 bytes, a 2-D launch, a struct of scalars by value",
        tolerance=1e-5,
    )


@fixture
def particles():
    n = 128
    steps = 10
    dt = 1.0 / 60.0
    rng = np.random.default_rng(7)
    x0 = (rng.random((n, 3)) * np.array([2.0, 1.0, 2.0])).astype(np.float32)
    v0 = (rng.standard_normal((n, 3)) * 2.0).astype(np.float32)
    x = wp.array(x0, dtype=wp.vec3, device=DEV)
    v = wp.array(v0, dtype=wp.vec3, device=DEV)
    hist = wp.zeros(steps * n, dtype=wp.vec3, device=DEV)
    bounces = wp.array(np.array([12345], dtype=np.int32), dtype=wp.int32, device=DEV)
    g = wp.vec3(0.0, -9.8, 0.0)
    wp.load_module(wp.get_module("wrp_particles"), device=DEV)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        bounces.zero_()
        for s in range(steps):
            wp.launch(apply_gravity, dim=n, inputs=[v, g, dt], device=DEV)
            wp.launch(integrate, dim=n, inputs=[x, v, dt], device=DEV)
            wp.launch(collide_ground, dim=n, inputs=[x, v, 0.8, bounces], device=DEV)
            wp.copy(hist, x, dest_offset=s * n, count=n)

    # numpy reference (float32, same operation order; CPU kernels are not fused-multiply-add here)
    rx, rv = x0.copy(), v0.copy()
    rh = np.zeros((steps * n, 3), dtype=np.float32)
    nb = 0
    gg = np.array([0.0, -9.8, 0.0], dtype=np.float32)
    for s in range(steps):
        rv = rv + gg * np.float32(dt)
        rx = rx + rv * np.float32(dt)
        neg = rx[:, 1] < 0.0
        nb += int(neg.sum())
        rx[neg, 1] = -rx[neg, 1]
        rv[neg, 1] = -rv[neg, 1] * np.float32(0.8)
        rh[s * n : (s + 1) * n] = rx
    return dict(
        graph=cap.graph,
        inputs={"x": x, "v": v},
        outputs={"x_out": x, "v_out": v, "history": hist, "bounces": bounces},
        reference={"x": rx, "v": rv, "x_out": rx, "v_out": rv, "history": rh, "bounces": np.array([nb], np.int32)},
        modules=["wrp_particles"],
        notes=f"{steps} steps x (3 launches + 1 partial copy) + 1 memset; atomic_add counter",
        tolerance=1e-5,
    )


@fixture
def control_flow():
    n = 64
    x = wp.zeros(n, dtype=float, device=DEV)
    y = wp.array(np.ones(n, dtype=np.float32), dtype=float, device=DEV)
    z = wp.array(np.arange(n, dtype=np.float32), dtype=float, device=DEV)
    counter = wp.array(np.array([5], dtype=np.int32), dtype=wp.int32, device=DEV)
    parity = wp.zeros(1, dtype=wp.int32, device=DEV)
    flag = wp.array(np.array([0], dtype=np.int32), dtype=wp.int32, device=DEV)
    wp.load_module(wp.get_module("wrp_control"), device=DEV)

    def inner_true():
        wp.launch(double_it, dim=n, inputs=[y], device=DEV)

    def inner_false():
        wp.launch(add_hundred, dim=n, inputs=[y], device=DEV)

    def body():
        wp.launch(add_one, dim=n, inputs=[x], device=DEV)
        wp.launch(dec_counter, dim=1, inputs=[counter, parity], device=DEV)
        wp.capture_if(parity, on_true=inner_true, on_false=inner_false)

    def after_true():
        wp.launch(add_one, dim=n, inputs=[z], device=DEV)

    def after_false():
        wp.launch(double_it, dim=n, inputs=[z], device=DEV)

    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        wp.capture_while(counter, body)
        wp.capture_if(flag, on_true=after_true, on_false=after_false)

    ry = np.ones(n, dtype=np.float32)
    for c in (4, 3, 2, 1, 0):  # counter value after dec in each of the 5 iterations
        ry = ry * 2.0 if c % 2 else ry + 100.0
    return dict(
        graph=cap.graph,
        inputs={"counter": counter, "flag": flag},
        outputs={"x": x, "y": y, "z": z, "counter_out": counter, "parity": parity},
        reference={"counter": np.array([0], np.int32), "flag": np.array([0], np.int32),
                   "x": np.full(n, 5.0, np.float32), "y": ry, "z": np.arange(n, dtype=np.float32) * 2.0,
                   "counter_out": np.array([0], np.int32), "parity": np.array([0], np.int32)},
        modules=["wrp_control"],
        notes="capture_while(counter){add_one; dec_counter; capture_if(parity){double}else{+100}} then "
              "capture_if(flag) with both branches; nested IF inside WHILE",
    )


@fixture
def library_ops():
    n = 64
    keys = wp.zeros(2 * n, dtype=wp.int32, device=DEV)  # radix sort needs 2*n scratch
    vals = wp.zeros(2 * n, dtype=wp.int32, device=DEV)
    scan_in = wp.array(np.arange(1, n + 1, dtype=np.int32), dtype=wp.int32, device=DEV)
    scan_out = wp.zeros(n, dtype=wp.int32, device=DEV)
    fvals = wp.array(np.linspace(0.0, 1.0, n, dtype=np.float32), dtype=float, device=DEV)
    fsum = wp.zeros(1, dtype=float, device=DEV)
    wp.load_module(wp.get_module("wrp_library"), device=DEV)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        wp.launch(make_keys, dim=n, inputs=[keys, vals, n], device=DEV)
        wp.utils.radix_sort_pairs(keys, vals, n)
        wp.utils.array_scan(scan_in, scan_out, inclusive=False)
        wp.utils.array_sum(fvals, out=fsum)
    rk = (np.arange(n) * 7919) % 97
    order = np.argsort(rk, kind="stable")
    return dict(
        graph=cap.graph,
        inputs={"scan_in": scan_in, "fvals": fvals},
        outputs={"keys": keys, "vals": vals, "scan_out": scan_out, "fsum": fsum},
        reference={"scan_out": np.concatenate([[0], np.cumsum(np.arange(1, n + 1))[:-1]]).astype(np.int32),
                   "fsum": np.array([np.linspace(0.0, 1.0, n, dtype=np.float32).sum()], np.float32),
                   "keys_head": rk[order].astype(np.int32), "vals_head": order.astype(np.int32)},
        modules=["wrp_library"],
        notes="RADIX_SORT, SCAN (exclusive int32) and REDUCTION (sum float32) records; these are host-library "
              "ops with no kernel/PTX (an importer must implement them natively)",
        tolerance=1e-5,
    )


@fixture
def library_more():
    # Every library routine recap replays that library_ops leaves out, small: float keys with -0.0,
    # NaNs of both signs, infinities and duplicates; a segmented sort with an empty segment and
    # keys outside every segment; an inclusive scan of vec3s (three components, 12-byte rows); an
    # inner product of vec3s; a float64 sum; a run-length encoding.
    n = 16
    neg_nan = np.array([0xFFC00000], np.uint32).view(np.float32)[0]
    fk = np.array([1.5, -0.0, np.nan, 0.0, -np.inf, -2.5, neg_nan, np.inf, -0.0, 1.5, 3.0, -2.5, 0.0, 7.0, -1.0, 2.0],
                  np.float32)
    fkeys = wp.array(np.concatenate([fk, np.zeros(n, np.float32)]), dtype=float, device=DEV)
    fvals = wp.array(np.concatenate([np.arange(n), np.full(n, -1)]).astype(np.int32), dtype=wp.int32, device=DEV)
    sk = np.array([5, 3, 3, 1, 9, -4, 2, 2, 8, 8, -1, 0, 0, 6, 6, 6], np.int32)
    skeys = wp.array(np.concatenate([sk, np.zeros(n, np.int32)]), dtype=wp.int32, device=DEV)
    svals = wp.array(np.concatenate([np.arange(n), np.zeros(n)]).astype(np.int32), dtype=wp.int32, device=DEV)
    starts = wp.array(np.array([0, 4, 6, 11], np.int32), dtype=wp.int32, device=DEV)
    ends = wp.array(np.array([4, 4, 11, 16], np.int32), dtype=wp.int32, device=DEV)
    rng = np.random.default_rng(11)
    v_in = rng.standard_normal((n, 3)).astype(np.float32)
    vscan_in = wp.array(v_in, dtype=wp.vec3, device=DEV)
    vscan_out = wp.zeros(n, dtype=wp.vec3, device=DEV)
    a0, b0 = rng.standard_normal((n, 3)).astype(np.float32), rng.standard_normal((n, 3)).astype(np.float32)
    va = wp.array(a0, dtype=wp.vec3, device=DEV)
    vb = wp.array(b0, dtype=wp.vec3, device=DEV)
    dot = wp.zeros(1, dtype=float, device=DEV)
    d0 = rng.standard_normal(n) * 1e3
    d64 = wp.array(d0, dtype=wp.float64, device=DEV)
    d64_sum = wp.zeros(1, dtype=wp.float64, device=DEV)
    r0 = np.array([1, 1, 2, 2, 2, 3, 7, 7, 7, 7, 1, 1, 0, 0, 0, 5], np.int32)
    rle_in = wp.array(r0, dtype=wp.int32, device=DEV)
    run_values = wp.array(np.full(n, -9, np.int32), dtype=wp.int32, device=DEV)
    run_lengths = wp.array(np.full(n, -9, np.int32), dtype=wp.int32, device=DEV)
    run_count = wp.zeros(1, dtype=wp.int32, device=DEV)
    wp.load_module(wp.get_module("wrp_library_more"), device=DEV)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        wp.launch(negate_tail, dim=n, inputs=[rle_in, 14], device=DEV)  # the encoding sees the kernel's data
        wp.utils.radix_sort_pairs(fkeys, fvals, n)
        wp.utils.segmented_sort_pairs(skeys, svals, n, starts, ends)
        wp.utils.array_scan(vscan_in, vscan_out, inclusive=True)
        wp.utils.array_inner(va, vb, out=dot)
        wp.utils.array_sum(d64, out=d64_sum)
        wp.utils.runlength_encode(rle_in, run_values, run_lengths, run_count=run_count)
    # Float keys in the order of their radix image (negative: all bits flipped; else the sign bit).
    bits = fk.view(np.uint32)
    image = np.where(bits >> 31 == 1, ~bits, bits | np.uint32(0x80000000))
    order = np.argsort(image, kind="stable")
    sorted_s, sorted_v = sk.copy(), np.arange(n, dtype=np.int32)
    for s, e in [(0, 4), (6, 11), (11, 16)]:
        o = np.argsort(sk[s:e], kind="stable")
        sorted_s[s:e], sorted_v[s:e] = sk[s:e][o], np.arange(s, e, dtype=np.int32)[o]
    rle = np.where(np.arange(n) >= 14, -r0, r0)
    runs = [(v, sum(1 for _ in g)) for v, g in itertools.groupby(rle.tolist())]
    rv, rl = np.full(n, -9, np.int32), np.full(n, -9, np.int32)
    rv[: len(runs)] = [v for v, _ in runs]
    rl[: len(runs)] = [c for _, c in runs]
    return dict(
        graph=cap.graph,
        inputs={"fkeys": fkeys, "skeys": skeys, "vscan_in": vscan_in, "va": va, "vb": vb, "d64": d64,
                "rle_in": rle_in},
        outputs={"fvals": fvals, "svals": svals, "starts": starts, "ends": ends, "vscan_out": vscan_out, "dot": dot,
                 "d64_sum": d64_sum, "run_values": run_values, "run_lengths": run_lengths, "run_count": run_count},
        reference={"vscan_out": np.cumsum(v_in, axis=0, dtype=np.float32), "dot": np.array([np.sum(a0 * b0)], np.float32),
                   "d64_sum": np.array([d0.sum()]), "run_values": rv, "run_lengths": rl,
                   "run_count": np.array([len(runs)], np.int32)},
        # Checked bit for bit: the first n keys and values (the rest is the sort's scratch).
        heads={"fkeys": fk[order].view(np.uint32), "fvals": order.astype(np.int32), "skeys": sorted_s,
               "svals": sorted_v},
        modules=["wrp_library_more"],
        notes="RADIX_SORT of float32 keys (-0.0, NaNs of both signs, infinities, duplicates), SEGMENTED_SORT (an "
              "empty segment, keys outside every segment), SCAN (inclusive, vec3), REDUCTION (inner of vec3 and a "
              "float64 sum), RUNLENGTH_ENCODE",
        tolerance=1e-5,
    )


@fixture
def backward():
    n = 16
    x = wp.array(np.linspace(-1.0, 1.0, n, dtype=np.float32), dtype=float, device=DEV, requires_grad=True)
    loss = wp.zeros(1, dtype=float, device=DEV, requires_grad=True)
    wp.load_module(wp.get_module("wrp_grad"), device=DEV)
    with wp.ScopedCapture(device=DEV, apic=True) as cap:
        tape = wp.Tape()
        with tape:
            wp.launch(sq_loss, dim=n, inputs=[x, loss], device=DEV)
        tape.backward(loss=loss)
    x0 = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    return dict(
        graph=cap.graph,
        inputs={"x": x},
        outputs={"loss": loss, "x_grad": x.grad, "loss_grad": loss.grad},
        reference={"x": x0, "loss": np.array([np.sum(x0 * x0)], np.float32), "x_grad": 2.0 * x0,
                   "loss_grad": np.ones(1, np.float32)},
        modules=["wrp_grad"],
        notes="forward launch + Tape.backward(): backward launch record (is_forward=0, adjoint bindings, "
              "grad DATA_PTR relocs) and the loss.grad seed fill",
        tolerance=1e-5,
    )


# ---------------------------------------------------------------------------------------------


def run_fixture(name, fn, manifest):
    spec = fn()
    g = spec["graph"]
    inputs, outputs = spec["inputs"], spec["outputs"]
    named = {}
    for d in (inputs, outputs):
        for k, a in d.items():
            named.setdefault(k, a)

    # Snapshot "in" contents now: capture_save() snapshots current host memory, and nothing has run yet
    # (CPU capture records without executing).
    before = {k: a.numpy().copy() for k, a in named.items()}
    base = os.path.join(OUT, name)
    shutil.rmtree(base + "_modules", ignore_errors=True)
    wp.capture_save(g, base, inputs=inputs, outputs=outputs)

    # (a) replay the live capture
    wp.capture_launch(g)
    live = {k: a.numpy().copy() for k, a in named.items()}

    # (b) replay the saved file in a freshly loaded graph
    lg = wp.capture_load(base + ".wrp", device=DEV)
    wp.capture_launch(lg)
    loaded = {}
    for k, a in named.items():
        tmp = wp.empty(shape=a.shape, dtype=a.dtype, device=DEV)
        lg.get_param(k, tmp)
        loaded[k] = tmp.numpy().copy()

    tol = spec.get("tolerance", 1e-6)
    checks = []
    differs = {}
    for k in named:
        if live[k].tobytes() != loaded[k].tobytes():  # bytes: NaN keys never compare equal
            raise AssertionError(f"{name}:{k}: live replay and loaded-file replay differ")
        ref = spec["reference"].get(k)
        if ref is not None:
            if OUT != HERE and not np.allclose(loaded[k].reshape(ref.shape), ref, rtol=tol, atol=tol):
                # An older release that does not capture something (Warp 1.13 and fill_) replays
                # without it: its own replay is what the expected states are, and the manifest says so.
                differs[k] = "Warp's replay of the saved file differs from the numpy reference"
                continue
            np.testing.assert_allclose(loaded[k].reshape(ref.shape), ref, rtol=tol, atol=tol, err_msg=f"{name}:{k}")
            checks.append(k)
    for k, want in spec.get("heads", {}).items():  # bit for bit, floats as their bits
        got = loaded[k][: len(want)]
        np.testing.assert_array_equal(got.view(want.dtype) if got.dtype.itemsize == want.dtype.itemsize else got, want,
                                      err_msg=f"{name}:{k}")
        checks.append(f"{k}[:{len(want)}]")
    if name == "library_ops":  # sorted keys/values live in the first n slots of the 2n scratch buffers
        n = len(spec["reference"]["keys_head"])
        np.testing.assert_array_equal(loaded["keys"][:n], spec["reference"]["keys_head"])
        np.testing.assert_array_equal(loaded["vals"][:n], spec["reference"]["vals_head"])
        checks += ["keys[:n]", "vals[:n]"]

    files = [name + ".wrp"]
    files += [f"{name}_modules/{f}" for f in sorted(os.listdir(base + "_modules"))]
    params = {}
    for k, a in named.items():
        np.save(f"{base}.{k}.in.npy", before[k])
        np.save(f"{base}.{k}.out.npy", loaded[k])
        files += [f"{name}.{k}.in.npy", f"{name}.{k}.out.npy"]
        params[k] = {"dtype": str(before[k].dtype), "shape": list(before[k].shape),
                     "warp_dtype": wp._src.types.type_repr(a.dtype), "role": "input" if k in inputs else "output"}

    def count_ops(ops, acc):
        for o in ops:
            acc[o["op"]] = acc.get(o["op"], 0) + 1
            count_ops(o.get("branch_a", []), acc)
            count_ops(o.get("branch_b", []), acc)
        return acc

    entry = {
        "notes": spec["notes"],
        "files": files,
        "params": params,
        "replays": 1,
        "checked_against_numpy": checks,
        "tolerance": tol,
        "warp_modules": spec["modules"],
    }
    if differs:
        entry["warp_replay_differs_from_numpy"] = differs
    # The independent reader (wrp_dump.py) reads format 18, what Warp 1.19 writes.
    if wrp_version(base + ".wrp") == 18:
        dump = wrp_dump.parse_wrp(base + ".wrp")
        with open(base + ".expected.json", "w") as f:
            json.dump(dump, f, indent=1)
        files.append(name + ".expected.json")
        entry["top_level_ops"] = dump["operation_count"]
        entry["op_histogram_including_nested"] = count_ops(dump["operations"], {})
    manifest["fixtures"][name] = entry
    return spec["modules"]


def wrp_version(path):
    """The APIC format version in a .wrp's header (the word after the magic)."""
    with open(path, "rb") as f:
        return int.from_bytes(f.read(8)[4:8], "little")


def save_as_cuda_ptx(name, fn, manifest):
    """Write ``<name>_cuda_sm90.wrp`` with Warp's own native writer (wp_apic_state_save) from a fresh CPU
    capture of the same workload, but registering the modules as CUDA PTX modules (target_arch 90,
    binary_filename = the AOT .sm90.ptx copied into the _modules folder) and the kernels under their
    ``*_cuda_kernel_forward/backward`` entry names with block_dim 256.

    SYNTHETIC: no GPU made this.  Differences from a real CUDA capture are listed in wrp-notes.md
    (launch records keep the CPU values block_dim=0, max_blocks=0, grid_stride=0, smem 0, and the
    module hash is the CPU (block_dim=1) variant's hash, not the hash in the PTX file name).
    Expected outputs are the CPU fixture's ``<name>.*.out.npy`` (same initial data, same ops).
    """
    import ctypes

    core = wp._src.context.runtime.core
    spec = fn()
    g = spec["graph"]
    cap, state = g._apic_capture, g.apic_state
    out_name = f"{name}_cuda_sm{SYNTHETIC_ARCH}"
    base = os.path.join(OUT, out_name)
    mod_dir = base + "_modules"
    shutil.rmtree(mod_dir, ignore_errors=True)
    os.makedirs(mod_dir)
    ptx_dir = os.path.join(OUT, "ptx")
    smem = {}
    for module_hash, info in cap.collected_modules.items():
        mod = wp.get_module(info["module_name"])
        ident = mod.get_module_identifier(mod.options["block_dim"])  # CUDA (block_dim 256) variant
        ptx_file = f"{ident}.sm{SYNTHETIC_ARCH}.ptx"
        shutil.copy2(os.path.join(ptx_dir, ptx_file), os.path.join(mod_dir, ptx_file))
        with open(os.path.join(ptx_dir, ident + ".meta")) as f:
            smem.update(json.load(f))
        core.wp_apic_register_module(
            state, module_hash.encode(), info["module_name"].encode(), ptx_file.encode(), SYNTHETIC_ARCH
        )
    for info in cap.collected_kernels.values():
        fwd = info["forward_name"].replace("_cpu_forward", "_cuda_kernel_forward")
        bwd = info["backward_name"].replace("_cpu_backward", "_cuda_kernel_backward")
        core.wp_apic_register_kernel(
            state, info["kernel_key"].encode(), info["module_hash"].encode(), fwd.encode(), bwd.encode(),
            smem.get(fwd + "_smem_bytes", 0), smem.get(bwd + "_smem_bytes", 0), 256,
        )
    for d in (spec["inputs"], spec["outputs"]):
        for k, a in d.items():
            core.wp_apic_register_binding(state, k.encode(), cap.get_region_id(a))
    seen = {}
    for region_id, base_ptr, capacity, _b in cap._regions.values():
        if region_id not in seen or capacity > seen[region_id][1]:
            seen[region_id] = (base_ptr, capacity)
    for region_id, (base_ptr, capacity) in seen.items():
        core.wp_apic_register_memory_region(state, region_id, capacity, 1, ctypes.c_void_p(base_ptr))
    if not core.wp_apic_state_save(state, (base + ".wrp").encode(), SYNTHETIC_ARCH, None):
        raise RuntimeError(wp._src.context.runtime.get_error_string())
    dump = wrp_dump.parse_wrp(base + ".wrp")
    with open(base + ".expected.json", "w") as f:
        json.dump(dump, f, indent=1)
    manifest["synthetic_cuda"][out_name] = {
        "synthetic": True,
        "same_workload_as": name,
        "expected_outputs": f"{name}.<param>.out.npy (inputs: {name}.<param>.in.npy)",
        "files": [out_name + ".wrp", out_name + ".expected.json"]
        + [f"{out_name}_modules/{f}" for f in sorted(os.listdir(mod_dir))],
    }


def save_with_source(name, fn, manifest):
    """Write ``<name>_cuda_source.wrp`` as ``wp.capture_save(..., source_fallback=True)`` writes a CUDA capture:
    each module's binary a cubin (``wp.compile_aot_module(..., use_ptx=False)``, Warp's own NVRTC, no GPU
    needed) and its generated CUDA source beside it, with the compile recipe and both SHA-256 digests in the
    metadata, and no PTX anywhere: what an importer must compile from source. SYNTHETIC like the
    ``_cuda_sm90`` fixtures (registered through Warp's native writer from a CPU capture of the same work,
    kernels under their CUDA entry names); expected outputs are ``<name>.*.out.npy``.
    """
    import ctypes
    import hashlib
    import tempfile

    from warp._src.apic.types import APIC_CUDA_BINARY_CUBIN, APIC_CUDA_FALLBACK_AVAILABLE, APICCudaCompileRecipe

    core = wp._src.context.runtime.core
    spec = fn()
    g = spec["graph"]
    cap, state = g._apic_capture, g.apic_state
    out_name = f"{name}_cuda_source"
    base = os.path.join(OUT, out_name)
    mod_dir = base + "_modules"
    shutil.rmtree(mod_dir, ignore_errors=True)
    os.makedirs(mod_dir)
    smem = {}
    for module_hash, info in cap.collected_modules.items():
        mod = wp.get_module(info["module_name"])
        ident = mod.get_module_identifier(mod.options["block_dim"])
        with tempfile.TemporaryDirectory() as tmp:
            wp.compile_aot_module(mod, arch=[SYNTHETIC_ARCH], module_dir=tmp, use_ptx=False)
            cubin = f"{ident}.sm{SYNTHETIC_ARCH}.cubin"
            source = f"{ident}.cu"
            for f in (cubin, source):
                shutil.copy2(os.path.join(tmp, f), os.path.join(mod_dir, f))
            with open(os.path.join(tmp, ident + ".meta")) as f:
                smem.update(json.load(f))
        digest = lambda f: hashlib.sha256(open(os.path.join(mod_dir, f), "rb").read()).hexdigest()  # noqa: E731
        core.wp_apic_register_module(state, module_hash.encode(), info["module_name"].encode(), cubin.encode(),
                                     SYNTHETIC_ARCH)
        recipe = APICCudaCompileRecipe()
        recipe.optimization_level = 3
        recipe.fuse_fp = 1
        core.wp_apic_register_cuda_module_artifacts(
            state, module_hash.encode(), digest(cubin).encode(), source.encode(), digest(source).encode(),
            APIC_CUDA_BINARY_CUBIN, APIC_CUDA_FALLBACK_AVAILABLE, ctypes.byref(recipe))
    for info in cap.collected_kernels.values():
        fwd = info["forward_name"].replace("_cpu_forward", "_cuda_kernel_forward")
        bwd = info["backward_name"].replace("_cpu_backward", "_cuda_kernel_backward")
        core.wp_apic_register_kernel(
            state, info["kernel_key"].encode(), info["module_hash"].encode(), fwd.encode(), bwd.encode(),
            smem.get(fwd + "_smem_bytes", 0), smem.get(bwd + "_smem_bytes", 0), 256,
        )
    for d in (spec["inputs"], spec["outputs"]):
        for k, a in d.items():
            core.wp_apic_register_binding(state, k.encode(), cap.get_region_id(a))
    seen = {}
    for region_id, base_ptr, capacity, _b in cap._regions.values():
        if region_id not in seen or capacity > seen[region_id][1]:
            seen[region_id] = (base_ptr, capacity)
    for region_id, (base_ptr, capacity) in seen.items():
        core.wp_apic_register_memory_region(state, region_id, capacity, 1, ctypes.c_void_p(base_ptr))
    if not core.wp_apic_state_save(state, (base + ".wrp").encode(), SYNTHETIC_ARCH, None):
        raise RuntimeError(wp._src.context.runtime.get_error_string())
    manifest.setdefault("synthetic_cuda", {})[out_name] = {
        "synthetic": True,
        "same_workload_as": name,
        "source_fallback": True,
        "expected_outputs": f"{name}.<param>.out.npy (inputs: {name}.<param>.in.npy)",
        "files": [out_name + ".wrp"] + [f"{out_name}_modules/{f}" for f in sorted(os.listdir(mod_dir))],
    }


def build_ptx(module_names, manifest):
    ptx_dir = os.path.join(OUT, "ptx")
    os.makedirs(ptx_dir, exist_ok=True)
    info = {}
    for mod_name in module_names:
        mod = wp.get_module(mod_name)
        before = set(os.listdir(ptx_dir))
        paths = wp.compile_aot_module(mod, arch=PTX_ARCHS, module_dir=ptx_dir, use_ptx=True)
        cuda_hash = mod.get_module_hash(mod.options["block_dim"]).hex()
        if paths is None:  # Warp 1.13 and 1.14 return nothing: the new files are the module's
            paths = sorted(f for f in set(os.listdir(ptx_dir)) - before if f.endswith(".ptx"))
        ptx_files = [os.path.basename(str(p)) for p in paths]
        if OUT != HERE:  # the generated CUDA source is not read by the tests; it doubles a folder's size
            for f in os.listdir(ptx_dir):
                if f.endswith(".cu"):
                    os.remove(os.path.join(ptx_dir, f))
        entries = {}
        for kernel in mod.kernels.values():
            mangled = kernel.get_mangled_name()
            entries[kernel.key] = {
                "cpu_forward": mangled + "_cpu_forward",
                "cuda_forward": mangled + "_cuda_kernel_forward",
                "cuda_backward": mangled + "_cuda_kernel_backward",
            }
            for pf in ptx_files:
                with open(os.path.join(ptx_dir, pf), "rb") as f:
                    text = f.read()
                if (".entry " + mangled + "_cuda_kernel_forward(").encode() not in text:
                    raise AssertionError(f"{pf} lacks entry for {kernel.key}")
        info[mod_name] = {
            "cuda_module_hash": cuda_hash,
            "cuda_block_dim": mod.options["block_dim"],
            "files": [f"ptx/{p}" for p in ptx_files],
            "source": f"ptx/{os.path.basename(str(paths[0])).split('.')[0]}.cu" if OUT == HERE else None,
            "kernels": entries,
        }
    manifest["ptx"] = info


def main():
    if sys.argv[1:2] == ["--add"]:
        add(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--source-fallback"]:
        # ``generate.py --source-fallback NAME``: <NAME>_cuda_source.wrp beside the others (save_with_source).
        with open(os.path.join(OUT, "manifest.json")) as f:
            manifest = json.load(f)
        save_with_source(sys.argv[2], FIXTURES[sys.argv[2]], manifest)
        with open(os.path.join(OUT, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        print(f"ok {sys.argv[2]} (synthetic CUDA sm{SYNTHETIC_ARCH} with its source, no PTX)")
        return
    if sys.argv[1:2] == ["--one"]:
        # One fixture for an older release (see below); the parent gathers the manifest.
        name = sys.argv[2]
        manifest = {"fixtures": {}}
        try:
            modules = run_fixture(name, FIXTURES[name], manifest)
        except Exception as e:  # noqa: BLE001 (what the release refused, in one line for the manifest)
            print(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}", file=sys.stderr)
            sys.exit(1)
        with open(os.path.join(OUT, f".{name}.json"), "w") as f:
            json.dump({"entry": manifest["fixtures"][name], "modules": modules}, f)
        return
    # start clean (only files this script makes)
    for f in os.listdir(OUT):
        p = os.path.join(OUT, f)
        if f.endswith((".wrp", ".npy", ".expected.json")) or f.endswith("_modules") or f in ("ptx", "manifest.json"):
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    manifest = {
        "warp_version": wp.__version__,
        "apic_format_version": None,
        "device": "cpu",
        "ptx_archs": [f"sm_{a}" for a in PTX_ARCHS],
        "fixtures": {},
    }
    mods = []
    only = sys.argv[1:] or (LATEST_RELEASE if OUT == HERE else OLDER_RELEASES)
    manifest["not_written"] = {}
    for name, fn in FIXTURES.items():
        if name not in only:
            continue
        if OUT != HERE:
            # An older release may refuse what a fixture uses, or crash on it: each fixture is written
            # by a process of its own, what went wrong is kept in the manifest, and the fixture is left
            # out for that release.
            import subprocess

            said = os.path.join(OUT, f".{name}.json")
            try:
                done = subprocess.run([sys.executable, __file__, "--out", OUT, "--one", name], capture_output=True,
                                      text=True, timeout=120)
            except subprocess.TimeoutExpired:
                # Warp 1.13 has no IF/WHILE records: its CPU capture_while runs the body without end.
                done = subprocess.CompletedProcess([], 1, "", "Warp did not finish the capture in 120 s")
            if done.returncode != 0 or not os.path.exists(said):
                lines = [x for x in done.stderr.splitlines() if x.strip() and "CUDA warning" not in x]
                why = lines[-1] if lines else f"Warp's process ended with status {done.returncode}"
                if done.returncode < 0:
                    why = f"Warp's process was killed by signal {-done.returncode}"
                manifest["not_written"][name] = why
                for f in os.listdir(OUT):
                    if f.startswith(name + ".") or f == name + "_modules":
                        p = os.path.join(OUT, f)
                        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
                print(f"not written {name}: {why}")
                continue
            with open(said) as f:
                got = json.load(f)
            os.remove(said)
            manifest["fixtures"][name] = got["entry"]
            mods += got["modules"]
        else:
            mods += run_fixture(name, fn, manifest)
        manifest["apic_format_version"] = wrp_version(os.path.join(OUT, name + ".wrp"))
        print(f"ok {name}")
    # Map each fixture module's CPU hash (in the .wrp) to the CUDA variant hash (in ptx/ file names).
    build_ptx(mods, manifest)
    manifest["synthetic_cuda"] = {}
    for name in SYNTHETIC_CUDA:
        if name in manifest["fixtures"]:
            save_as_cuda_ptx(name, FIXTURES[name], manifest)
            print(f"ok {name} (synthetic CUDA sm{SYNTHETIC_ARCH})")
    for name in manifest["fixtures"] if OUT == HERE else []:
        describe(name, manifest)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    total = 0
    for root, _dirs, files in os.walk(OUT):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    print(f"total size of tests/wrp: {total} bytes")


def add(names):
    """``generate.py --add NAME...``: writes the named fixtures (and their modules' PTX) beside the others,
    which it leaves as they are, and adds them to manifest.json."""
    with open(os.path.join(OUT, "manifest.json")) as f:
        manifest = json.load(f)
    mods = []
    for name in names:
        mods += run_fixture(name, FIXTURES[name], manifest)
        print(f"ok {name}")
    ptx = manifest.get("ptx", {})
    build_ptx(mods, manifest)
    ptx.update(manifest["ptx"])
    manifest["ptx"] = ptx
    for name in names if OUT == HERE else []:
        describe(name, manifest)
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


def describe(name, manifest):
    """The manifest's wrp_modules and ptx_entries of fixture ``name``: each module's PTX files, each kernel's entries."""
    d = json.load(open(os.path.join(OUT, name + ".expected.json")))
    manifest["fixtures"][name]["wrp_modules"] = [
        {"module_name": m["module_name"], "cpu_module_hash": m["module_hash"], "binary_filename": m["binary_filename"],
         "ptx": manifest["ptx"].get(m["module_name"], {}).get("files", [])}
        for m in d["metadata"]["modules"]
    ]
    # kernel -> PTX entry: same mangled name (key + kernel hash), suffix _cpu_forward -> _cuda_kernel_forward
    entries = {}
    for k in d["metadata"]["kernels"]:
        mod = next(m for m in d["metadata"]["modules"] if m["module_hash"] == k["module_hash"])
        entry = k["forward_name"].replace("_cpu_forward", "_cuda_kernel_forward")
        for p in manifest["ptx"][mod["module_name"]]["files"]:
            with open(os.path.join(OUT, p), "rb") as f:
                if (".entry " + entry + "(").encode() not in f.read():
                    raise AssertionError(f"{p} lacks {entry}")
        entries[k["kernel_key"]] = {"forward_name": k["forward_name"], "ptx_forward_entry": entry,
                                    "ptx_backward_entry": entry.replace("_forward", "_backward")}
    manifest["fixtures"][name]["ptx_entries"] = entries


if __name__ == "__main__":
    main()
