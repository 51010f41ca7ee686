/* A program that links its kernel's PTX with the driver's linker and loads the result, as numba
 * does through cuda.core: cuLinkCreate, cuLinkAddData of the PTX, cuLinkComplete, then a copy of
 * the linked image made before cuLinkDestroy frees the driver's, and cuModuleLoadData of that
 * copy. With `in-place` it loads the driver's own image before destroying the link instead.
 *
 * Usage: linked_copy [in-place]. Between cuProfilerStart and cuProfilerStop:
 * data[i] = data[i] * a + i, checked on the host; it prints `linked_copy: ok <sum>`. */
#define PROGRAM "linked_copy"
#include "common.h"

/* The linker's entry points, which cuda_min.h leaves out. */
typedef struct CUlinkState_st *CUlinkState;
#define CU_JIT_INPUT_PTX 1
CUresult cuLinkCreate_v2(unsigned num_options, int *options, void **values, CUlinkState *state);
CUresult cuLinkAddData_v2(CUlinkState state, int kind, void *data, size_t size, const char *name, unsigned num_options,
                          int *options, void **values);
CUresult cuLinkComplete(CUlinkState state, void **image, size_t *size);
CUresult cuLinkDestroy(CUlinkState state);

static const char *PTX = SCALE_INDEX_PTX("sm_80");

int main(int argc, char **argv) {
    int in_place = argc == 2 && strcmp(argv[1], "in-place") == 0;
    if (argc > 2 || (argc == 2 && !in_place)) {
        fprintf(stderr, "usage: " PROGRAM " [in-place]\n");
        return 2;
    }
    CUcontext ctx;
    CUmodule module;
    open_context(&ctx);

    CUlinkState link;
    CHECK(cuLinkCreate_v2(0, NULL, NULL, &link));
    CHECK(cuLinkAddData_v2(link, CU_JIT_INPUT_PTX, (void *)PTX, strlen(PTX) + 1, "scale_index.ptx", 0, NULL, NULL));
    void *image;
    size_t size;
    CHECK(cuLinkComplete(link, &image, &size));
    if (in_place) {
        CHECK(cuModuleLoadData(&module, image));
        CHECK(cuLinkDestroy(link));
    } else {
        unsigned char *copy = malloc(size);
        if (!copy) return 1;
        memcpy(copy, image, size);
        CHECK(cuLinkDestroy(link));
        CHECK(cuModuleLoadData(&module, copy));
        free(copy);
    }
    unsigned long long sum = scale_index_checked(get_kernel(module, "scale_index"), 5, 9);
    CHECK(cuCtxDestroy(ctx));
    printf(PROGRAM ": ok %llu\n", sum);
    return 0;
}
