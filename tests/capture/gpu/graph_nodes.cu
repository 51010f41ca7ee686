// A CUDA runtime program for `recap capture`: a CUDA graph built node by node (no stream capture)
// and launched twice between cudaProfilerStart and cudaProfilerStop. Its nodes: a memset, 1-D
// uploads and a download, kernels added with cudaGraphAddKernelNode and with cudaGraphAddNode, an
// empty join, a child graph, graph memory (an allocation node, a kernel writing it, a copy out of
// it, the free node), and an edge added after the fact. Between the launches a kernel node's
// parameters change in the executable graph.
// It checks its own results and prints one line.
#include <cuda_profiler_api.h>

#include "common.cuh"

__global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void mix(unsigned* u, unsigned seed, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) u[i] = (u[i] * 2654435761u) ^ (seed + (unsigned)i);
}

__global__ void halve_into(float* scratch, const float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) scratch[i] = 0.5f * y[i];
}

static cudaKernelNodeParams kernel(void* f, void** args, int n) {
  cudaKernelNodeParams p;
  memset(&p, 0, sizeof p);
  p.func = f;
  p.gridDim = dim3((n + 255) / 256);
  p.blockDim = dim3(256);
  p.kernelParams = args;
  return p;
}

int main() {
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(float);
  float *x, *y, *h_x, *h_out, *h_y = (float*)malloc(bytes);
  unsigned* u;
  CHECK(cudaMallocHost(&h_x, bytes));  // page-locked: what a graph's memcpy nodes read and write
  CHECK(cudaMallocHost(&h_out, bytes));
  CHECK(cudaMalloc(&x, bytes));
  CHECK(cudaMalloc(&y, bytes));
  CHECK(cudaMalloc(&u, n * sizeof(unsigned)));
  for (int i = 0; i < n; i++) {
    h_x[i] = (float)(i % 13);
    h_y[i] = 0.25f * (float)(i % 101);
  }
  CHECK(cudaMemcpy(y, h_y, bytes, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaGraph_t graph, child;
  CHECK(cudaGraphCreate(&graph, 0));
  CHECK(cudaGraphCreate(&child, 0));

  cudaGraphNode_t fill, up, k_axpy, k_mix, join, sub, alloc, k_halve, copy_out, free_node, down;
  cudaMemsetParams ms;
  memset(&ms, 0, sizeof ms);
  ms.dst = u;
  ms.value = 7;
  ms.elementSize = 4;
  ms.width = n;
  ms.height = 1;
  CHECK(cudaGraphAddMemsetNode(&fill, graph, NULL, 0, &ms));
  CHECK(cudaGraphAddMemcpyNode1D(&up, graph, NULL, 0, x, h_x, bytes, cudaMemcpyHostToDevice));

  float a = 2.0f;
  int nn = n;
  void* axpy_args[] = {&y, &x, &a, &nn};
  cudaKernelNodeParams kp = kernel((void*)axpy, axpy_args, n);
  CHECK(cudaGraphAddKernelNode(&k_axpy, graph, &up, 1, &kp));

  unsigned seed = 12345u;
  void* mix_args[] = {&u, &seed, &nn};
  ZEROED_NODE_PARAMS(np);
  np.type = cudaGraphNodeTypeKernel;
  np.kernel.func = (void*)mix;
  np.kernel.gridDim = dim3((n + 255) / 256);
  np.kernel.blockDim = dim3(256);
  np.kernel.kernelParams = mix_args;
  CHECK(ADD_NODE(&k_mix, graph, &fill, 1, &np));

  cudaGraphNode_t joined[] = {k_axpy, k_mix};
  CHECK(cudaGraphAddEmptyNode(&join, graph, joined, 2));

  // The child: y = y - 0.5 x.
  float half = -0.5f;
  void* child_args[] = {&y, &x, &half, &nn};
  kp = kernel((void*)axpy, child_args, n);
  cudaGraphNode_t c_axpy;
  CHECK(cudaGraphAddKernelNode(&c_axpy, child, NULL, 0, &kp));
  CHECK(cudaGraphAddChildGraphNode(&sub, graph, &join, 1, child));

  // Graph memory: scratch = y / 2, y = scratch.
  cudaMemAllocNodeParams ap;
  memset(&ap, 0, sizeof ap);
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = bytes;
  CHECK(cudaGraphAddMemAllocNode(&alloc, graph, NULL, 0, &ap));
  float* scratch = (float*)ap.dptr;
  void* halve_args[] = {&scratch, &y, &nn};
  kp = kernel((void*)halve_into, halve_args, n);
  CHECK(cudaGraphAddKernelNode(&k_halve, graph, &alloc, 1, &kp));
  CHECK(ADD_DEPENDENCIES(graph, &sub, &k_halve, 1));  // after the child, added afterwards
  CHECK(cudaGraphAddMemcpyNode1D(&copy_out, graph, &k_halve, 1, y, scratch, bytes, cudaMemcpyDeviceToDevice));
  CHECK(cudaGraphAddMemFreeNode(&free_node, graph, &copy_out, 1, scratch));
  CHECK(cudaGraphAddMemcpyNode1D(&down, graph, &copy_out, 1, h_out, y, bytes, cudaMemcpyDeviceToHost));

  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));

  CHECK(cudaProfilerStart());
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  unsigned seed2 = 777u;
  void* mix_args2[] = {&u, &seed2, &nn};
  kp = kernel((void*)mix, mix_args2, n);
  CHECK(cudaGraphExecKernelNodeSetParams(exec, k_mix, &kp));
  CHECK(cudaGraphLaunch(exec, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaProfilerStop());

  // y after two launches, x as the second upload left it.
  unsigned* h_u = (unsigned*)malloc(n * sizeof(unsigned));
  CHECK(cudaMemcpy(h_u, u, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    float yi = 0.25f * (float)(i % 101);
    for (int launch = 0; launch < 2; launch++) {  // y carries over; x is uploaded again
      float xi = (float)(i % 13);
      yi = 2.0f * xi + yi;
      yi = -0.5f * xi + yi;
      yi = 0.5f * yi;
    }
    unsigned want_u = (7u * 2654435761u) ^ (777u + (unsigned)i);
    if (h_out[i] != yi || h_u[i] != want_u) {
      fprintf(stderr, "graph_nodes: mismatch at %d: y %g (want %g), u %u (want %u)\n", i, h_out[i], yi, h_u[i],
              want_u);
      return 1;
    }
  }
  double sum = 0;
  for (int i = 0; i < n; i++) sum += h_out[i];
  printf("graph_nodes: ok %.3f\n", sum);
  return 0;
}
