// Small kernels the documentation and the tests use.
// basics.ptx beside this file is generated from it by build_ptx.py (NVRTC); keep the two in step.

// y = a * x + y
extern "C" __global__ void axpy(const float* x, float* y, float a, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// A table that lives in device memory and holds a device pointer.
struct Table {
    const float* data;
    int n;
    int pad;
};

// out = s * table->data, reached through a pointer stored inside a buffer.
extern "C" __global__ void table_scale(const Table* table, float* out, float s) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < table->n) out[i] = s * table->data[i];
}

// One thread: counter += 1; flag = counter < limit.
extern "C" __global__ void count_up(unsigned int* counter, unsigned int* flag, unsigned int limit) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned int c = *counter + 1;
        *counter = c;
        *flag = c < limit ? 1u : 0u;
    }
}
