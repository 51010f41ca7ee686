// Launch-bound loop for the capture overhead benchmark: the time per launch of a tiny kernel,
// first outside the recorded range (the program runs at full speed: the interposer's hooks only
// look at an atomic flag), then inside it (every launch recorded). Run it plain and under
// `recap capture` and compare the lines it prints.
#include <chrono>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

__global__ void bump(int* x) {
  if (threadIdx.x == 0) x[blockIdx.x] += 1;
}

static double per_launch_ns(int* x, int n) {
  cudaDeviceSynchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; i++) bump<<<1, 32>>>(x);
  cudaDeviceSynchronize();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

int main(int argc, char** argv) {
  int outside = argc > 1 ? atoi(argv[1]) : 200000;
  int inside = argc > 2 ? atoi(argv[2]) : 20000;
  int* x;
  cudaMalloc(&x, 4096);
  cudaMemset(x, 0, 4096);
  per_launch_ns(x, 1000);  // warm up
  double out_ns = per_launch_ns(x, outside);
  cudaProfilerStart();
  double in_ns = per_launch_ns(x, inside);
  cudaProfilerStop();
  int h = 0;
  cudaMemcpy(&h, x, 4, cudaMemcpyDeviceToHost);
  printf("launch_overhead: outside the range %.1f ns/launch (%d launches), inside %.1f ns/launch (%d launches), x[0] = %d\n",
         out_ns, outside, in_ns, inside, h);
  return h == 1000 + outside + inside ? 0 : 1;
}
