// A CUDA runtime program for `recap capture`: pointers the capture cannot relocate. Between
// cudaProfilerStart and cudaProfilerStop one kernel builds a table of device pointers from a base
// address it gets as two 32-bit halves (no 8-byte word of its parameters holds the address) and links
// the nodes of a list in device memory to each other; a second kernel follows the table and walks
// the list. A few small allocations made first and never used share the driver's 2 MiB pages with the
// buffers, as real programs' allocations do. Replays must place regions at their captured addresses
// (the capture chooses this by itself: the table's and the list's final contents hold pointers it
// never saw). It checks its own results and prints one line.
#include <cuda_profiler_api.h>
#include <stdint.h>

#include "common.cuh"

struct Node {
  Node* next;
  unsigned value;
  unsigned pad;
};

// table[i] = base + (i * 7) % n, base = (hi << 32) | lo; node i links to node (i + 1) % n.
__global__ void build(const unsigned** table, unsigned hi, unsigned lo, Node* nodes, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned* base = (const unsigned*)(((uint64_t)hi << 32) | lo);
  table[i] = base + (i * 7) % n;
  nodes[i].next = &nodes[(i + 1) % n];
  nodes[i].value = 3u * (unsigned)i;
}

// out[i] = *table[i] + (the sum of the values of the four nodes from node i on).
__global__ void follow(const unsigned* const* table, const Node* nodes, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned sum = *table[i];
  const Node* p = &nodes[i];
  for (int k = 0; k < 4; k++, p = p->next) sum += p->value;
  out[i] = sum;
}

int main() {
  const int n = 1000, block = 128, grid = (n + block - 1) / block;
  void* spacers[5];
  for (int s = 0; s < 5; s++) CHECK(cudaMalloc(&spacers[s], 4096));
  const unsigned** table;
  unsigned *data, *out;
  Node* nodes;
  CHECK(cudaMalloc(&table, n * sizeof(*table)));
  CHECK(cudaMalloc(&data, n * sizeof(unsigned)));
  CHECK(cudaMalloc(&nodes, n * sizeof(Node)));
  CHECK(cudaMalloc(&out, n * sizeof(unsigned)));
  static unsigned values[n], got[n];
  for (int i = 0; i < n; i++) values[i] = 1000u * (unsigned)i + 17u;
  CHECK(cudaDeviceSynchronize());

  CHECK(cudaProfilerStart());
  CHECK(cudaMemcpy(data, values, sizeof values, cudaMemcpyHostToDevice));
  uint64_t base = (uint64_t)data;
  build<<<grid, block>>>(table, (unsigned)(base >> 32), (unsigned)base, nodes, n);
  CHECK(cudaGetLastError());
  follow<<<grid, block>>>(table, nodes, out, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaProfilerStop());

  CHECK(cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost));
  unsigned long long h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < n; i++) {
    unsigned want = values[(i * 7) % n];
    for (int k = 0; k < 4; k++) want += 3u * (unsigned)((i + k) % n);
    if (got[i] != want) {
      fprintf(stderr, "placed_pointers: out[%d] is %u, expected %u\n", i, got[i], want);
      return 1;
    }
    h = (h ^ got[i]) * 0x100000001b3ULL;
  }
  printf("placed_pointers: ok %016llx (data at %p)\n", h, (void*)data);
  return 0;
}
