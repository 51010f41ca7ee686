// A CUDA runtime program for `recap capture`: the cuRAND device API. Between cudaProfilerStart and
// cudaProfilerStop: XORWOW states seeded per thread with curand_init (whose skip-ahead reads the
// precomputed matrices cuRAND keeps as __device__ tables in the module), a Monte Carlo estimate of
// pi that draws from those states, stores them back and adds its hits with a block reduction and one
// atomicAdd per block, and Philox4x32-10 normals (curand_normal4) for a second moment estimate.
// It checks the estimates and prints one line.
//
// Build: nvcc -O2 -arch=sm_90 -o curand_mc curand_mc.cu
#include <cuda_profiler_api.h>
#include <curand_kernel.h>
#include <math.h>

#include "common.cuh"

__global__ void seed_states(curandState* states, unsigned long long seed) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  curand_init(seed, id, 0, &states[id]);
}

__global__ void pi_hits(curandState* states, int draws, unsigned long long* hits) {
  __shared__ unsigned block_hits;
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  if (threadIdx.x == 0) block_hits = 0;
  __syncthreads();
  curandState s = states[id];
  unsigned mine = 0;
  for (int k = 0; k < draws; k++) {
    float x = curand_uniform(&s), y = curand_uniform(&s);
    mine += x * x + y * y <= 1.0f;
  }
  states[id] = s;
  atomicAdd(&block_hits, mine);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(hits, (unsigned long long)block_hits);
}

__global__ void normals(float4* out, int per_thread, unsigned long long seed) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  curandStatePhilox4_32_10_t s;
  curand_init(seed, id, 0, &s);
  for (int k = 0; k < per_thread; k++) out[id * per_thread + k] = curand_normal4(&s);
}

int main() {
  const int blocks = 64, threads = 128, n = blocks * threads, draws = 256, per_thread = 4;
  curandState* states;
  unsigned long long* hits;
  float4* out;
  CHECK(cudaMalloc(&states, n * sizeof(curandState)));
  CHECK(cudaMalloc(&hits, sizeof(unsigned long long)));
  CHECK(cudaMalloc(&out, n * per_thread * sizeof(float4)));
  CHECK(cudaMemset(hits, 0, sizeof(unsigned long long)));
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaProfilerStart());
  seed_states<<<blocks, threads>>>(states, 1234ull);
  CHECK(cudaGetLastError());
  for (int round = 0; round < 2; round++) {
    pi_hits<<<blocks, threads>>>(states, draws, hits);
    CHECK(cudaGetLastError());
  }
  normals<<<blocks, threads>>>(out, per_thread, 42ull);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaProfilerStop());

  unsigned long long h_hits;
  CHECK(cudaMemcpy(&h_hits, hits, sizeof h_hits, cudaMemcpyDeviceToHost));
  const size_t m = (size_t)n * per_thread * 4;
  float* h = (float*)malloc(m * sizeof(float));
  CHECK(cudaMemcpy(h, out, m * sizeof(float), cudaMemcpyDeviceToHost));
  double mean = 0.0, var = 0.0;
  for (size_t i = 0; i < m; i++) mean += h[i];
  mean /= m;
  for (size_t i = 0; i < m; i++) var += (h[i] - mean) * (h[i] - mean);
  var /= m;
  double pi = 4.0 * h_hits / (2.0 * n * draws);
  // 4.2M draws: the estimate's standard error is about 0.0008; the normals' mean 0.0004.
  if (fabs(pi - M_PI) > 0.01 || fabs(mean) > 0.005 || fabs(var - 1.0) > 0.01) {
    fprintf(stderr, "curand_mc: pi %.5f, normal mean %.5f variance %.5f\n", pi, mean, var);
    return 1;
  }
  printf("curand_mc: ok pi %.5f, normal mean %.5f variance %.5f\n", pi, mean, var);
  return 0;
}
