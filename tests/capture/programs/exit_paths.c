/* The driver at the edges of a program's life, linked with -lcuda and -lpthread: calls from a second
 * thread while the first also launches, a call from a thread's pthread key destructor (after the
 * thread's C++ and Rust thread-locals are gone), calls after the program's own cuCtxDestroy, a call
 * the driver may not implement (looked up with dlsym), and an exit without any teardown whose atexit
 * handler still reads device memory, as an interposer's exit-time read of the end state does.
 *
 * Prints one line per step; every value it reads back is checked against the host's computation.
 * The driver must answer each call with a status, never with a crash or a panic message. */
#define PROGRAM "exit_paths"
#include <dlfcn.h>
#include <pthread.h>

#include "common.h"

CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *ctx);

static const char *PTX = SCALE_ADD_MIX_PTX;

enum { N = 4096, BLOCK = 128 };

static CUcontext ctx;
static CUfunction mix;
static CUdeviceptr buffers[2];
static pthread_key_t key;

static unsigned expected(unsigned value, unsigned seed, unsigned i, int rounds) {
    for (int r = 0; r < rounds; r++) value = (value * 2654435761u) ^ (seed + i);
    return value;
}

/* Launches mix_u32 over buffer `which` `rounds` times and checks what comes back. */
static int mix_and_check(int which, int rounds) {
    unsigned seed = 7 + which;
    int n = N;
    void *params[] = {&buffers[which], &seed, &n};
    for (int r = 0; r < rounds; r++) {
        CUresult s = cuLaunchKernel(mix, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL);
        if (s != CUDA_SUCCESS) return s;
    }
    static unsigned out[2][N];
    CUresult s = cuMemcpyDtoH(out[which], buffers[which], sizeof(out[which]));
    if (s != CUDA_SUCCESS) return s;
    for (unsigned i = 0; i < N; i++) {
        if (out[which][i] != expected(i, seed, i, rounds)) return -1;
    }
    return 0;
}

static void *second_thread(void *arg) {
    (void)arg;
    CUresult s = cuCtxSetCurrent(ctx);
    if (s != CUDA_SUCCESS) return (void *)(long)s;
    return (void *)(long)mix_and_check(1, 20);
}

/* Runs when a thread that set the key ends, after its thread-locals were destroyed. */
static void key_destructor(void *arg) {
    unsigned value = 0;
    CUresult s = cuCtxSetCurrent(ctx);
    CUresult r = cuMemcpyDtoH(&value, buffers[0], sizeof(value));
    *(int *)arg = s == CUDA_SUCCESS && r == CUDA_SUCCESS ? 1 : -(int)(s ? s : r);
}

static void *keyed_thread(void *result) {
    pthread_setspecific(key, result);
    CUresult s = cuCtxSetCurrent(ctx);
    return (void *)(long)s;
}

static CUdeviceptr last;

static void at_exit(void) {
    unsigned values[4] = {0};
    CUresult r = cuMemcpyDtoH(values, last, sizeof(values));
    printf("at exit: %d %u %u\n", r, values[0], values[3]);
    fflush(stdout);
}

int main(void) {
    CUmodule module = open_module(&ctx, PTX);
    mix = get_kernel(module, "mix_u32");
    unsigned init[N];
    for (unsigned i = 0; i < N; i++) init[i] = i;
    for (int b = 0; b < 2; b++) {
        CHECK(cuMemAlloc(&buffers[b], sizeof(init)));
        CHECK(cuMemcpyHtoD(buffers[b], init, sizeof(init)));
    }

    /* Two threads launching on one context at once. */
    pthread_t t;
    pthread_create(&t, NULL, second_thread, NULL);
    int mine = mix_and_check(0, 20);
    void *theirs;
    pthread_join(t, &theirs);
    printf("two threads: %d %ld\n", mine, (long)theirs);

    /* A driver call from a pthread key destructor. */
    int from_destructor = 0;
    pthread_key_create(&key, key_destructor);
    pthread_create(&t, NULL, keyed_thread, &from_destructor);
    pthread_join(t, NULL);
    printf("key destructor: %d\n", from_destructor);

    /* An entry point the driver may lack: a status, whatever it is, not a crash. */
    void *self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CUresult (*array_create)(void *, const void *) = self ? (CUresult(*)(void *, const void *))dlsym(self, "cuArrayCreate_v2") : NULL;
    printf("cuArrayCreate_v2: %s\n", array_create ? "found" : "missing");
    if (array_create) {
        void *array = NULL;
        unsigned char desc[24] = {0};
        CUresult r = array_create(&array, desc);
        printf("cuArrayCreate_v2 returned a status: %s\n", r != CUDA_SUCCESS ? "error" : "success");
    }

    /* After the program's own cuCtxDestroy there is no current context. */
    CHECK(cuCtxDestroy(ctx));
    CUdeviceptr after;
    CUcontext current = (CUcontext)1;
    CUresult got = cuCtxGetCurrent(&current);
    printf("after destroy: alloc %d, synchronize %d, current %d %s\n", cuMemAlloc(&after, 64), cuCtxSynchronize(), got,
           current ? "set" : "null");

    /* A new context, work in flight, and an exit without teardown. */
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, 0, dev));
    CHECK(cuMemAlloc(&last, 16));
    unsigned four[4] = {11, 12, 13, 14};
    CHECK(cuMemcpyHtoD(last, four, sizeof(four)));
    atexit(at_exit);
    printf("exit without teardown\n");
    return 0;
}
