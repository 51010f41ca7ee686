/* A program that reaches the driver the way the CUDA runtime does: it dlopens libcuda.so.1, looks
 * up only cuGetProcAddress_v2 (or cuGetProcAddress) and resolves every other entry point through
 * it for CUDA 12.8, the launch and the async copies and fills for the per-thread default stream.
 * Two streams ordered by an event, async copies and a fill, a kernel taking a struct by value
 * (a device pointer and a length) and one that follows device pointers stored in a device buffer,
 * the middle part between cuProfilerStart and cuProfilerStop. It checks every value against its
 * own computation on the host and prints `runtime_style: ok <checksum>`.
 *
 * With the argument `unknown-symbol` it prints what cuGetProcAddress says of a name the driver
 * does not have and of one newer than the version asked for. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>

#include "cuda_min.h"

/* Resolved through cuGetProcAddress like every entry point: the program does not link the driver. */
static PFN_cuGetErrorName get_error_name;
#define PROGRAM "runtime_style"
#define ERROR_NAME(r, name) ((void)(get_error_name && get_error_name((r), (name))))
#include "common.h"

static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    "// struct Span { float *data; unsigned long long len; }: data[i] = 2 data[i] + b for i < len\n"
    ".visible .entry span_axpb(\n"
    "\t.param .align 8 .b8 span_axpb_param_0[16],\n"
    "\t.param .f32 span_axpb_param_1\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .f32 %f<4>;\n"
    "\t.reg .b32 %r<5>;\n"
    "\t.reg .b64 %rd<7>;\n"
    "\tld.param.u64 %rd1, [span_axpb_param_0];\n"
    "\tld.param.u64 %rd2, [span_axpb_param_0+8];\n"
    "\tld.param.f32 %f1, [span_axpb_param_1];\n"
    "\tmov.u32 %r1, %ctaid.x;\n"
    "\tmov.u32 %r2, %ntid.x;\n"
    "\tmov.u32 %r3, %tid.x;\n"
    "\tmad.lo.s32 %r4, %r1, %r2, %r3;\n"
    "\tcvt.u64.u32 %rd3, %r4;\n"
    "\tsetp.ge.u64 %p1, %rd3, %rd2;\n"
    "\t@%p1 bra $L__span_axpb_done;\n"
    "\tcvta.to.global.u64 %rd4, %rd1;\n"
    "\tshl.b64 %rd5, %rd3, 2;\n"
    "\tadd.s64 %rd6, %rd4, %rd5;\n"
    "\tld.global.f32 %f2, [%rd6];\n"
    "\tfma.rn.f32 %f3, %f2, 0f40000000, %f1;\n"
    "\tst.global.f32 [%rd6], %f3;\n"
    "$L__span_axpb_done:\n"
    "\tret;\n"
    "}\n"
    "\n"
    "// table[0], table[1]: two float buffers; out[i] += table[0][i] + table[1][i] for i < n\n"
    ".visible .entry gather_sum(\n"
    "\t.param .u64 gather_sum_param_0,\n"
    "\t.param .u64 gather_sum_param_1,\n"
    "\t.param .u32 gather_sum_param_2\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .f32 %f<5>;\n"
    "\t.reg .b32 %r<6>;\n"
    "\t.reg .b64 %rd<11>;\n"
    "\tld.param.u64 %rd1, [gather_sum_param_0];\n"
    "\tld.param.u64 %rd2, [gather_sum_param_1];\n"
    "\tld.param.u32 %r1, [gather_sum_param_2];\n"
    "\tmov.u32 %r2, %ctaid.x;\n"
    "\tmov.u32 %r3, %ntid.x;\n"
    "\tmov.u32 %r4, %tid.x;\n"
    "\tmad.lo.s32 %r5, %r2, %r3, %r4;\n"
    "\tsetp.ge.s32 %p1, %r5, %r1;\n"
    "\t@%p1 bra $L__gather_sum_done;\n"
    "\tcvta.to.global.u64 %rd3, %rd1;\n"
    "\tld.global.u64 %rd4, [%rd3];\n"
    "\tld.global.u64 %rd5, [%rd3+8];\n"
    "\tcvta.to.global.u64 %rd4, %rd4;\n"
    "\tcvta.to.global.u64 %rd5, %rd5;\n"
    "\tmul.wide.s32 %rd6, %r5, 4;\n"
    "\tadd.s64 %rd7, %rd4, %rd6;\n"
    "\tadd.s64 %rd8, %rd5, %rd6;\n"
    "\tld.global.f32 %f1, [%rd7];\n"
    "\tld.global.f32 %f2, [%rd8];\n"
    "\tadd.rn.f32 %f3, %f1, %f2;\n"
    "\tcvta.to.global.u64 %rd9, %rd2;\n"
    "\tadd.s64 %rd10, %rd9, %rd6;\n"
    "\tld.global.f32 %f4, [%rd10];\n"
    "\tadd.rn.f32 %f3, %f3, %f4;\n"
    "\tst.global.f32 [%rd10], %f3;\n"
    "$L__gather_sum_done:\n"
    "\tret;\n"
    "}\n";

enum { VERSION = 12080, N = 777, BLOCK = 64 };

static PFN_cuGetProcAddress_v2 get_proc_v2;
static PFN_cuGetProcAddress get_proc_v1;
/* cuGetProcAddress through whichever of the two the driver has; the status is 0 without _v2. */
static CUresult get_proc(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    *status = 0;
    if (get_proc_v2) return get_proc_v2(symbol, pfn, version, flags, status);
    return get_proc_v1(symbol, pfn, version, flags);
}

static void *resolve(const char *symbol, uint64_t flags) {
    void *pfn = NULL;
    int status = 0;
    CUresult r = get_proc(symbol, &pfn, VERSION, flags, &status);
    if (r != CUDA_SUCCESS || pfn == NULL) {
        fprintf(stderr, "runtime_style: cuGetProcAddress(%s) failed: %d (status %d)\n", symbol, r, status);
        exit(1);
    }
    return pfn;
}


static int unknown_symbol(void) {
    void *pfn = (void *)&pfn;
    int status = -1;
    CUresult r = get_proc("cuNoSuchEntryPoint", &pfn, VERSION, 0, &status);
    printf("unknown-symbol: %d %d %s\n", r, status, pfn == NULL ? "null" : "set");
    pfn = (void *)&pfn;
    r = get_proc("cuLibraryLoadData", &pfn, 11080, 0, &status);
    printf("too-new: %d %d %s\n", r, status, pfn == NULL ? "null" : "set");
    return 0;
}

struct Span {
    CUdeviceptr data;
    unsigned long long len;
};

int main(int argc, char **argv) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "runtime_style: %s\n", dlerror());
        return 1;
    }
    /* Object to function pointer through memcpy, as ISO C allows. */
    void *sym = dlsym(lib, "cuGetProcAddress_v2");
    if (sym) {
        memcpy(&get_proc_v2, &sym, sizeof sym);
    } else if ((sym = dlsym(lib, "cuGetProcAddress"))) {
        memcpy(&get_proc_v1, &sym, sizeof sym);
    } else {
        fprintf(stderr, "runtime_style: the driver has no cuGetProcAddress\n");
        return 1;
    }
    if (argc > 1 && strcmp(argv[1], "unknown-symbol") == 0) return unknown_symbol();

    const uint64_t PTDS = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    get_error_name = (PFN_cuGetErrorName)resolve("cuGetErrorName", 0);
    PFN_cuInit init = (PFN_cuInit)resolve("cuInit", 0);
    PFN_cuDeviceGet device_get = (PFN_cuDeviceGet)resolve("cuDeviceGet", 0);
    PFN_cuDevicePrimaryCtxRetain retain = (PFN_cuDevicePrimaryCtxRetain)resolve("cuDevicePrimaryCtxRetain", 0);
    PFN_cuDevicePrimaryCtxRelease release = (PFN_cuDevicePrimaryCtxRelease)resolve("cuDevicePrimaryCtxRelease", 0);
    PFN_cuCtxSetCurrent set_current = (PFN_cuCtxSetCurrent)resolve("cuCtxSetCurrent", 0);
    PFN_cuModuleLoadData load = (PFN_cuModuleLoadData)resolve("cuModuleLoadData", 0);
    PFN_cuModuleUnload unload = (PFN_cuModuleUnload)resolve("cuModuleUnload", 0);
    PFN_cuModuleGetFunction get_function = (PFN_cuModuleGetFunction)resolve("cuModuleGetFunction", 0);
    PFN_cuMemAlloc mem_alloc = (PFN_cuMemAlloc)resolve("cuMemAlloc", 0);
    PFN_cuMemFree mem_free = (PFN_cuMemFree)resolve("cuMemFree", 0);
    PFN_cuMemcpyHtoDAsync htod = (PFN_cuMemcpyHtoDAsync)resolve("cuMemcpyHtoDAsync", PTDS);
    PFN_cuMemcpyDtoHAsync dtoh = (PFN_cuMemcpyDtoHAsync)resolve("cuMemcpyDtoHAsync", PTDS);
    PFN_cuMemsetD8Async memset8 = (PFN_cuMemsetD8Async)resolve("cuMemsetD8Async", PTDS);
    PFN_cuLaunchKernel launch = (PFN_cuLaunchKernel)resolve("cuLaunchKernel", PTDS);
    PFN_cuStreamCreate stream_create = (PFN_cuStreamCreate)resolve("cuStreamCreate", 0);
    PFN_cuStreamDestroy stream_destroy = (PFN_cuStreamDestroy)resolve("cuStreamDestroy", 0);
    PFN_cuStreamSynchronize stream_sync = (PFN_cuStreamSynchronize)resolve("cuStreamSynchronize", PTDS);
    PFN_cuStreamWaitEvent wait_event = (PFN_cuStreamWaitEvent)resolve("cuStreamWaitEvent", PTDS);
    PFN_cuEventCreate event_create = (PFN_cuEventCreate)resolve("cuEventCreate", 0);
    PFN_cuEventRecord event_record = (PFN_cuEventRecord)resolve("cuEventRecord", PTDS);
    PFN_cuEventDestroy event_destroy = (PFN_cuEventDestroy)resolve("cuEventDestroy", 0);
    PFN_cuProfilerStart profiler_start = (PFN_cuProfilerStart)resolve("cuProfilerStart", 0);
    PFN_cuProfilerStop profiler_stop = (PFN_cuProfilerStop)resolve("cuProfilerStop", 0);

    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction span_axpb, gather_sum;
    CHECK(init(0));
    CHECK(device_get(&dev, 0));
    CHECK(retain(&ctx, dev));
    CHECK(set_current(ctx));
    CHECK(load(&module, PTX));
    CHECK(get_function(&span_axpb, module, "span_axpb"));
    CHECK(get_function(&gather_sum, module, "gather_sum"));

    static float a[N], b[N], out[N], want[N];
    for (int i = 0; i < N; i++) {
        a[i] = 0.25f * (float)(i % 64);
        b[i] = (float)(i % 11) - 5.0f;
    }
    CUdeviceptr da, db, dout, dtable;
    CHECK(mem_alloc(&da, sizeof a));
    CHECK(mem_alloc(&db, sizeof b));
    CHECK(mem_alloc(&dout, sizeof out));
    CHECK(mem_alloc(&dtable, 2 * sizeof(CUdeviceptr)));
    CUdeviceptr table[2] = {da, db};
    CUstream s1, s2;
    CUevent ready;
    CHECK(stream_create(&s1, CU_STREAM_NON_BLOCKING));
    CHECK(stream_create(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(event_create(&ready, CU_EVENT_DEFAULT));

    CHECK(profiler_start());
    CHECK(htod(da, a, sizeof a, s1));
    CHECK(htod(db, b, sizeof b, s1));
    CHECK(htod(dtable, table, sizeof table, s1));
    CHECK(memset8(dout, 0x40, sizeof out, s1));
    struct Span span = {da, N};
    float bias = 1.5f;
    void *span_params[] = {&span, &bias};
    unsigned grid = (N + BLOCK - 1) / BLOCK;
    CHECK(launch(span_axpb, grid, 1, 1, BLOCK, 1, 1, 0, s1, span_params, NULL)); /* a = 2 a + 1.5 */
    CHECK(event_record(ready, s1));
    CHECK(wait_event(s2, ready, 0));
    int n = N;
    void *gather_params[] = {&dtable, &dout, &n};
    CHECK(launch(gather_sum, grid, 1, 1, BLOCK, 1, 1, 0, s2, gather_params, NULL)); /* out += a + b */
    CHECK(dtoh(out, dout, sizeof out, s2));
    CHECK(stream_sync(s2));
    CHECK(profiler_stop());

    float fill;
    unsigned fill_bits = 0x40404040u;
    memcpy(&fill, &fill_bits, sizeof fill);
    for (int i = 0; i < N; i++) {
        float ai = 2.0f * a[i] + 1.5f; /* exact in float */
        float sum = ai + b[i];
        want[i] = sum + fill;
    }
    for (int i = 0; i < N; i++) {
        if (out[i] != want[i]) {
            fprintf(stderr, "runtime_style: mismatch at %d: %.9g, want %.9g\n", i, out[i], want[i]);
            return 1;
        }
    }
    CHECK(event_destroy(ready));
    CHECK(stream_destroy(s1));
    CHECK(stream_destroy(s2));
    CHECK(mem_free(da));
    CHECK(mem_free(db));
    CHECK(mem_free(dout));
    CHECK(mem_free(dtable));
    CHECK(unload(module));
    CHECK(release(dev));
    printf("runtime_style: ok %016llx\n", fnv1a(0xcbf29ce484222325ULL, out, sizeof out));
    return 0;
}
