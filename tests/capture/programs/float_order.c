/* Two reductions whose float result depends on the order the GPU runs blocks in, as real programs
 * have them: a histogram summed with float atomics (`red.global.add.f32`), and a sum where each
 * block adds its partial to a total under a spin lock (`atom.cas` / `atom.exch`). Between
 * cuProfilerStart and cuProfilerStop it zeroes the outputs and launches both; it checks the results
 * on the host against sums in double precision, within float rounding, and prints
 * `float_order: ok <bins> <total>`. Run it twice with different block orders and the last bits
 * differ: the program is nondeterministic, not wrong. */
#define PROGRAM "float_order"
#include "common.h"

#include <math.h>

enum { N = 1024, BINS = 8, HIST_BLOCK = 32, PER_BLOCK = 16 };

/* histogram(vals, bins):     bins[i % 8] += vals[i] for every thread i (float atomics)
 * locked_sum(vals, lock, total): block b sums vals[16b .. 16b + 16) in order, then adds it to
 *                            *total while holding *lock (one thread per block) */
static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".visible .entry histogram(.param .u64 vals, .param .u64 bins)\n"
    "{\n"
    "\t.reg .b32 %r<8>;\n"
    "\t.reg .f32 %f<2>;\n"
    "\t.reg .b64 %rd<8>;\n"
    "\tld.param.u64 %rd1, [vals];\n"
    "\tld.param.u64 %rd2, [bins];\n"
    "\tcvta.to.global.u64 %rd1, %rd1;\n"
    "\tcvta.to.global.u64 %rd2, %rd2;\n"
    "\tmov.u32 %r1, %ctaid.x;\n"
    "\tmov.u32 %r2, %ntid.x;\n"
    "\tmov.u32 %r3, %tid.x;\n"
    "\tmad.lo.s32 %r4, %r1, %r2, %r3;\n"
    "\tmul.wide.u32 %rd3, %r4, 4;\n"
    "\tadd.s64 %rd4, %rd1, %rd3;\n"
    "\tld.global.f32 %f1, [%rd4];\n"
    "\tand.b32 %r5, %r4, 7;\n"
    "\tmul.wide.u32 %rd5, %r5, 4;\n"
    "\tadd.s64 %rd6, %rd2, %rd5;\n"
    "\tred.global.add.f32 [%rd6], %f1;\n"
    "\tret;\n"
    "}\n"
    ".visible .entry locked_sum(.param .u64 vals, .param .u64 lock, .param .u64 total)\n"
    "{\n"
    "\t.reg .pred %p<3>;\n"
    "\t.reg .b32 %r<8>;\n"
    "\t.reg .f32 %f<4>;\n"
    "\t.reg .b64 %rd<8>;\n"
    "\tld.param.u64 %rd1, [vals];\n"
    "\tld.param.u64 %rd2, [lock];\n"
    "\tld.param.u64 %rd3, [total];\n"
    "\tmov.u32 %r1, %ctaid.x;\n"
    "\tmul.lo.u32 %r2, %r1, 16;\n"
    "\tmul.wide.u32 %rd4, %r2, 4;\n"
    "\tadd.s64 %rd5, %rd1, %rd4;\n"
    "\tmov.f32 %f1, 0f00000000;\n"
    "\tmov.u32 %r3, 0;\n"
    "$L_sum:\n"
    "\tld.global.f32 %f2, [%rd5];\n"
    "\tadd.rn.f32 %f1, %f1, %f2;\n"
    "\tadd.s64 %rd5, %rd5, 4;\n"
    "\tadd.u32 %r3, %r3, 1;\n"
    "\tsetp.lt.u32 %p1, %r3, 16;\n"
    "\t@%p1 bra $L_sum;\n"
    "$L_lock:\n"
    "\tatom.global.cas.b32 %r4, [%rd2], 0, 1;\n"
    "\tsetp.ne.u32 %p2, %r4, 0;\n"
    "\t@%p2 bra $L_lock;\n"
    "\tmembar.gl;\n"
    "\tld.volatile.global.f32 %f3, [%rd3];\n"
    "\tadd.rn.f32 %f3, %f3, %f1;\n"
    "\tst.volatile.global.f32 [%rd3], %f3;\n"
    "\tmembar.gl;\n"
    "\tatom.global.exch.b32 %r5, [%rd2], 0;\n"
    "\tret;\n"
    "}\n";

int main(void) {
    CUcontext ctx;
    CUmodule module = open_module(&ctx, PTX);
    CUfunction histogram = get_kernel(module, "histogram");
    CUfunction locked_sum = get_kernel(module, "locked_sum");

    static float vals[N];
    double want_bins[BINS] = {0}, want_total = 0, magnitude = 0;
    for (int i = 0; i < N; i++) {
        vals[i] = (float)((i * 2654435761ULL) % 10007) / 3.0f;
        want_bins[i % BINS] += vals[i];
        want_total += vals[i];
        magnitude += fabs(vals[i]);
    }
    CUdeviceptr dvals, dbins, dlock, dtotal;
    CHECK(cuMemAlloc(&dvals, sizeof vals));
    CHECK(cuMemAlloc(&dbins, BINS * sizeof(float)));
    CHECK(cuMemAlloc(&dlock, sizeof(unsigned)));
    CHECK(cuMemAlloc(&dtotal, sizeof(float)));
    CHECK(cuMemcpyHtoD(dvals, vals, sizeof vals));

    CHECK(cuProfilerStart());
    CHECK(cuMemsetD32(dbins, 0, BINS));
    CHECK(cuMemsetD32(dlock, 0, 1));
    CHECK(cuMemsetD32(dtotal, 0, 1));
    void *hist_params[] = {&dvals, &dbins};
    CHECK(cuLaunchKernel(histogram, N / HIST_BLOCK, 1, 1, HIST_BLOCK, 1, 1, 0, NULL, hist_params, NULL));
    void *sum_params[] = {&dvals, &dlock, &dtotal};
    CHECK(cuLaunchKernel(locked_sum, N / PER_BLOCK, 1, 1, 1, 1, 1, 0, NULL, sum_params, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());

    float bins[BINS], total;
    unsigned lock;
    CHECK(cuMemcpyDtoH(bins, dbins, sizeof bins));
    CHECK(cuMemcpyDtoH(&total, dtotal, sizeof total));
    CHECK(cuMemcpyDtoH(&lock, dlock, sizeof lock));
    /* Float sums in any order lie within n * eps * sum|x| of the exact sum. */
    double bound = N * 1.2e-7 * magnitude;
    for (int b = 0; b < BINS; b++) {
        if (fabs(bins[b] - want_bins[b]) > bound) {
            fprintf(stderr, PROGRAM ": bin %d is %.9g, want %.9g\n", b, bins[b], want_bins[b]);
            return 1;
        }
    }
    if (fabs(total - want_total) > bound || lock != 0) {
        fprintf(stderr, PROGRAM ": total %.9g (want %.9g), lock %u (want 0)\n", total, want_total, lock);
        return 1;
    }
    printf(PROGRAM ": ok %.9g %.9g\n", bins[0], total);
    return 0;
}
