// CUDA C whose PTX (nvcc -ptx -arch=sm_90, default -fmad=true) keeps products apart from the
// additions that use them: products with more than one use, which NVVM leaves to ptxas. Every
// kernel has probe.ptx's parameters, so run_probe.py runs both alike.
#define KERNEL(name) extern "C" __global__ void name(const float* a, const float* b, const float* c, \
    const float* d, float* out, unsigned n)
#define INDEX unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;

// A radix-2 butterfly after a twiddle multiply, as an FFT's inner stage computes it.
KERNEL(nvcc_butterfly) {
    INDEX
    float xr = a[i], xi = b[i], wr = c[i], wi = d[i];
    float tr = xr * wr - xi * wi;
    float ti = xr * wi + xi * wr;
    out[2 * i] = xi + tr;
    out[2 * i + 1] = xr - ti;
}

// One product used by an addition and a subtraction.
KERNEL(nvcc_shared_product) {
    INDEX
    float t = a[i] * b[i];
    out[2 * i] = t + c[i];
    out[2 * i + 1] = d[i] - t;
}

// A product stored as well as added.
KERNEL(nvcc_product_kept) {
    INDEX
    float t = a[i] * b[i];
    out[2 * i] = t + c[i];
    out[2 * i + 1] = t;
}

// Squares summed: |z|^2 and a difference of squares.
KERNEL(nvcc_norms) {
    INDEX
    float x = a[i], y = b[i];
    float xx = x * x, yy = y * y;
    out[2 * i] = xx + yy;
    out[2 * i + 1] = xx - yy + c[i] * xx;
}

// Horner's rule with the product of the first step reused.
KERNEL(nvcc_poly) {
    INDEX
    float x = a[i];
    float p = x * b[i];
    float q = p + c[i];
    float r = q * x + d[i];
    out[2 * i] = r;
    out[2 * i + 1] = p * q;
}

// A complex multiply-accumulate over four terms (a length-4 DFT row).
KERNEL(nvcc_dft4) {
    INDEX
    float sr = 0.f, si = 0.f;
    for (int k = 0; k < 4; k++) {
        float xr = a[(i + k) % n], xi = b[(i + k) % n];
        float wr = c[(i * k) % n], wi = d[(i * k) % n];
        sr += xr * wr - xi * wi;
        si += xr * wi + xi * wr;
    }
    out[2 * i] = sr;
    out[2 * i + 1] = si;
}
