//! The zero-copy reader and the validator.
//!
//! [`Archive::open`] checks the whole structure once (header, section table, checksums of every
//! table, every index and every range) so that every accessor afterwards is infallible and cheap;
//! nothing is copied out of the byte slice until a caller decodes a blob. [`Archive::validate`]
//! additionally checks the blobs section's checksum and decompresses every blob.
//!
//! The reader's parts: `open.rs` the file's frame (header, section table, strings) and the blobs
//! checks, `checks.rs` the record checks opening runs, `views.rs` the views and blobs the
//! accessors hand out, `table.rs` a table section's records, `error.rs` the errors; this file
//! the [`Archive`] itself and its accessors.

use std::ops::Range;

use crate::archive::layout::{self, *};
use crate::archive::model::*;

mod checks;
mod error;
mod open;
mod table;
mod views;

#[path = "module_vars.rs"]
pub(super) mod module_vars;
pub use module_vars::ModuleVar;

pub(super) use self::error::err;
pub use self::error::{FormatError, MetadataError, UnknownName};
use self::table::Table;
pub use self::views::{Binding, Blob, Children, Effects, KernelView, LaunchView, ModuleView, Op, RegionView};
use crate::le::{u32_at, u64_at};

/// A validated archive over borrowed bytes.
#[derive(Clone, Debug)]
pub struct Archive<'a> {
    bytes: &'a [u8],
    version: (u16, u16),
    string_offsets: &'a [u8],
    string_data: &'a [u8],
    string_count: usize,
    modules: Table<'a>,
    cubins: Table<'a>,
    kernels: Table<'a>,
    params: Table<'a>,
    regions: Table<'a>,
    relocs: Table<'a>,
    ops: Table<'a>,
    bindings: Table<'a>,
    meta: Table<'a>,
    devices: Table<'a>,
    module_vars: Table<'a>,
    library: Table<'a>,
    effects: Table<'a>,
    types: Table<'a>,
    pub(super) spread: Table<'a>,
    param_bytes: &'a [u8],
    param_bytes_offset: u64,
    blobs: &'a [u8],
    blobs_offset: u64,
    blobs_checksum: [u8; CHECKSUM_LEN],
}

impl<'a> Archive<'a> {
    /// A region's typed layout (`recap infer-types`), when the archive has one.
    pub fn typed_layout(&self, region: RegionId) -> Option<Vec<Stretch>> {
        let t = &self.types;
        // Records are sorted by region (checked at open): the first of `region`'s by bisection.
        let (mut lo, mut hi) = (0, t.count);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if super::types::record(t.rec(mid)).0 < region {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let first = lo;
        let out: Vec<Stretch> = (first..t.count)
            .map(|i| super::types::record(t.rec(i)))
            .take_while(|r| r.0 == region)
            .map(|(_, code, len)| Stretch { len, ty: ElemType::from_code(code).unwrap_or(ElemType::Untyped) })
            .collect();
        (!out.is_empty()).then_some(out)
    }

    /// Whether any region has a typed layout.
    pub fn has_typed_layouts(&self) -> bool {
        self.types.count > 0
    }

    /// The whole archive's bytes, as [`Archive::open`] was given them.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// `(major, minor)` of the file's format.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// Total size of the archive in bytes.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn string(&self, id: StrId) -> &'a str {
        if id as usize >= self.string_count {
            return "";
        }
        let a = u32_at(self.string_offsets, id as usize * 4) as usize;
        let b = u32_at(self.string_offsets, id as usize * 4 + 4) as usize;
        // Checked to be UTF-8 at open.
        std::str::from_utf8(&self.string_data[a..b]).unwrap_or("")
    }

    pub fn module_count(&self) -> usize {
        self.modules.count
    }

    pub fn module(&self, id: ModuleId) -> ModuleView<'a> {
        let t = &self.modules;
        let i = id as usize;
        let r = t.rec(i);
        let first = u32_at(r, 4) as usize;
        let n = u32_at(r, 8) as usize;
        let cubins = (first..first + n)
            .map(|c| (u32_at(self.cubins.rec(c), 4), self.check_blob(&self.cubins, c, 8).expect("checked at open")))
            .collect();
        ModuleView {
            id,
            name: self.string(u32_at(r, 0)),
            ptx: self.check_blob(t, i, 16).expect("checked at open"),
            cubins,
        }
    }

    pub fn modules(&self) -> impl ExactSizeIterator<Item = ModuleView<'a>> + '_ {
        (0..self.modules.count as u32).map(|i| self.module(i))
    }

    pub fn kernel_count(&self) -> usize {
        self.kernels.count
    }

    pub fn kernel(&self, id: KernelId) -> KernelView<'a> {
        let r = self.kernels.rec(id as usize);
        let first = u32_at(r, 8) as usize;
        let n = u32_at(r, 12) as usize;
        let params = (first..first + n)
            .map(|p| {
                let pr = self.params.rec(p);
                ParamDecl {
                    name: self.string(u32_at(pr, 0)).to_owned(),
                    offset: u32_at(pr, 4),
                    size: u32_at(pr, 8),
                    align: u32_at(pr, 12),
                    kind: if u32_at(pr, 16) == 1 { ParamKind::Pointer } else { ParamKind::Value },
                }
            })
            .collect();
        KernelView { id, module: u32_at(r, 0), name: self.string(u32_at(r, 4)), params }
    }

    pub fn kernels(&self) -> impl ExactSizeIterator<Item = KernelView<'a>> + '_ {
        (0..self.kernels.count as u32).map(|i| self.kernel(i))
    }

    pub fn region_count(&self) -> usize {
        self.regions.count
    }

    pub fn region(&self, id: RegionId) -> RegionView<'a> {
        let t = &self.regions;
        let i = id as usize;
        let r = t.rec(i);
        let flags = u32_at(r, 8);
        let rank = u32_at(r, 24) as usize;
        let tolerance = (flags & REGION_HAS_EXPECTED != 0).then(|| {
            let (a, b) = (f64::from_bits(u64_at(r, 136)), f64::from_bits(u64_at(r, 144)));
            match u32_at(r, 128) {
                2 => Tolerance::Close { rtol: a, atol: b },
                3 => Tolerance::MismatchFraction { max_fraction: a },
                _ => Tolerance::Exact,
            }
        });
        RegionView {
            id,
            name: self.string(u32_at(r, 0)),
            size: u64_at(r, 16),
            align: u32_at(r, 12),
            dtype: DType::from_code(u32_at(r, 4)).unwrap_or(DType::Bytes),
            shape: (0..rank).map(|d| u64_at(r, 32 + d * 8)).collect(),
            scratch: flags & REGION_SCRATCH != 0,
            device: u32_at(r, REGION_DEVICE),
            initial: (flags & REGION_HAS_INITIAL != 0).then(|| self.check_blob(t, i, 64).expect("checked at open")),
            expected: (flags & REGION_HAS_EXPECTED != 0).then(|| self.check_blob(t, i, 96).expect("checked at open")),
            tolerance,
        }
    }

    pub fn regions(&self) -> impl ExactSizeIterator<Item = RegionView<'a>> + '_ {
        (0..self.regions.count as u32).map(|i| self.region(i))
    }

    pub fn op_count(&self) -> usize {
        self.ops.count
    }

    /// The logical device op `id` runs on.
    pub fn op_device(&self, id: OpId) -> DeviceId {
        u32_at(self.ops.rec(id as usize), OP_DEVICE)
    }

    /// Logical devices: those of the `devices` section, or the single device 0 of an archive
    /// without one.
    pub fn device_count(&self) -> u32 {
        self.devices.count.max(1) as u32
    }

    /// The declared devices (empty for a one-device archive without a `devices` section).
    pub fn devices(&self) -> impl ExactSizeIterator<Item = DeviceDecl> + '_ {
        (0..self.devices.count).map(|i| {
            let r = self.devices.rec(i);
            DeviceDecl { name: self.string(u32_at(r, 0)).to_string(), sm: u32_at(r, 4) }
        })
    }

    /// A short name for op `id` that a person recognises: `launch saxpy`, `copy a -> b`, ...
    pub fn op_label(&self, id: OpId) -> String {
        let region = |r: RegionId| self.region(r).name;
        match self.op(id) {
            Op::Launch(l) => format!("launch {}", self.kernel(l.kernel).name),
            Op::Copy(c) => format!("copy {} -> {}", region(c.src), region(c.dst)),
            Op::Memset(m) => format!("memset {}", region(m.region)),
            Op::Alloc(r) => format!("alloc {}", region(r)),
            Op::Free(r) => format!("free {}", region(r)),
            Op::While { cond, .. } => format!("while {}[{}]", region(cond.region), cond.offset),
            Op::If { cond, .. } => format!("if {}[{}]", region(cond.region), cond.offset),
            Op::Marker(name) => format!("marker {name}"),
            Op::Signal(e) => format!("signal event {e}"),
            Op::Wait(e) => format!("wait event {e}"),
            Op::Library(l) => {
                let names: Vec<&str> = l.operands().unwrap_or_default().iter().map(|o| region(o.at.region)).collect();
                format!("{} {}", l.name(), names.join(", "))
            }
        }
    }

    pub fn op(&self, id: OpId) -> Op<'a> {
        let r = self.ops.rec(id as usize);
        let cond = || Condition { region: u32_at(r, 4), offset: u64_at(r, 16), max_iterations: u32_at(r, 12) };
        match u32_at(r, 0) {
            layout::op::LAUNCH => {
                let len = u32_at(r, 36) as usize;
                let off = u64_at(r, 40) as usize;
                let first = u32_at(r, 48);
                Op::Launch(LaunchView {
                    kernel: u32_at(r, 4),
                    grid: [u32_at(r, 8), u32_at(r, 12), u32_at(r, 16)],
                    block: [u32_at(r, 20), u32_at(r, 24), u32_at(r, 28)],
                    shared_bytes: u32_at(r, 32),
                    params: &self.param_bytes[off..off + len],
                    relocs: first..first + u32_at(r, 52),
                })
            }
            layout::op::COPY => Op::Copy(CopyOp {
                src: u32_at(r, 4),
                dst: u32_at(r, 8),
                src_offset: u64_at(r, 16),
                dst_offset: u64_at(r, 24),
                len: u64_at(r, 32),
            }),
            layout::op::MEMSET => Op::Memset(MemsetOp {
                region: u32_at(r, 4),
                width: u32_at(r, 8),
                offset: u64_at(r, 16),
                len: u64_at(r, 24),
                pattern: u64_at(r, 32),
            }),
            layout::op::ALLOC => Op::Alloc(u32_at(r, 4)),
            layout::op::FREE => Op::Free(u32_at(r, 4)),
            layout::op::WHILE => Op::While { cond: cond(), body_len: u32_at(r, 8) },
            layout::op::IF => Op::If { cond: cond(), body_len: u32_at(r, 8) },
            layout::op::SIGNAL => Op::Signal(u32_at(r, 4)),
            layout::op::WAIT => Op::Wait(u32_at(r, 4)),
            layout::op::LIBRARY => {
                let rec = self.library.rec(u32_at(r, 4) as usize);
                Op::Library(crate::archive::LibraryOp::decode(rec).expect("checked at open"))
            }
            _ => Op::Marker(self.string(u32_at(r, 4))),
        }
    }

    /// All ops in stored (pre-order) order, bodies included.
    pub fn ops(&self) -> impl ExactSizeIterator<Item = Op<'a>> + '_ {
        (0..self.ops.count as u32).map(|i| self.op(i))
    }

    /// The ids of the ops directly inside `range` (a body, or `0..op_count` for the top level),
    /// skipping over nested bodies.
    pub fn children(&self, range: Range<u32>) -> Children<'_, 'a> {
        Children { archive: self, next: range.start, end: range.end }
    }

    /// The top-level ops.
    pub fn top_level(&self) -> Children<'_, 'a> {
        self.children(0..self.ops.count as u32)
    }

    /// The range of op ids forming the body of the while/if at `id` (empty for other ops).
    pub fn body(&self, id: OpId) -> Range<u32> {
        id + 1..id + 1 + self.op(id).body_len()
    }

    pub fn reloc(&self, index: u32) -> Reloc {
        let r = self.relocs.rec(index as usize);
        Reloc { offset: u64_at(r, 8), target: u32_at(r, 16), target_offset: u64_at(r, 24) }
    }

    /// Relocations of one launch (the `relocs` range of its [`LaunchView`]).
    pub fn relocs(&self, range: Range<u32>) -> impl Iterator<Item = Reloc> + '_ {
        range.map(|i| self.reloc(i))
    }

    /// Relocations inside region contents: `(region holding the pointer, reloc)`.
    pub fn region_relocs(&self) -> impl Iterator<Item = (RegionId, Reloc)> + '_ {
        (0..self.relocs.count as u32)
            .filter(|&i| u32_at(self.relocs.rec(i as usize), 0) == RELOC_OWNER_REGION)
            .map(|i| (u32_at(self.relocs.rec(i as usize), 4), self.reloc(i)))
    }

    /// Recorded effects, one item per launch that has them, in op order.
    pub fn effects(&self) -> impl Iterator<Item = Effects<'a>> + '_ {
        let e = &self.effects;
        let mut i = 0usize;
        std::iter::from_fn(move || {
            if i >= e.count {
                return None;
            }
            let op = u32_at(e.rec(i), 0);
            let mut inputs = [0u8; crate::effects::INPUTS_HASH_LEN];
            inputs.copy_from_slice(&e.rec(i)[16..32]);
            let mut writes = Vec::new();
            while i < e.count && u32_at(e.rec(i), 0) == op {
                let region = u32_at(e.rec(i), 4);
                if region != EFFECT_NO_REGION {
                    let blob = self.check_blob(e, i, 32).expect("checked at open");
                    writes.push((region, u64_at(e.rec(i), 8), blob));
                }
                i += 1;
            }
            Some(Effects { op, inputs, writes })
        })
    }

    pub fn binding_count(&self) -> usize {
        self.bindings.count
    }

    pub fn bindings(&self) -> impl ExactSizeIterator<Item = Binding<'a>> + '_ {
        (0..self.bindings.count).map(|i| {
            let r = self.bindings.rec(i);
            Binding {
                name: self.string(u32_at(r, 0)),
                region: u32_at(r, 4),
                direction: Direction::from_code(u32_at(r, 8)).unwrap_or(Direction::InOut),
            }
        })
    }

    pub fn binding(&self, name: &str) -> Option<Binding<'a>> {
        self.bindings().find(|b| b.name == name)
    }

    /// Free-form metadata pairs.
    pub fn meta(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + '_ {
        (0..self.meta.count).map(|i| {
            let r = self.meta.rec(i);
            (self.string(u32_at(r, 0)), self.string(u32_at(r, 4)))
        })
    }

    pub fn meta_value(&self, key: &str) -> Option<&'a str> {
        self.meta().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The value of metadata key `key` that `why` needs (a sentence naming what asks for it).
    pub fn required_meta(&self, key: &'static str, why: &'static str) -> Result<&'a str, MetadataError> {
        self.meta_value(key).ok_or(MetadataError::Missing { key, why })
    }

    /// Looks a kernel up by entry name.
    pub fn kernel_by_name(&self, name: &str) -> Option<KernelView<'a>> {
        self.kernels().find(|k| k.name == name)
    }

    /// Looks a region up by name.
    pub fn region_by_name(&self, name: &str) -> Option<RegionView<'a>> {
        self.regions().find(|r| r.name == name)
    }

    /// The region a binding or region name names (a binding first: names people chose for the
    /// data).
    pub fn region_named(&self, name: &str) -> Result<RegionId, UnknownName> {
        if let Some(b) = self.binding(name) {
            return Ok(b.region);
        }
        if let Some(r) = self.region_by_name(name) {
            return Ok(r.id);
        }
        let list = |names: Vec<&str>| match names.len() {
            0 => "none".to_string(),
            n if n > 12 => format!("{}, ... ({n} in all)", names[..12].join(", ")),
            _ => names.join(", "),
        };
        Err(UnknownName {
            name: name.to_string(),
            bindings: list(self.bindings().map(|b| b.name).collect()),
            regions: list(self.regions().map(|r| r.name).collect()),
        })
    }

    /// Byte offset of the param-bytes section (for error messages of consumers).
    pub fn param_bytes_offset(&self) -> u64 {
        self.param_bytes_offset
    }
}
