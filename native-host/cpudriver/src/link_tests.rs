//! Links of several inputs: PTX with `.extern` functions and variables, and CPU machine code
//! (what stands in for a cubin) that defines them, linked into the one module that runs.

use super::*;
use crate::test_support::{link, run_k, CALLEE, CALLER, LINKED_RESULT};

#[test]
fn a_link_of_ptx_and_machine_code_binds_externs_across_them() {
    let callee = machine::wrap(CALLEE);
    let image = link(&[(INPUT_PTX, CALLER.as_bytes()), (INPUT_CUBIN, &callee)]).unwrap();
    assert!(image.starts_with(b"\x7fELF"), "the link hands back machine code");
    assert_eq!(run_k(&image), Ok(LINKED_RESULT), "scale and offset, from the second input");
    // Machine code first, the PTX that needs it after: the same module.
    let image = link(&[(INPUT_CUBIN, &callee), (INPUT_PTX, CALLER.as_bytes())]).unwrap();
    assert_eq!(run_k(&image), Ok(LINKED_RESULT));

    // The caller alone leaves `scale` undefined: the link fails, as nvlink's would.
    assert_eq!(link(&[(INPUT_PTX, CALLER.as_bytes())]), Err(CUresult::INVALID_PTX));
    // Two definitions of one visible name are refused too.
    let twice = [(INPUT_PTX, CALLER.as_bytes()), (INPUT_PTX, CALLEE.as_bytes()), (INPUT_PTX, CALLEE.as_bytes())];
    assert_eq!(link(&twice), Err(CUresult::INVALID_PTX));
}
