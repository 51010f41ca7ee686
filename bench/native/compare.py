"""Compares the replay's output regions with the native build's: the two ran the same work.

compare.py REPLAY_DIR [NATIVE_DIR]: NAME.bin in the first against NAME.native.bin in the second
(default: the same directory)."""

import struct
import sys
from pathlib import Path

out = Path(sys.argv[1])
native_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else out
for replay in sorted(out.glob("*.bin")):
    if replay.name.endswith(".native.bin"):
        continue
    native = native_dir / (replay.stem + ".native.bin")
    if not native.exists():
        continue
    fmt = "i" if replay.stem == "mandelbrot" else "f"
    a = struct.unpack(f"<{replay.stat().st_size // 4}{fmt}", replay.read_bytes())
    b = struct.unpack(f"<{native.stat().st_size // 4}{fmt}", native.read_bytes())
    diffs = [abs(x - y) for x, y in zip(a, b) if x != y]
    worst = max(diffs, default=0)
    print(f"{replay.stem}: {len(diffs)} of {len(a)} elements differ from native, max abs diff {worst:.3g}")
