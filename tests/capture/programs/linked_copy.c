/* A program that links its kernel's PTX with the driver's linker and loads the result, as numba
 * does through cuda.core: cuLinkCreate, cuLinkAddData of the PTX, cuLinkComplete, then a copy of
 * the linked image made before cuLinkDestroy frees the driver's, and cuModuleLoadData of that
 * copy. With `in-place` it loads the driver's own image before destroying the link instead.
 *
 * Usage: linked_copy [in-place]. Between cuProfilerStart and cuProfilerStop:
 * data[i] = data[i] * a + i, checked on the host; it prints `linked_copy: ok <sum>`. */
#define PROGRAM "linked_copy"
#include "common.h"

/* The linker's entry points, which cuda_min.h leaves out. */
typedef struct CUlinkState_st *CUlinkState;
#define CU_JIT_INPUT_PTX 1
CUresult cuLinkCreate_v2(unsigned num_options, int *options, void **values, CUlinkState *state);
CUresult cuLinkAddData_v2(CUlinkState state, int kind, void *data, size_t size, const char *name, unsigned num_options,
                          int *options, void **values);
CUresult cuLinkComplete(CUlinkState state, void **image, size_t *size);
CUresult cuLinkDestroy(CUlinkState state);

static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry scale_index(\n"
    "\t.param .u64 scale_index_param_0,\n"
    "\t.param .u32 scale_index_param_1,\n"
    "\t.param .u32 scale_index_param_2\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<10>;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u64 %rd1, [scale_index_param_0];\n"
    "\tld.param.u32 %r2, [scale_index_param_1];\n"
    "\tld.param.u32 %r3, [scale_index_param_2];\n"
    "\tmov.u32 %r4, %ctaid.x;\n"
    "\tmov.u32 %r5, %ntid.x;\n"
    "\tmov.u32 %r6, %tid.x;\n"
    "\tmad.lo.s32 %r1, %r4, %r5, %r6;\n"
    "\tsetp.ge.s32 %p1, %r1, %r3;\n"
    "\t@%p1 bra $L__done;\n"
    "\tcvta.to.global.u64 %rd2, %rd1;\n"
    "\tmul.wide.s32 %rd3, %r1, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tld.global.u32 %r7, [%rd4];\n"
    "\tmad.lo.s32 %r8, %r7, %r2, %r1;\n"
    "\tst.global.u32 [%rd4], %r8;\n"
    "$L__done:\n"
    "\tret;\n"
    "}\n";

enum { N = 300, BLOCK = 128 };

int main(int argc, char **argv) {
    int in_place = argc == 2 && strcmp(argv[1], "in-place") == 0;
    if (argc > 2 || (argc == 2 && !in_place)) {
        fprintf(stderr, "usage: " PROGRAM " [in-place]\n");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, 0, dev));

    CUlinkState link;
    CHECK(cuLinkCreate_v2(0, NULL, NULL, &link));
    CHECK(cuLinkAddData_v2(link, CU_JIT_INPUT_PTX, (void *)PTX, strlen(PTX) + 1, "scale_index.ptx", 0, NULL, NULL));
    void *image;
    size_t size;
    CHECK(cuLinkComplete(link, &image, &size));
    if (in_place) {
        CHECK(cuModuleLoadData(&module, image));
        CHECK(cuLinkDestroy(link));
    } else {
        unsigned char *copy = malloc(size);
        if (!copy) return 1;
        memcpy(copy, image, size);
        CHECK(cuLinkDestroy(link));
        CHECK(cuModuleLoadData(&module, copy));
        free(copy);
    }
    CUfunction scale_index = get_kernel(module, "scale_index");

    CUdeviceptr data;
    CHECK(cuMemAlloc(&data, N * sizeof(unsigned)));
    CHECK(cuMemsetD32(data, 5, N));
    CHECK(cuProfilerStart());
    unsigned a = 9, grid = (N + BLOCK - 1) / BLOCK;
    int n = N;
    void *params[] = {&data, &a, &n};
    CHECK(cuLaunchKernel(scale_index, grid, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());

    static unsigned host[N];
    CHECK(cuMemcpyDtoH(host, data, sizeof host));
    unsigned long long sum = 0;
    for (int i = 0; i < N; i++) {
        unsigned want = 5u * a + (unsigned)i;
        if (host[i] != want) {
            fprintf(stderr, PROGRAM ": data[%d] is %u, want %u\n", i, host[i], want);
            return 1;
        }
        sum += host[i];
    }
    CHECK(cuCtxDestroy(ctx));
    printf(PROGRAM ": ok %llu\n", sum);
    return 0;
}
