/* A program that loads its kernel as a bare cubin out of a compiler's cache, as Triton and
 * torch.compile do: it writes NAME.cubin and NAME.ptx into a folder laid out as Triton's cache
 * (`TRITON_CACHE_DIR/<hash>/`) or inductor's (`TORCHINDUCTOR_CACHE_DIR/triton/0/<hash>/`), sets the
 * variable only then (as a Python program sets os.environ after start-up), and hands the cubin's
 * bytes to cuModuleLoadData. For the CPU driver the cubin is its own machine code (an ELF header
 * with e_machine 0x4352, the PTX it runs, one section header covering it), which recap's capture
 * sees as a cubin without PTX.
 *
 * Usage: triton_cache triton|inductor DIR. Between cuProfilerStart and cuProfilerStop it runs
 * data[i] = data[i] * a + i, checks data on the host and prints `triton_cache: ok <sum>`. */
#define PROGRAM "triton_cache"
#define _POSIX_C_SOURCE 200809L
#include "common.h"

static const char *PTX = SCALE_INDEX_PTX("sm_90");

static void put16(unsigned char *p, unsigned v) { p[0] = v & 0xff, p[1] = (v >> 8) & 0xff; }
static void put32(unsigned char *p, unsigned long v) { for (int i = 0; i < 4; i++) p[i] = (v >> (8 * i)) & 0xff; }
static void put64(unsigned char *p, unsigned long long v) { for (int i = 0; i < 8; i++) p[i] = (v >> (8 * i)) & 0xff; }

/* The CPU driver's machine code for PTX: the ELF header, the PTX (NUL-terminated, padded to 8),
 * then one section header (PROGBITS over the PTX), so the image's length is in its own header. */
static unsigned char *machine_code_elf(const char *ptx, size_t *len) {
    size_t text = strlen(ptx) + 1, padded = (text + 7) / 8 * 8;
    *len = 64 + padded + 64;
    unsigned char *elf = calloc(1, *len);
    if (!elf) exit(1);
    memcpy(elf, "\x7f" "ELF", 4);
    elf[4] = 2;                      /* 64-bit */
    elf[5] = 1;                      /* little-endian */
    elf[6] = 1;                      /* ELF version */
    put16(elf + 16, 2);              /* executable */
    put16(elf + 18, 0x4352);         /* the CPU driver's machine */
    put32(elf + 20, 1);
    put64(elf + 0x28, 64 + padded);  /* e_shoff */
    put16(elf + 52, 64);             /* e_ehsize */
    put16(elf + 0x3a, 64);           /* e_shentsize */
    put16(elf + 0x3c, 1);            /* e_shnum */
    memcpy(elf + 64, ptx, text);
    unsigned char *sh = elf + 64 + padded;
    put32(sh + 4, 1);                /* SHT_PROGBITS */
    put64(sh + 0x18, 64);            /* sh_offset */
    put64(sh + 0x20, text);          /* sh_size */
    return elf;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "triton") && strcmp(argv[1], "inductor"))) {
        fprintf(stderr, "usage: " PROGRAM " triton|inductor DIR\n");
        return 2;
    }
    const char *root = argv[2];
    char folder[4096];
    make_dir(root);
    if (!strcmp(argv[1], "triton")) {
        snprintf(folder, sizeof folder, "%s/5AH6XZKQ3JY2BFOM", root);
    } else {
        snprintf(folder, sizeof folder, "%s/triton", root);
        make_dir(folder);
        snprintf(folder, sizeof folder, "%s/triton/0", root);
        make_dir(folder);
        snprintf(folder, sizeof folder, "%s/triton/0/5AH6XZKQ3JY2BFOM", root);
    }
    make_dir(folder);
    size_t len;
    unsigned char *cubin = machine_code_elf(PTX, &len);
    write_file(folder, "scale_index.cubin", cubin, len);
    write_file(folder, "scale_index.ptx", PTX, strlen(PTX));
    write_file(folder, "scale_index.json", "{\"name\": \"scale_index\"}\n", 24);
    if (setenv(!strcmp(argv[1], "triton") ? "TRITON_CACHE_DIR" : "TORCHINDUCTOR_CACHE_DIR", root, 1) != 0) return 1;

    CUcontext ctx;
    CUmodule module;
    open_context(&ctx);
    CHECK(cuModuleLoadData(&module, cubin));
    free(cubin);
    unsigned long long sum = scale_index_checked(get_kernel(module, "scale_index"), 7, 3);
    CHECK(cuCtxDestroy(ctx));
    printf(PROGRAM ": ok %llu\n", sum);
    return 0;
}
