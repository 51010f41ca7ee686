// Tensor-core probe: runs `mma.sync` of several shapes and types on an H100/H200 over seeded
// inputs and writes the hardware's outputs, so that a CPU model of the inner product can be fitted
// and checked against them offline (`shared/src/ptx/numerics/probe.rs` regenerates the same inputs).
//
// Every element of A, B and C is a pure function of (form, tile, operand, row, column) through
// splitmix64, computed on the GPU where the warp places it into its fragment, so only D has to come
// back. Tiles below RANDOM_TILES are random (a per-tile exponent spread); the rest are adversarial,
// nine classes in turn (cancellation, subnormal products, the format's whole exponent range, an
// accumulator that dominates, sparse powers of two, infinities and NaNs, near-ties against C = 1.x,
// overflow, signed zeros). The inputs of a few tiles of each kind are written too, raw, so that the
// CPU's generator is checked against the GPU's and a sample can be kept without the generator.
//
// Build and run: nvcc -O2 -arch=sm_90a -o mma_probe mma_probe.cu && ./mma_probe OUTDIR
// Output per form: OUTDIR/<form>.out (header, then D of every tile, row-major 16x8, raw bits: u32
// for f32, u16 for f16) and OUTDIR/<form>.in (the inputs of the dumped tiles, every element a u32).

#ifndef __CUDACC_RTC__
#include <cstdio>
#include <cstdlib>
#include <vector>
#endif

#include "probe_gen.cuh"

static const u32 RANDOM_TILES = 8192;
static const u32 PER_CLASS = 128;
static const u32 TILES = RANDOM_TILES + CLASSES * PER_CLASS;
// Tiles whose inputs are dumped: the first DUMP_RANDOM random ones and the first DUMP_CLASS of
// each adversarial class.
static const u32 DUMP_RANDOM = 64;
static const u32 DUMP_CLASS = 16;
static const u32 DUMPED = DUMP_RANDOM + CLASSES * DUMP_CLASS;

struct Form {
  u32 k;
  Fmt in;
  Fmt acc;
};

// Form ids are part of the inputs' hash: never renumber.
__host__ __device__ constexpr Form form_of(int id) {
  return id == 0   ? Form{16, F16, F32}
         : id == 1 ? Form{16, BF16, F32}
         : id == 2 ? Form{8, TF32, F32}
         : id == 3 ? Form{16, F16, F16}
         : id == 4 ? Form{8, F16, F32}
                   : Form{8, BF16, F32};
}
static const char *const FORM_NAMES[] = {"m16n8k16_f32_f16", "m16n8k16_f32_bf16", "m16n8k8_f32_tf32",
                                         "m16n8k16_f16_f16", "m16n8k8_f32_f16",  "m16n8k8_f32_bf16"};

__device__ inline u32 pack16(u32 lo, u32 hi) { return (lo & 0xFFFF) | (hi << 16); }

// Position of dumped tile `tile` in the dump, or -1.
__host__ __device__ inline int dump_slot(u32 tile) {
  if (tile < DUMP_RANDOM) return (int)tile;
  if (tile < RANDOM_TILES) return -1;
  u32 i = tile - RANDOM_TILES;
  if (i / CLASSES >= DUMP_CLASS) return -1;
  return (int)(DUMP_RANDOM + (i % CLASSES) * DUMP_CLASS + i / CLASSES);
}

// One warp per tile. FORM selects the instruction; the element positions are the ISA's fragment
// layouts for m16n8k16/m16n8k8 (16-bit elements) and m16n8k8 tf32.
template <int FORM>
__global__ void probe(u32 *out32, uint16_t *out16, u32 *dump) {
  constexpr Form fm = form_of(FORM);
  u32 tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (tile >= TILES) return;
  u32 lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  u32 K = fm.k;
  int slot = dump_slot(tile);
  int cls = tile_class(tile, RANDOM_TILES);
  // Dump layout per tile: A 16x16, B 16x8, C 16x8 (unused k left zero), every element a u32.
  u32 *dA = slot >= 0 ? dump + (size_t)slot * 512 : nullptr;
  u32 *dB = dA ? dA + 256 : nullptr;
  u32 *dC = dA ? dA + 384 : nullptr;
  auto A = [&](u32 r, u32 c) {
    u32 v = gen(FORM, K, fm.in, fm.acc, cls, tile, 0, r, c);
    if (dA) dA[r * 16 + c] = v;
    return v;
  };
  auto B = [&](u32 r, u32 c) {
    u32 v = gen(FORM, K, fm.in, fm.acc, cls, tile, 1, r, c);
    if (dB) dB[r * 8 + c] = v;
    return v;
  };
  auto C = [&](u32 r, u32 c) {
    u32 v = gen(FORM, K, fm.in, fm.acc, cls, tile, 2, r, c);
    if (dC) dC[r * 8 + c] = v;
    return v;
  };
  u32 a[4] = {0, 0, 0, 0}, b[2] = {0, 0}, c[4];
  float cf[4], df[4] = {0, 0, 0, 0};
  u32 d[4] = {0, 0, 0, 0};
  if (fm.in == TF32) {
    for (u32 i = 0; i < 4; i++) a[i] = A(g + 8 * (i & 1), t + 4 * (i >> 1));
    for (u32 i = 0; i < 2; i++) b[i] = B(t + 4 * i, g);
  } else {
    u32 na = K == 16 ? 8 : 4, nb = K == 16 ? 4 : 2;
    u32 ea[8], eb[4];
    for (u32 i = 0; i < na; i++) ea[i] = A(g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2));
    for (u32 i = 0; i < nb; i++) eb[i] = B(2 * t + (i & 1) + 8 * (i >> 1), g);
    for (u32 i = 0; i < na / 2; i++) a[i] = pack16(ea[2 * i], ea[2 * i + 1]);
    for (u32 i = 0; i < nb / 2; i++) b[i] = pack16(eb[2 * i], eb[2 * i + 1]);
  }
  u32 ec[4];
  for (u32 i = 0; i < 4; i++) ec[i] = C(g + 8 * (i >> 1), 2 * t + (i & 1));
  if (fm.acc == F16) {
    c[0] = pack16(ec[0], ec[1]);
    c[1] = pack16(ec[2], ec[3]);
  } else {
    for (u32 i = 0; i < 4; i++) cf[i] = __uint_as_float(ec[i]);
  }
  if (FORM == 0) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]),
          "f"(cf[2]), "f"(cf[3]));
  } else if (FORM == 1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]),
          "f"(cf[2]), "f"(cf[3]));
  } else if (FORM == 2) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(cf[0]), "f"(cf[1]),
          "f"(cf[2]), "f"(cf[3]));
  } else if (FORM == 3) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, {%8,%9};"
        : "=r"(d[0]), "=r"(d[1])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
  } else if (FORM == 4) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
        : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
        : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
        : "=f"(df[0]), "=f"(df[1]), "=f"(df[2]), "=f"(df[3])
        : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(cf[0]), "f"(cf[1]), "f"(cf[2]), "f"(cf[3]));
  }
  for (u32 i = 0; i < 4; i++) if (fm.acc != F16) d[i] = __float_as_uint(df[i]);
  for (u32 i = 0; i < 4; i++) {
    u32 row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    size_t at = (size_t)tile * 128 + row * 8 + col;
    if (fm.acc == F16) out16[at] = (uint16_t)(d[i >> 1] >> (16 * (i & 1)));
    else out32[at] = d[i];
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
static void run(const char *dir) {
  constexpr Form fm = form_of(FORM);
  size_t n = (size_t)TILES * 128;
  u32 *o32;
  uint16_t *o16;
  u32 *dump;
  CHECK(cudaMalloc(&o32, n * 4));
  CHECK(cudaMalloc(&o16, n * 2));
  CHECK(cudaMalloc(&dump, (size_t)DUMPED * 512 * 4));
  CHECK(cudaMemset(dump, 0, (size_t)DUMPED * 512 * 4));
  probe<FORM><<<(TILES + 3) / 4, 128>>>(o32, o16, dump);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  size_t esz = fm.acc == F16 ? 2 : 4;
  std::vector<unsigned char> host(n * esz);
  CHECK(cudaMemcpy(host.data(), fm.acc == F16 ? (void *)o16 : (void *)o32, n * esz, cudaMemcpyDeviceToHost));
  std::vector<u32> dh((size_t)DUMPED * 512);
  CHECK(cudaMemcpy(dh.data(), dump, dh.size() * 4, cudaMemcpyDeviceToHost));
  // Check the host's generator against the device's on the dumped inputs.
  size_t bad = 0;
  for (u32 tile = 0; tile < TILES; tile++) {
    int s = dump_slot(tile);
    if (s < 0) continue;
    const u32 *p = &dh[(size_t)s * 512];
    for (u32 r = 0; r < 16; r++)
      for (u32 c = 0; c < fm.k; c++) bad += p[r * 16 + c] != gen(FORM, fm.k, fm.in, fm.acc, tile_class(tile, RANDOM_TILES), tile, 0, r, c);
    for (u32 r = 0; r < fm.k; r++)
      for (u32 c = 0; c < 8; c++) bad += p[256 + r * 8 + c] != gen(FORM, fm.k, fm.in, fm.acc, tile_class(tile, RANDOM_TILES), tile, 1, r, c);
    for (u32 r = 0; r < 16; r++)
      for (u32 c = 0; c < 8; c++) bad += p[384 + r * 8 + c] != gen(FORM, fm.k, fm.in, fm.acc, tile_class(tile, RANDOM_TILES), tile, 2, r, c);
  }
  char path[512];
  snprintf(path, sizeof path, "%s/%s.out", dir, FORM_NAMES[FORM]);
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fwrite("RCMP", 1, 4, f);
  put32(f, 1);
  put32(f, FORM);
  put32(f, fm.k);
  put32(f, RANDOM_TILES);
  put32(f, CLASSES * PER_CLASS);
  put32(f, (u32)esz);
  fwrite(host.data(), 1, host.size(), f);
  fclose(f);
  snprintf(path, sizeof path, "%s/%s.in", dir, FORM_NAMES[FORM]);
  f = fopen(path, "wb");
  fwrite(dh.data(), 4, dh.size(), f);
  fclose(f);
  printf("%s: %u tiles (%u random, %u adversarial), %zu host/device input mismatches\n", FORM_NAMES[FORM], TILES,
         RANDOM_TILES, CLASSES * PER_CLASS, bad);
  CHECK(cudaFree(o32));
  CHECK(cudaFree(o16));
  CHECK(cudaFree(dump));
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : ".";
  run<0>(dir);
  run<1>(dir);
  run<2>(dir);
  run<3>(dir);
  run<4>(dir);
  run<5>(dir);
  return 0;
}
#endif
