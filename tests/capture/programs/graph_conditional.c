/* A program on the CUDA driver API with a conditional WHILE node: the body graph runs a kernel that
 * adds x to y and counts its passes, and sets the condition with cudaGraphSetConditional (declared
 * `.extern .func` in its PTX, supplied by the driver) until ten passes are done. The condition takes
 * its default value, 1, at every launch. The graph is launched between cuProfilerStart and
 * cuProfilerStop. It checks its results and prints `graph_conditional: ok <passes>`. */
#define PROGRAM "graph_conditional"
#include "common.h"

static const char *PTX =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".extern .func cudaGraphSetConditional\n"
    "(\n"
    "\t.param .b64 cudaGraphSetConditional_param_0,\n"
    "\t.param .b32 cudaGraphSetConditional_param_1\n"
    ")\n"
    ";\n"
    "\n"
    "// y[i] += x[i] for i < n; thread 0 counts the pass and keeps the loop going while passes < limit\n"
    ".visible .entry step(\n"
    "\t.param .u64 step_param_0,\n"
    "\t.param .u64 step_param_1,\n"
    "\t.param .u64 step_param_2,\n"
    "\t.param .u32 step_param_3,\n"
    "\t.param .u64 step_param_4,\n"
    "\t.param .u32 step_param_5\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<4>;\n"
    "\t.reg .f32 %f<4>;\n"
    "\t.reg .b32 %r<10>;\n"
    "\t.reg .b64 %rd<11>;\n"
    "\tld.param.u64 %rd1, [step_param_0];\n"
    "\tld.param.u64 %rd2, [step_param_1];\n"
    "\tld.param.u64 %rd3, [step_param_2];\n"
    "\tld.param.u32 %r1, [step_param_3];\n"
    "\tld.param.u64 %rd4, [step_param_4];\n"
    "\tld.param.u32 %r2, [step_param_5];\n"
    "\tmov.u32 %r3, %ctaid.x;\n"
    "\tmov.u32 %r4, %ntid.x;\n"
    "\tmov.u32 %r5, %tid.x;\n"
    "\tmad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "\tsetp.ge.s32 %p1, %r6, %r2;\n"
    "\t@%p1 bra $L__skip;\n"
    "\tcvta.to.global.u64 %rd5, %rd1;\n"
    "\tcvta.to.global.u64 %rd6, %rd2;\n"
    "\tmul.wide.s32 %rd7, %r6, 4;\n"
    "\tadd.s64 %rd8, %rd5, %rd7;\n"
    "\tadd.s64 %rd9, %rd6, %rd7;\n"
    "\tld.global.f32 %f1, [%rd8];\n"
    "\tld.global.f32 %f2, [%rd9];\n"
    "\tadd.f32 %f3, %f1, %f2;\n"
    "\tst.global.f32 [%rd8], %f3;\n"
    "$L__skip:\n"
    "\tsetp.ne.s32 %p2, %r6, 0;\n"
    "\t@%p2 bra $L__done;\n"
    "\tcvta.to.global.u64 %rd10, %rd3;\n"
    "\tld.global.u32 %r7, [%rd10];\n"
    "\tadd.s32 %r8, %r7, 1;\n"
    "\tst.global.u32 [%rd10], %r8;\n"
    "\tsetp.lt.u32 %p3, %r8, %r1;\n"
    "\tselp.u32 %r9, 1, 0, %p3;\n"
    "\t{\n"
    "\t.param .b64 param0;\n"
    "\tst.param.b64 [param0], %rd4;\n"
    "\t.param .b32 param1;\n"
    "\tst.param.b32 [param1], %r9;\n"
    "\tcall.uni cudaGraphSetConditional, (param0, param1);\n"
    "\t}\n"
    "$L__done:\n"
    "\tret;\n"
    "}\n";

enum { N = 1000, BLOCK = 128, LIMIT = 10 };

int main(void) {
    CUcontext ctx;
    CUmodule module = open_module(&ctx, PTX);
    CUfunction step = get_kernel(module, "step");

    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i % 7);
    CUdeviceptr dx, dy, dpasses;
    CHECK(cuMemAlloc(&dx, sizeof x));
    CHECK(cuMemAlloc(&dy, sizeof y));
    CHECK(cuMemAlloc(&dpasses, sizeof(unsigned)));
    CHECK(cuMemcpyHtoD(dx, x, sizeof x));
    CHECK(cuMemsetD32(dy, 0, N));
    CHECK(cuMemsetD32(dpasses, 0, 1));

    CUgraph graph;
    CHECK(cuGraphCreate(&graph, 0));
    CUgraphConditionalHandle cond;
    CHECK(cuGraphConditionalHandleCreate(&cond, graph, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
    CUgraphNodeParams cp;
    memset(&cp, 0, sizeof cp);
    cp.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
    cp.conditional.handle = cond;
    cp.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
    cp.conditional.size = 1;
    cp.conditional.ctx = ctx;
    CUgraphNode loop;
    CHECK(cuGraphAddNode(&loop, graph, NULL, 0, &cp));
    CUgraph body = cp.conditional.phGraph_out[0];

    int n = N;
    unsigned limit = LIMIT;
    void *args[] = {&dy, &dx, &dpasses, &limit, &cond, &n};
    CUgraphNodeParams kp;
    memset(&kp, 0, sizeof kp);
    kp.type = CU_GRAPH_NODE_TYPE_KERNEL;
    kp.kernel.func = step;
    kp.kernel.gridDimX = (N + BLOCK - 1) / BLOCK;
    kp.kernel.gridDimY = kp.kernel.gridDimZ = 1;
    kp.kernel.blockDimX = BLOCK;
    kp.kernel.blockDimY = kp.kernel.blockDimZ = 1;
    kp.kernel.kernelParams = args;
    CUgraphNode k;
    CHECK(cuGraphAddNode(&k, body, NULL, 0, &kp));

    CUgraphExec exec;
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK(cuProfilerStart());
    CHECK(cuGraphLaunch(exec, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());

    unsigned passes = 0;
    CHECK(cuMemcpyDtoH(&passes, dpasses, sizeof passes));
    CHECK(cuMemcpyDtoH(y, dy, sizeof y));
    for (int i = 0; i < N; i++) {
        if (y[i] != (float)(LIMIT * (i % 7))) {
            fprintf(stderr, "graph_conditional: y[%d] = %g, want %g\n", i, y[i], (float)(LIMIT * (i % 7)));
            return 1;
        }
    }
    if (passes != LIMIT) {
        fprintf(stderr, "graph_conditional: %u passes, want %d\n", passes, LIMIT);
        return 1;
    }
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
    CHECK(cuCtxDestroy(ctx));
    printf("graph_conditional: ok %u\n", passes);
    return 0;
}
