/* A program on the CUDA driver API, linked with -lcuda, that does what a capture must survive: work
 * the driver refuses, a device copy whose areas overlap, a code image whose ELF header lies, a
 * kernel whose parameters sit at offsets their sizes do not divide, and every way a program can
 * end. The first argument picks the mode; each prints `capture_edges: ok <checksum>` when the
 * values it reads back are right.
 *
 *   refused      between cuProfilerStart and cuProfilerStop: a launch, a launch of an empty grid, a
 *                launch of a 4096-thread block, a device copy within one buffer whose source and
 *                destination overlap, a launch of a kernel whose module was unloaded, a launch
 *   layout       a kernel shipped as machine code only (so a capture takes its layout from
 *                cuFuncGetParamInfo) whose parameters are a u32 at 0, an 8-byte struct at 4, a
 *                3-byte one at 12 and a pointer at 16
 *   lying-elf    cuModuleLoadData of a cubin whose section table lies far past the image (the
 *                driver reads only what it needs), then a launch of a PTX kernel
 *   exit, abort, no-teardown
 *                a launch and its result read back, then the end of the program by _exit(0), by
 *                abort(), or by returning from main with the context and buffers still alive */
#define PROGRAM "capture_edges"
#include <unistd.h>

#include "common.h"

static const char *PTX = SCALE_ADD_MIX_PTX;

/* What the machine code of `layout` runs: out[i] = pair.a * i + pair.b + tag[2] for i < n. */
static const char *PAIR_PTX =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry affine_pair(\n"
    "\t.param .u32 affine_pair_param_0,\n"
    "\t.param .align 4 .b8 affine_pair_param_1[8],\n"
    "\t.param .b8 affine_pair_param_2[3],\n"
    "\t.param .u64 affine_pair_param_3\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b16 %rs<2>;\n"
    "\t.reg .b32 %r<10>;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u32 %r1, [affine_pair_param_0];\n"
    "\tld.param.u32 %r2, [affine_pair_param_1];\n"
    "\tld.param.u32 %r3, [affine_pair_param_1+4];\n"
    "\tld.param.u8 %rs1, [affine_pair_param_2+2];\n"
    "\tcvt.u32.u16 %r4, %rs1;\n"
    "\tld.param.u64 %rd1, [affine_pair_param_3];\n"
    "\tmov.u32 %r5, %ctaid.x;\n"
    "\tmov.u32 %r6, %ntid.x;\n"
    "\tmov.u32 %r7, %tid.x;\n"
    "\tmad.lo.s32 %r8, %r5, %r6, %r7;\n"
    "\tsetp.ge.u32 %p1, %r8, %r1;\n"
    "\t@%p1 bra $L__done;\n"
    "\tcvta.to.global.u64 %rd2, %rd1;\n"
    "\tmul.wide.u32 %rd3, %r8, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tmad.lo.s32 %r9, %r8, %r2, %r3;\n"
    "\tadd.s32 %r9, %r9, %r4;\n"
    "\tst.global.u32 [%rd4], %r9;\n"
    "$L__done:\n"
    "\tret;\n"
    "}\n";

enum { N = 1000, BLOCK = 128, SHIFT = 16 };

static void put16(unsigned char *p, unsigned v) { p[0] = v & 0xff, p[1] = (v >> 8) & 0xff; }
static void put32(unsigned char *p, unsigned long v) { for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff; }
static void put64(unsigned char *p, unsigned long long v) { for (int i = 0; i < 8; i++) p[i] = (v >> (8 * i)) & 0xff; }

/* The CPU driver's machine code: a 64-byte ELF header (e_machine 0x4352) and the PTX it runs. */
static void cpu_elf(unsigned char *elf, const char *ptx) {
    memcpy(elf, "\x7f" "ELF", 4);
    elf[4] = 2; /* 64-bit */
    elf[5] = 1; /* little-endian */
    elf[6] = 1; /* ELF version */
    put16(elf + 16, 2);      /* executable */
    put16(elf + 18, 0x4352); /* the CPU driver's machine */
    put32(elf + 20, 1);
    put16(elf + 52, 64); /* e_ehsize */
    memcpy(elf + 64, ptx, strlen(ptx) + 1);
}

/* A fat binary container of one sm_90 cubin holding `ptx` as the CPU driver's machine code. */
static unsigned char *machine_code_fatbin(const char *ptx) {
    size_t payload = (64 + strlen(ptx) + 1 + 7) / 8 * 8;
    unsigned char *f = calloc(1, 16 + 64 + payload);
    if (!f) exit(1);
    put32(f, 0xBA55ED50u);      /* container magic */
    put16(f + 4, 1);            /* version */
    put16(f + 6, 16);           /* header size */
    put64(f + 8, 64 + payload); /* what follows the header */
    put16(f + 16, 2);           /* a cubin */
    put32(f + 20, 64);          /* entry header size */
    put64(f + 24, payload);     /* payload size */
    put32(f + 44, 90);          /* sm_90 */
    cpu_elf(f + 80, ptx);
    return f;
}

static CUresult launch(CUfunction f, unsigned grid, unsigned block, void **params) {
    return cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL);
}

static unsigned long long finish(const float *y, size_t n) {
    unsigned long long h = fnv1a(0xcbf29ce484222325ULL, y, n * sizeof *y);
    printf("capture_edges: ok %016llx\n", h);
    fflush(stdout);
    return h;
}

/* y = 2.5 x + y, read back and checked; what every mode but `layout` starts with. */
static int scale_add_once(CUfunction scale_add, CUdeviceptr dx, CUdeviceptr dy, float *y) {
    int n = N;
    float a = 2.5f;
    void *params[] = {&dy, &dx, &a, &n};
    CHECK(launch(scale_add, (N + BLOCK - 1) / BLOCK, BLOCK, params));
    CHECK(cuMemcpyDtoH(y, dy, N * sizeof *y));
    for (int i = 0; i < N; i++) {
        float want = 2.5f * (float)(1 + i % 7) + 0.25f * (float)i;
        if (y[i] != want) {
            fprintf(stderr, "capture_edges: y[%d] is %g, want %g\n", i, y[i], want);
            return 1;
        }
    }
    return 0;
}

static int refused(CUfunction scale_add, CUdeviceptr dx, CUdeviceptr dy, float *y) {
    int n = N;
    float a = 2.5f;
    void *params[] = {&dy, &dx, &a, &n};
    unsigned grid = (N + BLOCK - 1) / BLOCK;
    CUmodule gone;
    CUfunction stale;
    CHECK(cuModuleLoadData(&gone, PTX));
    CHECK(cuModuleGetFunction(&stale, gone, "scale_add"));
    CHECK(cuModuleUnload(gone));

    CHECK(cuProfilerStart());
    CHECK(launch(scale_add, grid, BLOCK, params)); /* y = 2.5 x + y */
    CUresult empty = launch(scale_add, 0, BLOCK, params);
    CUresult wide = launch(scale_add, grid, 4096, params);
    /* y[SHIFT..] = y[..N-SHIFT]: the areas overlap, which CUDA leaves undefined. */
    CUresult overlap = cuMemcpyDtoD(dy + SHIFT * sizeof(float), dy, (N - SHIFT) * sizeof(float));
    CUresult unloaded = launch(stale, grid, BLOCK, params);
    a = -1.0f;
    CHECK(launch(scale_add, grid, BLOCK, params)); /* y = y - x */
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());
    printf("capture_edges: refused %d %d %d, overlapping copy %d\n", empty, wide, unloaded, overlap);
    if (empty == CUDA_SUCCESS || wide == CUDA_SUCCESS || unloaded == CUDA_SUCCESS) {
        fprintf(stderr, "capture_edges: the driver ran a launch it should have refused\n");
        return 1;
    }
    CHECK(overlap);
    CHECK(cuMemcpyDtoH(y, dy, N * sizeof *y));
    /* Only the bytes no overlap decides are checked: the first SHIFT values. */
    for (int i = 0; i < SHIFT; i++) {
        float want = 2.5f * (float)(1 + i % 7) + 0.25f * (float)i - (float)(1 + i % 7);
        if (y[i] != want) {
            fprintf(stderr, "capture_edges: y[%d] is %g, want %g\n", i, y[i], want);
            return 1;
        }
    }
    finish(y, N);
    return 0;
}

static int layout(void) {
    unsigned char *fatbin = machine_code_fatbin(PAIR_PTX);
    CUmodule machine;
    CUfunction pair;
    CHECK(cuModuleLoadData(&machine, fatbin));
    free(fatbin);
    CHECK(cuModuleGetFunction(&pair, machine, "affine_pair"));
    size_t offset = 0, size = 0;
    CHECK(cuFuncGetParamInfo(pair, 2, &offset, &size));
    if (offset != 12 || size != 3) {
        fprintf(stderr, "capture_edges: affine_pair's parameter 2 at %zu (%zu bytes), expected 12 (3)\n", offset, size);
        return 1;
    }
    CUdeviceptr out;
    CHECK(cuMemAlloc(&out, N * sizeof(unsigned)));
    CHECK(cuMemsetD32(out, 0, N));
    int n = N;
    struct {
        unsigned a, b;
    } coefficients = {3, 11};
    unsigned char tag[3] = {1, 2, 40};
    void *params[] = {&n, &coefficients, tag, &out};
    CHECK(cuProfilerStart());
    CHECK(launch(pair, (N + BLOCK - 1) / BLOCK, BLOCK, params));
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());
    static unsigned host[N];
    CHECK(cuMemcpyDtoH(host, out, sizeof host));
    for (unsigned i = 0; i < N; i++) {
        if (host[i] != 3u * i + 11u + 40u) {
            fprintf(stderr, "capture_edges: out[%u] is %u, want %u\n", i, host[i], 3u * i + 51u);
            return 1;
        }
    }
    unsigned long long h = fnv1a(0xcbf29ce484222325ULL, host, sizeof host);
    printf("capture_edges: ok %016llx\n", h);
    return 0;
}

/* A CPU driver cubin whose section table claims to lie 128 TiB past the image, with four entries. */
static int lying_elf(CUfunction scale_add, CUdeviceptr dx, CUdeviceptr dy, float *y) {
    size_t size = 64 + strlen(PTX) + 1;
    unsigned char *elf = calloc(1, size);
    if (!elf) return 1;
    cpu_elf(elf, PTX);
    put64(elf + 0x28, 0x7fff00000000ULL); /* e_shoff */
    put16(elf + 0x3a, 64);                /* e_shentsize */
    put16(elf + 0x3c, 4);                 /* e_shnum */
    CUmodule liar;
    CHECK(cuModuleLoadData(&liar, elf));
    free(elf);
    CHECK(cuProfilerStart());
    int bad = scale_add_once(scale_add, dx, dy, y);
    CHECK(cuProfilerStop());
    if (bad) return bad;
    finish(y, N);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    CUcontext ctx;
    CUmodule module = open_module(&ctx, PTX);
    if (strcmp(mode, "layout") == 0) return layout();
    CUfunction scale_add = get_kernel(module, "scale_add");
    static float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(1 + i % 7);
        y[i] = 0.25f * (float)i;
    }
    CUdeviceptr dx, dy;
    CHECK(cuMemAlloc(&dx, sizeof x));
    CHECK(cuMemAlloc(&dy, sizeof y));
    CHECK(cuMemcpyHtoD(dx, x, sizeof x));
    CHECK(cuMemcpyHtoD(dy, y, sizeof y));
    if (strcmp(mode, "refused") == 0) return refused(scale_add, dx, dy, y);
    if (strcmp(mode, "lying-elf") == 0) return lying_elf(scale_add, dx, dy, y);
    if (scale_add_once(scale_add, dx, dy, y)) return 1;
    finish(y, N);
    if (strcmp(mode, "exit") == 0) _exit(0);
    if (strcmp(mode, "abort") == 0) abort();
    if (strcmp(mode, "no-teardown") == 0) return 0;
    fprintf(stderr, "capture_edges: unknown mode %s\n", mode);
    return 2;
}
