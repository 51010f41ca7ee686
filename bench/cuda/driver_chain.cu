// The 1000-node chain of graph_floor.cu's `inc`, built the way recap builds it (driver API: the
// kernel's PTX as a module or a library, explicit kernel nodes), beside the runtime's own capture.
// Build: nvcc -O3 -arch=sm_90 driver_chain.cu -lcuda (both), or without the CUDA runtime at all:
//   g++ -O2 -DDRIVER_ONLY -x c++ driver_chain.cu -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda
// Run: ./a.out runtime|driver-only inc.ptx   (inc.ptx: nvcc -ptx of graph_floor.cu's `inc` alone)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <string>
#include <algorithm>
#include <chrono>
#include <cuda.h>
#ifndef DRIVER_ONLY
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("runtime error %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)
#endif
#define DK(x) do { CUresult e = (x); if (e != CUDA_SUCCESS) { const char* s; cuGetErrorName(e, &s); printf("driver error %s at %d\n", s, __LINE__); exit(1);} } while (0)
using clk = std::chrono::steady_clock;
static double us(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }
static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
#ifndef DRIVER_ONLY
__global__ void inc(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
#endif
const int N = 1000, n = 256;

static double time_exec(CUgraphExec ge, CUstream s) {
  DK(cuGraphLaunch(ge, s)); DK(cuStreamSynchronize(s));
  std::vector<double> t;
  for (int r = 0; r < 25; r++) { auto a = clk::now(); DK(cuGraphLaunch(ge, s)); DK(cuStreamSynchronize(s)); auto b = clk::now(); t.push_back(us(a, b) / N); }
  return median(t);
}

static CUgraphExec explicit_chain(CUfunction f, CUkernel k, CUcontext ctx, CUdeviceptr x) {
  CUgraph g; DK(cuGraphCreate(&g, 0));
  int nn = n; void* args[] = {&x, &nn};
  CUgraphNode prev = nullptr;
  for (int i = 0; i < N; i++) {
    CUDA_KERNEL_NODE_PARAMS p; memset(&p, 0, sizeof p);
    if (k) { p.kern = k; p.ctx = ctx; } else { p.func = f; }
    p.gridDimX = 1; p.gridDimY = 1; p.gridDimZ = 1; p.blockDimX = n; p.blockDimY = 1; p.blockDimZ = 1; p.kernelParams = args;
    CUgraphNode node; DK(cuGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &p)); prev = node;
  }
  CUgraphExec ge; DK(cuGraphInstantiate(&ge, g, 0)); return ge;
}

int main(int argc, char** argv) {
  bool driver_only = argc > 1 && !strcmp(argv[1], "driver-only");
  const char* ptx_path = argc > 2 ? argv[2] : "inc.ptx";
  FILE* fp = fopen(ptx_path, "rb"); if (!fp) { printf("no %s\n", ptx_path); return 1; }
  std::string ptx; char buf[4096]; size_t got; while ((got = fread(buf, 1, sizeof buf, fp)) > 0) ptx.append(buf, got); fclose(fp);
  DK(cuInit(0)); CUdevice dev; DK(cuDeviceGet(&dev, 0)); CUcontext ctx;
#ifdef DRIVER_ONLY
  driver_only = true;
#endif
  if (driver_only) { DK(cuDevicePrimaryCtxRetain(&ctx, dev)); DK(cuCtxSetCurrent(ctx)); }
#ifndef DRIVER_ONLY
  else { CK(cudaFree(0)); DK(cuCtxGetCurrent(&ctx)); }
#endif
  unsigned flags; int active; DK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
  printf("%s: primary context flags 0x%x\n", driver_only ? "driver-only process" : "runtime started first", flags);
  CUstream s; DK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr x; DK(cuMemAlloc(&x, n * 4)); DK(cuMemsetD8(x, 0, n * 4));
  CUmodule mod; DK(cuModuleLoadData(&mod, ptx.c_str())); CUfunction fm; DK(cuModuleGetFunction(&fm, mod, "_Z3incPfi"));
  CUlibrary lib; DK(cuLibraryLoadData(&lib, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel kl; DK(cuLibraryGetKernel(&kl, lib, "_Z3incPfi"));
  for (int round = 0; round < 2; round++) {
#ifndef DRIVER_ONLY
    if (!driver_only) {
      cudaStream_t rs; CK(cudaStreamCreateWithFlags(&rs, cudaStreamNonBlocking));
      float* rx; CK(cudaMalloc(&rx, n * 4)); CK(cudaMemset(rx, 0, n * 4));
      cudaGraph_t g; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(rs, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < N; i++) inc<<<1, n, 0, rs>>>(rx, n);
      CK(cudaStreamEndCapture(rs, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
      printf("round %d  runtime capture of the runtime kernel, runtime stream    %.3f us/node\n", round, time_exec((CUgraphExec)ge, (CUstream)rs));
      printf("round %d  same exec on the driver stream                           %.3f us/node\n", round, time_exec((CUgraphExec)ge, s));
      // The runtime's own kernel as a driver kernel node (cudaGetFuncBySymbol).
      cudaFunction_t rf; CK(cudaGetFuncBySymbol(&rf, (const void*)inc));
      printf("round %d  explicit nodes, runtime kernel's CUfunction, driver x     %.3f us/node\n", round, time_exec(explicit_chain((CUfunction)rf, nullptr, ctx, x), s));
      printf("round %d  explicit nodes, module CUfunction, runtime x              %.3f us/node\n", round, time_exec(explicit_chain(fm, nullptr, ctx, (CUdeviceptr)rx), s));
    }
#endif
    printf("round %d  explicit nodes, module CUfunction (PTX JIT), driver x    %.3f us/node\n", round, time_exec(explicit_chain(fm, nullptr, ctx, x), s));
    printf("round %d  explicit nodes, library CUkernel (PTX JIT), driver x     %.3f us/node\n", round, time_exec(explicit_chain(nullptr, kl, ctx, x), s));
  }
  printf("ok\n");
  return 0;
}
