/* Module variables, as a CUDA C++ program keeps them: a `__constant__ float taps[5]` set before the
 * range (cuModuleGetGlobal + cuMemcpyHtoD: what cudaMemcpyToSymbol does), set again inside it, and a
 * `__device__ unsigned launches` counter the kernels bump. Inside the range: a 5-tap filter, a
 * kernel that reads the taps through a pointer parameter (the address cuModuleGetGlobal gave), a
 * copy of the counter to the host (cudaMemcpyFromSymbol). It checks every value on the host and
 * prints `module_vars: ok <checksum>`. */
#define PROGRAM "module_vars"
#include "common.h"

CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule module, const char *name);

enum { N = 256, TAPS = 5, BLOCK = 64 };

/* fir(out, in, n):      out[i] = sum_k taps[k] * in[i + k] (in has n + TAPS - 1 elements);
 *                       thread 0 of each block adds 1 to launches
 * weigh(out, w, n):     out[i] = out[i] * w[i % TAPS] (w: a pointer to the taps) */
static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    ".const .align 4 .f32 taps[5];\n"
    ".visible .global .align 4 .u32 launches;\n"
    ".visible .entry fir(.param .u64 out, .param .u64 in, .param .u32 n)\n"
    "{\n"
    "\t.reg .pred %p<3>;\n"
    "\t.reg .b32 %r<12>;\n"
    "\t.reg .f32 %f<6>;\n"
    "\t.reg .b64 %rd<12>;\n"
    "\tld.param.u64 %rd1, [out];\n"
    "\tld.param.u64 %rd2, [in];\n"
    "\tld.param.u32 %r1, [n];\n"
    "\tmov.u32 %r2, %ctaid.x;\n"
    "\tmov.u32 %r3, %ntid.x;\n"
    "\tmov.u32 %r4, %tid.x;\n"
    "\tmad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "\tsetp.ne.u32 %p1, %r4, 0;\n"
    "\t@%p1 bra $L_count_done;\n"
    "\tatom.global.add.u32 %r6, [launches], 1;\n"
    "$L_count_done:\n"
    "\tsetp.ge.u32 %p2, %r5, %r1;\n"
    "\t@%p2 bra $L_fir_done;\n"
    "\tmov.f32 %f1, 0f00000000;\n"
    "\tmov.u32 %r7, 0;\n"
    "\tmov.u64 %rd3, taps;\n"
    "$L_tap:\n"
    "\tadd.s32 %r8, %r5, %r7;\n"
    "\tmul.wide.u32 %rd4, %r8, 4;\n"
    "\tadd.s64 %rd5, %rd2, %rd4;\n"
    "\tld.global.f32 %f2, [%rd5];\n"
    "\tmul.wide.u32 %rd6, %r7, 4;\n"
    "\tadd.s64 %rd7, %rd3, %rd6;\n"
    "\tld.const.f32 %f3, [%rd7];\n"
    "\tfma.rn.f32 %f1, %f2, %f3, %f1;\n"
    "\tadd.s32 %r7, %r7, 1;\n"
    "\tsetp.lt.u32 %p1, %r7, 5;\n"
    "\t@%p1 bra $L_tap;\n"
    "\tmul.wide.u32 %rd8, %r5, 4;\n"
    "\tadd.s64 %rd9, %rd1, %rd8;\n"
    "\tst.global.f32 [%rd9], %f1;\n"
    "$L_fir_done:\n"
    "\tret;\n"
    "}\n"
    ".visible .entry weigh(.param .u64 out, .param .u64 w, .param .u32 n)\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<8>;\n"
    "\t.reg .f32 %f<4>;\n"
    "\t.reg .b64 %rd<8>;\n"
    "\tld.param.u64 %rd1, [out];\n"
    "\tld.param.u64 %rd2, [w];\n"
    "\tld.param.u32 %r1, [n];\n"
    "\tmov.u32 %r2, %ctaid.x;\n"
    "\tmov.u32 %r3, %ntid.x;\n"
    "\tmov.u32 %r4, %tid.x;\n"
    "\tmad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "\tsetp.ge.u32 %p1, %r5, %r1;\n"
    "\t@%p1 bra $L_weigh_done;\n"
    "\trem.u32 %r6, %r5, 5;\n"
    "\tmul.wide.u32 %rd3, %r6, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tld.f32 %f1, [%rd4];\n"
    "\tmul.wide.u32 %rd5, %r5, 4;\n"
    "\tadd.s64 %rd6, %rd1, %rd5;\n"
    "\tld.global.f32 %f2, [%rd6];\n"
    "\tmul.rn.f32 %f3, %f2, %f1;\n"
    "\tst.global.f32 [%rd6], %f3;\n"
    "$L_weigh_done:\n"
    "\tret;\n"
    "}\n";

static void fir_host(float *out, const float *in, const float *taps) {
    for (int i = 0; i < N; i++) {
        float acc = 0.0f;
        for (int k = 0; k < TAPS; k++) acc += in[i + k] * taps[k]; /* exact: small integers times dyadic taps */
        out[i] = acc;
    }
}

int main(void) {
    CUcontext ctx;
    CUmodule module = open_module(&ctx, PTX);
    CUfunction fir = get_kernel(module, "fir"), weigh = get_kernel(module, "weigh");
    CUdeviceptr taps, launches;
    size_t taps_size = 0, launches_size = 0;
    CHECK(cuModuleGetGlobal_v2(&taps, &taps_size, module, "taps"));
    CHECK(cuModuleGetGlobal_v2(&launches, &launches_size, module, "launches"));
    if (taps_size != TAPS * sizeof(float) || launches_size != sizeof(unsigned)) {
        fprintf(stderr, "module_vars: taps is %zu bytes and launches %zu\n", taps_size, launches_size);
        return 1;
    }
    /* Before the range, as cudaMemcpyToSymbol would: the taps and a count to start from. */
    const float first[TAPS] = {0.5f, -1.0f, 2.0f, 0.25f, 3.0f};
    const float second[TAPS] = {1.5f, 0.5f, -2.0f, 4.0f, 0.125f};
    unsigned start = 40;
    CHECK(cuMemcpyHtoD(taps, first, sizeof first));
    CHECK(cuMemcpyHtoD(launches, &start, sizeof start));

    static float in[N + TAPS - 1], out[N], want[N], weighed[N];
    for (int i = 0; i < N + TAPS - 1; i++) in[i] = (float)((i * 7) % 13) - 6.0f;
    CUdeviceptr din, dout, dweighed;
    CHECK(cuMemAlloc(&din, sizeof in));
    CHECK(cuMemAlloc(&dout, sizeof out));
    CHECK(cuMemAlloc(&dweighed, sizeof weighed));
    CHECK(cuMemcpyHtoD(din, in, sizeof in));

    unsigned n = N, grid = N / BLOCK, counted = 0;
    CHECK(cuProfilerStart());
    void *fir_params[] = {&dout, &din, &n};
    CHECK(cuLaunchKernel(fir, grid, 1, 1, BLOCK, 1, 1, 0, NULL, fir_params, NULL));
    void *weigh_params[] = {&dout, &taps, &n}; /* a pointer to the variable */
    CHECK(cuLaunchKernel(weigh, grid, 1, 1, BLOCK, 1, 1, 0, NULL, weigh_params, NULL));
    CHECK(cuMemcpyDtoD(dweighed, dout, sizeof out));
    CHECK(cuMemcpyHtoD(taps, second, sizeof second)); /* cudaMemcpyToSymbol inside the range */
    CHECK(cuLaunchKernel(fir, grid, 1, 1, BLOCK, 1, 1, 0, NULL, fir_params, NULL));
    CHECK(cuMemcpyDtoH(&counted, launches, sizeof counted)); /* cudaMemcpyFromSymbol */
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());

    CHECK(cuMemcpyDtoH(out, dout, sizeof out));
    CHECK(cuMemcpyDtoH(weighed, dweighed, sizeof weighed));
    if (counted != start + 2 * grid) {
        fprintf(stderr, "module_vars: launches %u, want %u\n", counted, start + 2 * grid);
        return 1;
    }
    fir_host(want, in, first);
    for (int i = 0; i < N; i++) {
        float w = want[i] * first[i % TAPS];
        if (weighed[i] != w) {
            fprintf(stderr, "module_vars: weighed[%d] %g, want %g\n", i, weighed[i], w);
            return 1;
        }
    }
    fir_host(want, in, second);
    for (int i = 0; i < N; i++) {
        if (out[i] != want[i]) {
            fprintf(stderr, "module_vars: out[%d] %g, want %g\n", i, out[i], want[i]);
            return 1;
        }
    }
    CHECK(cuMemFree(din));
    CHECK(cuMemFree(dout));
    CHECK(cuMemFree(dweighed));
    CHECK(cuModuleUnload(module));
    CHECK(cuCtxDestroy(ctx));
    unsigned long long h = fnv1a(0xcbf29ce484222325ULL, out, sizeof out);
    h = fnv1a(h, weighed, sizeof weighed);
    printf("module_vars: ok %016llx\n", h);
    return 0;
}
