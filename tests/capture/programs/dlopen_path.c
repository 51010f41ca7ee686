/* A program that opens the CUDA driver by its absolute path (argv[1]), as some frameworks do to
 * pin one driver, which LD_LIBRARY_PATH cannot redirect, and finds every entry point with dlsym.
 * It fills a buffer, adds to it with one kernel between cuProfilerStart and cuProfilerStop, checks
 * the result on the host and prints `dlopen_path: ok <sum>`. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_min.h"

static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    "// data[i] = data[i] * 3 + 1 for i < n\n"
    ".visible .entry triple_plus_one(\n"
    "\t.param .u64 triple_plus_one_param_0,\n"
    "\t.param .u32 triple_plus_one_param_1\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<9>;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u64 %rd1, [triple_plus_one_param_0];\n"
    "\tld.param.u32 %r2, [triple_plus_one_param_1];\n"
    "\tmov.u32 %r4, %ctaid.x;\n"
    "\tmov.u32 %r5, %ntid.x;\n"
    "\tmov.u32 %r6, %tid.x;\n"
    "\tmad.lo.s32 %r1, %r4, %r5, %r6;\n"
    "\tsetp.ge.s32 %p1, %r1, %r2;\n"
    "\t@%p1 bra $L__done;\n"
    "\tcvta.to.global.u64 %rd2, %rd1;\n"
    "\tmul.wide.s32 %rd3, %r1, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tld.global.u32 %r7, [%rd4];\n"
    "\tmad.lo.s32 %r8, %r7, 3, 1;\n"
    "\tst.global.u32 [%rd4], %r8;\n"
    "$L__done:\n"
    "\tret;\n"
    "}\n";

enum { N = 500, BLOCK = 128 };

static void *driver;

static void *entry(const char *name) {
    void *f = dlsym(driver, name);
    if (!f) {
        fprintf(stderr, "dlopen_path: no %s in the driver\n", name);
        exit(1);
    }
    return f;
}

static void check(CUresult r, const char *what) {
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "dlopen_path: %s failed with %d\n", what, r);
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc != 2 || argv[1][0] != '/') {
        fprintf(stderr, "usage: dlopen_path /ABSOLUTE/PATH/OF/libcuda.so.1\n");
        return 2;
    }
    driver = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!driver) {
        fprintf(stderr, "dlopen_path: %s\n", dlerror());
        return 1;
    }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))entry("cuInit");
    CUresult (*device_get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))entry("cuDeviceGet");
    CUresult (*ctx_create)(CUcontext *, unsigned, CUdevice) =
        (CUresult(*)(CUcontext *, unsigned, CUdevice))entry("cuCtxCreate_v2");
    CUresult (*ctx_destroy)(CUcontext) = (CUresult(*)(CUcontext))entry("cuCtxDestroy_v2");
    CUresult (*ctx_sync)(void) = (CUresult(*)(void))entry("cuCtxSynchronize");
    CUresult (*load)(CUmodule *, const void *) = (CUresult(*)(CUmodule *, const void *))entry("cuModuleLoadData");
    CUresult (*get_function)(CUfunction *, CUmodule, const char *) =
        (CUresult(*)(CUfunction *, CUmodule, const char *))entry("cuModuleGetFunction");
    CUresult (*alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))entry("cuMemAlloc_v2");
    CUresult (*upload)(CUdeviceptr, const void *, size_t) =
        (CUresult(*)(CUdeviceptr, const void *, size_t))entry("cuMemcpyHtoD_v2");
    CUresult (*download)(void *, CUdeviceptr, size_t) =
        (CUresult(*)(void *, CUdeviceptr, size_t))entry("cuMemcpyDtoH_v2");
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) =
        (CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                     void **, void **))entry("cuLaunchKernel");
    CUresult (*profiler_start)(void) = (CUresult(*)(void))entry("cuProfilerStart");
    CUresult (*profiler_stop)(void) = (CUresult(*)(void))entry("cuProfilerStop");

    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction f;
    check(init(0), "cuInit");
    check(device_get(&dev, 0), "cuDeviceGet");
    check(ctx_create(&ctx, 0, dev), "cuCtxCreate");
    check(load(&module, PTX), "cuModuleLoadData");
    check(get_function(&f, module, "triple_plus_one"), "cuModuleGetFunction");
    static unsigned host[N];
    for (int i = 0; i < N; i++) host[i] = (unsigned)(i * 7);
    CUdeviceptr data;
    check(alloc(&data, sizeof host), "cuMemAlloc");
    check(upload(data, host, sizeof host), "cuMemcpyHtoD");

    check(profiler_start(), "cuProfilerStart");
    int n = N;
    void *params[] = {&data, &n};
    check(launch(f, (N + BLOCK - 1) / BLOCK, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
    check(ctx_sync(), "cuCtxSynchronize");
    check(profiler_stop(), "cuProfilerStop");

    check(download(host, data, sizeof host), "cuMemcpyDtoH");
    unsigned long long sum = 0;
    for (int i = 0; i < N; i++) {
        if (host[i] != (unsigned)(i * 7) * 3u + 1u) {
            fprintf(stderr, "dlopen_path: element %d is %u\n", i, host[i]);
            return 1;
        }
        sum += host[i];
    }
    check(ctx_destroy(ctx), "cuCtxDestroy");
    printf("dlopen_path: ok %llu\n", sum);
    return 0;
}
