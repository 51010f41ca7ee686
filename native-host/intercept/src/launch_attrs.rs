//! Launch attributes: what `cuLaunchKernelEx`'s configuration, `cuLaunchCooperativeKernel` and a
//! graph kernel node's `cuGraphKernelNodeSetAttribute` add to a launch.
//!
//! The archive's launch op has a grid, a block, dynamic shared memory and parameters, nothing
//! more, and both replays launch plainly. So every attribute is kept beside the op, in the
//! archive's `capture.launch_attributes` metadata (the op's index and the attributes, JSON), and
//! the report says which ones a plain replay honours and which it does not:
//! - attributes that only tune scheduling or caching (priority, access policy window,
//!   synchronisation and scheduling policies, memory sync domains, the shared memory carve-out)
//!   or let a launch start before its predecessor ends (programmatic stream serialisation and
//!   events, the completion event) cannot change what a correct program computes: a plain,
//!   serial replay computes the same. They are counted;
//! - cluster dimensions (a kernel that reads its cluster rank or another block's shared memory
//!   computes something else without them), a cooperative launch (grid-wide synchronisation needs
//!   it) and device-updatable kernel nodes change what the kernel computes, so a launch with one
//!   makes the archive incomplete. A cluster shape the kernel declares in its PTX
//!   (`.reqnctapercluster`) stays with the kernel and needs no attribute.

use serde::Serialize;

use crate::sys::CUlaunchAttribute;
use shared::capture::Report;

/// `CUlaunchAttributeID` values.
mod id {
    pub const ACCESS_POLICY_WINDOW: u32 = 1;
    pub const COOPERATIVE: u32 = 2;
    pub const SYNCHRONIZATION_POLICY: u32 = 3;
    pub const CLUSTER_DIMENSION: u32 = 4;
    pub const CLUSTER_SCHEDULING_POLICY_PREFERENCE: u32 = 5;
    pub const PROGRAMMATIC_STREAM_SERIALIZATION: u32 = 6;
    pub const PROGRAMMATIC_EVENT: u32 = 7;
    pub const PRIORITY: u32 = 8;
    pub const MEM_SYNC_DOMAIN_MAP: u32 = 9;
    pub const MEM_SYNC_DOMAIN: u32 = 10;
    pub const PREFERRED_CLUSTER_DIMENSION: u32 = 11;
    pub const LAUNCH_COMPLETION_EVENT: u32 = 12;
    pub const DEVICE_UPDATABLE_KERNEL_NODE: u32 = 13;
    pub const PREFERRED_SHARED_MEMORY_CARVEOUT: u32 = 14;
}

/// A launch's attributes, as kept in `capture.launch_attributes`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LaunchAttrs {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<[u32; 3]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_cluster: Option<[u32; 3]>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cooperative: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub programmatic_serialization: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub device_updatable: bool,
    /// Every other attribute by name, with its value's first 16 bytes in hex.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other: Vec<String>,
}

fn i32_at(v: &[u8; 64], at: usize) -> i32 {
    i32::from_le_bytes(v[at..at + 4].try_into().expect("4 bytes"))
}

fn dims(v: &[u8; 64]) -> [u32; 3] {
    [i32_at(v, 0) as u32, i32_at(v, 4) as u32, i32_at(v, 8) as u32]
}

impl LaunchAttrs {
    /// A cooperative launch (`cuLaunchCooperativeKernel`).
    pub fn cooperative() -> LaunchAttrs {
        LaunchAttrs { cooperative: true, ..LaunchAttrs::default() }
    }

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

    /// Sets attribute `id` from its 64-byte value.
    pub fn set(&mut self, attr: u32, v: &[u8; 64]) {
        match attr {
            0 => {}
            id::CLUSTER_DIMENSION => self.cluster = Some(dims(v)).filter(|d| d.iter().product::<u32>() > 1),
            id::PREFERRED_CLUSTER_DIMENSION => self.preferred_cluster = Some(dims(v)),
            id::COOPERATIVE => self.cooperative = i32_at(v, 0) != 0,
            id::PRIORITY => self.priority = Some(i32_at(v, 0)),
            id::PROGRAMMATIC_STREAM_SERIALIZATION => self.programmatic_serialization = i32_at(v, 0) != 0,
            id::DEVICE_UPDATABLE_KERNEL_NODE => self.device_updatable = i32_at(v, 0) != 0,
            other => {
                let hex: String = v[..16].iter().map(|b| format!("{b:02x}")).collect();
                self.other.push(format!("{}={hex}", name(other)));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == LaunchAttrs::default()
    }

    /// The report's lines for one recorded launch with these attributes.
    pub fn report(&self, report: &mut Report) {
        if let Some(c) = self.cluster {
            report.count("launch attribute: cluster dimensions (kept, not replayed)");
            report.incomplete(format!(
                "a launch with cluster dimensions {c:?}: the replay launches without clusters (kept in capture.launch_attributes)"
            ));
        }
        if self.cooperative {
            report.count("launch attribute: cooperative (kept, not replayed)");
            report.incomplete(
                "a cooperative launch: the replay launches it plainly, without its grid-wide synchronisation guarantee (kept in capture.launch_attributes)".into(),
            );
        }
        if self.device_updatable {
            report.count("launch attribute: device-updatable kernel node (kept, not replayed)");
            report.incomplete("a device-updatable kernel node: updates the device makes to it are not replayed".into());
        }
        if self.preferred_cluster.is_some() {
            report.count("launch attribute: preferred cluster dimensions (kept; scheduling only)");
        }
        if self.priority.is_some() {
            report.count("launch attribute: priority (kept; scheduling only)");
        }
        if self.programmatic_serialization {
            report.count("launch attribute: programmatic stream serialization (kept; the replay runs serially)");
        }
        for o in &self.other {
            let name = o.split('=').next().unwrap_or(o);
            report.count(&format!("launch attribute: {name} (kept; scheduling only)"));
        }
    }
}

/// An attribute's name as cuda.h spells it, for the ones kept as `other`.
fn name(attr: u32) -> String {
    match attr {
        id::ACCESS_POLICY_WINDOW => "access_policy_window".into(),
        id::SYNCHRONIZATION_POLICY => "synchronization_policy".into(),
        id::CLUSTER_SCHEDULING_POLICY_PREFERENCE => "cluster_scheduling_policy_preference".into(),
        id::PROGRAMMATIC_EVENT => "programmatic_event".into(),
        id::MEM_SYNC_DOMAIN_MAP => "mem_sync_domain_map".into(),
        id::MEM_SYNC_DOMAIN => "mem_sync_domain".into(),
        id::LAUNCH_COMPLETION_EVENT => "launch_completion_event".into(),
        id::PREFERRED_SHARED_MEMORY_CARVEOUT => "preferred_shared_memory_carveout".into(),
        other => format!("attribute_{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(words: &[i32]) -> [u8; 64] {
        let mut v = [0u8; 64];
        for (i, w) in words.iter().enumerate() {
            v[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        v
    }

    #[test]
    fn attributes_that_change_results_make_the_archive_incomplete_and_the_others_are_counted() {
        let mut a = LaunchAttrs::default();
        a.set(id::CLUSTER_DIMENSION, &value(&[2, 1, 1]));
        a.set(id::PRIORITY, &value(&[-1]));
        a.set(id::ACCESS_POLICY_WINDOW, &value(&[7]));
        assert_eq!(a.cluster, Some([2, 1, 1]));
        assert_eq!(a.other, ["access_policy_window=07000000000000000000000000000000"]);
        let mut report = Report::default();
        a.report(&mut report);
        assert_eq!(report.incomplete.len(), 1, "{report:?}");
        assert!(report.ops.contains_key("launch attribute: priority (kept; scheduling only)"));
        // A 1x1x1 cluster is no cluster.
        let mut b = LaunchAttrs::default();
        b.set(id::CLUSTER_DIMENSION, &value(&[1, 1, 1]));
        assert!(b.is_empty());
        let json = serde_json::to_string(&LaunchAttrs::cooperative()).unwrap();
        assert_eq!(json, r#"{"cooperative":true}"#);
    }
}
