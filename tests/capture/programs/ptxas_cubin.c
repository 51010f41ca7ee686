/* A program that compiles its kernel's PTX with the `ptxas` binary as a child process, as XLA
 * does: it writes the PTX to a temporary file, runs `PTXAS IN -o OUT -arch=sm_90 --warn-on-spills`,
 * reads the cubin, deletes both files and hands the cubin's bytes to cuModuleLoadData. The driver
 * never sees PTX.
 *
 * Usage: ptxas_cubin PTXAS [refusals]. With `refusals` it first runs ptxas twice in ways that leave
 * no PTX to keep, and checks that ptxas answers as it would alone: on PTX it cannot compile (it
 * fails, and writes no output), and on two inputs at once (whatever ptxas makes of them, its exit
 * status is passed back; the cubin, if any, is not loaded).
 *
 * Between cuProfilerStart and cuProfilerStop: data[i] = data[i] * a + i, checked on the host; it
 * prints `ptxas_cubin: ok <sum>`. */
#define PROGRAM "ptxas_cubin"
#define _POSIX_C_SOURCE 200809L
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static const char *PTX =
    ".version 8.0\n"
    ".target sm_90\n"
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

/* A second module, for the run with two inputs. */
static const char *OTHER_PTX =
    ".version 8.0\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry nothing()\n"
    "{\n"
    "\tret;\n"
    "}\n";

/* PTX that ptxas refuses. */
static const char *BROKEN_PTX = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry broken( {\n";

/* A fresh temporary file holding `text` (when not NULL); its path in `path`. */
static void temp_file(char *path, size_t size, const char *text) {
    snprintf(path, size, "/tmp/" PROGRAM "-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) {
        perror(PROGRAM ": mkstemp");
        exit(1);
    }
    size_t len = text ? strlen(text) : 0;
    if (len && write(fd, text, len) != (ssize_t)len) {
        perror(PROGRAM ": write");
        exit(1);
    }
    close(fd);
}

/* Runs ptxas with `args` (NULL-terminated, after the program's name) and returns its exit status. */
static int run_ptxas(const char *ptxas, const char **args) {
    const char *argv[16] = {ptxas};
    for (int i = 0; args[i] && i < 14; i++) argv[i + 1] = args[i];
    pid_t pid = fork();
    if (pid < 0) {
        perror(PROGRAM ": fork");
        exit(1);
    }
    if (pid == 0) {
        execv(ptxas, (char *const *)argv);
        perror(PROGRAM ": execv");
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
        fprintf(stderr, PROGRAM ": ptxas did not exit normally\n");
        exit(1);
    }
    return WEXITSTATUS(status);
}

/* The whole file at `path`, its length in `len`. */
static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(PROGRAM ": fopen");
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc(*len);
    if (!bytes || fread(bytes, 1, *len, f) != *len) {
        fprintf(stderr, PROGRAM ": reading %s failed\n", path);
        exit(1);
    }
    fclose(f);
    return bytes;
}

/* The runs whose PTX cannot be kept: each must end as ptxas alone would. */
static void refusals(const char *ptxas) {
    char in[64], other[64], out[64];
    temp_file(in, sizeof in, BROKEN_PTX);
    temp_file(out, sizeof out, NULL);
    unlink(out);
    const char *broken[] = {in, "-o", out, "-arch=sm_90", NULL};
    if (run_ptxas(ptxas, broken) == 0 || access(out, F_OK) == 0) {
        fprintf(stderr, PROGRAM ": ptxas compiled PTX it should refuse\n");
        exit(1);
    }
    unlink(in);
    temp_file(in, sizeof in, PTX);
    temp_file(other, sizeof other, OTHER_PTX);
    const char *two[] = {in, other, "-o", out, "-arch=sm_90", NULL};
    int status = run_ptxas(ptxas, two);
    printf(PROGRAM ": two inputs: ptxas exited with %d\n", status);
    unlink(in);
    unlink(other);
    unlink(out);
}

enum { N = 300, BLOCK = 128 };

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "refusals") != 0)) {
        fprintf(stderr, "usage: " PROGRAM " /path/to/ptxas [refusals]\n");
        return 2;
    }
    if (argc == 3) refusals(argv[1]);

    char in[64], out[64];
    temp_file(in, sizeof in, PTX);
    temp_file(out, sizeof out, NULL);
    const char *args[] = {in, "-o", out, "-arch=sm_90", "--warn-on-spills", NULL};
    int status = run_ptxas(argv[1], args);
    if (status != 0) {
        fprintf(stderr, PROGRAM ": ptxas exited with %d\n", status);
        return 1;
    }
    size_t cubin_len;
    unsigned char *cubin = read_file(out, &cubin_len);
    unlink(in);
    unlink(out);

    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, 0, dev));
    CHECK(cuModuleLoadData(&module, cubin));
    free(cubin);
    CUfunction scale_index = get_kernel(module, "scale_index");

    CUdeviceptr data;
    CHECK(cuMemAlloc(&data, N * sizeof(unsigned)));
    CHECK(cuMemsetD32(data, 5, N));
    CHECK(cuProfilerStart());
    unsigned a = 7, grid = (N + BLOCK - 1) / BLOCK;
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
