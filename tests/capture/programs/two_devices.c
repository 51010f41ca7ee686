/* A program on two GPUs, on the CUDA driver API, linked with -lcuda: a context on each of devices 0
 * and 1 (each with its own module, streams and buffers), a kernel on each, a peer copy of device
 * 0's result into device 1's memory (cuMemcpyPeer), an event recorded on device 0's stream that
 * device 1's stream waits for, and a kernel on device 1 that reads what was copied. The work sits
 * between cuProfilerStart and cuProfilerStop. It checks every value against its own computation
 * on the host and prints `two_devices: ok <checksum>`.
 *
 * Run as `two_devices peer`, device 1's last kernel reads device 0's result through peer access
 * instead of the copy (the copy still runs, unread).
 *
 * On recap's CPU driver it needs RECAP_CPU_DEVICES=2. */
#define PROGRAM "two_devices"
#include "common.h"

/* Entry points cuda_min.h leaves out, as cuda.h declares them. */
#define cuMemcpyHtoDAsync cuMemcpyHtoDAsync_v2
#define cuEventDestroy cuEventDestroy_v2
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceCanAccessPeer(int *can, CUdevice device, CUdevice peer);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetDevice(CUdevice *device);
CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags);
CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t bytes);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream);
CUresult cuPointerGetAttribute(void *data, int attribute, CUdeviceptr ptr);
CUresult cuEventCreate(CUevent *event, unsigned int flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventDestroy_v2(CUevent event);
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags);
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9

static const char *PTX = SCALE_ADD_MIX_PTX;

enum { N = 1000, BLOCK = 128, GRID = (N + BLOCK - 1) / BLOCK };

/* One device's share: its context, kernels and stream. */
struct side {
    CUcontext ctx;
    CUfunction scale_add, mix_u32;
    CUstream stream;
};

static struct side open_side(int ordinal) {
    struct side s;
    CUdevice dev, current;
    CUmodule module;
    CHECK(cuDeviceGet(&dev, ordinal));
    CHECK(cuCtxCreate(&s.ctx, 0, dev));
    CHECK(cuCtxGetDevice(&current));
    if (current != dev) {
        fprintf(stderr, PROGRAM ": the context made on device %d is on device %d\n", ordinal, current);
        exit(1);
    }
    CHECK(cuModuleLoadData(&module, PTX));
    s.scale_add = get_kernel(module, "scale_add");
    s.mix_u32 = get_kernel(module, "mix_u32");
    CHECK(cuStreamCreate(&s.stream, 0));
    return s;
}

static CUdeviceptr alloc_on(CUcontext ctx, int ordinal, size_t bytes) {
    CUdeviceptr p;
    int owner = -1;
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemAlloc(&p, bytes));
    CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
    if (owner != ordinal) {
        fprintf(stderr, PROGRAM ": memory allocated on device %d says it is on device %d\n", ordinal, owner);
        exit(1);
    }
    return p;
}

static void scale_add(struct side *s, CUdeviceptr y, CUdeviceptr x, float a) {
    int n = N;
    void *params[] = {&y, &x, &a, &n};
    CHECK(cuCtxSetCurrent(s->ctx));
    CHECK(cuLaunchKernel(s->scale_add, GRID, 1, 1, BLOCK, 1, 1, 0, s->stream, params, NULL));
}

int main(int argc, char **argv) {
    int count = 0, can = 0, peer = argc > 1 && strcmp(argv[1], "peer") == 0;
    CHECK(cuInit(0));
    CHECK(cuDeviceGetCount(&count));
    if (count < 2) {
        fprintf(stderr, PROGRAM ": %d device(s); this program needs two\n", count);
        return 1;
    }
    CHECK(cuDeviceCanAccessPeer(&can, 1, 0));
    struct side d0 = open_side(0), d1 = open_side(1);
    if (peer && !can) {
        fprintf(stderr, PROGRAM ": device 1 cannot access device 0's memory\n");
        return 1;
    }
    if (can) {
        /* Device 1 may then read device 0's memory; the copy below does not need it. */
        CHECK(cuCtxEnablePeerAccess(d0.ctx, 0));
    }
    CUdeviceptr x0 = alloc_on(d0.ctx, 0, N * sizeof(float));
    CUdeviceptr y0 = alloc_on(d0.ctx, 0, N * sizeof(float));
    CUdeviceptr x1 = alloc_on(d1.ctx, 1, N * sizeof(float));
    CUdeviceptr y1 = alloc_on(d1.ctx, 1, N * sizeof(float));
    CUdeviceptr z1 = alloc_on(d1.ctx, 1, N * sizeof(unsigned));
    CUevent done0;
    CHECK(cuCtxSetCurrent(d0.ctx));
    CHECK(cuEventCreate(&done0, CU_EVENT_DEFAULT));

    static float x[N], ones[N], threes[N], got[N];
    static unsigned z[N], zgot[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        ones[i] = 1.0f;
        threes[i] = 3.0f;
        z[i] = (unsigned)i * 7u;
    }

    CHECK(cuProfilerStart());
    /* Device 0: y0 = 2 * x0 + 1. */
    CHECK(cuCtxSetCurrent(d0.ctx));
    CHECK(cuMemcpyHtoDAsync(x0, x, sizeof x, d0.stream));
    CHECK(cuMemcpyHtoDAsync(y0, ones, sizeof ones, d0.stream));
    scale_add(&d0, y0, x0, 2.0f);
    /* Device 1, meanwhile: its own kernel on its own data. */
    CHECK(cuCtxSetCurrent(d1.ctx));
    CHECK(cuMemcpyHtoDAsync(z1, z, sizeof z, d1.stream));
    CHECK(cuMemcpyHtoDAsync(y1, threes, sizeof threes, d1.stream));
    unsigned seed = 12345;
    int n = N;
    void *mix[] = {&z1, &seed, &n};
    CHECK(cuLaunchKernel(d1.mix_u32, GRID, 1, 1, BLOCK, 1, 1, 0, d1.stream, mix, NULL));
    /* Device 0's result into device 1's memory: the legacy stream the copy runs on waits for
     * device 0's blocking stream, and the copy is done when the call returns. */
    CHECK(cuCtxSetCurrent(d0.ctx));
    CHECK(cuMemcpyPeer(x1, d1.ctx, y0, d0.ctx, N * sizeof(float)));
    CHECK(cuEventRecord(done0, d0.stream));
    /* Device 1 waits for device 0, then reads the copy: y1 = 0.5 * x1 + 3. */
    CHECK(cuStreamWaitEvent(d1.stream, done0, 0));
    scale_add(&d1, y1, peer ? y0 : x1, 0.5f);
    CHECK(cuStreamSynchronize(d1.stream));
    CHECK(cuProfilerStop());

    CHECK(cuMemcpyDtoH(got, y1, sizeof got));
    CHECK(cuMemcpyDtoH(zgot, z1, sizeof zgot));
    for (int i = 0; i < N; i++) {
        float want = 0.5f * (2.0f * x[i] + 1.0f) + 3.0f;
        unsigned zwant = (z[i] * 2654435761u) ^ (seed + (unsigned)i);
        if (got[i] != want || zgot[i] != zwant) {
            fprintf(stderr, PROGRAM ": element %d: y1 %g (want %g), z1 %u (want %u)\n", i, got[i], want, zgot[i], zwant);
            return 1;
        }
    }
    unsigned long long h = fnv1a(0xcbf29ce484222325ULL, got, sizeof got);
    h = fnv1a(h, zgot, sizeof zgot);
    printf(PROGRAM ": ok %016llx\n", h);

    CHECK(cuEventDestroy(done0));
    CHECK(cuStreamDestroy(d1.stream));
    CHECK(cuStreamDestroy(d0.stream));
    CHECK(cuCtxDestroy(d1.ctx));
    CHECK(cuCtxDestroy(d0.ctx));
    return 0;
}
