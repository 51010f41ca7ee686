/* What the test programs share: the check of every driver call, the checksum they print, the start
 * of a driver-API program (a context on device 0 with its PTX loaded) and the two kernels of
 * hand-written PTX that several of them launch.
 *
 * Define PROGRAM (the name its messages start with) before including it. A program that resolves
 * the driver at run time instead of linking it defines ERROR_NAME as its own cuGetErrorName. Every
 * function is `static inline`, so one a program does not call leaves no reference to the driver. */
#ifndef RECAP_PROGRAMS_COMMON_H
#define RECAP_PROGRAMS_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_min.h"

#ifndef PROGRAM
#error "define PROGRAM, the name of the program, before including common.h"
#endif

#ifndef ERROR_NAME
#define ERROR_NAME cuGetErrorName
#endif

static inline void check(CUresult r, const char *what, int line) {
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        ERROR_NAME(r, &name);
        fprintf(stderr, PROGRAM ": %s failed with %s (%d) at line %d\n", what, name, r, line);
        exit(1);
    }
}
#define CHECK(call) check((call), #call, __LINE__)

/* FNV-1a over `len` bytes, continuing from `h` (0xcbf29ce484222325 to start). */
static inline unsigned long long fnv1a(unsigned long long h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* cuInit, a context on device 0 made current, and `ptx` loaded into it. */
static inline CUmodule open_module(CUcontext *ctx, const char *ptx) {
    CUdevice dev;
    CUmodule module;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(ctx, 0, dev));
    CHECK(cuModuleLoadData(&module, ptx));
    return module;
}

static inline CUfunction get_kernel(CUmodule module, const char *name) {
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, module, name));
    return f;
}

/* Two kernels over n elements, one thread each:
 *   scale_add(float *y, const float *x, float a, int n)   y[i] = a * x[i] + y[i]
 *   mix_u32(unsigned *data, unsigned seed, int n)          data[i] = (data[i] * 2654435761) ^ (seed + i) */
#define SCALE_ADD_MIX_PTX                                                                                              \
    ".version 8.0\n"                                                                                                   \
    ".target sm_80\n"                                                                                                  \
    ".address_size 64\n"                                                                                               \
    "\n"                                                                                                               \
    "// y[i] = a * x[i] + y[i] for i < n\n"                                                                            \
    ".visible .entry scale_add(\n"                                                                                     \
    "\t.param .u64 scale_add_param_0,\n"                                                                               \
    "\t.param .u64 scale_add_param_1,\n"                                                                               \
    "\t.param .f32 scale_add_param_2,\n"                                                                               \
    "\t.param .u32 scale_add_param_3\n"                                                                                \
    ")\n"                                                                                                              \
    "{\n"                                                                                                              \
    "\t.reg .pred %p<2>;\n"                                                                                            \
    "\t.reg .f32 %f<5>;\n"                                                                                             \
    "\t.reg .b32 %r<6>;\n"                                                                                             \
    "\t.reg .b64 %rd<8>;\n"                                                                                            \
    "\tld.param.u64 %rd1, [scale_add_param_0];\n"                                                                      \
    "\tld.param.u64 %rd2, [scale_add_param_1];\n"                                                                      \
    "\tld.param.f32 %f1, [scale_add_param_2];\n"                                                                       \
    "\tld.param.u32 %r2, [scale_add_param_3];\n"                                                                       \
    "\tmov.u32 %r3, %ctaid.x;\n"                                                                                       \
    "\tmov.u32 %r4, %ntid.x;\n"                                                                                        \
    "\tmov.u32 %r5, %tid.x;\n"                                                                                         \
    "\tmad.lo.s32 %r1, %r3, %r4, %r5;\n"                                                                               \
    "\tsetp.ge.s32 %p1, %r1, %r2;\n"                                                                                   \
    "\t@%p1 bra $L__scale_add_done;\n"                                                                                 \
    "\tcvta.to.global.u64 %rd3, %rd1;\n"                                                                               \
    "\tcvta.to.global.u64 %rd4, %rd2;\n"                                                                               \
    "\tmul.wide.s32 %rd5, %r1, 4;\n"                                                                                   \
    "\tadd.s64 %rd6, %rd4, %rd5;\n"                                                                                    \
    "\tld.global.f32 %f2, [%rd6];\n"                                                                                   \
    "\tadd.s64 %rd7, %rd3, %rd5;\n"                                                                                    \
    "\tld.global.f32 %f3, [%rd7];\n"                                                                                   \
    "\tfma.rn.f32 %f4, %f2, %f1, %f3;\n"                                                                               \
    "\tst.global.f32 [%rd7], %f4;\n"                                                                                   \
    "$L__scale_add_done:\n"                                                                                            \
    "\tret;\n"                                                                                                         \
    "}\n"                                                                                                              \
    "\n"                                                                                                               \
    "// data[i] = (data[i] * 2654435761) ^ (seed + i) for i < n\n"                                                     \
    ".visible .entry mix_u32(\n"                                                                                       \
    "\t.param .u64 mix_u32_param_0,\n"                                                                                 \
    "\t.param .u32 mix_u32_param_1,\n"                                                                                 \
    "\t.param .u32 mix_u32_param_2\n"                                                                                  \
    ")\n"                                                                                                              \
    "{\n"                                                                                                              \
    "\t.reg .pred %p<2>;\n"                                                                                            \
    "\t.reg .b32 %r<10>;\n"                                                                                            \
    "\t.reg .b64 %rd<5>;\n"                                                                                            \
    "\tld.param.u64 %rd1, [mix_u32_param_0];\n"                                                                        \
    "\tld.param.u32 %r2, [mix_u32_param_1];\n"                                                                         \
    "\tld.param.u32 %r3, [mix_u32_param_2];\n"                                                                         \
    "\tmov.u32 %r4, %ctaid.x;\n"                                                                                       \
    "\tmov.u32 %r5, %ntid.x;\n"                                                                                        \
    "\tmov.u32 %r6, %tid.x;\n"                                                                                         \
    "\tmad.lo.s32 %r1, %r4, %r5, %r6;\n"                                                                               \
    "\tsetp.ge.s32 %p1, %r1, %r3;\n"                                                                                   \
    "\t@%p1 bra $L__mix_u32_done;\n"                                                                                   \
    "\tcvta.to.global.u64 %rd2, %rd1;\n"                                                                               \
    "\tmul.wide.s32 %rd3, %r1, 4;\n"                                                                                   \
    "\tadd.s64 %rd4, %rd2, %rd3;\n"                                                                                    \
    "\tld.global.u32 %r7, [%rd4];\n"                                                                                   \
    "\tmul.lo.s32 %r8, %r7, -1640531535;\n"                                                                            \
    "\tadd.s32 %r9, %r2, %r1;\n"                                                                                       \
    "\txor.b32 %r8, %r8, %r9;\n"                                                                                       \
    "\tst.global.u32 [%rd4], %r8;\n"                                                                                   \
    "$L__mix_u32_done:\n"                                                                                              \
    "\tret;\n"                                                                                                         \
    "}\n"

#endif
