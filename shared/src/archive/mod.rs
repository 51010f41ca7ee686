//! The `.recap` archive: one file holding everything needed to replay captured GPU work.
//!
//! Format v1 is specified byte by byte in `docs/FORMAT.md`; [`layout`] holds its constants.
//! The design in one paragraph: bulk bytes (PTX, cubins, region contents) live in one `blobs`
//! section as independent lz4 frames, written first and streamed; everything else is small
//! fixed-size little-endian records in table sections written last, each with its own checksum,
//! so that opening validates all structure in one linear pass and then reads records in place.
//!
//! ```
//! use shared::archive::*;
//! let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
//! let x = w.add_region(RegionDecl::new("x", 16, DType::F32)).unwrap();
//! w.memset(MemsetOp { region: x, offset: 0, len: 16, width: 4, pattern: 0x3f80_0000 }).unwrap();
//! let bytes = w.finish().unwrap().into_inner();
//! let a = Archive::open(&bytes).unwrap();
//! assert_eq!(a.op_count(), 1);
//! assert_eq!(a.region(x).name, "x");
//! ```

mod bounded;
pub mod declared;
pub mod layout;
mod library;
mod model;
mod reader;
mod reseal;
mod rules;
mod spread;
mod types;
mod writer;

pub use bounded::{scan, validate_reader, validate_scanned, ArchiveCounts, Scanned};
pub use library::{At, LibraryOp, Operand};
pub use model::*;
pub use reader::ModuleVar;
pub use reader::{
    Archive, Binding, Blob, Children, Effects, FormatError, KernelView, LaunchView, MetadataError, ModuleView, Op,
    RegionView, UnknownName,
};
pub use reseal::reseal;
pub use rules::MAX_NESTING;
pub use spread::{with_recorded_spread, RecordedSpread, SpreadError};
pub use types::{layout_line, run_lengths, with_typed_layouts, TypesError};
pub use writer::{ArchiveWriter, WriteError};
