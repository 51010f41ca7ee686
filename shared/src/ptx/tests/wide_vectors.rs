//! `.v8` loads and stores of 32-bit elements (32 bytes, as sm_100 PTX moves them, e.g. cuBLASLt's
//! `ld.global.nc.v8.f32`): two `.v4` halves, the second 16 bytes on. Every run compares native code
//! with the interpreter (`run_kernel`).

use super::run_kernel;

/// Thread `t` copies its 32 bytes from `src` to `out` through eight registers, reversing their order.
const KERNEL: &str = ".version 8.8
.target sm_100
.address_size 64
.visible .entry k(.param .u64 out, .param .u64 src)
{
    .reg .b32 %r<16>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [src];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 32;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.nc.v8.f32 {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, [%rd5];
    st.global.v8.f32 [%rd4], {%f7, %f6, %f5, %f4, %f3, %f2, %f1, %f0};
    ret;
}";

#[test]
fn v8_moves_thirty_two_bytes_in_two_halves() {
    let threads = 32usize;
    let src: Vec<u8> = (0..32 * threads).map(|i| (i * 5 + 1) as u8).collect();
    let out = run_kernel(KERNEL, "k", [1, 1, 1], [threads as u32, 1, 1], &[vec![0xEE; 32 * threads], src.clone()], &[])
        .unwrap()
        .remove(0);
    let want: Vec<u8> =
        src.chunks(32).flat_map(|row| row.chunks(4).rev().flatten().copied().collect::<Vec<_>>()).collect();
    assert_eq!(out, want);
}

#[test]
fn v8_of_64_bit_elements_is_refused_by_name() {
    let ptx = KERNEL.replace(
        ".v8.f32 {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}",
        ".v8.f64 {%rd0, %rd1, %rd2, %rd3, %rd4, %rd5, %rd6, %rd7}",
    );
    let err = run_kernel(&ptx, "k", [1, 1, 1], [1, 1, 1], &[vec![0; 64], vec![0; 64]], &[]).unwrap_err();
    assert!(err.contains("ld.global.nc.v8.f64"), "{err}");
}
