// A CUDA runtime program for `recap capture`: two streams ordered by an event, async copies and a
// memset, and a CUDA graph captured from a stream and launched three times, all between
// cudaProfilerStart and cudaProfilerStop. It checks its own results and prints one line.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.cuh"

__global__ void fill_ramp(float* x, float step, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = step * i;
}

__global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void square_inplace(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * 0.5f + 1.0f;
}

int main() {
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(float);
  float *x, *y, *h = (float*)malloc(bytes), *want = (float*)malloc(bytes);
  CHECK(cudaMalloc(&x, bytes));
  CHECK(cudaMalloc(&y, bytes));
  for (int i = 0; i < n; i++) h[i] = (float)(i % 97) * 0.25f;
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t ready;
  CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));

  // A graph captured before the range and launched inside it.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal));
  axpy<<<n / 256, 256, 0, s2>>>(y, x, 2.0f, n);
  square_inplace<<<n / 256, 256, 0, s2>>>(y, n);
  CHECK(cudaStreamEndCapture(s2, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));

  CHECK(cudaProfilerStart());
  fill_ramp<<<n / 256, 256, 0, s1>>>(x, 0.5f, n);
  CHECK(cudaMemcpyAsync(y, h, bytes, cudaMemcpyHostToDevice, s1));
  CHECK(cudaMemsetAsync(y, 0, 64 * sizeof(float), s1));
  CHECK(cudaEventRecord(ready, s1));
  CHECK(cudaStreamWaitEvent(s2, ready, 0));
  for (int k = 0; k < 3; k++) CHECK(cudaGraphLaunch(exec, s2));
  CHECK(cudaMemcpyAsync(h, y, bytes, cudaMemcpyDeviceToHost, s2));
  CHECK(cudaStreamSynchronize(s2));
  CHECK(cudaProfilerStop());

  double sum = 0;
  for (int i = 0; i < n; i++) {
    float v = i < 64 ? 0.0f : (float)(i % 97) * 0.25f;
    for (int k = 0; k < 3; k++) v = (2.0f * (0.5f * i) + v) * 0.5f + 1.0f;
    if (v != h[i]) {
      fprintf(stderr, "streams_graph: y[%d] = %g, want %g\n", i, h[i], v);
      return 1;
    }
    sum += h[i];
  }
  printf("streams_graph: ok %.3f\n", sum);
  return 0;
}
