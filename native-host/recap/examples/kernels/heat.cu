// One explicit step of the 2-D heat equation, split into the kernels a simulation would have.
// heat.ptx beside this file is generated from it by build_ptx.py (NVRTC); keep the two in step.

// A field passed by value: the data pointer is a marked pointer field of the struct.
struct Field {
    float* data;
    int nx;
    int ny;
};

// out = in + alpha * laplacian(in) in the interior; boundary cells keep their value.
extern "C" __global__ void heat_diffuse(Field in, Field out, float alpha) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= in.nx || y >= in.ny) return;
    int i = y * in.nx + x;
    float c = in.data[i];
    if (x == 0 || y == 0 || x == in.nx - 1 || y == in.ny - 1) {
        out.data[i] = c;
        return;
    }
    float lap = in.data[i - 1] + in.data[i + 1] + in.data[i - in.nx] + in.data[i + in.nx] - 4.0f * c;
    out.data[i] = c + alpha * lap;
}

// u += dt * source
extern "C" __global__ void heat_add_source(float* u, const float* source, float dt, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) u[i] += dt * source[i];
}

// Newtonian cooling towards an ambient temperature: u += rate * (ambient - u)
extern "C" __global__ void heat_cool(float* u, float ambient, float rate, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) u[i] += rate * (ambient - u[i]);
}
