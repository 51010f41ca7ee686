/* Pointers the capture cannot see: a kernel builds a table of device pointers from a base address it
 * gets as two 32-bit halves (high word first, so no 8-byte word of its parameters holds the address),
 * and a second kernel follows them. Between cuProfilerStart and cuProfilerStop: the data uploaded,
 * the table built, the table followed. A few allocations made first and never used put the buffers
 * at addresses a replay with fresh addresses does not give, so a replay that does not place regions
 * at their captured addresses reads outside every region. It checks the gathered values on the host
 * and prints `placed_pointers: ok <checksum>`. */
#define PROGRAM "placed_pointers"
#include "common.h"

static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    "// table[i] = base + 4 * ((i * 7) % n), base = (hi << 32) | lo, for i < n\n"
    ".visible .entry build_table(\n"
    "\t.param .u64 build_table_param_0,\n"
    "\t.param .u32 build_table_param_1,\n"
    "\t.param .u32 build_table_param_2,\n"
    "\t.param .u32 build_table_param_3\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<10>;\n"
    "\t.reg .b64 %rd<10>;\n"
    "\tld.param.u64 %rd1, [build_table_param_0];\n"
    "\tld.param.u32 %r1, [build_table_param_1];\n"
    "\tld.param.u32 %r2, [build_table_param_2];\n"
    "\tld.param.u32 %r3, [build_table_param_3];\n"
    "\tmov.u32 %r4, %ctaid.x;\n"
    "\tmov.u32 %r5, %ntid.x;\n"
    "\tmov.u32 %r6, %tid.x;\n"
    "\tmad.lo.s32 %r7, %r4, %r5, %r6;\n"
    "\tsetp.ge.u32 %p1, %r7, %r3;\n"
    "\t@%p1 bra $L__build_done;\n"
    "\tcvt.u64.u32 %rd7, %r1;\n"
    "\tshl.b64 %rd8, %rd7, 32;\n"
    "\tcvt.u64.u32 %rd9, %r2;\n"
    "\tor.b64 %rd2, %rd8, %rd9;\n"
    "\tmul.lo.u32 %r8, %r7, 7;\n"
    "\trem.u32 %r9, %r8, %r3;\n"
    "\tmul.wide.u32 %rd3, %r9, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tmul.wide.u32 %rd5, %r7, 8;\n"
    "\tadd.s64 %rd6, %rd1, %rd5;\n"
    "\tst.global.u64 [%rd6], %rd4;\n"
    "$L__build_done:\n"
    "\tret;\n"
    "}\n"
    "\n"
    "// out[i] = *table[i] + i, for i < n\n"
    ".visible .entry follow(\n"
    "\t.param .u64 follow_param_0,\n"
    "\t.param .u64 follow_param_1,\n"
    "\t.param .u32 follow_param_2\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<10>;\n"
    "\t.reg .b64 %rd<10>;\n"
    "\tld.param.u64 %rd1, [follow_param_0];\n"
    "\tld.param.u64 %rd2, [follow_param_1];\n"
    "\tld.param.u32 %r1, [follow_param_2];\n"
    "\tmov.u32 %r2, %ctaid.x;\n"
    "\tmov.u32 %r3, %ntid.x;\n"
    "\tmov.u32 %r4, %tid.x;\n"
    "\tmad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "\tsetp.ge.u32 %p1, %r5, %r1;\n"
    "\t@%p1 bra $L__follow_done;\n"
    "\tmul.wide.u32 %rd3, %r5, 8;\n"
    "\tadd.s64 %rd4, %rd1, %rd3;\n"
    "\tld.global.u64 %rd5, [%rd4];\n"
    "\tld.global.u32 %r6, [%rd5];\n"
    "\tadd.s32 %r7, %r6, %r5;\n"
    "\tmul.wide.u32 %rd6, %r5, 4;\n"
    "\tadd.s64 %rd7, %rd2, %rd6;\n"
    "\tst.global.u32 [%rd7], %r7;\n"
    "$L__follow_done:\n"
    "\tret;\n"
    "}\n";

enum { N = 300, BLOCK = 64, SPACERS = 6 };

int main(void) {
    CUcontext ctx;
    CUmodule module = open_module(&ctx, PTX);
    CUfunction build_table = get_kernel(module, "build_table"), follow = get_kernel(module, "follow");

    CUdeviceptr spacers[SPACERS];
    for (int s = 0; s < SPACERS; s++) CHECK(cuMemAlloc(&spacers[s], 4096));
    CUdeviceptr table, data, out;
    CHECK(cuMemAlloc(&table, N * sizeof(CUdeviceptr)));
    CHECK(cuMemAlloc(&data, N * sizeof(unsigned)));
    CHECK(cuMemAlloc(&out, N * sizeof(unsigned)));
    static unsigned values[N], got[N];
    for (int i = 0; i < N; i++) values[i] = 1000u * (unsigned)i + 17u;

    CHECK(cuProfilerStart());
    CHECK(cuMemcpyHtoD(data, values, sizeof values));
    unsigned hi = (unsigned)(data >> 32), lo = (unsigned)data, n = N;
    unsigned grid = (N + BLOCK - 1) / BLOCK;
    void *build_params[] = {&table, &hi, &lo, &n};
    CHECK(cuLaunchKernel(build_table, grid, 1, 1, BLOCK, 1, 1, 0, NULL, build_params, NULL));
    void *follow_params[] = {&table, &out, &n};
    CHECK(cuLaunchKernel(follow, grid, 1, 1, BLOCK, 1, 1, 0, NULL, follow_params, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());

    CHECK(cuMemcpyDtoH(got, out, sizeof got));
    unsigned long long h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < N; i++) {
        unsigned want = values[(i * 7) % N] + (unsigned)i;
        if (got[i] != want) {
            fprintf(stderr, "placed_pointers: out[%d] is %u, expected %u\n", i, got[i], want);
            return 1;
        }
        h = (h ^ got[i]) * 0x100000001b3ULL;
    }
    for (int s = 0; s < SPACERS; s++) CHECK(cuMemFree(spacers[s]));
    CHECK(cuMemFree(table));
    CHECK(cuMemFree(data));
    CHECK(cuMemFree(out));
    CHECK(cuModuleUnload(module));
    CHECK(cuCtxDestroy(ctx));
    printf("placed_pointers: ok %016llx\n", h);
    return 0;
}
