// Jacobi iteration for -laplacian(x) = f on an n x n grid with x = 0 on the boundary, and the two
// small kernels that let a device-side while loop decide when to stop.
// jacobi.ptx beside this file is generated from it by build_ptx.py (NVRTC); keep the two in step.

extern "C" __global__ void jacobi_sweep(const float* x, float* y, const float* f, int n, float h2) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int j = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= n || j >= n) return;
    int k = j * n + i;
    if (i == 0 || j == 0 || i == n - 1 || j == n - 1) {
        y[k] = 0.0f;
        return;
    }
    y[k] = 0.25f * (x[k - 1] + x[k + 1] + x[k - n] + x[k + n] + h2 * f[k]);
}

// max_bits = max(max_bits, |a - b|) over all elements; non-negative floats order like their bits.
extern "C" __global__ void max_change(const float* a, const float* b, unsigned int* max_bits, int count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) atomicMax(max_bits, __float_as_uint(fabsf(a[i] - b[i])));
}

// One thread: count the iteration and keep looping while the change is above tol.
extern "C" __global__ void continue_while(const unsigned int* max_bits, unsigned int* flag, unsigned int* iterations,
                                          float tol, unsigned int max_iterations) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned int it = *iterations + 1;
        *iterations = it;
        *flag = (__uint_as_float(*max_bits) > tol && it < max_iterations) ? 1u : 0u;
    }
}
