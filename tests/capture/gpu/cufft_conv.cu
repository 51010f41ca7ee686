// A CUDA runtime program for `recap capture`: cuFFT. A batch of signals is convolved (circularly)
// with one filter through the frequency domain: plans made before the range (cufftPlanMany, R2C and
// C2R); between cudaProfilerStart and cudaProfilerStop the forward transforms of signals and filter,
// a pointwise complex product (our own kernel, with PTX), the inverse transform and a scaling kernel.
// cuFFT's kernels ship as machine code only: the CPU replays them from recorded effects
// (`recap capture --record-effects`). It checks against a direct convolution and prints one line.
//
// Build: nvcc -O2 -arch=sm_90 -o cufft_conv cufft_conv.cu -lcufft
#include <cuda_profiler_api.h>
#include <cufft.h>
#include <math.h>

#include "common.cuh"

#define CUFFT_CHECK(x)                                                          \
  do {                                                                          \
    cufftResult r = (x);                                                        \
    if (r != CUFFT_SUCCESS) {                                                   \
      fprintf(stderr, "%s:%d %s: cufft error %d\n", __FILE__, __LINE__, #x, r); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

__global__ void multiply_spectra(cufftComplex* signals, const cufftComplex* filter, int bins, int batch) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= bins * batch) return;
  cufftComplex a = signals[i], b = filter[i % bins];
  signals[i] = make_cuFloatComplex(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

__global__ void scale(float* x, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= s;
}

int main() {
  const int len = 1024, batch = 16, bins = len / 2 + 1, taps = 9;
  float* h_sig = (float*)malloc(sizeof(float) * len * batch);
  float* h_filt = (float*)calloc(len, sizeof(float));
  float* h_out = (float*)malloc(sizeof(float) * len * batch);
  for (int b = 0; b < batch; b++)
    for (int i = 0; i < len; i++) h_sig[b * len + i] = sinf(0.01f * (b + 1) * i) + 0.1f * cosf(0.37f * i);
  for (int t = 0; t < taps; t++) h_filt[t] = 1.0f / taps;

  float *sig, *filt;
  cufftComplex *sig_f, *filt_f;
  CHECK(cudaMalloc(&sig, sizeof(float) * len * batch));
  CHECK(cudaMalloc(&filt, sizeof(float) * len));
  CHECK(cudaMalloc(&sig_f, sizeof(cufftComplex) * bins * batch));
  CHECK(cudaMalloc(&filt_f, sizeof(cufftComplex) * bins));
  CHECK(cudaMemcpy(sig, h_sig, sizeof(float) * len * batch, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(filt, h_filt, sizeof(float) * len, cudaMemcpyHostToDevice));
  cufftHandle fwd_batch, fwd_one, inv_batch;
  int n[1] = {len};
  CUFFT_CHECK(cufftPlanMany(&fwd_batch, 1, n, NULL, 1, len, NULL, 1, bins, CUFFT_R2C, batch));
  CUFFT_CHECK(cufftPlan1d(&fwd_one, len, CUFFT_R2C, 1));
  CUFFT_CHECK(cufftPlanMany(&inv_batch, 1, n, NULL, 1, bins, NULL, 1, len, CUFFT_C2R, batch));
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaProfilerStart());
  CUFFT_CHECK(cufftExecR2C(fwd_batch, sig, sig_f));
  CUFFT_CHECK(cufftExecR2C(fwd_one, filt, filt_f));
  multiply_spectra<<<(bins * batch + 255) / 256, 256>>>(sig_f, filt_f, bins, batch);
  CHECK(cudaGetLastError());
  CUFFT_CHECK(cufftExecC2R(inv_batch, sig_f, sig));
  scale<<<(len * batch + 255) / 256, 256>>>(sig, 1.0f / len, len * batch);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaProfilerStop());

  CHECK(cudaMemcpy(h_out, sig, sizeof(float) * len * batch, cudaMemcpyDeviceToHost));
  double worst = 0.0;
  for (int b = 0; b < batch; b++)
    for (int i = 0; i < len; i++) {
      double want = 0.0;
      for (int t = 0; t < taps; t++) want += (double)h_filt[t] * h_sig[b * len + (i - t + len) % len];
      worst = fmax(worst, fabs(want - h_out[b * len + i]));
    }
  if (worst > 1e-4) {
    fprintf(stderr, "cufft_conv: max error %g against the direct convolution\n", worst);
    return 1;
  }
  CUFFT_CHECK(cufftDestroy(fwd_batch));
  CUFFT_CHECK(cufftDestroy(fwd_one));
  CUFFT_CHECK(cufftDestroy(inv_batch));
  printf("cufft_conv: ok max error %.2e\n", worst);
  return 0;
}
