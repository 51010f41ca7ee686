// A launch whose result depends on its launch attributes: `cudaLaunchKernelEx` with a cluster
// dimension of 4 blocks, and a kernel that writes its block's rank in the cluster and the cluster's
// size, and reads a value from the first block of its cluster through distributed shared memory.
// Launched without the attribute, every block is a cluster of one and the output differs; so a
// CUDA replay passes `--check` only if it sets the attribute again. The CPU replay refuses the
// launch by name (it runs blocks without clusters).
//
// Build: nvcc -O2 -arch=sm_90 -o cluster_launch cluster_launch.cu
// Capture: recap capture -o cluster.recap -- ./cluster_launch
#include <cooperative_groups.h>
#include <cuda_profiler_api.h>

#include "common.cuh"

namespace cg = cooperative_groups;

constexpr int BLOCKS = 64, THREADS = 128, CLUSTER = 4;

__global__ void ranks(int *out, const int *seed) {
    __shared__ int mine;
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) mine = seed[blockIdx.x];
    cluster.sync();
    // The first block of this cluster's value, read from its shared memory.
    int *first = cluster.map_shared_rank(&mine, 0);
    int v = *first;
    cluster.sync();
    if (threadIdx.x == 0) out[blockIdx.x] = (int)cluster.block_rank() * 1000 + (int)cluster.num_blocks() * 100 + v;
}

int main() {
    int host_seed[BLOCKS], host_out[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) host_seed[i] = (i * 7) % 50;
    int *seed, *out;
    CHECK(cudaMalloc(&seed, sizeof host_seed));
    CHECK(cudaMalloc(&out, sizeof host_out));
    CHECK(cudaMemcpy(seed, host_seed, sizeof host_seed, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(out, 0, sizeof host_out));

    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = CLUSTER;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(BLOCKS);
    config.blockDim = dim3(THREADS);
    config.attrs = &attr;
    config.numAttrs = 1;

    CHECK(cudaProfilerStart());
    CHECK(cudaLaunchKernelEx(&config, ranks, out, (const int *)seed));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaProfilerStop());

    CHECK(cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost));
    for (int i = 0; i < BLOCKS; i++) {
        int want = (i % CLUSTER) * 1000 + CLUSTER * 100 + host_seed[i - i % CLUSTER];
        if (host_out[i] != want) {
            fprintf(stderr, "cluster_launch: block %d wrote %d, want %d\n", i, host_out[i], want);
            return 1;
        }
    }
    printf("cluster_launch: ok (%d blocks in clusters of %d)\n", BLOCKS, CLUSTER);
    return 0;
}
