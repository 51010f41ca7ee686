//! What a launch the engine stops returns: the status NVIDIA's driver gives for the same fault.

use crate::result::CUresult;
use crate::test_support::{run_k, OUT_BYTES};

/// `k(out)` loads a word at `out + OFFSET` and stores it at `out`.
fn load_at(offset: usize) -> String {
    format!(
        "
.version 8.0
.target sm_80
.address_size 64
.visible .entry k(.param .u64 out)
{{
    .reg .b32 %r<2>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    ld.global.u32 %r1, [%rd1+{offset}];
    st.global.u32 [%rd1], %r1;
    ret;
}}
"
    )
}

#[test]
fn a_misaligned_access_is_a_misaligned_address_and_one_out_of_bounds_an_illegal_address() {
    assert_eq!(run_k(load_at(4).as_bytes()), Ok(0), "aligned and inside: the buffer's zeros");
    assert_eq!(run_k(load_at(2).as_bytes()), Err(CUresult::MISALIGNED_ADDRESS), "inside the buffer, off by 2");
    assert_eq!(run_k(load_at(OUT_BYTES).as_bytes()), Err(CUresult::ILLEGAL_ADDRESS), "past the buffer");
}
