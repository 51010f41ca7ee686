#define WP_NO_BFLOAT16

#define WP_TILE_BLOCK_DIM 256
#define WP_NO_CRT
#include "builtin.h"
#include "deterministic.h"

// Map wp.breakpoint() to a device brkpt at the call site so cuda-gdb attributes the stop to the generated .cu line
#if defined(__CUDACC__) && !defined(_MSC_VER)
#define __debugbreak() __brkpt()
#endif

#define builtin_tid1d() wp::tid(_idx, dim)
#define builtin_tid2d(x, y) wp::tid(x, y, _idx, dim)
#define builtin_tid3d(x, y, z) wp::tid(x, y, z, _idx, dim)
#define builtin_tid4d(x, y, z, w) wp::tid(x, y, z, w, _idx, dim)

#define builtin_block_dim() wp::block_dim()

// CUDA Thread Block Cluster shape declaration. Expands to __cluster_dims__
// only on devices that support clusters (compute capability 9.0+); otherwise
// expands to nothing so the same source compiles cleanly for any target arch.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define WP_CLUSTER_DIMS(x, y, z) __cluster_dims__(x, y, z)
#else
#define WP_CLUSTER_DIMS(x, y, z)
#endif

// Maximum registers per thread. __maxnreg__ was added in CUDA Toolkit 12.4;
// older toolkits ignore the opt-in so the same source remains compilable.
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 4))
#define WP_MAXNREG(n) __maxnreg__(n)
#else
#define WP_MAXNREG(n)
#endif

// Allow PTXAS to spill registers into shared memory. CUDA Toolkit 13.0
// introduced the pragma, which is unavailable in device-debug compilation.
#if defined(__CUDACC_VER_MAJOR__) && (__CUDACC_VER_MAJOR__ >= 13) && !defined(_DEBUG)
#define WP_ENABLE_SMEM_SPILLING() asm volatile(".pragma \"enable_smem_spilling\";");
#else
#define WP_ENABLE_SMEM_SPILLING()
#endif


// avoid namespacing of float type for casting to float type, this is to avoid wp::float(x), which is not valid in C++
#define float(x) cast_float(x)
#define adj_float(x, adj_x, adj_ret) adj_cast_float(x, adj_x, adj_ret)

#define int(x) cast_int(x)
#define adj_int(x, adj_x, adj_ret) adj_cast_int(x, adj_x, adj_ret)



extern "C" __global__ void apply_gravity_1f7036e6_cuda_kernel_forward(
    wp::launch_bounds_t<1> dim,
    wp::array_t<wp::vec_t<3, wp::float32>> var_v,
    wp::vec_t<3, wp::float32> var_g,
    wp::float32 var_dt)
{
    wp::tile_shared_storage_t tile_mem;

    for (size_t _idx = static_cast<size_t>(blockDim.x) * static_cast<size_t>(blockIdx.x) + static_cast<size_t>(threadIdx.x);
         _idx < dim.size;
         _idx += static_cast<size_t>(blockDim.x) * static_cast<size_t>(gridDim.x))
    {
            // reset shared memory allocator
        wp::tile_shared_storage_t::init();

        //---------
        // primal vars
        wp::int32 var_0;
        wp::vec_t<3, wp::float32>* var_1;
        wp::vec_t<3, wp::float32> var_2;
        wp::vec_t<3, wp::float32> var_3;
        wp::vec_t<3, wp::float32> var_4;
        //---------
        // forward
        // def apply_gravity(v: wp.array(dtype=wp.vec3), g: wp.vec3, dt: float):                  <L 93>
        // i = wp.tid()                                                                           <L 94>
        var_0 = builtin_tid1d();
        // v[i] = v[i] + g * dt                                                                   <L 95>
        var_1 = wp::address(var_v, var_0);
        var_2 = wp::mul(var_g, var_dt);
        var_4 = wp::load(var_1);
        var_3 = wp::add(var_4, var_2);
        wp::array_store(var_v, var_0, var_3);
    }
}



extern "C" __global__ void apply_gravity_1f7036e6_cuda_kernel_backward(
    wp::launch_bounds_t<1> dim,
    wp::array_t<wp::vec_t<3, wp::float32>> var_v,
    wp::vec_t<3, wp::float32> var_g,
    wp::float32 var_dt,
    wp::array_t<wp::vec_t<3, wp::float32>> adj_v,
    wp::vec_t<3, wp::float32> adj_g,
    wp::float32 adj_dt)
{
    wp::tile_shared_storage_t tile_mem;

    for (size_t _idx = static_cast<size_t>(blockDim.x) * static_cast<size_t>(blockIdx.x) + static_cast<size_t>(threadIdx.x);
         _idx < dim.size;
         _idx += static_cast<size_t>(blockDim.x) * static_cast<size_t>(gridDim.x))
    {
            // reset shared memory allocator
        wp::tile_shared_storage_t::init();

        //---------
        // primal vars
        wp::int32 var_0;
        wp::vec_t<3, wp::float32>* var_1;
        wp::vec_t<3, wp::float32> var_2;
        wp::vec_t<3, wp::float32> var_3;
        wp::vec_t<3, wp::float32> var_4;
        //---------
        // dual vars
        wp::int32 adj_0 = {};
        wp::vec_t<3, wp::float32> adj_1 = {};
        wp::vec_t<3, wp::float32> adj_2 = {};
        wp::vec_t<3, wp::float32> adj_3 = {};
        wp::vec_t<3, wp::float32> adj_4 = {};
        //---------
        // forward
        // def apply_gravity(v: wp.array(dtype=wp.vec3), g: wp.vec3, dt: float):                  <L 93>
        // i = wp.tid()                                                                           <L 94>
        var_0 = builtin_tid1d();
        // v[i] = v[i] + g * dt                                                                   <L 95>
        var_1 = wp::address(var_v, var_0);
        var_2 = wp::mul(var_g, var_dt);
        var_4 = wp::load(var_1);
        var_3 = wp::add(var_4, var_2);
        // wp::array_store(var_v, var_0, var_3);
        //---------
        // reverse
        wp::adj_array_store(var_v, var_0, var_3, adj_v, adj_0, adj_3);
        wp::adj_add(var_4, var_2, adj_1, adj_2, adj_3);
        wp::adj_mul(var_g, var_dt, adj_g, adj_dt, adj_2);
        wp::adj_address(var_v, var_0, adj_v, adj_0, adj_1);
        // adj: v[i] = v[i] + g * dt                                                              <L 95>
        // adj: i = wp.tid()                                                                      <L 94>
        // adj: def apply_gravity(v: wp.array(dtype=wp.vec3), g: wp.vec3, dt: float):             <L 93>
        continue;
    }
}



extern "C" __global__ void collide_ground_273e0bdb_cuda_kernel_forward(
    wp::launch_bounds_t<1> dim,
    wp::array_t<wp::vec_t<3, wp::float32>> var_x,
    wp::array_t<wp::vec_t<3, wp::float32>> var_v,
    wp::float32 var_restitution,
    wp::array_t<wp::int32> var_bounces)
{
    wp::tile_shared_storage_t tile_mem;

    for (size_t _idx = static_cast<size_t>(blockDim.x) * static_cast<size_t>(blockIdx.x) + static_cast<size_t>(threadIdx.x);
         _idx < dim.size;
         _idx += static_cast<size_t>(blockDim.x) * static_cast<size_t>(gridDim.x))
    {
            // reset shared memory allocator
        wp::tile_shared_storage_t::init();

        //---------
        // primal vars
        wp::int32 var_0;
        wp::vec_t<3, wp::float32>* var_1;
        wp::vec_t<3, wp::float32> var_2;
        wp::vec_t<3, wp::float32> var_3;
        const wp::int32 var_4 = 1;
        wp::float32 var_5;
        const wp::float32 var_6 = 0.0;
        bool var_7;
        const wp::int32 var_8 = 0;
        wp::float32 var_9;
        const wp::int32 var_10 = 1;
        wp::float32 var_11;
        wp::float32 var_12;
        const wp::int32 var_13 = 2;
        wp::float32 var_14;
        wp::vec_t<3, wp::float32> var_15;
        wp::vec_t<3, wp::float32>* var_16;
        wp::vec_t<3, wp::float32> var_17;
        wp::vec_t<3, wp::float32> var_18;
        const wp::int32 var_19 = 0;
        wp::float32 var_20;
        const wp::int32 var_21 = 1;
        wp::float32 var_22;
        wp::float32 var_23;
        wp::float32 var_24;
        const wp::int32 var_25 = 2;
        wp::float32 var_26;
        wp::vec_t<3, wp::float32> var_27;
        const wp::int32 var_28 = 0;
        const wp::int32 var_29 = 1;
        wp::int32 var_30;
        //---------
        // forward
        // def collide_ground(                                                                    <L 105>
        // i = wp.tid()                                                                           <L 108>
        var_0 = builtin_tid1d();
        // p = x[i]                                                                               <L 109>
        var_1 = wp::address(var_x, var_0);
        var_3 = wp::load(var_1);
        var_2 = wp::copy(var_3);
        // if p[1] < 0.0:                                                                         <L 110>
        var_5 = wp::extract(var_2, var_4);
        var_7 = (var_5 < var_6);
        if (var_7) {
            // x[i] = wp.vec3(p[0], -p[1], p[2])                                                  <L 111>
            var_9 = wp::extract(var_2, var_8);
            var_11 = wp::extract(var_2, var_10);
            var_12 = wp::neg(var_11);
            var_14 = wp::extract(var_2, var_13);
            var_15 = wp::vec_t<3, wp::float32>(var_9, var_12, var_14);
            wp::array_store(var_x, var_0, var_15);
            // vel = v[i]                                                                         <L 112>
            var_16 = wp::address(var_v, var_0);
            var_18 = wp::load(var_16);
            var_17 = wp::copy(var_18);
            // v[i] = wp.vec3(vel[0], -vel[1] * restitution, vel[2])                              <L 113>
            var_20 = wp::extract(var_17, var_19);
            var_22 = wp::extract(var_17, var_21);
            var_23 = wp::neg(var_22);
            var_24 = wp::mul(var_23, var_restitution);
            var_26 = wp::extract(var_17, var_25);
            var_27 = wp::vec_t<3, wp::float32>(var_20, var_24, var_26);
            wp::array_store(var_v, var_0, var_27);
            // wp.atomic_add(bounces, 0, 1)                                                       <L 114>
            var_30 = wp::atomic_add(var_bounces, var_28, var_29);
        }
    }
}



extern "C" __global__ void collide_ground_273e0bdb_cuda_kernel_backward(
    wp::launch_bounds_t<1> dim,
    wp::array_t<wp::vec_t<3, wp::float32>> var_x,
    wp::array_t<wp::vec_t<3, wp::float32>> var_v,
    wp::float32 var_restitution,
    wp::array_t<wp::int32> var_bounces,
    wp::array_t<wp::vec_t<3, wp::float32>> adj_x,
    wp::array_t<wp::vec_t<3, wp::float32>> adj_v,
    wp::float32 adj_restitution,
    wp::array_t<wp::int32> adj_bounces)
{
    wp::tile_shared_storage_t tile_mem;

    for (size_t _idx = static_cast<size_t>(blockDim.x) * static_cast<size_t>(blockIdx.x) + static_cast<size_t>(threadIdx.x);
         _idx < dim.size;
         _idx += static_cast<size_t>(blockDim.x) * static_cast<size_t>(gridDim.x))
    {
            // reset shared memory allocator
        wp::tile_shared_storage_t::init();

        //---------
        // primal vars
        wp::int32 var_0;
        wp::vec_t<3, wp::float32>* var_1;
        wp::vec_t<3, wp::float32> var_2;
        wp::vec_t<3, wp::float32> var_3;
        const wp::int32 var_4 = 1;
        wp::float32 var_5;
        const wp::float32 var_6 = 0.0;
        bool var_7;
        const wp::int32 var_8 = 0;
        wp::float32 var_9;
        const wp::int32 var_10 = 1;
        wp::float32 var_11;
        wp::float32 var_12;
        const wp::int32 var_13 = 2;
        wp::float32 var_14;
        wp::vec_t<3, wp::float32> var_15;
        wp::vec_t<3, wp::float32>* var_16;
        wp::vec_t<3, wp::float32> var_17;
        wp::vec_t<3, wp::float32> var_18;
        const wp::int32 var_19 = 0;
        wp::float32 var_20;
        const wp::int32 var_21 = 1;
        wp::float32 var_22;
        wp::float32 var_23;
        wp::float32 var_24;
        const wp::int32 var_25 = 2;
        wp::float32 var_26;
        wp::vec_t<3, wp::float32> var_27;
        const wp::int32 var_28 = 0;
        const wp::int32 var_29 = 1;
        wp::int32 var_30;
        //---------
        // dual vars
        wp::int32 adj_0 = {};
        wp::vec_t<3, wp::float32> adj_1 = {};
        wp::vec_t<3, wp::float32> adj_2 = {};
        wp::vec_t<3, wp::float32> adj_3 = {};
        wp::int32 adj_4 = {};
        wp::float32 adj_5 = {};
        wp::float32 adj_6 = {};
        bool adj_7 = {};
        wp::int32 adj_8 = {};
        wp::float32 adj_9 = {};
        wp::int32 adj_10 = {};
        wp::float32 adj_11 = {};
        wp::float32 adj_12 = {};
        wp::int32 adj_13 = {};
        wp::float32 adj_14 = {};
        wp::vec_t<3, wp::float32> adj_15 = {};
        wp::vec_t<3, wp::float32> adj_16 = {};
        wp::vec_t<3, wp::float32> adj_17 = {};
        wp::vec_t<3, wp::float32> adj_18 = {};
        wp::int32 adj_19 = {};
        wp::float32 adj_20 = {};
        wp::int32 adj_21 = {};
        wp::float32 adj_22 = {};
        wp::float32 adj_23 = {};
        wp::float32 adj_24 = {};
        wp::int32 adj_25 = {};
        wp::float32 adj_26 = {};
        wp::vec_t<3, wp::float32> adj_27 = {};
        wp::int32 adj_28 = {};
        wp::int32 adj_29 = {};
        wp::int32 adj_30 = {};
        //---------
        // forward
        // def collide_ground(                                                                    <L 105>
        // i = wp.tid()                                                                           <L 108>
        var_0 = builtin_tid1d();
        // p = x[i]                                                                               <L 109>
        var_1 = wp::address(var_x, var_0);
        var_3 = wp::load(var_1);
        var_2 = wp::copy(var_3);
        // if p[1] < 0.0:                                                                         <L 110>
        var_5 = wp::extract(var_2, var_4);
        var_7 = (var_5 < var_6);
        if (var_7) {
            // x[i] = wp.vec3(p[0], -p[1], p[2])                                                  <L 111>
            var_9 = wp::extract(var_2, var_8);
            var_11 = wp::extract(var_2, var_10);
            var_12 = wp::neg(var_11);
            var_14 = wp::extract(var_2, var_13);
            var_15 = wp::vec_t<3, wp::float32>(var_9, var_12, var_14);
            // wp::array_store(var_x, var_0, var_15);
            // vel = v[i]                                                                         <L 112>
            var_16 = wp::address(var_v, var_0);
            var_18 = wp::load(var_16);
            var_17 = wp::copy(var_18);
            // v[i] = wp.vec3(vel[0], -vel[1] * restitution, vel[2])                              <L 113>
            var_20 = wp::extract(var_17, var_19);
            var_22 = wp::extract(var_17, var_21);
            var_23 = wp::neg(var_22);
            var_24 = wp::mul(var_23, var_restitution);
            var_26 = wp::extract(var_17, var_25);
            var_27 = wp::vec_t<3, wp::float32>(var_20, var_24, var_26);
            // wp::array_store(var_v, var_0, var_27);
            // wp.atomic_add(bounces, 0, 1)                                                       <L 114>
            // var_30 = wp::atomic_add(var_bounces, var_28, var_29);
        }
        //---------
        // reverse
        if (var_7) {
            wp::adj_atomic_add(var_bounces, var_28, var_29, adj_bounces, adj_28, adj_29, adj_30);
            // adj: wp.atomic_add(bounces, 0, 1)                                                  <L 114>
            wp::adj_array_store(var_v, var_0, var_27, adj_v, adj_0, adj_27);
            wp::adj_vec_t(var_20, var_24, var_26, adj_20, adj_24, adj_26, adj_27);
            wp::adj_extract(var_17, var_25, adj_17, adj_25, adj_26);
            wp::adj_mul(var_23, var_restitution, adj_23, adj_restitution, adj_24);
            wp::adj_neg(var_22, adj_22, adj_23);
            wp::adj_extract(var_17, var_21, adj_17, adj_21, adj_22);
            wp::adj_extract(var_17, var_19, adj_17, adj_19, adj_20);
            // adj: v[i] = wp.vec3(vel[0], -vel[1] * restitution, vel[2])                         <L 113>
            wp::adj_copy(var_18, adj_16, adj_17);
            wp::adj_address(var_v, var_0, adj_v, adj_0, adj_16);
            // adj: vel = v[i]                                                                    <L 112>
            wp::adj_array_store(var_x, var_0, var_15, adj_x, adj_0, adj_15);
            wp::adj_vec_t(var_9, var_12, var_14, adj_9, adj_12, adj_14, adj_15);
            wp::adj_extract(var_2, var_13, adj_2, adj_13, adj_14);
            wp::adj_neg(var_11, adj_11, adj_12);
            wp::adj_extract(var_2, var_10, adj_2, adj_10, adj_11);
            wp::adj_extract(var_2, var_8, adj_2, adj_8, adj_9);
            // adj: x[i] = wp.vec3(p[0], -p[1], p[2])                                             <L 111>
        }
        wp::adj_extract(var_2, var_4, adj_2, adj_4, adj_5);
        // adj: if p[1] < 0.0:                                                                    <L 110>
        wp::adj_copy(var_3, adj_1, adj_2);
        wp::adj_address(var_x, var_0, adj_x, adj_0, adj_1);
        // adj: p = x[i]                                                                          <L 109>
        // adj: i = wp.tid()                                                                      <L 108>
        // adj: def collide_ground(                                                               <L 105>
        continue;
    }
}



extern "C" __global__ void integrate_4db8bf97_cuda_kernel_forward(
    wp::launch_bounds_t<1> dim,
    wp::array_t<wp::vec_t<3, wp::float32>> var_x,
    wp::array_t<wp::vec_t<3, wp::float32>> var_v,
    wp::float32 var_dt)
{
    wp::tile_shared_storage_t tile_mem;

    for (size_t _idx = static_cast<size_t>(blockDim.x) * static_cast<size_t>(blockIdx.x) + static_cast<size_t>(threadIdx.x);
         _idx < dim.size;
         _idx += static_cast<size_t>(blockDim.x) * static_cast<size_t>(gridDim.x))
    {
            // reset shared memory allocator
        wp::tile_shared_storage_t::init();

        //---------
        // primal vars
        wp::int32 var_0;
        wp::vec_t<3, wp::float32>* var_1;
        wp::vec_t<3, wp::float32>* var_2;
        wp::vec_t<3, wp::float32> var_3;
        wp::vec_t<3, wp::float32> var_4;
        wp::vec_t<3, wp::float32> var_5;
        wp::vec_t<3, wp::float32> var_6;
        //---------
        // forward
        // def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), dt: float):       <L 99>
        // i = wp.tid()                                                                           <L 100>
        var_0 = builtin_tid1d();
        // x[i] = x[i] + v[i] * dt                                                                <L 101>
        var_1 = wp::address(var_x, var_0);
        var_2 = wp::address(var_v, var_0);
        var_4 = wp::load(var_2);
        var_3 = wp::mul(var_4, var_dt);
        var_6 = wp::load(var_1);
        var_5 = wp::add(var_6, var_3);
        wp::array_store(var_x, var_0, var_5);
    }
}



extern "C" __global__ void integrate_4db8bf97_cuda_kernel_backward(
    wp::launch_bounds_t<1> dim,
    wp::array_t<wp::vec_t<3, wp::float32>> var_x,
    wp::array_t<wp::vec_t<3, wp::float32>> var_v,
    wp::float32 var_dt,
    wp::array_t<wp::vec_t<3, wp::float32>> adj_x,
    wp::array_t<wp::vec_t<3, wp::float32>> adj_v,
    wp::float32 adj_dt)
{
    wp::tile_shared_storage_t tile_mem;

    for (size_t _idx = static_cast<size_t>(blockDim.x) * static_cast<size_t>(blockIdx.x) + static_cast<size_t>(threadIdx.x);
         _idx < dim.size;
         _idx += static_cast<size_t>(blockDim.x) * static_cast<size_t>(gridDim.x))
    {
            // reset shared memory allocator
        wp::tile_shared_storage_t::init();

        //---------
        // primal vars
        wp::int32 var_0;
        wp::vec_t<3, wp::float32>* var_1;
        wp::vec_t<3, wp::float32>* var_2;
        wp::vec_t<3, wp::float32> var_3;
        wp::vec_t<3, wp::float32> var_4;
        wp::vec_t<3, wp::float32> var_5;
        wp::vec_t<3, wp::float32> var_6;
        //---------
        // dual vars
        wp::int32 adj_0 = {};
        wp::vec_t<3, wp::float32> adj_1 = {};
        wp::vec_t<3, wp::float32> adj_2 = {};
        wp::vec_t<3, wp::float32> adj_3 = {};
        wp::vec_t<3, wp::float32> adj_4 = {};
        wp::vec_t<3, wp::float32> adj_5 = {};
        wp::vec_t<3, wp::float32> adj_6 = {};
        //---------
        // forward
        // def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), dt: float):       <L 99>
        // i = wp.tid()                                                                           <L 100>
        var_0 = builtin_tid1d();
        // x[i] = x[i] + v[i] * dt                                                                <L 101>
        var_1 = wp::address(var_x, var_0);
        var_2 = wp::address(var_v, var_0);
        var_4 = wp::load(var_2);
        var_3 = wp::mul(var_4, var_dt);
        var_6 = wp::load(var_1);
        var_5 = wp::add(var_6, var_3);
        // wp::array_store(var_x, var_0, var_5);
        //---------
        // reverse
        wp::adj_array_store(var_x, var_0, var_5, adj_x, adj_0, adj_5);
        wp::adj_add(var_6, var_3, adj_1, adj_3, adj_5);
        wp::adj_mul(var_4, var_dt, adj_2, adj_dt, adj_3);
        wp::adj_address(var_v, var_0, adj_v, adj_0, adj_2);
        wp::adj_address(var_x, var_0, adj_x, adj_0, adj_1);
        // adj: x[i] = x[i] + v[i] * dt                                                           <L 101>
        // adj: i = wp.tid()                                                                      <L 100>
        // adj: def integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), dt: float):  <L 99>
        continue;
    }
}

