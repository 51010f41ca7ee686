//! Tensor maps (TMA descriptors) a captured program passed to its kernels, kept with the archive so
//! a replay can make them again against its own memory.
//!
//! A `CUtensorMap` is 128 opaque bytes that `cuTensorMapEncodeTiled` or `cuTensorMapEncodeIm2col`
//! fill from a global address and a shape; a kernel takes it as a `.param .align 64 .b8 [128]`
//! parameter. The bytes embed the address in a form only the driver knows, so a relocation cannot
//! patch them. `recap capture` keeps instead the arguments the program encoded the map with, the
//! region and offset its address fell in, and the launch and parameter offset that carried it
//! (the archive's `capture.tensor_maps` metadata, a JSON list of [`TensorMapUse`]); the parameter's
//! bytes in the archive are zeros. A CUDA replay encodes the map again with the region's replay
//! address before the launch; the CPU replay refuses TMA instructions (docs/PTX.md).

use serde::{Deserialize, Serialize};

/// The metadata key holding the list of [`TensorMapUse`].
pub const META_KEY: &str = "capture.tensor_maps";

/// The size of a `CUtensorMap`.
pub const SIZE: usize = 128;

/// How the map was encoded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Layout {
    /// `cuTensorMapEncodeTiled`: the box each access moves.
    Tiled { box_dim: Vec<u32> },
    /// `cuTensorMapEncodeIm2col`.
    Im2col { lower_corner: Vec<i32>, upper_corner: Vec<i32>, channels_per_pixel: u32, pixels_per_column: u32 },
}

/// Every argument of the encode call except the map and the global address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Encode {
    /// `CUtensorMapDataType`.
    pub dtype: u32,
    pub rank: u32,
    pub global_dim: Vec<u64>,
    /// `rank - 1` strides in bytes (the innermost dimension is dense).
    pub global_strides: Vec<u64>,
    pub element_strides: Vec<u32>,
    pub interleave: u32,
    pub swizzle: u32,
    pub l2_promotion: u32,
    pub oob_fill: u32,
    #[serde(flatten)]
    pub layout: Layout,
}

impl Encode {
    /// Whether the lengths agree with the rank (1 to 5), as the driver requires; a replay checks
    /// this before handing the arrays to the driver.
    pub fn is_consistent(&self) -> bool {
        let r = self.rank as usize;
        let layout_ok = match &self.layout {
            Layout::Tiled { box_dim } => box_dim.len() == r,
            Layout::Im2col { lower_corner, upper_corner, .. } => {
                r >= 3 && lower_corner.len() == r - 2 && upper_corner.len() == r - 2
            }
        };
        (1..=5).contains(&r)
            && self.global_dim.len() == r
            && self.global_strides.len() == r - 1
            && self.element_strides.len() == r
            && layout_ok
    }
}

/// One launch parameter that is a tensor map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorMapUse {
    /// The launch's op index.
    pub op: u32,
    /// Where the 128 bytes start in the launch's parameter buffer.
    pub param_offset: u32,
    /// The region index and offset of the map's global address.
    pub region: u32,
    pub offset: u64,
    pub encode: Encode,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_reads_back_as_written_and_its_lengths_are_checked() {
        let encode = Encode {
            dtype: 7,
            rank: 2,
            global_dim: vec![256, 128],
            global_strides: vec![1024],
            element_strides: vec![1, 1],
            interleave: 0,
            swizzle: 3,
            l2_promotion: 2,
            oob_fill: 0,
            layout: Layout::Tiled { box_dim: vec![64, 64] },
        };
        let uses = vec![TensorMapUse { op: 3, param_offset: 0, region: 1, offset: 512, encode: encode.clone() }];
        let json = serde_json::to_string(&uses).unwrap();
        assert!(json.contains(r#""kind":"tiled""#), "{json}");
        assert_eq!(serde_json::from_str::<Vec<TensorMapUse>>(&json).unwrap(), uses);
        assert!(encode.is_consistent());
        assert!(!Encode { global_strides: vec![], ..encode.clone() }.is_consistent());
        assert!(!Encode { rank: 6, ..encode }.is_consistent());
        assert!(serde_json::from_str::<Vec<TensorMapUse>>(r#"[{"op": 1}]"#).is_err());
    }
}
