//! Kernel parameter layouts and the packing of a launch's parameters by them.
//!
//! A layout comes from the PTX `.entry` where the module has PTX (`images.rs`), else from the
//! driver's own record of the kernel's parameters (`cuFuncGetParamInfo`, `cuKernelGetParamInfo`),
//! which gives offsets and sizes only.

use std::ffi::c_void;

use crate::real;
use crate::sys::*;

/// A kernel's parameter layout: `(offset, size)` per parameter, and where it came from.
#[derive(Clone, Debug)]
pub struct Layout {
    pub params: Vec<(String, u32, u32, u32)>,
    pub from: &'static str,
}

impl Layout {
    pub fn size(&self) -> usize {
        self.params.iter().map(|p| (p.1 + p.2) as usize).max().unwrap_or(0)
    }
}

/// A layout from the driver's own record of the kernel's parameters (CUDA 12.4 and later).
pub(super) fn param_info_layout(func: usize) -> Option<Layout> {
    let mut params = Vec::new();
    for index in 0.. {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: out-parameters; an index past the last parameter is an error.
        let ok = unsafe {
            real::func_get_param_info(func as Handle, index, &mut offset, &mut size) == CUDA_SUCCESS
                || real::kernel_get_param_info(func as Handle, index, &mut offset, &mut size) == CUDA_SUCCESS
        };
        if !ok {
            break;
        }
        params.push((format!("param{index}"), offset as u32, size as u32, param_align(offset as u32)));
    }
    if params.is_empty() {
        // A kernel without parameters also answers an error for index 0; it has an empty layout,
        // which is what an unknown kernel would get too, so the PTX or nothing decides.
        return None;
    }
    Some(Layout { params, from: "cuFuncGetParamInfo" })
}

/// The alignment a parameter at `offset` is declared with when the driver gives only offsets and
/// sizes: the largest power of two dividing the offset, at most 8. The size says nothing about it
/// (an 8-byte struct of two floats sits at a 4-byte offset; a 3-byte one is aligned to 1), while
/// the offset the compiler chose is aligned to at least what the parameter needs.
fn param_align(offset: u32) -> u32 {
    1 << offset.trailing_zeros().min(3)
}

/// Packs a launch's parameters into one buffer laid out as `layout` says.
///
/// # Safety
/// `params` is NULL or holds one valid pointer per parameter, each to that parameter's bytes;
/// `extra` is NULL or a `CU_LAUNCH_PARAM_END`-terminated key/value list as cuLaunchKernel takes.
pub(super) unsafe fn pack(layout: &Layout, params: *mut *mut c_void, extra: *mut *mut c_void) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; layout.size()];
    if !params.is_null() {
        for (i, &(_, offset, size, _)) in layout.params.iter().enumerate() {
            let src = *params.add(i) as *const u8;
            if src.is_null() {
                return None;
            }
            std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr().add(offset as usize), size as usize);
        }
        return Some(buf);
    }
    if extra.is_null() {
        return (layout.size() == 0).then_some(buf);
    }
    let (mut data, mut len): (*const u8, Option<usize>) = (std::ptr::null(), None);
    let mut i = 0;
    loop {
        let key = *extra.add(i) as usize;
        if key == CU_LAUNCH_PARAM_END {
            break;
        }
        let value = *extra.add(i + 1);
        match key {
            CU_LAUNCH_PARAM_BUFFER_POINTER => data = value as *const u8,
            CU_LAUNCH_PARAM_BUFFER_SIZE => len = Some(*(value as *const usize)),
            _ => {}
        }
        i += 2;
    }
    let len = len?;
    if data.is_null() {
        return None;
    }
    let n = len.min(buf.len());
    std::ptr::copy_nonoverlapping(data, buf.as_mut_ptr(), n);
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alignment_is_the_largest_power_of_two_dividing_the_offset_up_to_8() {
        // An 8-byte struct of two floats at offset 4, a 3-byte one at 12, a pointer at 16, a
        // byte at 1, and the first parameter.
        for (offset, align) in [(4, 4), (12, 4), (16, 8), (1, 1), (6, 2), (0, 8), (40, 8)] {
            assert_eq!(param_align(offset), align, "offset {offset}");
        }
    }
}
