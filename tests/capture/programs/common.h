/* What the test programs share: the check of every driver call, the checksum they print, the start
 * of a driver-API program (a context on device 0 with its PTX loaded), the kernels of hand-written
 * PTX that several of them launch (scale_index with its checked run, scale_add and mix_u32) and,
 * for programs that ask for POSIX, the file helpers of those that stand in for compilers.
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

/* cuInit and a context on device 0, made current. */
static inline void open_context(CUcontext *ctx) {
    CUdevice dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(ctx, 0, dev));
}

/* cuInit, a context on device 0 made current, and `ptx` loaded into it. */
static inline CUmodule open_module(CUcontext *ctx, const char *ptx) {
    CUmodule module;
    open_context(ctx);
    CHECK(cuModuleLoadData(&module, ptx));
    return module;
}

static inline CUfunction get_kernel(CUmodule module, const char *name) {
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, module, name));
    return f;
}

/* One kernel over n elements, one thread each, for the `.target` given (a string literal):
 *   scale_index(unsigned *data, unsigned a, int n)        data[i] = data[i] * a + i
 * The programs that load it from an image other than PTX text (a cubin from ptxas, NVRTC, a
 * linker or a compiler's cache) run it through scale_index_checked. */
#define SCALE_INDEX_PTX(target)                                                                                        \
    ".version 8.0\n"                                                                                                   \
    ".target " target "\n"                                                                                             \
    ".address_size 64\n"                                                                                               \
    "\n"                                                                                                               \
    ".visible .entry scale_index(\n"                                                                                   \
    "\t.param .u64 scale_index_param_0,\n"                                                                             \
    "\t.param .u32 scale_index_param_1,\n"                                                                             \
    "\t.param .u32 scale_index_param_2\n"                                                                              \
    ")\n"                                                                                                              \
    "{\n"                                                                                                              \
    "\t.reg .pred %p<2>;\n"                                                                                            \
    "\t.reg .b32 %r<10>;\n"                                                                                            \
    "\t.reg .b64 %rd<5>;\n"                                                                                            \
    "\tld.param.u64 %rd1, [scale_index_param_0];\n"                                                                    \
    "\tld.param.u32 %r2, [scale_index_param_1];\n"                                                                     \
    "\tld.param.u32 %r3, [scale_index_param_2];\n"                                                                     \
    "\tmov.u32 %r4, %ctaid.x;\n"                                                                                       \
    "\tmov.u32 %r5, %ntid.x;\n"                                                                                        \
    "\tmov.u32 %r6, %tid.x;\n"                                                                                         \
    "\tmad.lo.s32 %r1, %r4, %r5, %r6;\n"                                                                               \
    "\tsetp.ge.s32 %p1, %r1, %r3;\n"                                                                                   \
    "\t@%p1 bra $L__done;\n"                                                                                           \
    "\tcvta.to.global.u64 %rd2, %rd1;\n"                                                                               \
    "\tmul.wide.s32 %rd3, %r1, 4;\n"                                                                                   \
    "\tadd.s64 %rd4, %rd2, %rd3;\n"                                                                                    \
    "\tld.global.u32 %r7, [%rd4];\n"                                                                                   \
    "\tmad.lo.s32 %r8, %r7, %r2, %r1;\n"                                                                               \
    "\tst.global.u32 [%rd4], %r8;\n"                                                                                   \
    "$L__done:\n"                                                                                                      \
    "\tret;\n"                                                                                                         \
    "}\n"

/* Runs scale_index (`f`) over 300 elements that start as `init`, between cuProfilerStart and
 * cuProfilerStop, checks every element on the host (init * a + i) and returns their sum. */
static inline unsigned long long scale_index_checked(CUfunction f, unsigned init, unsigned a) {
    enum { N = 300, BLOCK = 128 };
    CUdeviceptr data;
    CHECK(cuMemAlloc(&data, N * sizeof(unsigned)));
    CHECK(cuMemsetD32(data, init, N));
    CHECK(cuProfilerStart());
    unsigned grid = (N + BLOCK - 1) / BLOCK;
    int n = N;
    void *params[] = {&data, &a, &n};
    CHECK(cuLaunchKernel(f, grid, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());

    static unsigned host[N];
    CHECK(cuMemcpyDtoH(host, data, sizeof host));
    unsigned long long sum = 0;
    for (int i = 0; i < N; i++) {
        unsigned want = init * a + (unsigned)i;
        if (host[i] != want) {
            fprintf(stderr, PROGRAM ": data[%d] is %u, want %u\n", i, host[i], want);
            exit(1);
        }
        sum += host[i];
    }
    return sum;
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

/* Files, for programs that ask for POSIX.1-2008 (`#define _POSIX_C_SOURCE 200809L` before any
 * include): the compiler caches, temporary files and compiler runs they stand in for. */
#if defined(_POSIX_C_SOURCE) && _POSIX_C_SOURCE >= 200809L
#include <sys/stat.h>
#include <unistd.h>

/* `len` bytes of `data` written to DIR/NAME. */
static inline void write_file(const char *dir, const char *name, const void *data, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, PROGRAM ": cannot write %s\n", path);
        exit(1);
    }
}

/* The whole file at `path`, its length in `len`; the caller frees it. */
static inline unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(PROGRAM ": fopen");
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc(*len ? *len : 1);
    if (!bytes || fread(bytes, 1, *len, f) != *len) {
        fprintf(stderr, PROGRAM ": reading %s failed\n", path);
        exit(1);
    }
    fclose(f);
    return bytes;
}

/* A fresh temporary file holding `text` (when not NULL); its path in `path`. */
static inline void temp_file(char *path, size_t size, const char *text) {
    snprintf(path, size, "/tmp/" PROGRAM "-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        perror(PROGRAM ": mkstemp");
        exit(1);
    }
    size_t len = text ? strlen(text) : 0;
    if (len && write(fd, text, len) != (ssize_t)len) {
        perror(PROGRAM ": write");
        exit(1);
    }
    close(fd);
}

/* The folder `path`, made unless it is there. */
static inline void make_dir(const char *path) {
    if (mkdir(path, 0755) != 0 && access(path, F_OK) != 0) {
        fprintf(stderr, PROGRAM ": cannot create %s\n", path);
        exit(1);
    }
}
#endif

#endif
