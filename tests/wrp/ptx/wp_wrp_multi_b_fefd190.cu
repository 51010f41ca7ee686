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


struct Params_f70a058f
{
    wp::float32 scale;
    wp::vec_t<3, wp::float32> offset;
    wp::int32 count;
    wp::array_t<wp::float32> weights;


    Params_f70a058f() = default;
    CUDA_CALLABLE Params_f70a058f(wp::float32 const& scale,
    wp::vec_t<3, wp::float32> const& offset = {},
    wp::int32 const& count = {},
    wp::array_t<wp::float32> const& weights = {})
        : scale{scale}
        , offset{offset}
        , count{count}
        , weights{weights}

    {
    }

    CUDA_CALLABLE Params_f70a058f& operator += (const Params_f70a058f& rhs)
    {    scale += rhs.scale;
    offset += rhs.offset;
    count += rhs.count;

        return *this;}

};

static CUDA_CALLABLE void adj_Params_f70a058f(wp::float32 const&,
    wp::vec_t<3, wp::float32> const&,
    wp::int32 const&,
    wp::array_t<wp::float32> const&,
    wp::float32 & adj_scale,
    wp::vec_t<3, wp::float32> & adj_offset,
    wp::int32 & adj_count,
    wp::array_t<wp::float32> & adj_weights,
    Params_f70a058f & adj_ret)
{
    adj_scale += adj_ret.scale;
    adj_offset += adj_ret.offset;
    adj_count += adj_ret.count;
    adj_weights = adj_ret.weights;
}

// Required when compiling adjoints.
CUDA_CALLABLE Params_f70a058f add(const Params_f70a058f& a, const Params_f70a058f& b)
{
    return Params_f70a058f();
}

CUDA_CALLABLE void adj_atomic_add(Params_f70a058f* p, Params_f70a058f t)
{
    wp::adj_atomic_add(&p->scale, t.scale);
    wp::adj_atomic_add(&p->offset, t.offset);
    wp::adj_atomic_add(&p->count, t.count);
    wp::adj_atomic_add(&p->weights, t.weights);
}





extern "C" __global__ void struct_kernel_625816d7_cuda_kernel_forward(
    wp::launch_bounds_t<1> dim,
    Params_f70a058f var_p,
    wp::array_t<wp::vec_t<3, wp::float32>> var_pts,
    wp::array_t<wp::vec_t<3, wp::float32>> var_out)
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
        wp::array_t<wp::float32>* var_1;
        wp::int32* var_2;
        wp::int32 var_3;
        wp::int32 var_4;
        wp::float32* var_5;
        wp::array_t<wp::float32> var_6;
        wp::float32 var_7;
        wp::float32 var_8;
        wp::vec_t<3, wp::float32>* var_9;
        wp::float32* var_10;
        wp::float32 var_11;
        wp::float32 var_12;
        wp::vec_t<3, wp::float32> var_13;
        wp::vec_t<3, wp::float32> var_14;
        wp::vec_t<3, wp::float32>* var_15;
        wp::vec_t<3, wp::float32> var_16;
        wp::vec_t<3, wp::float32> var_17;
        //---------
        // forward
        // def struct_kernel(p: Params, pts: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):       <L 80>
        // i = wp.tid()                                                                           <L 81>
        var_0 = builtin_tid1d();
        // w = p.weights[i % p.count]                                                             <L 82>
        var_1 = &((var_p).weights);
        var_2 = &((var_p).count);
        var_4 = wp::load(var_2);
        var_3 = wp::mod(var_0, var_4);
        var_6 = wp::load(var_1);
        var_5 = wp::address(var_6, var_3);
        var_8 = wp::load(var_5);
        var_7 = wp::copy(var_8);
        // out[i] = pts[i] * (p.scale * w) + p.offset                                             <L 83>
        var_9 = wp::address(var_pts, var_0);
        var_10 = &((var_p).scale);
        var_12 = wp::load(var_10);
        var_11 = wp::mul(var_12, var_7);
        var_14 = wp::load(var_9);
        var_13 = wp::mul(var_14, var_11);
        var_15 = &((var_p).offset);
        var_17 = wp::load(var_15);
        var_16 = wp::add(var_13, var_17);
        wp::array_store(var_out, var_0, var_16);
    }
}



extern "C" __global__ void struct_kernel_625816d7_cuda_kernel_backward(
    wp::launch_bounds_t<1> dim,
    Params_f70a058f var_p,
    wp::array_t<wp::vec_t<3, wp::float32>> var_pts,
    wp::array_t<wp::vec_t<3, wp::float32>> var_out,
    Params_f70a058f adj_p,
    wp::array_t<wp::vec_t<3, wp::float32>> adj_pts,
    wp::array_t<wp::vec_t<3, wp::float32>> adj_out)
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
        wp::array_t<wp::float32>* var_1;
        wp::int32* var_2;
        wp::int32 var_3;
        wp::int32 var_4;
        wp::float32* var_5;
        wp::array_t<wp::float32> var_6;
        wp::float32 var_7;
        wp::float32 var_8;
        wp::vec_t<3, wp::float32>* var_9;
        wp::float32* var_10;
        wp::float32 var_11;
        wp::float32 var_12;
        wp::vec_t<3, wp::float32> var_13;
        wp::vec_t<3, wp::float32> var_14;
        wp::vec_t<3, wp::float32>* var_15;
        wp::vec_t<3, wp::float32> var_16;
        wp::vec_t<3, wp::float32> var_17;
        //---------
        // dual vars
        wp::int32 adj_0 = {};
        wp::array_t<wp::float32> adj_1 = {};
        wp::int32 adj_2 = {};
        wp::int32 adj_3 = {};
        wp::int32 adj_4 = {};
        wp::float32 adj_5 = {};
        wp::array_t<wp::float32> adj_6 = {};
        wp::float32 adj_7 = {};
        wp::float32 adj_8 = {};
        wp::vec_t<3, wp::float32> adj_9 = {};
        wp::float32 adj_10 = {};
        wp::float32 adj_11 = {};
        wp::float32 adj_12 = {};
        wp::vec_t<3, wp::float32> adj_13 = {};
        wp::vec_t<3, wp::float32> adj_14 = {};
        wp::vec_t<3, wp::float32> adj_15 = {};
        wp::vec_t<3, wp::float32> adj_16 = {};
        wp::vec_t<3, wp::float32> adj_17 = {};
        //---------
        // forward
        // def struct_kernel(p: Params, pts: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):       <L 80>
        // i = wp.tid()                                                                           <L 81>
        var_0 = builtin_tid1d();
        // w = p.weights[i % p.count]                                                             <L 82>
        var_1 = &((var_p).weights);
        var_2 = &((var_p).count);
        var_4 = wp::load(var_2);
        var_3 = wp::mod(var_0, var_4);
        var_6 = wp::load(var_1);
        var_5 = wp::address(var_6, var_3);
        var_8 = wp::load(var_5);
        var_7 = wp::copy(var_8);
        // out[i] = pts[i] * (p.scale * w) + p.offset                                             <L 83>
        var_9 = wp::address(var_pts, var_0);
        var_10 = &((var_p).scale);
        var_12 = wp::load(var_10);
        var_11 = wp::mul(var_12, var_7);
        var_14 = wp::load(var_9);
        var_13 = wp::mul(var_14, var_11);
        var_15 = &((var_p).offset);
        var_17 = wp::load(var_15);
        var_16 = wp::add(var_13, var_17);
        // wp::array_store(var_out, var_0, var_16);
        //---------
        // reverse
        wp::adj_array_store(var_out, var_0, var_16, adj_out, adj_0, adj_16);
        wp::adj_add(var_13, var_17, adj_13, adj_15, adj_16);
        adj_p.offset += adj_15;
        wp::adj_mul(var_14, var_11, adj_9, adj_11, adj_13);
        wp::adj_mul(var_12, var_7, adj_10, adj_7, adj_11);
        adj_p.scale += adj_10;
        wp::adj_address(var_pts, var_0, adj_pts, adj_0, adj_9);
        // adj: out[i] = pts[i] * (p.scale * w) + p.offset                                        <L 83>
        wp::adj_copy(var_8, adj_5, adj_7);
        wp::adj_address(var_6, var_3, adj_1, adj_3, adj_5);
        wp::adj_mod(var_0, var_4, adj_0, adj_2, adj_3);
        adj_p.count = adj_2;
        adj_p.weights = adj_1;
        // adj: w = p.weights[i % p.count]                                                        <L 82>
        // adj: i = wp.tid()                                                                      <L 81>
        // adj: def struct_kernel(p: Params, pts: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):  <L 80>
        continue;
    }
}



extern "C" __global__ void add_kernel_f91a62db_cuda_kernel_forward(
    wp::launch_bounds_t<1> dim,
    wp::array_t<wp::float32> var_a,
    wp::array_t<wp::float32> var_b,
    wp::array_t<wp::float32> var_c)
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
        wp::float32* var_1;
        wp::float32* var_2;
        wp::float32 var_3;
        wp::float32 var_4;
        wp::float32 var_5;
        //---------
        // forward
        // def add_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):       <L 87>
        // i = wp.tid()                                                                           <L 88>
        var_0 = builtin_tid1d();
        // c[i] = a[i] + b[i]                                                                     <L 89>
        var_1 = wp::address(var_a, var_0);
        var_2 = wp::address(var_b, var_0);
        var_4 = wp::load(var_1);
        var_5 = wp::load(var_2);
        var_3 = wp::add(var_4, var_5);
        wp::array_store(var_c, var_0, var_3);
    }
}



extern "C" __global__ void add_kernel_f91a62db_cuda_kernel_backward(
    wp::launch_bounds_t<1> dim,
    wp::array_t<wp::float32> var_a,
    wp::array_t<wp::float32> var_b,
    wp::array_t<wp::float32> var_c,
    wp::array_t<wp::float32> adj_a,
    wp::array_t<wp::float32> adj_b,
    wp::array_t<wp::float32> adj_c)
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
        wp::float32* var_1;
        wp::float32* var_2;
        wp::float32 var_3;
        wp::float32 var_4;
        wp::float32 var_5;
        //---------
        // dual vars
        wp::int32 adj_0 = {};
        wp::float32 adj_1 = {};
        wp::float32 adj_2 = {};
        wp::float32 adj_3 = {};
        wp::float32 adj_4 = {};
        wp::float32 adj_5 = {};
        //---------
        // forward
        // def add_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):       <L 87>
        // i = wp.tid()                                                                           <L 88>
        var_0 = builtin_tid1d();
        // c[i] = a[i] + b[i]                                                                     <L 89>
        var_1 = wp::address(var_a, var_0);
        var_2 = wp::address(var_b, var_0);
        var_4 = wp::load(var_1);
        var_5 = wp::load(var_2);
        var_3 = wp::add(var_4, var_5);
        // wp::array_store(var_c, var_0, var_3);
        //---------
        // reverse
        wp::adj_array_store(var_c, var_0, var_3, adj_c, adj_0, adj_3);
        wp::adj_add(var_4, var_5, adj_1, adj_2, adj_3);
        wp::adj_address(var_b, var_0, adj_b, adj_0, adj_2);
        wp::adj_address(var_a, var_0, adj_a, adj_0, adj_1);
        // adj: c[i] = a[i] + b[i]                                                                <L 89>
        // adj: i = wp.tid()                                                                      <L 88>
        // adj: def add_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):  <L 87>
        continue;
    }
}

