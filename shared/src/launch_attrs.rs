//! Launch attributes a captured program gave its launches (`cuLaunchKernelEx`'s configuration,
//! `cuLaunchCooperativeKernel`, a graph kernel node's `cuGraphKernelNodeSetAttribute`), kept with
//! the archive so a CUDA replay launches the same way.
//!
//! The archive's launch op has a grid, a block, dynamic shared memory and parameters, nothing
//! more; `recap capture` keeps every attribute beside the op in the archive's
//! `capture.launch_attributes` metadata, a JSON list of [`LaunchAttrUse`]. The attributes fall in
//! two kinds:
//! - those that change what a kernel computes: cluster dimensions (a kernel that reads its cluster
//!   rank or another block's shared memory computes something else without them) and a cooperative
//!   launch (grid-wide synchronisation needs it). A CUDA replay sets them on the launch
//!   ([`LaunchAttrs::replayed`]); the CPU replay models neither and refuses such a launch by name.
//!   A device-updatable kernel node is kept too, but the device's updates to it are not replayed;
//! - those that only tune scheduling or caching, or let a launch start before its predecessor
//!   ends (priority, access policy window, programmatic serialisation...). A plain, serial replay
//!   computes the same; priority is set on CUDA all the same, the others are kept for reading.
//!
//! A cluster shape the kernel declares in its PTX (`.reqnctapercluster`) stays with the kernel and
//! needs no attribute.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The metadata key holding the list of [`LaunchAttrUse`].
pub const META_KEY: &str = "capture.launch_attributes";

/// `CUlaunchAttributeID` values (cuda.h).
pub mod id {
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

/// The size of a `CUlaunchAttributeValue`.
pub const VALUE_SIZE: usize = 64;

/// A launch's attributes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LaunchAttrs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<[u32; 3]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_cluster: Option<[u32; 3]>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cooperative: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub programmatic_serialization: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub device_updatable: bool,
    /// Every other attribute by name, with its value's first 16 bytes in hex.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other: Vec<String>,
}

/// The attributes of one launch op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchAttrUse {
    /// The launch's op index.
    pub op: u32,
    pub attributes: LaunchAttrs,
}

fn i32_at(v: &[u8; VALUE_SIZE], at: usize) -> i32 {
    i32::from_le_bytes(v[at..at + 4].try_into().expect("4 bytes"))
}

fn dims(v: &[u8; VALUE_SIZE]) -> [u32; 3] {
    [i32_at(v, 0) as u32, i32_at(v, 4) as u32, i32_at(v, 8) as u32]
}

fn value_of(words: &[u32]) -> [u8; VALUE_SIZE] {
    let mut v = [0u8; VALUE_SIZE];
    for (i, w) in words.iter().enumerate() {
        v[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
    v
}

impl LaunchAttrs {
    /// A cooperative launch (`cuLaunchCooperativeKernel`).
    pub fn cooperative() -> LaunchAttrs {
        LaunchAttrs { cooperative: true, ..LaunchAttrs::default() }
    }

    /// Sets attribute `attr` from its 64-byte value, as the driver API passes it.
    pub fn set(&mut self, attr: u32, v: &[u8; VALUE_SIZE]) {
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

    /// The attributes a CUDA replay sets on the launch, as `(CUlaunchAttributeID, value)`: cluster
    /// dimensions, cooperative and priority.
    pub fn replayed(&self) -> Vec<(u32, [u8; VALUE_SIZE])> {
        let mut out = Vec::new();
        if let Some(c) = self.cluster {
            out.push((id::CLUSTER_DIMENSION, value_of(&c)));
        }
        if self.cooperative {
            out.push((id::COOPERATIVE, value_of(&[1])));
        }
        if let Some(p) = self.priority {
            out.push((id::PRIORITY, value_of(&[p as u32])));
        }
        out
    }

    /// Why a replay that launches every kernel plainly (the CPU's) computes something else than
    /// this launch did, if it does.
    pub fn needs_gpu(&self) -> Option<String> {
        match (self.cluster, self.cooperative) {
            (Some(c), _) => Some(format!("it launches in clusters of {}x{}x{} blocks", c[0], c[1], c[2])),
            (None, true) => Some("it is a cooperative launch (grid-wide synchronisation)".into()),
            (None, false) => None,
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

/// The launch attributes an archive's metadata holds, by op index (none where the metadata has no
/// such key). An error says what in the JSON is wrong.
pub fn of_archive(
    archive: &crate::archive::Archive,
) -> Result<HashMap<u32, LaunchAttrs>, crate::archive::MetadataError> {
    let Some(json) = archive.meta_value(META_KEY) else { return Ok(HashMap::new()) };
    let invalid = |reason| crate::archive::MetadataError::invalid(META_KEY, reason);
    let uses: Vec<LaunchAttrUse> = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
    let mut out = HashMap::new();
    for u in uses {
        let launch = (u.op as usize) < archive.op_count() && matches!(archive.op(u.op), crate::archive::Op::Launch(_));
        if !launch {
            return Err(invalid(format!("op {} is not a launch of this archive", u.op)));
        }
        out.insert(u.op, u.attributes);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_read_from_driver_values_and_round_trip_through_json() {
        let mut a = LaunchAttrs::default();
        a.set(id::CLUSTER_DIMENSION, &value_of(&[2, 1, 1]));
        a.set(id::PRIORITY, &value_of(&[(-1i32) as u32]));
        a.set(id::ACCESS_POLICY_WINDOW, &value_of(&[7]));
        assert_eq!(a.cluster, Some([2, 1, 1]));
        assert_eq!(a.priority, Some(-1));
        assert_eq!(a.other, ["access_policy_window=07000000000000000000000000000000"]);
        assert_eq!(
            a.replayed(),
            vec![(id::CLUSTER_DIMENSION, value_of(&[2, 1, 1])), (id::PRIORITY, value_of(&[u32::MAX]))]
        );
        assert!(a.needs_gpu().unwrap().contains("clusters of 2x1x1"));
        let uses = vec![LaunchAttrUse { op: 4, attributes: a }];
        let json = serde_json::to_string(&uses).unwrap();
        assert_eq!(serde_json::from_str::<Vec<LaunchAttrUse>>(&json).unwrap(), uses);
        // A 1x1x1 cluster is no cluster.
        let mut b = LaunchAttrs::default();
        b.set(id::CLUSTER_DIMENSION, &value_of(&[1, 1, 1]));
        assert!(b.is_empty() && b.replayed().is_empty() && b.needs_gpu().is_none());
        assert_eq!(serde_json::to_string(&LaunchAttrs::cooperative()).unwrap(), r#"{"cooperative":true}"#);
        assert!(LaunchAttrs::cooperative().needs_gpu().unwrap().contains("cooperative"));
        assert!(serde_json::from_str::<LaunchAttrs>(r#"{"clusters": [2, 1, 1]}"#).is_err());
    }
}
