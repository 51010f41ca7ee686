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
#include <sys/wait.h>

#include "common.h"

static const char *PTX = SCALE_INDEX_PTX("sm_90");

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

    CUcontext ctx;
    CUmodule module;
    open_context(&ctx);
    CHECK(cuModuleLoadData(&module, cubin));
    free(cubin);
    unsigned long long sum = scale_index_checked(get_kernel(module, "scale_index"), 5, 7);
    CHECK(cuCtxDestroy(ctx));
    printf(PROGRAM ": ok %llu\n", sum);
    return 0;
}
