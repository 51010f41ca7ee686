/* A program that compiles its kernel at run time with NVRTC for the GPU's exact architecture and
 * loads the cubin, as CuPy does by default: it opens NVRTC by its absolute path (argv[1]), as
 * CuPy's cuda-pathfinder does, hands it a source that includes a header it supplies, asks for one
 * instantiation of a template by name expression, compiles with -arch=sm_90, takes the cubin with
 * nvrtcGetCUBIN and loads it with cuModuleLoadData. The driver never sees PTX.
 *
 * Between cuProfilerStart and cuProfilerStop: data[i] = data[i] * 3 + BIAS + i (BIAS from the
 * header), checked on the host; it prints `nvrtc_cubin: ok <sum>`. */
#define PROGRAM "nvrtc_cubin"
#include <dlfcn.h>

#include "common.h"

static const char *SOURCE =
    "#include \"bias.h\"\n"
    "template <int K>\n"
    "__global__ void scale_bias(unsigned *data, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) data[i] = data[i] * K + BIAS + i;\n"
    "}\n";
static const char *HEADER = "#define BIAS 11u\n";

typedef int (*create_fn)(void **, const char *, const char *, int, const char *const *, const char *const *);
typedef int (*compile_fn)(void *, int, const char *const *);
typedef int (*size_fn)(void *, size_t *);
typedef int (*get_fn)(void *, char *);
typedef int (*name_fn)(void *, const char *);
typedef int (*lowered_fn)(void *, const char *, const char **);
typedef int (*destroy_fn)(void **);

static void *nvrtc;

static void *nvrtc_entry(const char *name) {
    void *f = dlsym(nvrtc, name);
    if (!f) {
        fprintf(stderr, PROGRAM ": no %s in NVRTC\n", name);
        exit(1);
    }
    return f;
}

static void nvrtc_check(int r, const char *what) {
    if (r != 0) {
        fprintf(stderr, PROGRAM ": %s failed with NVRTC error %d\n", what, r);
        exit(1);
    }
}

enum { N = 300, BLOCK = 128 };

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: " PROGRAM " /path/to/libnvrtc.so [/path/to/libnvrtc-builtins.so]\n");
        return 2;
    }
    /* NVRTC opens its builtins library by soname; a wheel's copy is on no search path, so load it
     * first, as Python's nvidia packages do, and NVRTC finds it already loaded. */
    if (argc == 3 && !dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, PROGRAM ": cannot open %s: %s\n", argv[2], dlerror());
        return 1;
    }
    nvrtc = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!nvrtc) {
        fprintf(stderr, PROGRAM ": cannot open %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void *prog;
    const char *header_name = "bias.h";
    nvrtc_check(((create_fn)nvrtc_entry("nvrtcCreateProgram"))(&prog, SOURCE, "scale_bias.cu", 1, &HEADER, &header_name),
                "nvrtcCreateProgram");
    nvrtc_check(((name_fn)nvrtc_entry("nvrtcAddNameExpression"))(prog, "scale_bias<3>"), "nvrtcAddNameExpression");
    const char *options[] = {"-arch=sm_90", "-std=c++17"};
    int r = ((compile_fn)nvrtc_entry("nvrtcCompileProgram"))(prog, 2, options);
    if (r != 0) {
        size_t len = 0;
        ((size_fn)nvrtc_entry("nvrtcGetProgramLogSize"))(prog, &len);
        char *log = calloc(1, len + 1);
        if (log) ((get_fn)nvrtc_entry("nvrtcGetProgramLog"))(prog, log);
        fprintf(stderr, PROGRAM ": compiling failed with NVRTC error %d:\n%s\n", r, log ? log : "");
        return 1;
    }
    const char *lowered;
    nvrtc_check(((lowered_fn)nvrtc_entry("nvrtcGetLoweredName"))(prog, "scale_bias<3>", &lowered), "nvrtcGetLoweredName");
    char kernel_name[256];
    snprintf(kernel_name, sizeof kernel_name, "%s", lowered);
    size_t cubin_len = 0;
    nvrtc_check(((size_fn)nvrtc_entry("nvrtcGetCUBINSize"))(prog, &cubin_len), "nvrtcGetCUBINSize");
    char *cubin = malloc(cubin_len);
    if (!cubin) return 1;
    nvrtc_check(((get_fn)nvrtc_entry("nvrtcGetCUBIN"))(prog, cubin), "nvrtcGetCUBIN");
    nvrtc_check(((destroy_fn)nvrtc_entry("nvrtcDestroyProgram"))(&prog), "nvrtcDestroyProgram");

    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, 0, dev));
    CHECK(cuModuleLoadData(&module, cubin));
    free(cubin);
    CUfunction scale_bias = get_kernel(module, kernel_name);

    CUdeviceptr data;
    CHECK(cuMemAlloc(&data, N * sizeof(unsigned)));
    CHECK(cuMemsetD32(data, 7, N));
    CHECK(cuProfilerStart());
    unsigned grid = (N + BLOCK - 1) / BLOCK;
    int n = N;
    void *args[] = {&data, &n};
    CHECK(cuLaunchKernel(scale_bias, grid, 1, 1, BLOCK, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    CHECK(cuProfilerStop());

    static unsigned host[N];
    CHECK(cuMemcpyDtoH(host, data, sizeof host));
    unsigned long long sum = 0;
    for (int i = 0; i < N; i++) {
        unsigned want = 7u * 3u + 11u + (unsigned)i;
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
