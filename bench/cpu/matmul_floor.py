"""numpy's float32 matmul of the shapes `triton_matmul.sh` replays: its time (the BLAS floor),
the replay's time against it, and the replay's fp16 result against numpy's (float32 products of
the same fp16 inputs, rounded to fp16).

    python3 matmul_floor.py DIR SIZE "LINE" [KERNEL]
      DIR: the bench's --dump folder; LINE: its output; KERNEL: the bench's kernel name
      (default triton_matmul_f16)
"""
import re
import sys
import time

import numpy as np

folder, size, line = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kernel = sys.argv[4] if len(sys.argv) > 4 else "triton_matmul_f16"
a = np.fromfile(f"{folder}/{kernel}.a.bin", dtype=np.float16).reshape(size, size).astype(np.float32)
b = np.fromfile(f"{folder}/{kernel}.b.bin", dtype=np.float16).reshape(size, size).astype(np.float32)
c = np.fromfile(f"{folder}/{kernel}.bin", dtype=np.float16).reshape(size, size).astype(np.float32)

times, cpu = [], []
for i in range(11):
    t, p = time.perf_counter(), time.process_time()
    ref = np.matmul(a, b)
    if i > 0:  # the first run warms caches and starts the BLAS threads
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - p)
floor = float(np.median(times)) * 1e3
floor_cpu = float(np.median(cpu)) * 1e3

expect = ref.astype(np.float16).astype(np.float32)
err = np.abs(c - expect)
tol = 1e-3 + 1e-2 * np.abs(expect)
bad = int((err > tol).sum())
cfg = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {}).get("name", "?")
print(f"numpy {np.__version__} ({cfg}) matmul float32 {size}^3: median {floor:.1f} ms, cpu {floor_cpu:.1f} ms")
print(f"replay against numpy: max abs error {err.max():.3g}, {bad} of {c.size} elements outside atol 1e-3 + rtol 1e-2")
m = re.search(r"median ([0-9.]+) ms, cpu ([0-9.]+) ms", line)
if m:
    replay, replay_cpu = float(m.group(1)), float(m.group(2))
    print(f"ratio replay / numpy: {replay / floor:.2f}x wall, {replay_cpu / floor_cpu:.2f}x cpu (goal <= 4x)")
sys.exit(1 if bad else 0)
