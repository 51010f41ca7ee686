//! Launch attributes a captured launch had ([`shared::launch_attrs`]: cluster dimensions, a
//! cooperative launch, priority), set on the launch again: on its kernel node in graph mode, through
//! `cuLaunchKernelEx` in stream mode. The driver judges the values (a cluster shape the kernel or
//! the GPU cannot take fails the load with the driver's error, naming the op).

use shared::launch_attrs::{id, LaunchAttrs, VALUE_SIZE};

use crate::sys;

/// The attributes of `attrs` that a replay sets, as the driver takes them.
pub(crate) fn for_launch(attrs: &LaunchAttrs) -> Vec<sys::CUlaunchAttribute> {
    attrs
        .replayed()
        .into_iter()
        .map(|(attr, bytes)| {
            let id = match attr {
                id::CLUSTER_DIMENSION => sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                id::COOPERATIVE => sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                id::PRIORITY => sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PRIORITY,
                other => unreachable!("LaunchAttrs::replayed gives no attribute {other}"),
            };
            let mut pad = [0 as std::ffi::c_char; VALUE_SIZE];
            for (p, b) in pad.iter_mut().zip(bytes) {
                *p = b as std::ffi::c_char;
            }
            sys::CUlaunchAttribute { id, pad: [0; 4], value: sys::CUlaunchAttributeValue { pad } }
        })
        .collect()
}
