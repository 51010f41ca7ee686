// The probe's inputs, shared by the mma and wgmma probes (host and device): every element of A, B
// and C a pure function of (form, tile, operand, row, column) through splitmix64. `shared/src/ptx/numerics/probe.rs`
// regenerates the same elements on the CPU; change one, change both.
#pragma once
#ifdef __CUDACC_RTC__
typedef unsigned long long uint64_t;
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
#else
#include <cstdint>
#endif

typedef uint64_t u64;
typedef uint32_t u32;

static const u64 SEED = 0x7265636170ull;
static const u32 CLASSES = 9;
enum Fmt { F16 = 0, BF16 = 1, TF32 = 2, F32 = 3 };

__host__ __device__ inline u64 mix(u64 x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__host__ __device__ inline u64 elem_hash(u32 form, u32 tile, u32 op, u32 row, u32 col) {
  return mix(mix(SEED ^ ((u64)form << 40) ^ tile) ^ (((u64)op << 32) | (row << 16) | col));
}

__host__ __device__ inline u32 ebits(Fmt f) { return f == F16 ? 5 : 8; }
__host__ __device__ inline u32 mbits(Fmt f) { return f == F16 ? 10 : f == BF16 ? 7 : 23; }

// The bits of sign * 1.mant * 2^e in format f (f32 layout for tf32: its low 13 bits random, which
// the hardware ignores), flushed to a subnormal, zero or infinity where e leaves the range.
__host__ __device__ inline u32 encode(Fmt f, u32 sign, int e, u64 mant) {
  u32 E = ebits(f), M = mbits(f);
  u32 bias = (1u << (E - 1)) - 1;
  int b = e + (int)bias;
  u32 s = sign << (E + M);
  u32 m = (u32)(mant & ((1u << M) - 1));
  if (f == TF32) m &= ~0x1FFFu;
  u32 low = f == TF32 ? (u32)(mant >> 32) & 0x1FFF : 0;
  if (b > (int)((1u << E) - 2)) return s | (((1u << E) - 1) << M);
  if (b >= 1) return s | ((u32)b << M) | m | low;
  int shift = 1 - b;
  if (shift > (int)M + 1) return s | low;
  return s | (((1u << M) | m) >> shift) | low;
}

__host__ __device__ inline u32 inf_bits(Fmt f, u32 sign) { return encode(f, sign, 100000, 0); }
__host__ __device__ inline u32 nan_bits(Fmt f) {
  u32 M = mbits(f);
  return inf_bits(f, 0) | (1u << (M - 1));
}
__host__ __device__ inline u32 max_bits(Fmt f, u32 sign) {
  u32 E = ebits(f), M = mbits(f);
  return (sign << (E + M)) | ((((1u << E) - 2)) << M) | ((1u << M) - 1);
}

__host__ __device__ inline int pick(u64 u, int lo, int hi) { return lo + (int)(u % (u64)(hi - lo + 1)); }

// The class of a tile: -1 random (the first `random` tiles), else 0..8 in turn.
__host__ __device__ inline int tile_class(u32 tile, u32 random) {
  return tile < random ? -1 : (int)((tile - random) % CLASSES);
}

// Element (row, col) of operand op (0 A, 1 B, 2 C) of a tile, as bits of its format.
__host__ __device__ inline u32 gen(u32 form, u32 k, Fmt in, Fmt acc, int cls, u32 tile, u32 op, u32 row, u32 col) {
  Fmt f = op == 2 ? acc : in;
  u64 p = elem_hash(form, tile, 3, 0, 0);
  // Cancellation: A's odd columns repeat the even one before; B's odd rows negate the one before
  // (its last bit flipped half the time), in the first half of k.
  if (cls == 0 && op == 0 && (col & 1) && col < k / 2) col -= 1;
  bool negate_prev = cls == 0 && op == 1 && (row & 1) && row < k / 2;
  if (negate_prev) row -= 1;
  u64 u = elem_hash(form, tile, op, row, col);
  u32 sign = (u32)(u & 1);
  u64 mant = u >> 1;
  u64 r1 = (u >> 40) & 0xFFFF;
  u32 r2 = (u32)(u >> 56);
  bool big = f != F16;  // the exponent range of f32
  u32 bits;
  switch (cls) {
    case -1: {
      const int spreads[4] = {1, 3, 6, 12};
      int s = spreads[p & 3];
      if (r2 < 8) {
        bits = encode(f, sign, -100000, 0);
      } else if (op == 2) {
        if (((p >> 2) & 3) == 0) bits = encode(f, sign, -100000, 0);
        else bits = encode(f, sign, pick(r1, -2 * s, big ? 2 * s : (2 * s < 15 ? 2 * s : 15)), mant);
      } else {
        bits = encode(f, sign, pick(r1, -s, s), mant);
      }
      break;
    }
    case 0:
      if (op == 2) bits = r2 < 128 ? encode(f, sign, -100000, 0) : encode(f, sign, pick(r1, -12, 12), mant);
      else bits = encode(f, sign, pick(r1, -6, 6), mant);
      break;
    case 1:
      if (op == 2) {
        if (r2 < 64) bits = encode(f, sign, -100000, 0);
        else bits = big ? encode(f, sign, pick(r1, -149, -120), mant) : encode(f, sign, pick(r1, -24, -12), mant);
      } else {
        bits = big ? encode(f, sign, pick(r1, -75, -60), mant) : encode(f, sign, pick(r1, -24, -10), mant);
      }
      break;
    case 2:
      if (op == 2) bits = big ? encode(f, sign, pick(r1, -140, 127), mant) : encode(f, sign, pick(r1, -24, 15), mant);
      else bits = big ? encode(f, sign, pick(r1, -70, 63), mant) : encode(f, sign, pick(r1, -24, 15), mant);
      break;
    case 3:
      if (op == 2) bits = big ? encode(f, sign, pick(r1, 20, 40), mant) : encode(f, sign, pick(r1, 8, 15), mant);
      else bits = encode(f, sign, pick(r1, -4, 4), mant);
      break;
    case 4:
      if (op == 2) bits = r2 < 32 ? encode(f, sign, -100000, 0) : encode(f, sign, pick(r1, -4, big ? 20 : 15), 0);
      else bits = r2 < 128 ? encode(f, sign, -100000, 0) : encode(f, sign, pick(r1, -8, 8), 0);
      break;
    case 5:
      if (r2 < 32) {
        switch (r2 & 3) {
          case 0: bits = inf_bits(f, sign); break;
          case 1: bits = nan_bits(f); break;
          case 2: bits = encode(f, sign, -100000, 0); break;
          default: bits = max_bits(f, sign); break;
        }
      } else {
        bits = encode(f, sign, pick(r1, -4, 4), mant);
      }
      break;
    case 6:
      if (op == 2) bits = encode(f, sign, 0, mant);
      else bits = acc == F16 ? encode(f, sign, pick(r1, -8, -3), mant) : encode(f, sign, pick(r1, -14, -8), mant);
      break;
    case 7:
      if (op == 2) bits = big ? encode(f, sign, pick(r1, 120, 127), mant) : encode(f, sign, pick(r1, 12, 15), mant);
      else bits = big ? encode(f, sign, pick(r1, 58, 66), mant) : encode(f, sign, pick(r1, 9, 15), mant);
      break;
    default:
      bits = r2 < 192 ? encode(f, sign, -100000, 0) : encode(f, sign, pick(r1, -2, 2), mant);
      break;
  }
  if (negate_prev) {
    u32 E = ebits(f), M = mbits(f);
    bits ^= 1u << (E + M);
    if ((u >> 2) & 1) bits ^= f == TF32 ? 0x2000u : 1u;
  }
  return bits;
}

