// The few CUDA built-ins the benchmark kernels use, for compiling their CUDA C as plain C++.
//
// Thread and block indices are thread_local globals: each OpenMP worker runs whole blocks and sets
// them before calling the kernel body once per CUDA thread, so the kernel source compiles unchanged.
#pragma once
#include <cmath>
#include <cstdint>

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

static thread_local uint3 threadIdx, blockIdx;
static thread_local uint3 blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }

// Runs `body` once per thread of every block, blocks spread over the OpenMP workers. Only for
// kernels without barriers or warp collectives: each thread runs to completion in turn.
template <class F>
void launch(dim3 grid, dim3 block, F body) {
  const long blocks = (long)grid.x * grid.y * grid.z;
#pragma omp parallel for schedule(dynamic, 1)
  for (long b = 0; b < blocks; b++) {
    gridDim = {grid.x, grid.y, grid.z};
    blockDim = {block.x, block.y, block.z};
    blockIdx = {unsigned(b % grid.x), unsigned((b / grid.x) % grid.y), unsigned(b / ((long)grid.x * grid.y))};
    for (unsigned z = 0; z < block.z; z++)
      for (unsigned y = 0; y < block.y; y++)
        for (unsigned x = 0; x < block.x; x++) {
          threadIdx = {x, y, z};
          body();
        }
  }
}
