/* A program on the CUDA driver API, linked with -lcuda: two kernels of hand-written PTX over three
 * buffers (launches from kernelParams and from an `extra` buffer, a fill, copies in every
 * direction), the middle part between cuProfilerStart and cuProfilerStop. It checks every value
 * against its own computation on the host and prints `driver_api: ok <checksum>`.
 *
 * With an argument it exercises an error instead and prints what the driver said:
 *   bad-pointer     a launch that writes through a pointer into no allocation
 *   garbage-module  cuModuleLoadData of text that is not PTX, and of PTX that does not compile */
#define PROGRAM "driver_api"
#include "common.h"

static const char *PTX = SCALE_ADD_MIX_PTX;

enum { N = 1000, BLOCK = 128 };

/* The status of a launch and what follows it: the real driver reports a kernel fault from a later
 * call, recap's CPU driver from the launch itself. */
static CUresult launch_then_sync(CUfunction f, unsigned grid, void **params, void **extra) {
    CUresult r = cuLaunchKernel(f, grid, 1, 1, BLOCK, 1, 1, 0, NULL, params, extra);
    return r != CUDA_SUCCESS ? r : cuCtxSynchronize();
}

static int bad_pointer(CUfunction scale_add) {
    CUdeviceptr x;
    CHECK(cuMemAlloc(&x, N * sizeof(float)));
    CUdeviceptr y = 16; /* inside no allocation */
    float a = 1.0f;
    int n = N;
    void *params[] = {&y, &x, &a, &n};
    CUresult r = launch_then_sync(scale_add, (N + BLOCK - 1) / BLOCK, params, NULL);
    const char *name = "?";
    cuGetErrorName(r, &name);
    printf("bad-pointer: %d %s\n", r, name);
    return 0;
}

static int garbage_module(void) {
    CUmodule m = NULL;
    CUresult garbage = cuModuleLoadData(&m, "this is not a module at all");
    CUresult broken = cuModuleLoadData(&m,
                                       ".version 8.0\n.target sm_80\n.address_size 64\n"
                                       ".visible .entry broken()\n{\n\tfrobnicate.u32 %r1;\n\tret;\n}\n");
    printf("garbage-module: %d %d\n", garbage, broken);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction scale_add, mix_u32;
    int version = 0, major = 0;
    CHECK(cuInit(0));
    CHECK(cuDriverGetVersion(&version));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    if (version < 12000 || major < 8) {
        fprintf(stderr, "driver_api: driver %d, compute capability %d: too old\n", version, major);
        return 1;
    }
    CHECK(cuCtxCreate(&ctx, 0, dev));
    if (strcmp(mode, "garbage-module") == 0) return garbage_module();
    CHECK(cuModuleLoadData(&module, PTX));
    CHECK(cuModuleGetFunction(&scale_add, module, "scale_add"));
    CHECK(cuModuleGetFunction(&mix_u32, module, "mix_u32"));
    if (strcmp(mode, "bad-pointer") == 0) return bad_pointer(scale_add);

    /* The parameter layout as the PTX declares it. */
    size_t offset = 0, size = 0;
    CHECK(cuFuncGetParamInfo(scale_add, 2, &offset, &size));
    if (offset != 16 || size != 4 || cuFuncGetParamInfo(scale_add, 4, &offset, &size) != CUDA_ERROR_INVALID_VALUE) {
        fprintf(stderr, "driver_api: scale_add's parameter 2 at %zu (%zu bytes), expected 16 (4)\n", offset, size);
        return 1;
    }

    static float x[N], y[N], want_y[N];
    static unsigned u[N], want_u[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(1 + i % 7);
        y[i] = 0.25f * (float)i;
    }
    CUdeviceptr dx, dy, du;
    CHECK(cuMemAlloc(&dx, sizeof x));
    CHECK(cuMemAlloc(&dy, sizeof y));
    CHECK(cuMemAlloc(&du, sizeof u));
    CHECK(cuMemcpyHtoD(dx, x, sizeof x));
    CHECK(cuMemcpyHtoD(dy, y, sizeof y));
    CHECK(cuMemsetD32(du, 7, N));

    CHECK(cuProfilerStart());
    unsigned grid = (N + BLOCK - 1) / BLOCK;
    int n = N;
    float a = 2.5f;
    void *params[] = {&dy, &dx, &a, &n};
    CHECK(cuLaunchKernel(scale_add, grid, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL)); /* y = 2.5 x + y */
    struct {
        CUdeviceptr data;
        unsigned seed;
        int n;
    } packed = {du, 12345u, N};
    size_t packed_size = sizeof packed;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                     CU_LAUNCH_PARAM_END};
    CHECK(cuLaunchKernel(mix_u32, grid, 1, 1, BLOCK, 1, 1, 0, NULL, NULL, extra));
    a = -0.5f;
    CHECK(cuLaunchKernel(scale_add, grid, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL)); /* y = -0.5 x + y */
    CHECK(cuMemcpyDtoD(dx, dy, sizeof y));                                              /* x = y */
    a = 1.0f;
    if (strcmp(mode, "cluster") == 0) {
        /* The same launch in clusters of two blocks (a launch attribute): y = 2 y */
        CUlaunchAttribute cluster = {.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .dim = {2, 1, 1}};
        CUlaunchConfig config = {grid + grid % 2, 1, 1, BLOCK, 1, 1, 0, NULL, &cluster, 1};
        CHECK(cuLaunchKernelEx(&config, scale_add, params, NULL));
    } else {
        CHECK(cuLaunchKernel(scale_add, grid, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL)); /* y = 2 y */
    }
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());

    CHECK(cuMemcpyDtoH(y, dy, sizeof y));
    CHECK(cuMemcpyDtoH(u, du, sizeof u));
    for (int i = 0; i < N; i++) {
        float xi = (float)(1 + i % 7), yi = 0.25f * (float)i;
        yi = 2.5f * xi + yi; /* every value here is exact in float */
        yi = -0.5f * xi + yi;
        want_y[i] = yi + yi;
        want_u[i] = (7u * 2654435761u) ^ (12345u + (unsigned)i);
    }
    for (int i = 0; i < N; i++) {
        if (y[i] != want_y[i] || u[i] != want_u[i]) {
            fprintf(stderr, "driver_api: mismatch at %d: y %g (want %g), u %u (want %u)\n", i, y[i], want_y[i], u[i],
                    want_u[i]);
            return 1;
        }
    }
    CHECK(cuMemFree(dx));
    CHECK(cuMemFree(dy));
    CHECK(cuMemFree(du));
    CHECK(cuModuleUnload(module));
    CHECK(cuCtxDestroy(ctx));
    unsigned long long h = fnv1a(0xcbf29ce484222325ULL, y, sizeof y);
    h = fnv1a(h, u, sizeof u);
    printf("driver_api: ok %016llx\n", h);
    return 0;
}
