/* A program that marks its phases with NVTX ranges and loads NVTX the way NVTX v3's headers do:
 * a table of function pointers per NVTX call, filled on the first call by the injection library
 * that NVTX_INJECTION64_PATH names (dlopen, then its InitializeInjectionNvtx2 with this copy's
 * export-table getter). Without an injection library every NVTX call is a no-op.
 *
 * Each phase adds its own power of ten to every element of one buffer, so the final contents say
 * which phases ran; it checks them on the host and prints `nvtx_range: ok <value> injected=<0|1>`.
 *   warmup      push/pop                  +1
 *   step        push/pop, holding inner   +10, inner +100, +1000
 *   solve       a push in domain "physics" with a registered string   +10000
 *   io          start/end                 +100000
 *   step again  push/pop                  +1000000 */
#include <dlfcn.h>

#define PROGRAM "nvtx_range"
#include "common.h"

/* ---- NVTX v3's injection ABI, as its documentation lays it out ---- */

typedef void (*nvtx_fn)(void);
typedef const void *(*get_export_table_fn)(uint32_t id);
typedef int (*initialize_injection_fn)(get_export_table_fn get);

enum { ETID_CALLBACKS = 1, MODULE_CORE = 1, MODULE_CORE2 = 5, MESSAGE_REGISTERED = 3 };
enum { CORE_RANGE_START_A = 5, CORE_RANGE_END = 7, CORE_RANGE_PUSH_A = 9, CORE_RANGE_POP = 11, CORE_SIZE = 16 };
enum { CORE2_PUSH_EX = 4, CORE2_POP = 5, CORE2_REGISTER_STRING_A = 10, CORE2_DOMAIN_CREATE_A = 12, CORE2_SIZE = 16 };

typedef struct {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type;
    int32_t reserved0;
    uint64_t payload;
    int32_t message_type;
    const void *message;
} event_attributes;

typedef struct {
    size_t struct_size;
    int (*get_module_function_table)(uint32_t module, nvtx_fn ***table, unsigned *size);
} callbacks_table;

/* This copy's slots: NULL is a no-op. */
static uint64_t (*range_start_a)(const char *);
static void (*range_end)(uint64_t);
static int (*range_push_a)(const char *);
static int (*range_pop)(void);
static int (*domain_push_ex)(void *, const event_attributes *);
static int (*domain_pop)(void *);
static void *(*register_string_a)(void *, const char *);
static void *(*domain_create_a)(const char *);

/* Slot 0 and the one past the last are NULL; calls this program does not make get slots of
 * their own that it never reads. */
static nvtx_fn unused_core[CORE_SIZE], unused_core2[CORE2_SIZE];
static nvtx_fn *core_table[CORE_SIZE + 1], *core2_table[CORE2_SIZE + 1];

static int get_module_function_table(uint32_t module, nvtx_fn ***table, unsigned *size) {
    switch (module) {
    case MODULE_CORE: *table = core_table; *size = CORE_SIZE; return 1;
    case MODULE_CORE2: *table = core2_table; *size = CORE2_SIZE; return 1;
    default: return 0;
    }
}

static const callbacks_table CALLBACKS = {sizeof(callbacks_table), get_module_function_table};

static const void *get_export_table(uint32_t id) {
    return id == ETID_CALLBACKS ? &CALLBACKS : NULL;
}

static int injected = -1;

static void nvtx_init(void) {
    if (injected >= 0) return;
    injected = 0;
    for (int i = 1; i < CORE_SIZE; i++) core_table[i] = &unused_core[i];
    for (int i = 1; i < CORE2_SIZE; i++) core2_table[i] = &unused_core2[i];
    core_table[CORE_RANGE_START_A] = (nvtx_fn *)&range_start_a;
    core_table[CORE_RANGE_END] = (nvtx_fn *)&range_end;
    core_table[CORE_RANGE_PUSH_A] = (nvtx_fn *)&range_push_a;
    core_table[CORE_RANGE_POP] = (nvtx_fn *)&range_pop;
    core2_table[CORE2_PUSH_EX] = (nvtx_fn *)&domain_push_ex;
    core2_table[CORE2_POP] = (nvtx_fn *)&domain_pop;
    core2_table[CORE2_REGISTER_STRING_A] = (nvtx_fn *)&register_string_a;
    core2_table[CORE2_DOMAIN_CREATE_A] = (nvtx_fn *)&domain_create_a;
    const char *path = getenv("NVTX_INJECTION64_PATH");
    if (!path) return;
    void *lib = dlopen(path, RTLD_LAZY);
    if (!lib) {
        fprintf(stderr, "nvtx_range: dlopen %s: %s\n", path, dlerror());
        return;
    }
    initialize_injection_fn init;
    *(void **)&init = dlsym(lib, "InitializeInjectionNvtx2");
    if (init && init(get_export_table)) {
        injected = 1;
    } else {
        range_start_a = NULL, range_end = NULL, range_push_a = NULL, range_pop = NULL;
        domain_push_ex = NULL, domain_pop = NULL, register_string_a = NULL, domain_create_a = NULL;
    }
}

static void push(const char *m) { nvtx_init(); if (range_push_a) range_push_a(m); }
static void pop(void) { nvtx_init(); if (range_pop) range_pop(); }
static uint64_t start(const char *m) { nvtx_init(); return range_start_a ? range_start_a(m) : 0; }
static void end(uint64_t id) { nvtx_init(); if (range_end) range_end(id); }
static void *domain(const char *name) { nvtx_init(); return domain_create_a ? domain_create_a(name) : NULL; }
static void *registered(void *d, const char *s) { nvtx_init(); return register_string_a ? register_string_a(d, s) : NULL; }
static void dpush(void *d, const event_attributes *a) { nvtx_init(); if (domain_push_ex) domain_push_ex(d, a); }
static void dpop(void *d) { nvtx_init(); if (domain_pop) domain_pop(d); }

/* ---- the CUDA part ---- */

static const char *PTX =
    ".version 8.0\n"
    ".target sm_80\n"
    ".address_size 64\n"
    "\n"
    "// data[i] += k for i < n\n"
    ".visible .entry add_u32(\n"
    "\t.param .u64 add_u32_param_0,\n"
    "\t.param .u32 add_u32_param_1,\n"
    "\t.param .u32 add_u32_param_2\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<9>;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u64 %rd1, [add_u32_param_0];\n"
    "\tld.param.u32 %r2, [add_u32_param_1];\n"
    "\tld.param.u32 %r3, [add_u32_param_2];\n"
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
    "\tadd.s32 %r8, %r7, %r2;\n"
    "\tst.global.u32 [%rd4], %r8;\n"
    "$L__done:\n"
    "\tret;\n"
    "}\n";

enum { N = 300, BLOCK = 128 };

static CUfunction add_u32;
static CUdeviceptr data;

static void add(unsigned k) {
    int n = N;
    void *params[] = {&data, &k, &n};
    CHECK(cuLaunchKernel(add_u32, (N + BLOCK - 1) / BLOCK, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
}

int main(void) {
    CUcontext ctx;
    CUmodule module = open_module(&ctx, PTX);
    add_u32 = get_kernel(module, "add_u32");
    static unsigned host[N];
    /* The top bit set: no two neighbouring words read as an address of the CPU driver's, which
     * recap would take for a pointer. */
    for (int i = 0; i < N; i++) host[i] = 0x80000000u | (unsigned)i;
    CHECK(cuMemAlloc(&data, sizeof host));
    CHECK(cuMemcpyHtoD(data, host, sizeof host));

    push("warmup");
    add(1);
    pop();

    push("step");
    add(10);
    push("inner");
    add(100);
    pop();
    add(1000);
    pop();

    void *physics = domain("physics");
    event_attributes attrs = {0};
    attrs.version = 3;
    attrs.size = sizeof attrs;
    attrs.message_type = MESSAGE_REGISTERED;
    attrs.message = registered(physics, "solve");
    dpush(physics, &attrs);
    add(10000);
    dpop(physics);

    uint64_t io = start("io");
    add(100000);
    end(io);

    push("step");
    add(1000000);
    pop();

    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(host, data, sizeof host));
    for (int i = 0; i < N; i++) {
        unsigned want = (0x80000000u | (unsigned)i) + 1111111u;
        if (host[i] != want) {
            fprintf(stderr, "nvtx_range: element %d is %u, want %u\n", i, host[i], want);
            return 1;
        }
    }
    CHECK(cuMemFree(data));
    CHECK(cuModuleUnload(module));
    CHECK(cuCtxDestroy(ctx));
    printf("nvtx_range: ok %u injected=%d\n", host[N - 1], injected);
    return 0;
}
