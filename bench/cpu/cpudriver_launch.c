/* The CPU driver's cost per launch: an empty one-thread kernel launched in a loop with
 * cuLaunchKernel (three parameters, as a small numba kernel has after its arrays are packed),
 * closed by one cuCtxSynchronize. What is timed is the driver alone: the parameter packing, the
 * handle lookups, the launch plan and the engine's dispatch of one block.
 *
 *   cc -O2 -o launch bench/cpu/cpudriver_launch.c -I tests/capture/programs -L <folder with libcuda.so> -lcuda
 *   recap run --cpu --sms 1 -- ./launch 200000 */
#define PROGRAM "cpudriver_launch"
#include <time.h>

#include "common.h"

static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry noop(.param .u64 p0, .param .u64 p1, .param .u32 p2)\n"
    "{\n"
    "\tret;\n"
    "}\n";

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    CUcontext ctx;
    CUmodule module = open_module(&ctx, PTX);
    CUfunction noop = get_kernel(module, "noop");
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, 256));
    CHECK(cuMemAlloc(&b, 256));
    unsigned len = 64;
    void *params[] = {&a, &b, &len};
    /* The first launch compiles the kernel to native code: not part of the per-launch cost. */
    CHECK(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    for (int round = 0; round < 3; round++) {
        double t0 = now();
        for (long i = 0; i < n; i++) CHECK(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
        CHECK(cuCtxSynchronize());
        double t1 = now();
        printf("%ld launches: %.0f ns per launch\n", n, (t1 - t0) / n * 1e9);
    }
    return 0;
}
