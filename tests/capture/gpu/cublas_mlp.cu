// A CUDA runtime program for `recap capture`: cuBLAS as a forward pass is written by hand. The handle,
// its workspace and the weights are made before the range; between cudaProfilerStart and
// cudaProfilerStop: a hidden layer by cublasSgemm with our own bias-and-ReLU kernel (PTX), an output
// layer by cublasGemmEx (TF32 disabled: plain fp32), a residual by cublasSaxpy, and the batch's norm by
// cublasSnrm2 into device memory (CUBLAS_POINTER_MODE_DEVICE). cuBLAS's kernels ship as machine code
// only: the CPU replays them from recorded effects (`recap capture --record-effects`). It checks
// against the same arithmetic in double on the host and prints one line.
//
// Build: nvcc -O2 -arch=sm_90 -o cublas_mlp cublas_mlp.cu -lcublas
#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <math.h>

#include "common.cuh"

#define CUBLAS_CHECK(x)                                                           \
  do {                                                                            \
    cublasStatus_t s = (x);                                                       \
    if (s != CUBLAS_STATUS_SUCCESS) {                                             \
      fprintf(stderr, "%s:%d %s: cublas status %d\n", __FILE__, __LINE__, #x, s); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

__global__ void bias_relu(float* h, const float* bias, int rows, int cols) {
  // Column-major rows x cols, as cuBLAS leaves it.
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) h[i] = fmaxf(h[i] + bias[i % rows], 0.0f);
}

static float frand(unsigned* s) {
  *s = *s * 1664525u + 1013904223u;
  return ((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

int main() {
  // x: in x batch, W1: hidden x in, W2: out x hidden (column-major); out == in for the residual.
  const int in = 256, hidden = 512, out = 256, batch = 64;
  unsigned seed = 7;
  float* hx = (float*)malloc(sizeof(float) * in * batch);
  float* hw1 = (float*)malloc(sizeof(float) * hidden * in);
  float* hb1 = (float*)malloc(sizeof(float) * hidden);
  float* hw2 = (float*)malloc(sizeof(float) * out * hidden);
  for (int i = 0; i < in * batch; i++) hx[i] = frand(&seed);
  for (int i = 0; i < hidden * in; i++) hw1[i] = frand(&seed) * 0.1f;
  for (int i = 0; i < hidden; i++) hb1[i] = frand(&seed) * 0.1f;
  for (int i = 0; i < out * hidden; i++) hw2[i] = frand(&seed) * 0.1f;

  float *x, *w1, *b1, *w2, *h, *y, *norm;
  CHECK(cudaMalloc(&x, sizeof(float) * in * batch));
  CHECK(cudaMalloc(&w1, sizeof(float) * hidden * in));
  CHECK(cudaMalloc(&b1, sizeof(float) * hidden));
  CHECK(cudaMalloc(&w2, sizeof(float) * out * hidden));
  CHECK(cudaMalloc(&h, sizeof(float) * hidden * batch));
  CHECK(cudaMalloc(&y, sizeof(float) * out * batch));
  CHECK(cudaMalloc(&norm, sizeof(float)));
  CHECK(cudaMemcpy(x, hx, sizeof(float) * in * batch, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w1, hw1, sizeof(float) * hidden * in, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(b1, hb1, sizeof(float) * hidden, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(w2, hw2, sizeof(float) * out * hidden, cudaMemcpyHostToDevice));
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  const float one = 1.0f, zero = 0.0f;
  // A first product outside the range: cuBLAS loads its kernels and sizes its workspace here.
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, hidden, batch, in, &one, w1, hidden, x, in, &zero, h,
                           hidden));
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaProfilerStart());
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, hidden, batch, in, &one, w1, hidden, x, in, &zero, h,
                           hidden));
  bias_relu<<<(hidden * batch + 255) / 256, 256>>>(h, b1, hidden, batch);
  CHECK(cudaGetLastError());
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, out, batch, hidden, &one, w2, CUDA_R_32F, out, h,
                            CUDA_R_32F, hidden, &zero, y, CUDA_R_32F, out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  CUBLAS_CHECK(cublasSaxpy(handle, in * batch, &one, x, 1, y, 1));
  CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE));
  CUBLAS_CHECK(cublasSnrm2(handle, out * batch, y, 1, norm));
  CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaProfilerStop());

  float* hy = (float*)malloc(sizeof(float) * out * batch);
  float h_norm;
  CHECK(cudaMemcpy(hy, y, sizeof(float) * out * batch, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&h_norm, norm, sizeof(float), cudaMemcpyDeviceToHost));
  double* hh = (double*)malloc(sizeof(double) * hidden * batch);
  for (int c = 0; c < batch; c++)
    for (int r = 0; r < hidden; r++) {
      double acc = hb1[r];
      for (int k = 0; k < in; k++) acc += (double)hw1[k * hidden + r] * hx[c * in + k];
      hh[c * hidden + r] = acc > 0.0 ? acc : 0.0;
    }
  double worst = 0.0, sq = 0.0;
  for (int c = 0; c < batch; c++)
    for (int r = 0; r < out; r++) {
      double acc = hx[c * in + r];
      for (int k = 0; k < hidden; k++) acc += (double)hw2[k * out + r] * hh[c * hidden + k];
      worst = fmax(worst, fabs(acc - hy[c * out + r]));
      sq += acc * acc;
    }
  if (worst > 1e-4 || fabs(h_norm - sqrt(sq)) > 1e-4 * sqrt(sq)) {
    fprintf(stderr, "cublas_mlp: max error %g, norm %f want %f\n", worst, h_norm, sqrt(sq));
    return 1;
  }
  CUBLAS_CHECK(cublasDestroy(handle));
  printf("cublas_mlp: ok norm %.4f\n", h_norm);
  return 0;
}
