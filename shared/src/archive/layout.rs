//! Byte layout of format v1: every constant `docs/FORMAT.md` describes, in one place.
//!
//! All integers are little-endian. Table sections start with `count: u32, record_size: u32`; a reader
//! accepts records larger than it knows (later minor versions append fields) and reads the prefix.

pub const MAGIC: [u8; 8] = *b"RECAP\0\x1a\n";
pub const MAJOR: u16 = 1;
/// The newest minor version this build writes. The writer stamps the oldest minor whose features
/// the file uses (`0` without a `devices`, `module-vars` or `library` section), so one-device
/// archives without module variables or library ops stay 1.0 byte for byte.
pub const MINOR: u16 = 3;
/// The minor version that added logical devices (the `devices` section, signal and wait ops).
pub const MINOR_DEVICES: u16 = 1;
/// The minor version that added module variables (the `module-vars` section).
pub const MINOR_MODULE_VARS: u16 = 2;
/// The minor version that added library ops (the `library` section and op kind 11).
pub const MINOR_LIBRARY: u16 = 3;

pub const HEADER_LEN: usize = 64;
pub const SECTION_ENTRY_LEN: usize = 48;
pub const TABLE_HEADER_LEN: usize = 8;
/// Bytes of blake3 kept as a section or header checksum.
pub const CHECKSUM_LEN: usize = 16;

/// Header field offsets.
pub mod header {
    pub const MAGIC: usize = 0;
    pub const MAJOR: usize = 8;
    pub const MINOR: usize = 10;
    pub const FLAGS: usize = 12;
    pub const TABLE_OFFSET: usize = 16;
    pub const SECTION_COUNT: usize = 24;
    pub const FILE_LEN: usize = 32;
    /// blake3 over header bytes `0..48` followed by the section table, first 16 bytes.
    pub const CHECKSUM: usize = 48;
}

/// Section table entry field offsets (entries are [`SECTION_ENTRY_LEN`] bytes).
pub mod entry {
    pub const KIND: usize = 0;
    pub const FLAGS: usize = 4;
    pub const OFFSET: usize = 8;
    pub const LEN: usize = 16;
    /// blake3 over the section's bytes, first 16 bytes.
    pub const CHECKSUM: usize = 24;
}

/// Section entry flag: a reader that does not know this kind must refuse the file.
pub const SECTION_REQUIRED: u32 = 1;

/// Section kinds of v1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SectionKind {
    Strings = 1,
    Modules = 2,
    Cubins = 3,
    Kernels = 4,
    Params = 5,
    Regions = 6,
    Relocs = 7,
    Ops = 8,
    ParamBytes = 9,
    Bindings = 10,
    Blobs = 11,
    Meta = 12,
    Devices = 13,
    /// Regions that are module-scope variables of a module (1.2).
    ModuleVars = 14,
    /// The library ops' records (1.3): what each op of kind `library` computes.
    Library = 15,
    /// Recorded effects of launches the CPU cannot run (`recap capture --record-effects`).
    Effects = 20,
    /// Each region's typed layout: the element type of each stretch of its bytes
    /// (`recap infer-types`, `shared::check::infer`).
    Types = 21,
    /// How far repeated runs of the captured range spread, per stretch (`recap capture
    /// --repeat-range`): a check judges those stretches no tighter.
    Spread = 22,
}

impl SectionKind {
    pub const ALL: [SectionKind; 18] = [
        SectionKind::Strings,
        SectionKind::Modules,
        SectionKind::Cubins,
        SectionKind::Kernels,
        SectionKind::Params,
        SectionKind::Regions,
        SectionKind::Relocs,
        SectionKind::Ops,
        SectionKind::ParamBytes,
        SectionKind::Bindings,
        SectionKind::Blobs,
        SectionKind::Meta,
        SectionKind::Devices,
        SectionKind::ModuleVars,
        SectionKind::Library,
        SectionKind::Effects,
        SectionKind::Types,
        SectionKind::Spread,
    ];

    pub fn from_code(code: u32) -> Option<SectionKind> {
        SectionKind::ALL.into_iter().find(|k| *k as u32 == code)
    }

    pub fn name(self) -> &'static str {
        match self {
            SectionKind::Strings => "strings",
            SectionKind::Modules => "modules",
            SectionKind::Cubins => "cubins",
            SectionKind::Kernels => "kernels",
            SectionKind::Params => "params",
            SectionKind::Regions => "regions",
            SectionKind::Relocs => "relocs",
            SectionKind::Ops => "ops",
            SectionKind::ParamBytes => "param-bytes",
            SectionKind::Bindings => "bindings",
            SectionKind::Blobs => "blobs",
            SectionKind::Meta => "meta",
            SectionKind::Devices => "devices",
            SectionKind::ModuleVars => "module-vars",
            SectionKind::Library => "library",
            SectionKind::Effects => "effects",
            SectionKind::Types => "types",
            SectionKind::Spread => "spread",
        }
    }

    /// Size of one record in v1 for table sections; `None` for byte sections.
    pub fn record_len(self) -> Option<usize> {
        match self {
            SectionKind::Strings | SectionKind::ParamBytes | SectionKind::Blobs => None,
            SectionKind::Modules => Some(MODULE_LEN),
            SectionKind::Cubins => Some(CUBIN_LEN),
            SectionKind::Kernels => Some(KERNEL_LEN),
            SectionKind::Params => Some(PARAM_LEN),
            SectionKind::Regions => Some(REGION_LEN),
            SectionKind::Relocs => Some(RELOC_LEN),
            SectionKind::Ops => Some(OP_LEN),
            SectionKind::Bindings => Some(BINDING_LEN),
            SectionKind::Meta => Some(META_LEN),
            SectionKind::Devices => Some(DEVICE_LEN),
            SectionKind::ModuleVars => Some(MODULE_VAR_LEN),
            SectionKind::Library => Some(super::library::LIBRARY_LEN),
            SectionKind::Effects => Some(EFFECT_LEN),
            SectionKind::Types => Some(TYPES_LEN),
            SectionKind::Spread => Some(SPREAD_LEN),
        }
    }

    /// Sections a v1 file must contain.
    pub fn mandatory(self) -> bool {
        !matches!(
            self,
            SectionKind::Cubins
                | SectionKind::Meta
                | SectionKind::Devices
                | SectionKind::ModuleVars
                | SectionKind::Library
                | SectionKind::Effects
                | SectionKind::Types
                | SectionKind::Spread
        )
    }

    /// Whether the writer marks the section `REQUIRED`: every mandatory section, `devices`,
    /// because a reader that ignored it would run a multi-device archive with wrong placement
    /// (and meet op kinds it does not know), and `module-vars`, because one that ignored it would
    /// run kernels over their variables' PTX initialisers instead of the captured contents, and
    /// `library`, which announces op kind 11 to readers that do not know it.
    pub fn required(self) -> bool {
        self.mandatory() || matches!(self, SectionKind::Devices | SectionKind::ModuleVars | SectionKind::Library)
    }
}

/// A reference to bytes in the blobs section: `offset, stored_len, raw_len: u64, codec: u32, reserved: u32`.
pub const BLOB_REF_LEN: usize = 32;
pub const CODEC_RAW: u32 = 0;
pub const CODEC_LZ4_FRAME: u32 = 1;
/// An lz4 frame never decodes to more than this many times its stored size (LZ4's limit is 255).
pub const LZ4_MAX_RATIO: u64 = 256;

/// `name: u32, cubin_first: u32, cubin_count: u32, reserved: u32, ptx: BlobRef`.
pub const MODULE_LEN: usize = 16 + BLOB_REF_LEN;
/// `module: u32, sm: u32, blob: BlobRef`.
pub const CUBIN_LEN: usize = 8 + BLOB_REF_LEN;
/// `module: u32, name: u32, param_first: u32, param_count: u32`.
pub const KERNEL_LEN: usize = 16;
/// `name: u32, offset: u32, size: u32, align: u32, kind: u32`.
pub const PARAM_LEN: usize = 20;
/// `name, dtype, flags, align: u32; size: u64; rank: u32, device: u32; shape: [u64; 4];
/// initial: BlobRef; expected: BlobRef; tolerance kind: u32, reserved: u32, a: f64, b: f64`.
pub const REGION_LEN: usize = 16 + 8 + 8 + 32 + BLOB_REF_LEN * 2 + 24;
pub const REGION_HAS_INITIAL: u32 = 1;
pub const REGION_HAS_EXPECTED: u32 = 2;
pub const REGION_SCRATCH: u32 = 4;
/// Offset of a region's logical device (a reserved zero in 1.0 files).
pub const REGION_DEVICE: usize = 28;
/// `owner_kind: u32 (0 region, 1 launch), owner: u32, offset: u64, target: u32, reserved: u32, target_offset: u64`.
pub const RELOC_LEN: usize = 32;
pub const RELOC_OWNER_REGION: u32 = 0;
pub const RELOC_OWNER_LAUNCH: u32 = 1;
/// Ops are fixed 64-byte records: `kind: u32` then the kind's fields (FORMAT.md lists them).
pub const OP_LEN: usize = 64;
/// Offset of an op's logical device: bytes 60..64 are unused by every 1.0 op kind.
pub const OP_DEVICE: usize = 60;
/// `name: u32, sm: u32, reserved: u64`.
pub const DEVICE_LEN: usize = 16;
/// `region: u32, module: u32, name: u32 (str), reserved: u32`: region `region` is the storage of
/// module `module`'s variable `name` on the region's device.
pub const MODULE_VAR_LEN: usize = 16;
/// `op: u32, region: u32, offset: u64, inputs: [u8; 16], bytes: BlobRef`: bytes a launch wrote at
/// `offset` of `region`, applied when its inputs hash to `inputs` (`shared::effects`).
pub const EFFECT_LEN: usize = 32 + BLOB_REF_LEN;
/// An effects record's `region` when the launch wrote nothing (its one record, with an empty blob).
pub const EFFECT_NO_REGION: u32 = u32::MAX;
/// `region: u32, type: u32, len: u64`: one stretch of a region's typed layout. A region's stretches
/// are consecutive records, in address order, covering it exactly; regions in ascending order.
pub const TYPES_LEN: usize = 16;
/// `spread` record: region u32, reserved u32, offset u64, len u64, ulps u64, abs f64, elements u64.
pub const SPREAD_LEN: usize = 48;
/// `name: u32, region: u32, direction: u32, reserved: u32`.
pub const BINDING_LEN: usize = 16;
/// `key: u32, value: u32` (both strings).
pub const META_LEN: usize = 8;

pub mod op {
    pub const LAUNCH: u32 = 1;
    pub const COPY: u32 = 2;
    pub const MEMSET: u32 = 3;
    pub const ALLOC: u32 = 4;
    pub const FREE: u32 = 5;
    pub const WHILE: u32 = 6;
    pub const IF: u32 = 7;
    pub const MARKER: u32 = 8;
    /// Since 1.1, with a `devices` section: records event `event @4` on the op's device.
    pub const SIGNAL: u32 = 9;
    /// Since 1.1, with a `devices` section: the op's device waits for the latest signal of `event @4`.
    pub const WAIT: u32 = 10;
    /// Since 1.3, with a `library` section: a library routine, `record @4` its index there.
    pub const LIBRARY: u32 = 11;
}

/// "No string" in optional string fields.
pub const NO_STRING: u32 = u32::MAX;

pub fn checksum(parts: &[&[u8]]) -> [u8; CHECKSUM_LEN] {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
    }
    let mut out = [0u8; CHECKSUM_LEN];
    out.copy_from_slice(&h.finalize().as_bytes()[..CHECKSUM_LEN]);
    out
}
