"""NVIDIA Warp's CPU graph replay of 1000 launches of a 1-thread kernel: the dispatch anchor.

The same work as `cargo bench -p recap-shared --bench cpu_replay -- dispatch`: a kernel that adds
1 to x[0], launched 1000 times with dim=1, captured once with wp.ScopedCapture(device="cpu") and
replayed with wp.capture_launch. Prints microseconds per launch (median and min over replays, and the process CPU time per launch).
"""

import statistics
import sys
import time

import warp as wp

LAUNCHES = 1000


@wp.kernel
def inc(x: wp.array(dtype=wp.float32)):
    x[0] = x[0] + 1.0


def main():
    wp.config.quiet = True
    wp.init()
    x = wp.zeros(1, dtype=wp.float32, device="cpu")
    wp.launch(inc, dim=1, inputs=[x], device="cpu")  # compile and load the module outside the capture
    with wp.ScopedCapture(device="cpu") as capture:
        for _ in range(LAUNCHES):
            wp.launch(inc, dim=1, inputs=[x], device="cpu")
    graph = capture.graph
    for _ in range(20):
        wp.capture_launch(graph)
    times = []
    deadline = time.perf_counter() + float(sys.argv[1] if len(sys.argv) > 1 else 2.0)
    cpu0 = time.process_time()
    while time.perf_counter() < deadline or len(times) < 50:
        t = time.perf_counter()
        wp.capture_launch(graph)
        times.append(time.perf_counter() - t)
    wp.synchronize_device("cpu")
    cpu = time.process_time() - cpu0
    per = [t * 1e6 / LAUNCHES for t in times]
    print(
        f"warp {wp.__version__} cpu graph: {LAUNCHES} launches of a 1-thread kernel, {len(times)} replays: "
        f"median {statistics.median(per):.4f} us/launch, min {min(per):.4f} us/launch, "
        f"cpu {cpu * 1e6 / (len(times) * LAUNCHES):.4f} us/launch (mean) (x = {x.numpy()[0]:.0f})"
    )


if __name__ == "__main__":
    main()
