/* A program with a kernel shipped as machine code only, as cuBLAS and PyTorch ship theirs: it
 * loads a fat binary whose one entry is a cubin (no PTX entry). On a GPU that would be SASS; for
 * the CPU driver the cubin is its own machine code (an ELF header with e_machine 0x4352, then the
 * PTX it runs), which image readers, recap's capture included, see as a cubin without PTX.
 *
 * Between cuProfilerStart and cuProfilerStop: a PTX kernel fills x, the machine-code kernel adds
 * x*x into y, a PTX kernel adds 5 to y. It checks y on the host and prints `machine_code: ok <sum>`.
 * Run as `machine_code graph`, the same work is one CUDA graph (a memset node setting y to 7, then
 * the three kernel nodes in a chain, then a device-to-device memcpy node copying y into z), launched
 * twice in the range; it checks y and z. */
#define PROGRAM "machine_code"
#include "common.h"

static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    "// data[i] = a * i + b for i < n\n"
    ".visible .entry affine_u32(\n"
    "\t.param .u64 affine_u32_param_0,\n"
    "\t.param .u32 affine_u32_param_1,\n"
    "\t.param .u32 affine_u32_param_2,\n"
    "\t.param .u32 affine_u32_param_3\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<10>;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u64 %rd1, [affine_u32_param_0];\n"
    "\tld.param.u32 %r2, [affine_u32_param_1];\n"
    "\tld.param.u32 %r3, [affine_u32_param_2];\n"
    "\tld.param.u32 %r9, [affine_u32_param_3];\n"
    "\tmov.u32 %r4, %ctaid.x;\n"
    "\tmov.u32 %r5, %ntid.x;\n"
    "\tmov.u32 %r6, %tid.x;\n"
    "\tmad.lo.s32 %r1, %r4, %r5, %r6;\n"
    "\tsetp.ge.s32 %p1, %r1, %r9;\n"
    "\t@%p1 bra $L__done;\n"
    "\tcvta.to.global.u64 %rd2, %rd1;\n"
    "\tmul.wide.s32 %rd3, %r1, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tmad.lo.s32 %r7, %r1, %r2, %r3;\n"
    "\tld.global.u32 %r8, [%rd4];\n"
    "\tadd.s32 %r8, %r8, %r7;\n"
    "\tst.global.u32 [%rd4], %r8;\n"
    "$L__done:\n"
    "\tret;\n"
    "}\n";

/* What the machine code runs: y[i] += x[i] * x[i] for i < n. */
static const char *MACHINE_PTX =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry square_acc(\n"
    "\t.param .u64 square_acc_param_0,\n"
    "\t.param .u64 square_acc_param_1,\n"
    "\t.param .u32 square_acc_param_2\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<10>;\n"
    "\t.reg .b64 %rd<8>;\n"
    "\tld.param.u64 %rd1, [square_acc_param_0];\n"
    "\tld.param.u64 %rd2, [square_acc_param_1];\n"
    "\tld.param.u32 %r2, [square_acc_param_2];\n"
    "\tmov.u32 %r4, %ctaid.x;\n"
    "\tmov.u32 %r5, %ntid.x;\n"
    "\tmov.u32 %r6, %tid.x;\n"
    "\tmad.lo.s32 %r1, %r4, %r5, %r6;\n"
    "\tsetp.ge.s32 %p1, %r1, %r2;\n"
    "\t@%p1 bra $L__done;\n"
    "\tcvta.to.global.u64 %rd6, %rd1;\n"
    "\tcvta.to.global.u64 %rd7, %rd2;\n"
    "\tmul.wide.s32 %rd3, %r1, 4;\n"
    "\tadd.s64 %rd4, %rd6, %rd3;\n"
    "\tadd.s64 %rd5, %rd7, %rd3;\n"
    "\tld.global.u32 %r7, [%rd5];\n"
    "\tld.global.u32 %r8, [%rd4];\n"
    "\tmad.lo.s32 %r8, %r7, %r7, %r8;\n"
    "\tst.global.u32 [%rd4], %r8;\n"
    "$L__done:\n"
    "\tret;\n"
    "}\n";

static void put16(unsigned char *p, unsigned v) { p[0] = v & 0xff, p[1] = (v >> 8) & 0xff; }
static void put32(unsigned char *p, unsigned long v) { for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff; }
static void put64(unsigned char *p, unsigned long long v) { for (int i = 0; i < 8; i++) p[i] = (v >> (8 * i)) & 0xff; }

/* A fat binary container of one cubin entry for sm_90 holding the CPU driver's machine code. */
static unsigned char *machine_code_fatbin(void) {
    size_t text = strlen(MACHINE_PTX) + 1;
    size_t payload = (64 + text + 7) / 8 * 8;
    size_t total = 16 + 64 + payload;
    unsigned char *f = calloc(1, total);
    if (!f) exit(1);
    put32(f, 0xBA55ED50u);           /* container magic */
    put16(f + 4, 1);                 /* version */
    put16(f + 6, 16);                /* header size */
    put64(f + 8, 64 + payload);      /* what follows the header */
    unsigned char *e = f + 16;
    put16(e, 2);                     /* a cubin */
    put32(e + 4, 64);                /* entry header size */
    put64(e + 8, payload);           /* payload size */
    put32(e + 28, 90);               /* sm_90 */
    unsigned char *elf = e + 64;
    memcpy(elf, "\x7f" "ELF", 4);
    elf[4] = 2;                      /* 64-bit */
    elf[5] = 1;                      /* little-endian */
    elf[6] = 1;                      /* ELF version */
    put16(elf + 16, 2);              /* executable */
    put16(elf + 18, 0x4352);         /* the CPU driver's machine */
    put32(elf + 20, 1);
    put16(elf + 52, 64);             /* e_ehsize */
    memcpy(elf + 64, MACHINE_PTX, text);
    return f;
}

enum { N = 400, BLOCK = 128 };

static CUDA_KERNEL_NODE_PARAMS kernel_node(CUfunction f, unsigned grid, void **params) {
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = grid;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = BLOCK;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = params;
    return p;
}

int main(int argc, char **argv) {
    int as_graph = argc > 1 && strcmp(argv[1], "graph") == 0;
    CUcontext ctx;
    CUmodule ptx_module = open_module(&ctx, PTX), machine_module;
    unsigned char *fatbin = machine_code_fatbin();
    CHECK(cuModuleLoadData(&machine_module, fatbin));
    free(fatbin); /* the driver and recap have what they need by now */
    CUfunction affine = get_kernel(ptx_module, "affine_u32"), square_acc = get_kernel(machine_module, "square_acc");

    CUdeviceptr x, y, z;
    CHECK(cuMemAlloc(&x, N * sizeof(unsigned)));
    CHECK(cuMemAlloc(&y, N * sizeof(unsigned)));
    CHECK(cuMemAlloc(&z, N * sizeof(unsigned)));
    CHECK(cuMemsetD32(x, 0, N));
    CHECK(cuMemsetD32(y, 7, N));
    CHECK(cuMemsetD32(z, 0, N));

    unsigned grid = (N + BLOCK - 1) / BLOCK, a = 3, b = 1, zero = 0, five = 5;
    int n = N;
    void *fill[] = {&x, &a, &b, &n};
    void *square[] = {&y, &x, &n};
    void *add[] = {&y, &zero, &five, &n};
    if (!as_graph) {
        CHECK(cuProfilerStart());
        CHECK(cuLaunchKernel(affine, grid, 1, 1, BLOCK, 1, 1, 0, NULL, fill, NULL));       /* x = 3i + 1 */
        CHECK(cuLaunchKernel(square_acc, grid, 1, 1, BLOCK, 1, 1, 0, NULL, square, NULL)); /* y += x*x */
        CHECK(cuLaunchKernel(affine, grid, 1, 1, BLOCK, 1, 1, 0, NULL, add, NULL));        /* y += 5 */
        CHECK(cuCtxSynchronize());
        CHECK(cuProfilerStop());
    } else {
        /* x starts at 0 and the fill adds 3i + 1, so a second launch must reset x as well: the
         * memset nodes set x to 0 and y to 7 first. */
        CUgraph graph;
        CUgraphExec exec;
        CUgraphNode reset_x, reset_y, k_fill, k_square, k_add, copy;
        CHECK(cuGraphCreate(&graph, 0));
        CUDA_MEMSET_NODE_PARAMS mx = {x, 0, 0u, 4, N, 1}, my = {y, 0, 7u, 4, N, 1};
        CHECK(cuGraphAddMemsetNode(&reset_x, graph, NULL, 0, &mx, ctx));
        CHECK(cuGraphAddMemsetNode(&reset_y, graph, NULL, 0, &my, ctx));
        CUDA_KERNEL_NODE_PARAMS p = kernel_node(affine, grid, fill);
        CHECK(cuGraphAddKernelNode_v2(&k_fill, graph, &reset_x, 1, &p));
        CUgraphNode before_square[] = {k_fill, reset_y};
        p = kernel_node(square_acc, grid, square);
        CHECK(cuGraphAddKernelNode_v2(&k_square, graph, before_square, 2, &p));
        p = kernel_node(affine, grid, add);
        CHECK(cuGraphAddKernelNode_v2(&k_add, graph, &k_square, 1, &p));
        CUDA_MEMCPY3D c;
        memset(&c, 0, sizeof c);
        c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
        c.srcDevice = y;
        c.dstDevice = z;
        c.WidthInBytes = N * sizeof(unsigned);
        c.Height = c.Depth = 1;
        CHECK(cuGraphAddMemcpyNode(&copy, graph, &k_add, 1, &c, ctx));
        CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
        CHECK(cuProfilerStart());
        CHECK(cuGraphLaunch(exec, NULL));
        CHECK(cuGraphLaunch(exec, NULL));
        CHECK(cuCtxSynchronize());
        CHECK(cuProfilerStop());
    }

    static unsigned host[N], copied[N];
    CHECK(cuMemcpyDtoH(host, y, sizeof host));
    CHECK(cuMemcpyDtoH(copied, z, sizeof copied));
    unsigned long long sum = 0;
    for (int i = 0; i < N; i++) {
        unsigned xi = 3u * (unsigned)i + 1u, want = xi * xi + 7u + 5u;
        if (host[i] != want || copied[i] != (as_graph ? want : 0u)) {
            fprintf(stderr, "machine_code: y[%d] is %u and z[%d] is %u, want %u\n", i, host[i], i, copied[i], want);
            return 1;
        }
        sum += host[i];
    }
    CHECK(cuCtxDestroy(ctx));
    printf("machine_code: ok %llu\n", sum);
    return 0;
}
