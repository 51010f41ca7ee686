//! The APIC format versions Warp's releases write, and what differs between them.
//!
//! Each Warp release writes one format version and reads only that one (1.19 refuses anything but
//! 18), so a capture saved by an older Warp cannot be loaded by a newer one. recap reads every
//! version a release has written, into the one [`Capture`](super::Capture) model:
//!
//! | format | written by | differs from the next |
//! |--------|------------|-----------------------|
//! | 3  | Warp 1.13 | launch arguments as 88-byte records, an array one as (region, offset, shape, strides), a scalar inline; no IF/WHILE |
//! | 10 | Warp 1.14 | launch records of 76 bytes (no grid stride, no cluster size); no fills or library routines |
//! | 14 | Warp 1.15 | no reductions, BVH or hash grid updates |
//! | 15 | Warp 1.16 and 1.17 | launch shapes are signed |
//! | 16 | Warp 1.18 | metadata without the producer's version, module digests, sources or compile recipes |
//! | 18 | Warp 1.19 | |
//!
//! The header, the section table, the memory section and every record not named above are the
//! same in all of them. What a format lacks (IF/WHILE before 10, fills before 14) its captures
//! lack, so their archives lack it too.

/// One APIC format version and the Warp releases that write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    pub version: u32,
    /// The releases that write it, for messages and the producer's name (`1.16.0 or 1.17.0`).
    pub releases: &'static str,
}

/// Every format a Warp release has written, oldest first.
pub const FORMATS: [Format; 6] = [
    Format { version: 3, releases: "1.13.0" },
    Format { version: 10, releases: "1.14.0" },
    Format { version: 14, releases: "1.15.0" },
    Format { version: 15, releases: "1.16.0 or 1.17.0" },
    Format { version: 16, releases: "1.18.0" },
    Format { version: 18, releases: "1.19.0" },
];

/// A version no Warp release writes: one line naming it and every version recap reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("APIC format version {version}, which no Warp release recap knows writes; recap reads versions {}", known())]
pub struct UnknownFormat {
    pub version: u32,
}

/// `3 (Warp 1.13), 10 (Warp 1.14), ...`.
fn known() -> String {
    let known: Vec<String> =
        FORMATS.iter().map(|f| format!("{} (Warp {})", f.version, f.releases.replace(".0", ""))).collect();
    known.join(", ")
}

/// How a format lays out a kernel launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LaunchLayout {
    /// Format 3: one 88-byte record per argument, no argument bytes of their own.
    ArgumentRecords,
    /// Formats 10 to 18: each argument's bytes as the kernel takes them, with relocations; the
    /// fixed part is 76 bytes before format 14 (no `grid_stride`, no `cluster_dim`), 80 from it.
    Blobs { fixed: usize },
}

impl Format {
    /// The format of `version`.
    pub fn of(version: u32) -> Result<Format, UnknownFormat> {
        FORMATS.iter().copied().find(|f| f.version == version).ok_or(UnknownFormat { version })
    }

    /// Format 18 added the producer's version, module digests, generated sources and compile
    /// recipes to the metadata, and widened a handle location to 28 bytes (20 before).
    pub(super) fn rich_metadata(self) -> bool {
        self.version >= 18
    }

    pub(super) fn launch(self) -> LaunchLayout {
        match self.version {
            3 => LaunchLayout::ArgumentRecords,
            10 => LaunchLayout::Blobs { fixed: 76 },
            _ => LaunchLayout::Blobs { fixed: 80 },
        }
    }

    /// Before format 16 a launch's shape was `i32`s: Warp refuses a word past `i32::MAX` there.
    pub(super) fn signed_shape(self) -> bool {
        self.version < 16
    }

    /// Whether the format has op type `opcode` at all (IF/WHILE came with 10, fills, scans and
    /// sorts with 14, reductions, BVH and hash grid updates with 15).
    pub(super) fn has_op(self, opcode: u32) -> bool {
        match opcode {
            1 | 2 | 4 | 5 | 6 => true,
            7 | 8 => self.version >= 10,
            9..=15 => self.version >= 14,
            16..=19 => self.version >= 15,
            _ => false,
        }
    }

    /// The name a capture's producer goes by when the file does not say it (before format 18).
    pub(super) fn producer(self) -> String {
        self.releases.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_version_names_every_version_read() {
        let e = Format::of(17).unwrap_err();
        assert_eq!(
            e.to_string(),
            "APIC format version 17, which no Warp release recap knows writes; recap reads versions 3 (Warp 1.13), \
             10 (Warp 1.14), 14 (Warp 1.15), 15 (Warp 1.16 or 1.17), 16 (Warp 1.18), 18 (Warp 1.19)"
        );
        for f in FORMATS {
            assert_eq!(Format::of(f.version), Ok(f));
        }
    }

    #[test]
    fn ops_arrive_with_their_formats() {
        let v = |n| Format::of(n).unwrap();
        assert!(v(3).has_op(1) && !v(3).has_op(7) && !v(3).has_op(3));
        assert!(v(10).has_op(8) && !v(10).has_op(10));
        assert!(v(14).has_op(10) && !v(14).has_op(16));
        assert!(v(15).has_op(16) && v(18).has_op(19) && !v(18).has_op(20));
    }
}
