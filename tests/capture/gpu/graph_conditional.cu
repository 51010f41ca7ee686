// A CUDA runtime program (CUDA 12.4 or later) for `recap capture`: a CUDA graph with a
// conditional WHILE node. The body graph runs a kernel that adds x to y and counts its passes;
// the kernel sets the condition with cudaGraphSetConditional until ten passes are done. The graph
// is launched once between cudaProfilerStart and cudaProfilerStop. It checks its own results and
// prints one line. `nvcc -arch=sm_90 -ptx` of this file shows how the condition leaves the kernel.
#include <cuda_profiler_api.h>

#include "common.cuh"

__global__ void step(float* y, const float* x, unsigned* passes, unsigned limit, cudaGraphConditionalHandle cond,
                     int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
  if (i == 0) {
    unsigned done = *passes + 1;
    *passes = done;
    cudaGraphSetConditional(cond, done < limit ? 1u : 0u);
  }
}

int main() {
  const int n = 1 << 12;
  const unsigned limit = 10;
  const size_t bytes = n * sizeof(float);
  float *x, *y, *h = (float*)malloc(bytes);
  unsigned* passes;
  CHECK(cudaMalloc(&x, bytes));
  CHECK(cudaMalloc(&y, bytes));
  CHECK(cudaMalloc(&passes, sizeof(unsigned)));
  for (int i = 0; i < n; i++) h[i] = (float)(i % 7);
  CHECK(cudaMemcpy(x, h, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(y, 0, bytes));
  CHECK(cudaMemset(passes, 0, sizeof(unsigned)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaGraph_t graph;
  CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphConditionalHandle cond;
  CHECK(cudaGraphConditionalHandleCreate(&cond, graph, 1, cudaGraphCondAssignDefault));
  ZEROED_NODE_PARAMS(cp);
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = cond;
  cp.conditional.type = cudaGraphCondTypeWhile;
  cp.conditional.size = 1;
  cudaGraphNode_t loop;
  CHECK(ADD_NODE(&loop, graph, NULL, 0, &cp));
  cudaGraph_t body = cp.conditional.phGraph_out[0];

  int nn = n;
  unsigned lim = limit;
  void* args[] = {&y, &x, &passes, &lim, &cond, &nn};
  ZEROED_NODE_PARAMS(kp);
  kp.type = cudaGraphNodeTypeKernel;
  kp.kernel.func = (void*)step;
  kp.kernel.gridDim = dim3((n + 255) / 256);
  kp.kernel.blockDim = dim3(256);
  kp.kernel.kernelParams = args;
  cudaGraphNode_t k;
  CHECK(ADD_NODE(&k, body, NULL, 0, &kp));

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaProfilerStart());
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaProfilerStop());

  unsigned got_passes = 0;
  CHECK(cudaMemcpy(&got_passes, passes, sizeof got_passes, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(h, y, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    if (h[i] != (float)(limit * (i % 7))) {
      fprintf(stderr, "graph_conditional: y[%d] = %g, want %g\n", i, h[i], (float)(limit * (i % 7)));
      return 1;
    }
  }
  if (got_passes != limit) {
    fprintf(stderr, "graph_conditional: %u passes, want %u\n", got_passes, limit);
    return 1;
  }
  printf("graph_conditional: ok %u passes\n", got_passes);
  return 0;
}
