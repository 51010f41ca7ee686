// Warpgroup probe: `wgmma.mma_async.m64n8k16.f32.{f16,bf16}` on an H100/H200 over the seeded
// inputs of `probe_gen.cuh` (forms 6 and 7), so that the CPU model of `mma` can be checked on the
// warpgroup instruction too: A from registers (each warp's rows in `mma`'s A fragment), B from
// shared memory through a descriptor (K-major, no swizzle), D the accumulator in registers.
//
// One warpgroup (one block of 128 threads) per tile of 64 rows. Tiles below RANDOM_WG are random,
// the rest adversarial (the nine classes of `probe_gen.cuh` in turn).
//
// Build and run: nvcc -O2 -arch=sm_90a -o wgmma_probe wgmma_probe.cu && ./wgmma_probe OUTDIR
// Output per form: OUTDIR/<form>.out (header, then D of every tile, row-major 64x8, f32 bits) and
// OUTDIR/<form>.in (the inputs of the first DUMP_RANDOM random tiles and the first DUMP_CLASS of
// each class: A 64x16, B 16x8, C 64x8, every element a u32).

#ifndef __CUDACC_RTC__
#include <cstdio>
#include <cstdlib>
#include <vector>
#endif

#include "probe_gen.cuh"

static const u32 RANDOM_WG = 2048;
static const u32 PER_CLASS = 32;
static const u32 TILES = RANDOM_WG + CLASSES * PER_CLASS;
static const u32 DUMP_RANDOM = 16;
static const u32 DUMP_CLASS = 4;
static const u32 DUMPED = DUMP_RANDOM + CLASSES * DUMP_CLASS;
static const u32 DUMP_WORDS = 64 * 16 + 16 * 8 + 64 * 8;

__host__ __device__ inline int dump_slot(u32 tile) {
  if (tile < DUMP_RANDOM) return (int)tile;
  if (tile < RANDOM_WG) return -1;
  u32 i = tile - RANDOM_WG;
  if (i / CLASSES >= DUMP_CLASS) return -1;
  return (int)(DUMP_RANDOM + (i % CLASSES) * DUMP_CLASS + i / CLASSES);
}

__device__ inline u32 pack16(u32 lo, u32 hi) { return (lo & 0xFFFF) | (hi << 16); }

template <int FORM>
__global__ void probe(u32 *out, u32 *dump) {
  const Fmt in = FORM == 6 ? F16 : BF16;
  u32 tile = blockIdx.x;
  u32 w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  int cls = tile_class(tile, RANDOM_WG);
  int slot = dump_slot(tile);
  u32 *dA = slot >= 0 ? dump + (size_t)slot * DUMP_WORDS : nullptr;
  // B, K-major: core matrix j (k 8j..8j+8) at byte 128 j, row n of it at 16 n.
  __shared__ __align__(128) uint16_t sb[128];
  {
    u32 i = threadIdx.x;  // one element of B per thread
    u32 k = i / 8, n = i % 8;
    u32 v = gen(FORM, 16, in, F32, cls, tile, 1, k, n);
    if (dA) dA[1024 + k * 8 + n] = v;
    sb[(k / 8) * 64 + n * 8 + (k % 8)] = (uint16_t)v;
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  u32 ea[8];
  for (u32 i = 0; i < 8; i++) {
    u32 r = 16 * w + g + 8 * ((i >> 1) & 1), c = 2 * t + (i & 1) + 8 * (i >> 2);
    ea[i] = gen(FORM, 16, in, F32, cls, tile, 0, r, c);
    if (dA) dA[r * 16 + c] = ea[i];
  }
  u32 a[4];
  for (u32 i = 0; i < 4; i++) a[i] = pack16(ea[2 * i], ea[2 * i + 1]);
  float d[4];
  for (u32 i = 0; i < 4; i++) {
    u32 r = 16 * w + g + 8 * ((i >> 1) & 1), c = 2 * t + (i & 1);
    u32 v = gen(FORM, 16, in, F32, cls, tile, 2, r, c);
    if (dA) dA[1152 + r * 8 + c] = v;
    d[i] = __uint_as_float(v);
  }
  u32 addr = (u32)__cvta_generic_to_shared(sb);
  // Start address, then LBO and SBO both 128 bytes (with N = 8 only the stride between the two
  // core matrices along K is ever used, whichever field the hardware takes it from), no swizzle.
  u64 desc = (u64)((addr & 0x3FFFF) >> 4) | ((u64)(128 >> 4) << 16) | ((u64)(128 >> 4) << 32);
  if (FORM == 6) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.fence.sync.aligned;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n"
        "wgmma.commit_group.sync.aligned;\n"
        "wgmma.wait_group.sync.aligned 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1u)
        : "memory");
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.fence.sync.aligned;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n"
        "wgmma.commit_group.sync.aligned;\n"
        "wgmma.wait_group.sync.aligned 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1u)
        : "memory");
  }
  for (u32 i = 0; i < 4; i++) {
    u32 r = 16 * w + g + 8 * ((i >> 1) & 1), c = 2 * t + (i & 1);
    out[(size_t)tile * 512 + r * 8 + c] = __float_as_uint(d[i]);
  }
}

#ifndef __CUDACC_RTC__
#define CHECK(x)                                                               \
  do {                                                                         \
    cudaError_t e_ = (x);                                                      \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                 \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static void put32(FILE *f, u32 v) { fwrite(&v, 4, 1, f); }

template <int FORM>
static void run(const char *dir, const char *name) {
  const Fmt in = FORM == 6 ? F16 : BF16;
  size_t n = (size_t)TILES * 512;
  u32 *out, *dump;
  CHECK(cudaMalloc(&out, n * 4));
  CHECK(cudaMalloc(&dump, (size_t)DUMPED * DUMP_WORDS * 4));
  CHECK(cudaMemset(dump, 0, (size_t)DUMPED * DUMP_WORDS * 4));
  probe<FORM><<<TILES, 128>>>(out, dump);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<u32> host(n), dh((size_t)DUMPED * DUMP_WORDS);
  CHECK(cudaMemcpy(host.data(), out, n * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(dh.data(), dump, dh.size() * 4, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (u32 tile = 0; tile < TILES; tile++) {
    int s = dump_slot(tile);
    if (s < 0) continue;
    const u32 *p = &dh[(size_t)s * DUMP_WORDS];
    int cls = tile_class(tile, RANDOM_WG);
    for (u32 r = 0; r < 64; r++)
      for (u32 c = 0; c < 16; c++) bad += p[r * 16 + c] != gen(FORM, 16, in, F32, cls, tile, 0, r, c);
    for (u32 r = 0; r < 16; r++)
      for (u32 c = 0; c < 8; c++) bad += p[1024 + r * 8 + c] != gen(FORM, 16, in, F32, cls, tile, 1, r, c);
    for (u32 r = 0; r < 64; r++)
      for (u32 c = 0; c < 8; c++) bad += p[1152 + r * 8 + c] != gen(FORM, 16, in, F32, cls, tile, 2, r, c);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/%s.out", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fwrite("RCMP", 1, 4, f);
  put32(f, 1);
  put32(f, FORM);
  put32(f, 16);
  put32(f, RANDOM_WG);
  put32(f, CLASSES * PER_CLASS);
  put32(f, 4);
  fwrite(host.data(), 4, host.size(), f);
  fclose(f);
  snprintf(path, sizeof path, "%s/%s.in", dir, name);
  f = fopen(path, "wb");
  fwrite(dh.data(), 4, dh.size(), f);
  fclose(f);
  printf("%s: %u warpgroup tiles (%u random, %u adversarial), %zu host/device input mismatches\n", name,
         TILES, RANDOM_WG, CLASSES * PER_CLASS, bad);
  CHECK(cudaFree(out));
  CHECK(cudaFree(dump));
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  run<6>(dir, "m64n8k16_f32_f16");
  run<7>(dir, "m64n8k16_f32_bf16");
  return 0;
}
#endif
