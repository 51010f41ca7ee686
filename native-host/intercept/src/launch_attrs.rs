//! Launch attributes: what `cuLaunchKernelEx`'s configuration, `cuLaunchCooperativeKernel` and a
//! graph kernel node's `cuGraphKernelNodeSetAttribute` add to a launch ([`shared::launch_attrs`]
//! says what is kept and how each replay treats it), and the capture report's lines for them.

use crate::sys::CUlaunchAttribute;
use shared::capture::Report;
pub use shared::launch_attrs::LaunchAttrs;

/// The attributes of a `CUlaunchConfig`.
///
/// # Safety
/// `attrs` is null or points to `n` attributes.
pub unsafe fn from_config(attrs: *const CUlaunchAttribute, n: u32) -> LaunchAttrs {
    let mut out = LaunchAttrs::default();
    if attrs.is_null() {
        return out;
    }
    for i in 0..n as usize {
        // SAFETY: the caller's contract.
        let a = unsafe { &*attrs.add(i) };
        out.set(a.id, &a.value);
    }
    out
}

/// The report's lines for one recorded launch with these attributes.
pub fn report(attrs: &LaunchAttrs, report: &mut Report) {
    if attrs.cluster.is_some() {
        report.count("launch attribute: cluster dimensions (replayed on CUDA; the CPU refuses the launch)");
    }
    if attrs.cooperative {
        report.count("launch attribute: cooperative (replayed on CUDA; the CPU refuses the launch)");
    }
    if attrs.priority.is_some() {
        report.count("launch attribute: priority (replayed on CUDA)");
    }
    if attrs.device_updatable {
        report.count("launch attribute: device-updatable kernel node (kept, not replayed)");
        report.incomplete("a device-updatable kernel node: updates the device makes to it are not replayed".into());
    }
    if attrs.preferred_cluster.is_some() {
        report.count("launch attribute: preferred cluster dimensions (kept; scheduling only)");
    }
    if attrs.programmatic_serialization {
        report.count("launch attribute: programmatic stream serialization (kept; the replay runs serially)");
    }
    for o in &attrs.other {
        let name = o.split('=').next().unwrap_or(o);
        report.count(&format!("launch attribute: {name} (kept; scheduling only)"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::launch_attrs::id;

    fn value(words: &[i32]) -> [u8; 64] {
        let mut v = [0u8; 64];
        for (i, w) in words.iter().enumerate() {
            v[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        v
    }

    #[test]
    fn only_attributes_no_replay_honours_make_the_archive_incomplete_and_all_are_counted() {
        let mut a = LaunchAttrs::default();
        a.set(id::CLUSTER_DIMENSION, &value(&[2, 1, 1]));
        a.set(id::PRIORITY, &value(&[-1]));
        a.set(id::ACCESS_POLICY_WINDOW, &value(&[7]));
        let mut r = Report::default();
        report(&a, &mut r);
        assert!(r.incomplete.is_empty(), "{r:?}");
        assert!(r.ops.contains_key("launch attribute: priority (replayed on CUDA)"), "{r:?}");
        assert!(r.ops.keys().any(|k| k.starts_with("launch attribute: cluster dimensions")), "{r:?}");
        assert!(r.ops.contains_key("launch attribute: access_policy_window (kept; scheduling only)"), "{r:?}");
        let mut b = LaunchAttrs::default();
        b.set(id::DEVICE_UPDATABLE_KERNEL_NODE, &value(&[1]));
        let mut r = Report::default();
        report(&b, &mut r);
        assert_eq!(r.incomplete.len(), 1, "{r:?}");
    }
}
