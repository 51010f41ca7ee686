// The CPU-replay benchmark's native anchor: the corpus kernels' CUDA C compiled by g++ -O3 and run
// with a loop over blocks and threads (see bench/native/README.md for the method).
//
// saxpy, nbody_accel and mandelbrot have no barriers or warp collectives, so their kernel.cu is
// included unchanged and called once per thread. matmul_tiled (__syncthreads) and softmax_rows
// (__shfl_xor_sync) are written out split at their barriers: each phase between two barriers runs
// for all threads of the block before the next starts, with per-thread state in arrays. That is
// the transformation CPU compilers of CUDA apply, and it is the fastest fair native shape.
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_shim.h"

#include "saxpy/kernel.cu"
#include "nbody_accel/kernel.cu"
#include "mandelbrot/kernel.cu"

// Same generator as shared/benches/cpu_replay.rs.
static std::vector<float> floats(size_t n, uint32_t seed) {
  uint32_t s = seed * 2654435761u;
  if (s == 0) s = 1;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    v[i] = (float)(s >> 8) / (float)(1u << 23) - 1.0f;
  }
  return v;
}

#define T 16
// matmul_tiled's kernel.cu, split at its two __syncthreads.
static void matmul_tiled_split(const float* A, const float* B, float* C, int M, int N, int K, dim3 grid) {
  const long blocks = (long)grid.x * grid.y;
#pragma omp parallel for schedule(dynamic, 1)
  for (long b = 0; b < blocks; b++) {
    const unsigned bx = b % grid.x, by = b / grid.x;
    float As[T][T], Bs[T][T], acc[T][T];
    for (int ty = 0; ty < T; ty++)
      for (int tx = 0; tx < T; tx++) acc[ty][tx] = 0.f;
    for (int k0 = 0; k0 < K; k0 += T) {
      for (int ty = 0; ty < T; ty++)
        for (int tx = 0; tx < T; tx++) {
          int r = by * T + ty, c = bx * T + tx;
          As[ty][tx] = (r < M && k0 + tx < K) ? A[r * K + k0 + tx] : 0.f;
          Bs[ty][tx] = (c < N && k0 + ty < K) ? B[(k0 + ty) * N + c] : 0.f;
        }
      // __syncthreads()
      for (int ty = 0; ty < T; ty++)
        for (int tx = 0; tx < T; tx++)
          for (int k = 0; k < T; k++) acc[ty][tx] += As[ty][k] * Bs[k][tx];
      // __syncthreads()
    }
    for (int ty = 0; ty < T; ty++)
      for (int tx = 0; tx < T; tx++) {
        int r = by * T + ty, c = bx * T + tx;
        if (r < M && c < N) C[r * N + c] = acc[ty][tx];
      }
  }
}

// softmax_rows's kernel.cu, split at its warp shuffles (one 32-lane block per row).
static void softmax_rows_split(const float* x, float* y, int cols, int rows) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int row = 0; row < rows; row++) {
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    float m[32], s[32], t[32];
    for (int lane = 0; lane < 32; lane++) {
      m[lane] = -3.402823466e38f;
      for (int c = lane; c < cols; c += 32) m[lane] = fmaxf(m[lane], xr[c]);
    }
    for (int o = 16; o > 0; o >>= 1) {
      for (int lane = 0; lane < 32; lane++) t[lane] = m[lane ^ o];
      for (int lane = 0; lane < 32; lane++) m[lane] = fmaxf(m[lane], t[lane]);
    }
    for (int lane = 0; lane < 32; lane++) {
      s[lane] = 0.f;
      for (int c = lane; c < cols; c += 32) s[lane] += __expf(xr[c] - m[lane]);
    }
    for (int o = 16; o > 0; o >>= 1) {
      for (int lane = 0; lane < 32; lane++) t[lane] = s[lane ^ o];
      for (int lane = 0; lane < 32; lane++) s[lane] += t[lane];
    }
    for (int lane = 0; lane < 32; lane++)
      for (int c = lane; c < cols; c += 32) yr[c] = __expf(xr[c] - m[lane]) / s[lane];
  }
}

// CPU time of the whole process (all threads), steadier than wall time on a shared machine; run with
// OMP_WAIT_POLICY=passive so that idle workers do not spin it up.
static double cpu_ms() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

struct Timing {
  double wall_ms, cpu_ms;
};

// Medians of 10 runs after a warm-up run.
template <class F>
static Timing median_ms(F run) {
  std::vector<double> t, c;
  for (int i = 0; i < 11; i++) {
    auto a = std::chrono::steady_clock::now();
    double ca = cpu_ms();
    run();
    double cb = cpu_ms();
    auto b = std::chrono::steady_clock::now();
    if (i > 0) {
      t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
      c.push_back(cb - ca);
    }
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  return {t[t.size() / 2], c[c.size() / 2]};
}

static void report(const char* name, const std::string& size, Timing ms, const void* out, size_t bytes,
                   bool ints, const char* dump) {
  double sum = 0;
  for (size_t i = 0; i < bytes / 4; i++) sum += ints ? ((const int*)out)[i] : ((const float*)out)[i];
  printf("native %s (%s) threads=%d: median %.2f ms, cpu %.2f ms, checksum %.6e\n", name, size.c_str(),
         omp_get_max_threads(), ms.wall_ms, ms.cpu_ms, sum);
  if (dump) {
    std::string path = std::string(dump) + "/" + name + ".native.bin";
    FILE* f = fopen(path.c_str(), "wb");
    fwrite(out, 1, bytes, f);
    fclose(f);
  }
}

int main(int argc, char** argv) {
  const char* dump = argc > 1 ? argv[1] : nullptr;
  {
    const int n = 1 << 26;
    auto x = floats(n, 1), y0 = floats(n, 2), y = y0;
    // Each timed run updates y once more; only the last run's output is compared, after a reset.
    Timing ms = median_ms([&] { launch(dim3(n / 256), dim3(256), [&] { saxpy(n, 2.5f, x.data(), y.data()); }); });
    y = y0;
    launch(dim3(n / 256), dim3(256), [&] { saxpy(n, 2.5f, x.data(), y.data()); });
    report("saxpy", "n=" + std::to_string(n), ms, y.data(), n * 4, false, dump);
  }
  {
    const int M = 1024, N = 1024, K = 1024;
    auto A = floats(M * K, 3), B = floats(K * N, 4);
    std::vector<float> C(M * N);
    Timing ms = median_ms([&] { matmul_tiled_split(A.data(), B.data(), C.data(), M, N, K, dim3(N / T, M / T)); });
    report("matmul_tiled", "M=N=K=" + std::to_string(M), ms, C.data(), C.size() * 4, false, dump);
  }
  {
    const int n = 8192;
    auto bodies = floats(n * 4, 5);
    std::vector<float> ax(n), ay(n), az(n);
    Timing ms = median_ms([&] {
      launch(dim3(n / 128), dim3(128),
             [&] { nbody_accel((const Body*)bodies.data(), ax.data(), ay.data(), az.data(), n, 0.01f); });
    });
    report("nbody_accel", "n=" + std::to_string(n), ms, ax.data(), n * 4, false, dump);
  }
  {
    const int w = 2048, h = 1536, max_iter = 256;
    std::vector<int> iters(w * h);
    Timing ms = median_ms(
        [&] { launch(dim3(w / 32, h / 8), dim3(32, 8), [&] { mandelbrot(iters.data(), w, h, max_iter, -2.0f, -1.0f, 2.5f / w); }); });
    report("mandelbrot", std::to_string(w) + "x" + std::to_string(h) + ", max_iter=" + std::to_string(max_iter), ms, iters.data(), iters.size() * 4, true, dump);
  }
  {
    const int rows = 16384, cols = 1024;
    auto x = floats(rows * cols, 6);
    std::vector<float> y(rows * cols);
    Timing ms = median_ms([&] { softmax_rows_split(x.data(), y.data(), cols, rows); });
    report("softmax_rows", std::to_string(rows) + "x" + std::to_string(cols), ms, y.data(), y.size() * 4, false, dump);
  }
  return 0;
}
