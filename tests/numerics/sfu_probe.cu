// Special-function probe: runs every `.approx` instruction recap models (and `div.full.f32`) on
// an H100/H200 over all 2^32 inputs and hashes the outputs, so that the CPU's model
// (`shared/src/ptx/numerics/sfu.rs`) is checked exhaustively offline without bringing 16 GiB of
// outputs back.
//
// The hash of a chunk (the 2^24 inputs sharing their top 8 bits) is the wrapping sum over its
// inputs x of fmix64((x << 32) ^ out), murmur3's 64-bit finaliser: a sum, so the order in which
// threads finish does not matter, and per element injective, so a changed output changes the sum
// but for a 2^-64 chance. `recap-shared`'s `sfu_hashes` test computes the same sums from the model.
//
// Besides the hashes it writes the outputs of a few dense input ranges raw (the data the models
// are fitted to), every 16-bit form over all 65,536 inputs, and the outputs for a fixed list of
// inputs (the sample that CI checks).
//
// Build and run: nvcc -O3 -arch=sm_90 -o sfu_probe sfu_probe.cu && ./sfu_probe OUTDIR SAMPLE.u32
// Output: OUTDIR/hashes.txt (`name chunk hash`), OUTDIR/dump_<name>_<first>.u32,
// OUTDIR/half_<name>.u16 or .u32, OUTDIR/sample_<name>.bin (one output per sample input: u32, or
// u64 for the f64 forms).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

typedef uint32_t u32;
typedef uint64_t u64;

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

__host__ __device__ __forceinline__ u64 fmix(u64 k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

// One instruction per id, on the raw bits of one input. Ids 0..63 are f32 -> f32, 64.. the
// `div.full.f32` sweeps (a fixed operand, the other one running), 96.. the f64 forms (the input
// word is the high half of the operand, the low half fixed).
template <int F>
__device__ __forceinline__ u64 sfu(u32 xb);

#define UNARY(ID, INSN)                                     \
  template <>                                               \
  __device__ __forceinline__ u64 sfu<ID>(u32 xb) {          \
    float x = __uint_as_float(xb), y;                       \
    asm volatile(INSN " %0, %1;" : "=f"(y) : "f"(x));       \
    return __float_as_uint(y);                              \
  }
UNARY(0, "ex2.approx.ftz.f32")
UNARY(1, "ex2.approx.f32")
UNARY(2, "rcp.approx.ftz.f32")
UNARY(3, "rcp.approx.f32")
UNARY(4, "rsqrt.approx.ftz.f32")
UNARY(5, "rsqrt.approx.f32")
UNARY(6, "sqrt.approx.ftz.f32")
UNARY(7, "sqrt.approx.f32")
UNARY(8, "tanh.approx.f32")
UNARY(9, "lg2.approx.ftz.f32")
UNARY(10, "lg2.approx.f32")
UNARY(11, "sin.approx.ftz.f32")
UNARY(12, "sin.approx.f32")
UNARY(13, "cos.approx.ftz.f32")
UNARY(14, "cos.approx.f32")

// The fixed operands of the division sweeps.
#define DIV_FIXED {0x3F800000u, 0x3FC00001u, 0x40490FDBu, 0x7F000000u, 0x00800000u, 0x00000001u}
#define DIV_N 6
__constant__ u32 div_fixed[DIV_N] = DIV_FIXED;

#define DIVA(ID, K)                                                                     \
  template <>                                                                           \
  __device__ __forceinline__ u64 sfu<ID>(u32 xb) {                                      \
    float a = __uint_as_float(div_fixed[K]), b = __uint_as_float(xb), y;                \
    asm volatile("div.full.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));                \
    return __float_as_uint(y);                                                          \
  }                                                                                     \
  template <>                                                                           \
  __device__ __forceinline__ u64 sfu<ID + 16>(u32 xb) {                                 \
    float a = __uint_as_float(xb), b = __uint_as_float(div_fixed[K]), y;                \
    asm volatile("div.full.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));                \
    return __float_as_uint(y);                                                          \
  }
DIVA(64, 0)
DIVA(65, 1)
DIVA(66, 2)
DIVA(67, 3)
DIVA(68, 4)
DIVA(69, 5)

#define F64(ID, INSN, LO)                                           \
  template <>                                                       \
  __device__ __forceinline__ u64 sfu<ID>(u32 xb) {                  \
    double x = __longlong_as_double((long long)(((u64)xb << 32) | (LO))), y; \
    asm volatile(INSN " %0, %1;" : "=d"(y) : "d"(x));               \
    return (u64)__double_as_longlong(y);                            \
  }
F64(96, "rcp.approx.ftz.f64", 0u)
F64(97, "rcp.approx.ftz.f64", 0xFFFFFFFFu)
F64(98, "rsqrt.approx.ftz.f64", 0u)
F64(99, "rsqrt.approx.ftz.f64", 0xFFFFFFFFu)

// 64 inputs per thread, 256 threads per block: a warp's 2048 inputs lie in one chunk.
template <int F>
__global__ void hash_kernel(unsigned long long *chunks) {
  u64 start = ((u64)blockIdx.x * blockDim.x + threadIdx.x) * 64;
  u64 s = 0;
#pragma unroll 8
  for (int i = 0; i < 64; i++) {
    u32 x = (u32)(start + i);
    s += fmix(((u64)x << 32) ^ sfu<F>(x));
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(&chunks[(u32)(start >> 24)], (unsigned long long)s);
}

template <int F>
__global__ void dump_kernel(u32 first, u32 n, u32 *out) {
  u32 i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (u32)sfu<F>(first + i);
}

template <int F>
__global__ void sample_kernel(const u32 *in, u32 n, u64 *out) {
  u32 i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = sfu<F>(in[i]);
}

struct Fn {
  const char *name;
  void (*hash)(unsigned long long *);
  void (*dump)(u32, u32, u32 *);
  void (*sample)(const u32 *, u32, u64 *);
  bool wide;
};

template <int F>
void run_hash(unsigned long long *c) {
  hash_kernel<F><<<(unsigned)((1ull << 32) / 64 / 256), 256>>>(c);
}
template <int F>
void run_dump(u32 first, u32 n, u32 *o) {
  dump_kernel<F><<<(n + 255) / 256, 256>>>(first, n, o);
}
template <int F>
void run_sample(const u32 *in, u32 n, u64 *o) {
  sample_kernel<F><<<(n + 255) / 256, 256>>>(in, n, o);
}
#define FN(ID, NAME, WIDE) {NAME, run_hash<ID>, run_dump<ID>, run_sample<ID>, WIDE}

static const Fn FNS[] = {
    FN(0, "ex2.approx.ftz.f32", false),   FN(1, "ex2.approx.f32", false),
    FN(2, "rcp.approx.ftz.f32", false),   FN(3, "rcp.approx.f32", false),
    FN(4, "rsqrt.approx.ftz.f32", false), FN(5, "rsqrt.approx.f32", false),
    FN(6, "sqrt.approx.ftz.f32", false),  FN(7, "sqrt.approx.f32", false),
    FN(8, "tanh.approx.f32", false),      FN(9, "lg2.approx.ftz.f32", false),
    FN(10, "lg2.approx.f32", false),      FN(11, "sin.approx.ftz.f32", false),
    FN(12, "sin.approx.f32", false),      FN(13, "cos.approx.ftz.f32", false),
    FN(14, "cos.approx.f32", false),      FN(64, "div.full.f32/a=3f800000", false),
    FN(65, "div.full.f32/a=3fc00001", false), FN(66, "div.full.f32/a=40490fdb", false),
    FN(67, "div.full.f32/a=7f000000", false), FN(68, "div.full.f32/a=00800000", false),
    FN(69, "div.full.f32/a=00000001", false), FN(80, "div.full.f32/b=3f800000", false),
    FN(81, "div.full.f32/b=3fc00001", false), FN(82, "div.full.f32/b=40490fdb", false),
    FN(83, "div.full.f32/b=7f000000", false), FN(84, "div.full.f32/b=00800000", false),
    FN(85, "div.full.f32/b=00000001", false), FN(96, "rcp.approx.ftz.f64/lo=0", true),
    FN(97, "rcp.approx.ftz.f64/lo=ffffffff", true), FN(98, "rsqrt.approx.ftz.f64/lo=0", true),
    FN(99, "rsqrt.approx.ftz.f64/lo=ffffffff", true),
};
static const int NFNS = sizeof(FNS) / sizeof(FNS[0]);

// The dense ranges the models are fitted to: (function index in FNS, first input bits, count).
struct Range {
  int fn;
  u32 first, n;
};
static const Range RANGES[] = {
    {0, 0x3F800000u, 1u << 23},  // ex2.ftz on [1, 2): the fraction's table
    {0, 0xBF800000u, 1u << 23},  // ex2.ftz on [-2, -1)
    {0, 0x3F000000u, 1u << 23},  // ex2.ftz on [0.5, 1): is the fraction cut to 23 bits?
    {2, 0x3F800000u, 1u << 23},  // rcp.ftz on [1, 2)
    {4, 0x3F800000u, 1u << 24},  // rsqrt.ftz on [1, 4)
    {6, 0x3F800000u, 1u << 24},  // sqrt.ftz on [1, 4)
    {9, 0x3F000000u, 1u << 24},  // lg2.ftz on [0.5, 2)
    {8, 0x3F000000u, 1u << 24},  // tanh on [0.5, 2)
    {11, 0x3F800000u, 1u << 23}, // sin.ftz on [1, 2)
    {13, 0x3F800000u, 1u << 23}, // cos.ftz on [1, 2)
};

// The 16-bit forms over every input; the x2 forms with lanes (x, x ^ 0xFFFF) to show that each lane
// is the scalar form.
#define HALF1(NAME, INSN)                                                  \
  __global__ void NAME(u32 *out) {                                         \
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;                         \
    unsigned short x = (unsigned short)i, y;                               \
    asm volatile(INSN " %0, %1;" : "=h"(y) : "h"(x));                      \
    out[i] = y;                                                            \
  }
#define HALF2(NAME, INSN)                                                  \
  __global__ void NAME(u32 *out) {                                         \
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;                         \
    u32 x = (i & 0xFFFF) | ((i ^ 0xFFFF) << 16), y;                        \
    asm volatile(INSN " %0, %1;" : "=r"(y) : "r"(x));                      \
    out[i] = y;                                                            \
  }
HALF1(h_ex2_f16, "ex2.approx.f16")
HALF2(h_ex2_f16x2, "ex2.approx.f16x2")
HALF1(h_ex2_bf16, "ex2.approx.ftz.bf16")
HALF2(h_ex2_bf16x2, "ex2.approx.ftz.bf16x2")
HALF1(h_tanh_f16, "tanh.approx.f16")
HALF2(h_tanh_f16x2, "tanh.approx.f16x2")
HALF1(h_tanh_bf16, "tanh.approx.bf16")
HALF2(h_tanh_bf16x2, "tanh.approx.bf16x2")
struct Half {
  const char *name;
  void (*k)(u32 *);
};
static const Half HALVES[] = {
    {"ex2.approx.f16", h_ex2_f16},           {"ex2.approx.f16x2", h_ex2_f16x2},
    {"ex2.approx.ftz.bf16", h_ex2_bf16},     {"ex2.approx.ftz.bf16x2", h_ex2_bf16x2},
    {"tanh.approx.f16", h_tanh_f16},         {"tanh.approx.f16x2", h_tanh_f16x2},
    {"tanh.approx.bf16", h_tanh_bf16},       {"tanh.approx.bf16x2", h_tanh_bf16x2},
};

static void write_file(const std::string &path, const void *p, size_t n) {
  FILE *f = fopen(path.c_str(), "wb");
  if (!f || fwrite(p, 1, n, f) != n) {
    fprintf(stderr, "cannot write %s\n", path.c_str());
    exit(1);
  }
  fclose(f);
}

static std::string file_name(const char *name) {
  std::string s(name);
  for (char &c : s)
    if (c == '/' || c == '=') c = '_';
  return s;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: sfu_probe OUTDIR SAMPLE.u32\n");
    return 2;
  }
  std::string dir = argv[1];
  // The sample inputs.
  std::vector<u32> sample;
  {
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
      fprintf(stderr, "cannot read %s\n", argv[2]);
      return 1;
    }
    u32 v;
    while (fread(&v, 4, 1, f) == 1) sample.push_back(v);
    fclose(f);
  }
  u32 ns = (u32)sample.size();
  u32 *d_in;
  u64 *d_sout;
  CHECK(cudaMalloc(&d_in, ns * 4));
  CHECK(cudaMalloc(&d_sout, ns * 8));
  CHECK(cudaMemcpy(d_in, sample.data(), ns * 4, cudaMemcpyHostToDevice));
  std::vector<u64> sout(ns);
  for (int f = 0; f < NFNS; f++) {
    FNS[f].sample(d_in, ns, d_sout);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(sout.data(), d_sout, ns * 8, cudaMemcpyDeviceToHost));
    std::string p = dir + "/sample_" + file_name(FNS[f].name) + ".bin";
    if (FNS[f].wide) {
      write_file(p, sout.data(), ns * 8);
    } else {
      std::vector<u32> s32(ns);
      for (u32 i = 0; i < ns; i++) s32[i] = (u32)sout[i];
      write_file(p, s32.data(), ns * 4);
    }
  }

  // The 16-bit forms.
  u32 *d_half;
  CHECK(cudaMalloc(&d_half, 65536 * 4));
  std::vector<u32> half(65536);
  for (const Half &h : HALVES) {
    h.k<<<256, 256>>>(d_half);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(half.data(), d_half, 65536 * 4, cudaMemcpyDeviceToHost));
    write_file(dir + "/half_" + file_name(h.name) + ".u32", half.data(), 65536 * 4);
  }

  // Dense ranges.
  u32 *d_dump;
  CHECK(cudaMalloc(&d_dump, (1u << 24) * 4));
  std::vector<u32> dump(1u << 24);
  for (const Range &r : RANGES) {
    FNS[r.fn].dump(r.first, r.n, d_dump);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(dump.data(), d_dump, (size_t)r.n * 4, cudaMemcpyDeviceToHost));
    char first[16];
    snprintf(first, sizeof first, "%08x", r.first);
    write_file(dir + "/dump_" + file_name(FNS[r.fn].name) + "_" + first + ".u32", dump.data(),
               (size_t)r.n * 4);
  }

  // Exhaustive hashes.
  unsigned long long *d_chunks;
  CHECK(cudaMalloc(&d_chunks, 256 * 8));
  std::vector<unsigned long long> chunks(256);
  FILE *hf = fopen((dir + "/hashes.txt").c_str(), "w");
  if (!hf) {
    fprintf(stderr, "cannot write hashes.txt\n");
    return 1;
  }
  for (int f = 0; f < NFNS; f++) {
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    CHECK(cudaMemset(d_chunks, 0, 256 * 8));
    CHECK(cudaEventRecord(t0));
    FNS[f].hash(d_chunks);
    CHECK(cudaEventRecord(t1));
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(chunks.data(), d_chunks, 256 * 8, cudaMemcpyDeviceToHost));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, t0, t1));
    for (int c = 0; c < 256; c++) fprintf(hf, "%s %d %016llx\n", FNS[f].name, c, chunks[c]);
    fprintf(stderr, "%s: 2^32 inputs in %.1f ms\n", FNS[f].name, ms);
  }
  fclose(hf);
  return 0;
}
