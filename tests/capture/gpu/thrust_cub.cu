// A CUDA runtime program for `recap capture`: Thrust and CUB as library users call them. Between
// cudaProfilerStart and cudaProfilerStop: thrust::sort_by_key of keys with payloads (CUB's onesweep
// radix sort underneath, its temporary storage allocated and freed inside the range),
// thrust::inclusive_scan and thrust::transform_reduce, then CUB's device-wide calls on storage
// sized before the range: cub::DeviceRadixSort::SortPairsDescending, cub::DeviceReduce::Sum and
// cub::DeviceHistogram::HistogramEven. It checks every result on the host and prints one line.
//
// Build: nvcc -O2 -arch=sm_90 -std=c++17 -o thrust_cub thrust_cub.cu
#include <cub/cub.cuh>
#include <cuda_profiler_api.h>
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform_reduce.h>

#include <algorithm>
#include <vector>

#include "common.cuh"

struct Square {
  __host__ __device__ float operator()(float v) const { return v * v; }
};

int main() {
  const int n = 1 << 16, bins = 32;
  std::vector<unsigned> keys(n);
  std::vector<float> vals(n);
  unsigned state = 2463534242u;
  for (int i = 0; i < n; i++) {
    state ^= state << 13, state ^= state >> 17, state ^= state << 5;
    keys[i] = state % 100000u;
    vals[i] = (float)(i % 1000) * 0.001f;
  }
  thrust::device_vector<unsigned> d_keys(keys.begin(), keys.end());
  thrust::device_vector<float> d_vals(vals.begin(), vals.end());
  thrust::device_vector<float> d_scan(n);
  thrust::device_vector<unsigned> d_keys_out(n);
  thrust::device_vector<float> d_vals_out(n);
  thrust::device_vector<float> d_sum(1);
  thrust::device_vector<int> d_hist(bins);
  unsigned* k = thrust::raw_pointer_cast(d_keys.data());
  float* v = thrust::raw_pointer_cast(d_vals.data());

  // CUB's two-phase calls: ask for the temporary storage first, allocate it before the range.
  size_t sort_bytes = 0, sum_bytes = 0, hist_bytes = 0;
  CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, sort_bytes, k, thrust::raw_pointer_cast(d_keys_out.data()),
                                                  v, thrust::raw_pointer_cast(d_vals_out.data()), n));
  CHECK(cub::DeviceReduce::Sum(nullptr, sum_bytes, v, thrust::raw_pointer_cast(d_sum.data()), n));
  CHECK(cub::DeviceHistogram::HistogramEven(nullptr, hist_bytes, k, thrust::raw_pointer_cast(d_hist.data()), bins + 1,
                                            0u, 100000u, n));
  size_t temp_bytes = std::max(sort_bytes, std::max(sum_bytes, hist_bytes));
  void* temp;
  CHECK(cudaMalloc(&temp, temp_bytes));
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaProfilerStart());
  thrust::sort_by_key(d_keys.begin(), d_keys.end(), d_vals.begin());
  thrust::inclusive_scan(d_vals.begin(), d_vals.end(), d_scan.begin());
  float sq = thrust::transform_reduce(d_vals.begin(), d_vals.end(), Square(), 0.0f, thrust::plus<float>());
  CHECK(cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, k, thrust::raw_pointer_cast(d_keys_out.data()), v,
                                                  thrust::raw_pointer_cast(d_vals_out.data()), n));
  CHECK(cub::DeviceReduce::Sum(temp, temp_bytes, v, thrust::raw_pointer_cast(d_sum.data()), n));
  CHECK(cub::DeviceHistogram::HistogramEven(temp, temp_bytes, k, thrust::raw_pointer_cast(d_hist.data()), bins + 1, 0u,
                                            100000u, n));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaProfilerStop());

  // The host's answers: a stable sort by key, then the same scans and reductions.
  std::vector<int> order(n);
  for (int i = 0; i < n; i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[a] < keys[b]; });
  thrust::host_vector<unsigned> got_keys = d_keys;
  thrust::host_vector<float> got_vals = d_vals, got_scan = d_scan, got_vals_desc = d_vals_out;
  thrust::host_vector<unsigned> got_keys_desc = d_keys_out;
  thrust::host_vector<int> got_hist = d_hist;
  float got_sum = d_sum[0];
  double want_sq = 0.0, want_sum = 0.0, run = 0.0, worst_scan = 0.0;
  std::vector<int> want_hist(bins, 0);
  for (int i = 0; i < n; i++) {
    if (got_keys[i] != keys[order[i]] || got_vals[i] != vals[order[i]]) {
      fprintf(stderr, "thrust_cub: sort_by_key differs at %d\n", i);
      return 1;
    }
    if (got_keys_desc[i] != keys[order[n - 1 - i]]) {
      fprintf(stderr, "thrust_cub: descending sort differs at %d\n", i);
      return 1;
    }
    run += vals[order[i]];
    worst_scan = std::max(worst_scan, fabs(run - got_scan[i]) / std::max(1.0, run));
    want_sq += (double)vals[i] * vals[i];
    want_sum += vals[i];
    want_hist[keys[i] / (100000u / bins)]++;
  }
  // 100000 splits into 32 bins of 3125 exactly.
  int hist_wrong = 0;
  for (int b = 0; b < bins; b++) hist_wrong += got_hist[b] != want_hist[b];
  if (worst_scan > 1e-4 || fabs(sq - want_sq) > 1e-4 * want_sq || fabs(got_sum - want_sum) > 1e-4 * want_sum ||
      hist_wrong != 0) {
    fprintf(stderr, "thrust_cub: scan err %g, squares %f want %f, sum %f want %f, %d histogram bins wrong\n", worst_scan,
            sq, want_sq, got_sum, want_sum, hist_wrong);
    return 1;
  }
  CHECK(cudaFree(temp));
  printf("thrust_cub: ok sum %.3f squares %.3f\n", got_sum, sq);
  return 0;
}
