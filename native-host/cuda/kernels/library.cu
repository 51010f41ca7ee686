// Library ops of a recap archive (sorts, scans, reductions, run-length encoding) on a GPU.
//
// Each op runs as ONE launch of ONE block of LIBRARY_THREADS threads (recap-cuda's library.rs
// builds the launch; its docs say why): the result must be the bytes shared::library computes on
// the CPU, which follows NVIDIA Warp's host code.
// - Sorts are exact by construction: a stable sort by given key bits has one result. Warp's
//   16-bit passes ping-pong between the two halves of the keys and values; here each such pass is
//   made of stable 1-bit splits (a block-wide scan of the bit) through a scratch buffer the
//   replay owns, so that after each 16-bit pass the half Warp writes holds what Warp's holds.
// - Scans, sums and inner products add in index order, one element after another, as the CPU
//   does: the block stages a tile of elements in shared memory, one thread folds it, the block
//   writes the results back. Floats add with __fadd_rn/__dadd_rn and multiply with
//   __fmul_rn/__dmul_rn so that the compiler cannot contract a product and a sum into an FMA.
// - Run-length encoding walks its values in order the same way.
//
// Generated into library.ptx by generate.py (NVRTC 12.0, compute_70); the PTX is what recap loads.

typedef unsigned char u8;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

#define LIBRARY_THREADS 1024
#define WARPS (LIBRARY_THREADS / 32)
// Elements per thread in a split's tile, and elements staged per tile of a fold.
#define ITEMS 8
#define STAGE 2048

// Key kinds (recap-cuda's library.rs KeyKind): the radix image of each.
#define KEY_I32 0
#define KEY_U32 1
#define KEY_I64 2
#define KEY_U64 3
#define KEY_F32 4
#define KEY_F64 5

// Element kinds of scans and reductions (library.rs's Elem).
#define ELEM_I32 0
#define ELEM_I64 1
#define ELEM_F32 2
#define ELEM_F64 3

// The key's radix image: an unsigned integer whose order is the keys' order (shared::library's
// radix_image).
__device__ __forceinline__ u64 radix_image(const u8 *key, u32 kind) {
    switch (kind) {
    case KEY_I32:
        return (u64)(*(const u32 *)key ^ 0x80000000u);
    case KEY_I64:
        return *(const u64 *)key ^ (1ull << 63);
    case KEY_F32: {
        u32 i = *(const u32 *)key;
        u32 mask = (u32)(-(i32)(i >> 31)) | 0x80000000u;
        return (u64)(i ^ mask);
    }
    case KEY_F64: {
        u64 i = *(const u64 *)key;
        u64 mask = (u64)(-(i64)(i >> 63)) | (1ull << 63);
        return i ^ mask;
    }
    case KEY_U64:
        return *(const u64 *)key;
    default:
        return (u64)*(const u32 *)key;
    }
}

// Exclusive sum over the block's threads in thread order; every thread gets the block's total.
__device__ u32 block_exclusive_scan(u32 v, u32 *total) {
    __shared__ u32 warp_sums[WARPS];
    u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 x = v;
    for (u32 d = 1; d < 32; d <<= 1) {
        u32 y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d)
            x += y;
    }
    if (lane == 31)
        warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u32 s = warp_sums[lane];
        for (u32 d = 1; d < 32; d <<= 1) {
            u32 y = __shfl_up_sync(0xffffffffu, s, d);
            if (lane >= d)
                s += y;
        }
        warp_sums[lane] = s;
    }
    __syncthreads();
    u32 before = warp == 0 ? 0 : warp_sums[warp - 1];
    *total = warp_sums[WARPS - 1];
    __syncthreads();
    return before + x - v;
}

// Keys and values of `key_size` and `value_size` bytes (values a whole number of 4-byte words).
struct Pairs {
    u8 *keys;
    u8 *values;
};

struct Layout {
    u32 kind, key_size, value_size;
};

__device__ __forceinline__ void move_pair(Pairs src, u32 i, Pairs dst, u32 j, Layout l) {
    if (l.key_size == 8)
        ((u64 *)dst.keys)[j] = ((const u64 *)src.keys)[i];
    else
        ((u32 *)dst.keys)[j] = ((const u32 *)src.keys)[i];
    u32 words = l.value_size / 4;
    const u32 *from = (const u32 *)(src.values + (u64)i * l.value_size);
    u32 *to = (u32 *)(dst.values + (u64)j * l.value_size);
    for (u32 w = 0; w < words; w++)
        to[w] = from[w];
}

__device__ __forceinline__ u32 key_bit(Pairs p, u32 i, Layout l, u32 bit) {
    return (u32)(radix_image(p.keys + (u64)i * l.key_size, l.kind) >> bit) & 1u;
}

// Stable split of `n` pairs of `src` into `dst` by one bit of the radix image: pairs whose bit is
// 0 first, each side in its order. `src` and `dst` do not overlap.
__device__ void split(Pairs src, Pairs dst, u32 n, Layout l, u32 bit) {
    u32 zeros_here = 0;
    for (u32 i = threadIdx.x; i < n; i += LIBRARY_THREADS)
        zeros_here += 1 - key_bit(src, i, l, bit);
    u32 zeros;
    block_exclusive_scan(zeros_here, &zeros);
    // Zeros before the current tile.
    u32 done = 0;
    for (u32 base = 0; base < n; base += LIBRARY_THREADS * ITEMS) {
        u32 first = base + threadIdx.x * ITEMS;
        u32 bits = 0, mine = 0;
        for (u32 k = 0; k < ITEMS; k++) {
            u32 i = first + k;
            if (i < n && key_bit(src, i, l, bit) == 0) {
                mine++;
            } else if (i < n) {
                bits |= 1u << k;
            }
        }
        u32 tile_zeros;
        u32 z = done + block_exclusive_scan(mine, &tile_zeros);
        for (u32 k = 0; k < ITEMS; k++) {
            u32 i = first + k;
            if (i >= n)
                break;
            if (bits >> k & 1) {
                move_pair(src, i, dst, zeros + (i - z), l);
            } else {
                move_pair(src, i, dst, z, l);
                z++;
            }
        }
        done += tile_zeros;
    }
    __syncthreads();
}

__device__ __forceinline__ Pairs at(Pairs p, u32 first, Layout l) {
    Pairs r = {p.keys + (u64)first * l.key_size, p.values + (u64)first * l.value_size};
    return r;
}

// Warp's radix sort of pairs `first .. first + len` by key bits `begin .. end`, 16 bits a pass,
// ping-ponging with the pairs `scratch` on (shared::library's Sort::run); `temp` holds `len`
// pairs of the replay's own.
__device__ void radix_sort(Pairs data, Pairs temp, u32 first, u32 len, u32 scratch, u32 begin, u32 end,
                           Layout l) {
    u32 key_bits = 8 * l.key_size;
    if (end <= begin || end > key_bits || len == 0)
        return;
    u32 passes = min((end - begin + 15) / 16, (key_bits + 15) / 16);
    Pairs low = at(data, first, l), high = at(data, first + scratch, l);
    for (u32 p = 0; p < passes; p++) {
        Pairs from = p % 2 == 0 ? low : high, to = p % 2 == 0 ? high : low;
        u32 shift = begin + 16 * p;
        u32 bits = min(end - shift, 16u);
        // The splits alternate between `temp` and `to`, the last one landing in `to`; `from`
        // keeps what it held, as Warp's pass leaves its source.
        Pairs src = from;
        for (u32 b = 0; b < bits; b++) {
            Pairs dst = (bits - 1 - b) % 2 == 0 ? to : temp;
            split(src, dst, len, l, shift + b);
            src = dst;
        }
    }
    if (passes % 2 == 1) {
        for (u32 i = threadIdx.x; i < len; i += LIBRARY_THREADS)
            move_pair(high, i, low, i, l);
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(LIBRARY_THREADS)
    recap_radix_sort_pairs(u8 *keys, u8 *values, u8 *temp_keys, u8 *temp_values, u32 count, u32 kind,
                           u32 key_size, u32 value_size, u32 begin_bit, u32 end_bit) {
    Layout l = {kind, key_size, value_size};
    Pairs data = {keys, values}, temp = {temp_keys, temp_values};
    radix_sort(data, temp, 0, count, count, begin_bit, end_bit, l);
}

// Warp checks every segment before it sorts any: a segment outside the keys stops the launch
// with a trap, which the replay reports as a fault of this op.
extern "C" __global__ void __launch_bounds__(LIBRARY_THREADS)
    recap_segmented_sort_pairs(u8 *keys, u8 *values, const i32 *starts, const i32 *ends, u8 *temp_keys,
                               u8 *temp_values, u32 count, u32 segments, u32 kind) {
    __shared__ u32 bad;
    if (threadIdx.x == 0)
        bad = 0;
    __syncthreads();
    for (u32 s = threadIdx.x; s < segments; s += LIBRARY_THREADS) {
        i32 start = starts[s], end = ends[s];
        if (start < 0 || end < start || (i64)end > (i64)count)
            bad = 1;
    }
    __syncthreads();
    if (bad)
        __trap();
    Layout l = {kind, 4, 4};
    Pairs data = {keys, values}, temp = {temp_keys, temp_values};
    for (u32 s = 0; s < segments; s++) {
        i32 start = starts[s], end = ends[s];
        radix_sort(data, temp, (u32)start, (u32)(end - start), count, 0, 32, l);
    }
}

// One element of a scan or reduction, as its bits, added in its own type.
__device__ __forceinline__ u64 load_elem(const u8 *p, u32 elem) {
    return elem == ELEM_I64 || elem == ELEM_F64 ? *(const u64 *)p : (u64) * (const u32 *)p;
}

__device__ __forceinline__ void store_elem(u8 *p, u32 elem, u64 v) {
    if (elem == ELEM_I64 || elem == ELEM_F64)
        *(u64 *)p = v;
    else
        *(u32 *)p = (u32)v;
}

__device__ __forceinline__ u64 add_elem(u64 a, u64 b, u32 elem) {
    switch (elem) {
    case ELEM_I64:
        return a + b;
    case ELEM_F32:
        return (u64)__float_as_uint(__fadd_rn(__uint_as_float((u32)a), __uint_as_float((u32)b)));
    case ELEM_F64:
        return (u64)__double_as_longlong(__dadd_rn(__longlong_as_double((i64)a), __longlong_as_double((i64)b)));
    default:
        return (u64)(u32)((u32)a + (u32)b);
    }
}

__device__ __forceinline__ u64 mul_elem(u64 a, u64 b, u32 elem) {
    if (elem == ELEM_F32)
        return (u64)__float_as_uint(__fmul_rn(__uint_as_float((u32)a), __uint_as_float((u32)b)));
    return (u64)__double_as_longlong(__dmul_rn(__longlong_as_double((i64)a), __longlong_as_double((i64)b)));
}

__device__ __forceinline__ u32 elem_size(u32 elem) { return elem == ELEM_I64 || elem == ELEM_F64 ? 8 : 4; }

// Per component k < width: the running sum of src[i * src_stride + k] into
// dst[i * dst_stride + k] (strides in bytes), inclusive or exclusive, in index order.
extern "C" __global__ void __launch_bounds__(LIBRARY_THREADS)
    recap_scan(const u8 *src, u8 *dst, u32 count, u32 elem, u32 src_stride, u32 dst_stride, u32 width,
               u32 inclusive) {
    __shared__ u64 stage[STAGE];
    u32 size = elem_size(elem);
    for (u32 k = 0; k < width; k++) {
        u64 sum = 0;
        for (u32 base = 0; base < count; base += STAGE) {
            u32 n = min(count - base, (u32)STAGE);
            for (u32 i = threadIdx.x; i < n; i += LIBRARY_THREADS)
                stage[i] = load_elem(src + (u64)(base + i) * src_stride + (u64)k * size, elem);
            __syncthreads();
            if (threadIdx.x == 0) {
                for (u32 i = 0; i < n; i++) {
                    u64 v = stage[i];
                    if (inclusive) {
                        sum = add_elem(sum, v, elem);
                        stage[i] = sum;
                    } else {
                        stage[i] = sum;
                        sum = add_elem(sum, v, elem);
                    }
                }
            }
            __syncthreads();
            for (u32 i = threadIdx.x; i < n; i += LIBRARY_THREADS)
                store_elem(dst + (u64)(base + i) * dst_stride + (u64)k * size, elem, stage[i]);
            __syncthreads();
        }
    }
}

// dst[k] = the sum over i of src[i * stride + k], in index order.
extern "C" __global__ void __launch_bounds__(LIBRARY_THREADS)
    recap_sum(const u8 *src, u8 *dst, u32 count, u32 elem, u32 stride, u32 width) {
    __shared__ u64 stage[STAGE];
    u32 size = elem_size(elem);
    for (u32 k = 0; k < width; k++) {
        u64 sum = 0;
        for (u32 base = 0; base < count; base += STAGE) {
            u32 n = min(count - base, (u32)STAGE);
            for (u32 i = threadIdx.x; i < n; i += LIBRARY_THREADS)
                stage[i] = load_elem(src + (u64)(base + i) * stride + (u64)k * size, elem);
            __syncthreads();
            if (threadIdx.x == 0)
                for (u32 i = 0; i < n; i++)
                    sum = add_elem(sum, stage[i], elem);
            __syncthreads();
        }
        if (threadIdx.x == 0)
            store_elem(dst + (u64)k * size, elem, sum);
    }
}

// dst = the sum over i, then k, of a[i * a_stride + k] * b[i * b_stride + k], each product
// rounded before it is added.
extern "C" __global__ void __launch_bounds__(LIBRARY_THREADS)
    recap_inner(const u8 *a, const u8 *b, u8 *dst, u32 count, u32 elem, u32 a_stride, u32 b_stride, u32 width) {
    __shared__ u64 stage_a[STAGE / 2], stage_b[STAGE / 2];
    u32 size = elem_size(elem);
    u64 total = (u64)count * width, dot = 0;
    for (u64 base = 0; base < total; base += STAGE / 2) {
        u32 n = (u32)min(total - base, (u64)(STAGE / 2));
        for (u32 j = threadIdx.x; j < n; j += LIBRARY_THREADS) {
            u64 f = base + j, i = f / width, k = f % width;
            stage_a[j] = load_elem(a + i * a_stride + k * size, elem);
            stage_b[j] = load_elem(b + i * b_stride + k * size, elem);
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (u32 j = 0; j < n; j++)
                dot = add_elem(dot, mul_elem(stage_a[j], stage_b[j], elem), elem);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        store_elem(dst, elem, dot);
}

// Each run of equal i32 values: its value and length, in order, and the number of runs.
extern "C" __global__ void __launch_bounds__(LIBRARY_THREADS)
    recap_runlength_encode(const i32 *values, i32 *run_values, i32 *run_lengths, i32 *run_count, u32 count) {
    __shared__ i32 stage[STAGE];
    u32 runs = 0;
    i32 length = 0, last = 0;
    for (u32 base = 0; base < count; base += STAGE) {
        u32 n = min(count - base, (u32)STAGE);
        for (u32 i = threadIdx.x; i < n; i += LIBRARY_THREADS)
            stage[i] = values[base + i];
        __syncthreads();
        if (threadIdx.x == 0) {
            for (u32 i = 0; i < n; i++) {
                i32 v = stage[i];
                if (base + i > 0 && v == last) {
                    length++;
                } else {
                    if (base + i > 0)
                        run_lengths[runs - 1] = length;
                    run_values[runs] = v;
                    runs++;
                    length = 1;
                }
                last = v;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (runs > 0)
            run_lengths[runs - 1] = length;
        *run_count = (i32)runs;
    }
}
