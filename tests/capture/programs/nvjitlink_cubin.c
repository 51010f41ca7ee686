/* A program that links its kernel with nvJitLink and loads the cubin, as numba-cuda does through
 * cuda.bindings: it opens nvJitLink by its absolute path (argv[1]), as cuda-pathfinder does,
 * creates a link for -arch=sm_90, adds its input, completes the link, copies the cubin out,
 * destroys the link and hands the copy to cuModuleLoadData. The driver never sees PTX.
 *
 * Usage: nvjitlink_cubin NVJITLINK ptx|plain|lto [NVRTC [NVRTC_BUILTINS]].
 *   ptx    the kernel's PTX, through the versioned entry points a CUDA 13.0 header calls
 *          (`__nvJitLinkCreate_13_0`, ...);
 *   plain  the same through the plain names (`nvJitLinkCreate`, ...);
 *   lto    the kernel compiled to LTO-IR by NVRTC (-dlto), linked with -lto: nvJitLink optimises
 *          the whole and hands out a cubin only.
 *
 * Between cuProfilerStart and cuProfilerStop: data[i] = data[i] * 11 + i, checked on the host; it
 * prints `nvjitlink_cubin: ok <sum>`. */
#define PROGRAM "nvjitlink_cubin"
#include <dlfcn.h>

#include "common.h"

static const char *PTX = SCALE_INDEX_PTX("sm_90");

static const char *SOURCE = "extern \"C\" __global__ void scale_index(unsigned *data, unsigned a, int n) {\n"
                            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                            "    if (i < n) data[i] = data[i] * a + i;\n"
                            "}\n";

/* nvJitLinkInputType */
enum { NVJITLINK_INPUT_PTX = 2, NVJITLINK_INPUT_LTOIR = 3 };

typedef int (*create_fn)(void **, unsigned, const char *const *);
typedef int (*add_fn)(void *, int, const void *, size_t, const char *);
typedef int (*handle_fn)(void *);
typedef int (*size_fn)(void *, size_t *);
typedef int (*get_fn)(void *, void *);
typedef int (*destroy_fn)(void **);

/* `name` in `lib`, or the program ends saying which. */
static void *entry(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, PROGRAM ": no %s: %s\n", name, dlerror());
        exit(1);
    }
    return f;
}

static void *open_library(const char *path) {
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, PROGRAM ": cannot open %s: %s\n", path, dlerror());
        exit(1);
    }
    return lib;
}

/* nvJitLink's entry point `base` under the names the program calls it by. */
static void *jitlink_entry(void *lib, const char *base, int versioned) {
    char name[128];
    snprintf(name, sizeof name, versioned ? "__nvJitLink%s_13_0" : "nvJitLink%s", base);
    return entry(lib, name);
}

/* The kernel's LTO-IR from NVRTC (`-arch=compute_90 -dlto`); its length in `len`. */
static void *lto_ir(const char *nvrtc_path, const char *builtins, size_t *len) {
    /* NVRTC opens its builtins by soname, on no search path in a wheel: loaded first, it is found. */
    if (builtins && !dlopen(builtins, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, PROGRAM ": cannot open %s: %s\n", builtins, dlerror());
        exit(1);
    }
    void *nvrtc = open_library(nvrtc_path);
    typedef int (*nvrtc_create_fn)(void **, const char *, const char *, int, const char *const *,
                                   const char *const *);
    typedef int (*nvrtc_compile_fn)(void *, int, const char *const *);
    void *prog;
    if (((nvrtc_create_fn)entry(nvrtc, "nvrtcCreateProgram"))(&prog, SOURCE, "scale_index.cu", 0, NULL, NULL)) {
        fprintf(stderr, PROGRAM ": nvrtcCreateProgram failed\n");
        exit(1);
    }
    const char *options[] = {"-arch=compute_90", "-dlto"};
    int r = ((nvrtc_compile_fn)entry(nvrtc, "nvrtcCompileProgram"))(prog, 2, options);
    if (r || ((size_fn)entry(nvrtc, "nvrtcGetLTOIRSize"))(prog, len)) {
        fprintf(stderr, PROGRAM ": compiling to LTO-IR failed with NVRTC error %d\n", r);
        exit(1);
    }
    void *ir = malloc(*len);
    if (!ir || ((get_fn)entry(nvrtc, "nvrtcGetLTOIR"))(prog, ir)) {
        fprintf(stderr, PROGRAM ": nvrtcGetLTOIR failed\n");
        exit(1);
    }
    ((destroy_fn)entry(nvrtc, "nvrtcDestroyProgram"))(&prog);
    return ir;
}

/* Ends the program with nvJitLink's error log when `r` is an error. */
static void jitlink_check(int r, const char *what, void *lib, void *link, int versioned) {
    if (r == 0) return;
    size_t len = 0;
    char *log = NULL;
    if (link && ((size_fn)jitlink_entry(lib, "GetErrorLogSize", versioned))(link, &len) == 0 && len) {
        log = calloc(1, len + 1);
        if (log) ((get_fn)jitlink_entry(lib, "GetErrorLog", versioned))(link, log);
    }
    fprintf(stderr, PROGRAM ": %s failed with nvJitLink error %d\n%s\n", what, r, log ? log : "");
    exit(1);
}

int main(int argc, char **argv) {
    const char *mode = argc >= 3 ? argv[2] : "";
    int lto = !strcmp(mode, "lto");
    if (argc < 3 || (strcmp(mode, "ptx") && strcmp(mode, "plain") && !lto) || (lto && argc < 4) ||
        (!lto && argc > 3) || argc > 5) {
        fprintf(stderr, "usage: " PROGRAM " /path/to/libnvJitLink.so ptx|plain|lto [NVRTC [NVRTC_BUILTINS]]\n");
        return 2;
    }
    int versioned = strcmp(mode, "plain") != 0;
    const void *input = PTX;
    size_t input_len = strlen(PTX);
    if (lto) input = lto_ir(argv[3], argc == 5 ? argv[4] : NULL, &input_len);

    void *lib = open_library(argv[1]);
    void *link = NULL;
    const char *options[] = {"-arch=sm_90", "-lto"};
    jitlink_check(((create_fn)jitlink_entry(lib, "Create", versioned))(&link, lto ? 2 : 1, options), "nvJitLinkCreate",
                  lib, NULL, versioned);
    int kind = lto ? NVJITLINK_INPUT_LTOIR : NVJITLINK_INPUT_PTX;
    const char *name = lto ? "scale_index.ltoir" : "scale_index.ptx";
    jitlink_check(((add_fn)jitlink_entry(lib, "AddData", versioned))(link, kind, input, input_len, name),
                  "nvJitLinkAddData", lib, link, versioned);
    jitlink_check(((handle_fn)jitlink_entry(lib, "Complete", versioned))(link), "nvJitLinkComplete", lib, link,
                  versioned);
    size_t size = 0;
    jitlink_check(((size_fn)jitlink_entry(lib, "GetLinkedCubinSize", versioned))(link, &size),
                  "nvJitLinkGetLinkedCubinSize", lib, link, versioned);
    void *cubin = malloc(size);
    if (!cubin) return 1;
    jitlink_check(((get_fn)jitlink_entry(lib, "GetLinkedCubin", versioned))(link, cubin), "nvJitLinkGetLinkedCubin",
                  lib, link, versioned);
    jitlink_check(((destroy_fn)jitlink_entry(lib, "Destroy", versioned))(&link), "nvJitLinkDestroy", lib, NULL,
                  versioned);
    if (lto) free((void *)input);

    CUcontext ctx;
    CUmodule module;
    open_context(&ctx);
    CHECK(cuModuleLoadData(&module, cubin));
    free(cubin);
    unsigned long long sum = scale_index_checked(get_kernel(module, "scale_index"), 5, 11);
    CHECK(cuCtxDestroy(ctx));
    printf(PROGRAM ": ok %llu\n", sum);
    return 0;
}
