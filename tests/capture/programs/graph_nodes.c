/* A program on the CUDA driver API that builds a CUDA graph node by node and launches it twice
 * between cuProfilerStart and cuProfilerStop: memset and memcpy nodes (host to device, a pitched
 * device-to-device copy of half of every row, device to host), kernel nodes made three ways
 * (cuGraphAddKernelNode with the v1 structure, cuGraphAddKernelNode_v2, cuGraphAddNode), an empty
 * join node, a child graph, an edge added after the fact with cuGraphAddDependencies, a node's
 * parameters changed in the graph and, between the launches, in the executable graph. The memcpy
 * node reads host memory when the graph runs, so the second launch sees the host data as changed
 * in between. It checks every value against its own computation and prints
 * `graph_nodes: ok <checksum>`. */
#define PROGRAM "graph_nodes"
#include "common.h"



enum { N = 1000, BLOCK = 128, ROWS = 10, COLS = N / ROWS, HALF = COLS / 2 };

static float x[N], y[N], y_out[N];
static unsigned u[N];

static CUDA_KERNEL_NODE_PARAMS kernel_params(CUfunction f, void **params) {
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.func = f;
    p.gridDimX = (N + BLOCK - 1) / BLOCK;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = BLOCK;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = params;
    return p;
}

/* What one launch of the graph leaves in y_out, from the host's x and y. */
static void expected(const float *x0, const float *y0, float *want) {
    static float xs[N], ys[N];
    for (int i = 0; i < N; i++) {
        xs[i] = x0[i];
        ys[i] = 2.5f * xs[i] + y0[i]; /* every value here is exact in float */
    }
    for (int i = 0; i < N; i++) ys[i] = -0.5f * xs[i] + ys[i];                                 /* child: y -= x/2 */
    for (int r = 0; r < ROWS; r++) memcpy(&xs[r * COLS], &ys[r * COLS], HALF * sizeof(float)); /* child: half rows */
    for (int i = 0; i < N; i++) want[i] = xs[i] + ys[i];
}

static int check_y(const char *when) {
    static float want[N];
    expected(x, y, want);
    for (int i = 0; i < N; i++) {
        if (y_out[i] != want[i]) {
            fprintf(stderr, "graph_nodes: %s: y[%d] = %g, want %g\n", when, i, y_out[i], want[i]);
            return 0;
        }
    }
    return 1;
}

int main(void) {
    CUcontext ctx;
    CUmodule module = open_module(&ctx, SCALE_ADD_MIX_PTX);
    CUfunction scale_add = get_kernel(module, "scale_add"), mix_u32 = get_kernel(module, "mix_u32");
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    for (int i = 0; i < N; i++) {
        x[i] = (float)(1 + i % 7);
        y[i] = 0.25f * (float)i;
    }
    CUdeviceptr dx, dy, du;
    CHECK(cuMemAlloc(&dx, sizeof x));
    CHECK(cuMemAlloc(&dy, sizeof y));
    CHECK(cuMemAlloc(&du, sizeof u));

    CUgraph graph, child;
    CHECK(cuGraphCreate(&graph, 0));
    CHECK(cuGraphCreate(&child, 0));

    /* u = 7 */
    CUgraphNode fill;
    CUDA_MEMSET_NODE_PARAMS ms = {du, 0, 7u, 4, N, 1};
    CHECK(cuGraphAddMemsetNode(&fill, graph, NULL, 0, &ms, ctx));

    /* x and y from the host, read when the graph runs; y as ROWS dense rows. */
    CUgraphNode up_x, up_y;
    CUDA_MEMCPY3D cp;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_HOST;
    cp.srcHost = x;
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = dx;
    cp.WidthInBytes = sizeof x;
    cp.Height = cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&up_x, graph, NULL, 0, &cp, ctx));
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    cp.srcDevice = (CUdeviceptr)(uintptr_t)y;
    cp.srcPitch = COLS * sizeof(float);
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = dy;
    cp.dstPitch = COLS * sizeof(float);
    cp.WidthInBytes = COLS * sizeof(float);
    cp.Height = ROWS;
    cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&up_y, graph, NULL, 0, &cp, ctx));

    /* y = a x + y, made with a = 0 and changed to 2.5 in the graph. */
    int n = N;
    float a_zero = 0.0f, a_first = 2.5f, a_child = -0.5f;
    void *first_args[] = {&dy, &dx, &a_zero, &n};
    CUgraphNode axpy;
    CUgraphNode after_uploads[] = {up_x, up_y};
    CUDA_KERNEL_NODE_PARAMS kp = kernel_params(scale_add, first_args);
    CHECK(cuGraphAddKernelNode_v2(&axpy, graph, after_uploads, 2, &kp));
    first_args[2] = &a_first;
    kp = kernel_params(scale_add, first_args);
    CHECK(cuGraphKernelNodeSetParams_v2(axpy, &kp));

    /* u = mix(u, 12345), through cuGraphAddNode. */
    unsigned seed = 12345u;
    void *mix_args[] = {&du, &seed, &n};
    CUgraphNodeParams np;
    memset(&np, 0, sizeof np);
    np.type = CU_GRAPH_NODE_TYPE_KERNEL;
    np.kernel = kernel_params(mix_u32, mix_args);
    CUgraphNode mix;
    CHECK(cuGraphAddNode(&mix, graph, &fill, 1, &np));

    CUgraphNode join;
    CUgraphNode joined[] = {axpy, mix};
    CHECK(cuGraphAddEmptyNode(&join, graph, joined, 2));

    /* The child: y = y - x/2, then the first half of every row of y into x (pitched). */
    void *child_args[] = {&dy, &dx, &a_child, &n};
    CUgraphNode c_axpy, c_copy;
    kp = kernel_params(scale_add, child_args);
    CHECK(cuGraphAddKernelNode_v2(&c_axpy, child, NULL, 0, &kp));
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = dy;
    cp.srcPitch = COLS * sizeof(float);
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.dstDevice = dx;
    cp.dstPitch = COLS * sizeof(float);
    cp.WidthInBytes = HALF * sizeof(float);
    cp.Height = ROWS;
    cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&c_copy, child, &c_axpy, 1, &cp, ctx));
    CUgraphNode sub;
    CHECK(cuGraphAddChildGraphNode(&sub, graph, &join, 1, child));

    /* y = x + y with the v1 structure, ordered after the child by an edge added afterwards. */
    float a_one = 1.0f;
    void *last_args[] = {&dy, &dx, &a_one, &n};
    CUDA_KERNEL_NODE_PARAMS_v1 kp1;
    memset(&kp1, 0, sizeof kp1);
    kp1.func = scale_add;
    kp1.gridDimX = (N + BLOCK - 1) / BLOCK;
    kp1.gridDimY = kp1.gridDimZ = 1;
    kp1.blockDimX = BLOCK;
    kp1.blockDimY = kp1.blockDimZ = 1;
    kp1.kernelParams = last_args;
    CUgraphNode last;
    CHECK(cuGraphAddKernelNode(&last, graph, NULL, 0, &kp1));
    CHECK(cuGraphAddDependencies(graph, &sub, &last, 1));

    /* y back to the host. */
    CUgraphNode down;
    memset(&cp, 0, sizeof cp);
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    cp.srcDevice = dy;
    cp.dstMemoryType = CU_MEMORYTYPE_HOST;
    cp.dstHost = y_out;
    cp.WidthInBytes = sizeof y_out;
    cp.Height = cp.Depth = 1;
    CHECK(cuGraphAddMemcpyNode(&down, graph, &last, 1, &cp, ctx));

    CUgraphExec exec;
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));

    CHECK(cuProfilerStart());
    CHECK(cuGraphLaunch(exec, stream));
    CHECK(cuStreamSynchronize(stream));
    if (!check_y("first launch")) return 1;
    /* The second launch: new host data, a new seed in the executable graph only. */
    for (int i = 0; i < N; i++) x[i] += 1.0f;
    unsigned seed2 = 777u;
    void *mix_args2[] = {&du, &seed2, &n};
    kp = kernel_params(mix_u32, mix_args2);
    CHECK(cuGraphExecKernelNodeSetParams_v2(exec, mix, &kp));
    CHECK(cuGraphLaunch(exec, stream));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuProfilerStop());

    if (!check_y("second launch")) return 1;
    CHECK(cuMemcpyDtoH(u, du, sizeof u));
    for (int i = 0; i < N; i++) {
        unsigned want = (7u * 2654435761u) ^ (777u + (unsigned)i);
        if (u[i] != want) {
            fprintf(stderr, "graph_nodes: u[%d] = %u, want %u\n", i, u[i], want);
            return 1;
        }
    }
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
    CHECK(cuGraphDestroy(child));
    CHECK(cuStreamDestroy(stream));
    CHECK(cuMemFree(dx));
    CHECK(cuMemFree(dy));
    CHECK(cuMemFree(du));
    CHECK(cuModuleUnload(module));
    CHECK(cuCtxDestroy(ctx));
    unsigned long long h = fnv1a(0xcbf29ce484222325ULL, y_out, sizeof y_out);
    h = fnv1a(h, u, sizeof u);
    printf("graph_nodes: ok %016llx\n", h);
    return 0;
}
