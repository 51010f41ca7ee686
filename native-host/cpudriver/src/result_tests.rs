//! The CUDA runtime's export tables, which this driver does not have: a clear refusal that leaves
//! no table behind, found the same way through `cuGetProcAddress`.

use std::ffi::c_void;

use super::*;
use crate::procs::cuGetProcAddress_v2;

/// The id of the second table the CUDA runtime (12.x and 13.x) asks for.
const RUNTIME_TABLE: [u8; 16] =
    [0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9];

#[test]
fn an_export_table_is_refused_with_no_table_and_a_bad_call_is_an_invalid_value() {
    let id = RUNTIME_TABLE.as_ptr() as *const c_void;
    let mut table = 8usize as *const c_void;
    let (mut found, mut status) = (std::ptr::null_mut::<c_void>(), -1);
    // SAFETY (every call below): valid out-parameters and a 16-byte id, or the null pointers the
    // calls must refuse.
    unsafe {
        assert_eq!(cuGetExportTable(&mut table, id), CUresult::NOT_SUPPORTED);
        assert!(table.is_null(), "no table is handed out");
        assert_eq!(cuGetExportTable(&mut table, std::ptr::null()), CUresult::INVALID_VALUE);
        assert_eq!(cuGetExportTable(std::ptr::null_mut(), id), CUresult::INVALID_VALUE);

        let name = c"cuGetExportTable".as_ptr();
        assert_eq!(cuGetProcAddress_v2(name, &mut found, 13000, 0, &mut status), CUresult::SUCCESS);
        assert_eq!((found, status), (cuGetExportTable as *mut c_void, 0));
    }
}
