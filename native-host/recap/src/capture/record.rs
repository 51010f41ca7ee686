//! What a capture records: regions, kernels and a tree of ops that name regions, never addresses.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use shared::archive::{Condition, CopyOp, DeviceId, MemsetOp, RegionDecl, RegionId, Reloc};

use super::args::PackedParams;
use super::device::{Kernel, RawBuffer};
use super::{usage, Result};

/// One region of a graph: a live buffer of the device, or scratch that exists while the graph runs.
pub(crate) struct GraphRegion {
    pub decl: RegionDecl,
    /// `None` for scratch.
    pub buffer: Option<RawBuffer>,
}

/// A recorded op. Mirrors the archive's ops, with while/if bodies as nested lists.
pub(crate) enum GOp {
    Launch { kernel: usize, grid: [u32; 3], block: [u32; 3], shared: u32, params: Vec<u8>, relocs: Vec<Reloc> },
    Copy(CopyOp),
    Memset(MemsetOp),
    Alloc(RegionId),
    Free(RegionId),
    While { cond: Condition, body: Vec<GOp> },
    If { cond: Condition, body: Vec<GOp> },
}

/// A complete recording, as a graph replays or saves it.
pub(crate) struct GraphData {
    pub regions: Vec<GraphRegion>,
    pub kernels: Vec<Kernel>,
    pub ops: Vec<GOp>,
    /// The device of each top-level op (a body runs on its owner's); empty when there is one.
    pub devices: Vec<DeviceId>,
}

impl GraphData {
    pub fn op_count(&self) -> usize {
        fn count(ops: &[GOp]) -> usize {
            ops.iter()
                .map(|op| match op {
                    GOp::While { body, .. } | GOp::If { body, .. } => 1 + count(body),
                    _ => 1,
                })
                .sum()
        }
        count(&self.ops)
    }
}

/// An open capture.
pub(crate) struct Recording {
    data: GraphData,
    by_buffer: HashMap<u64, RegionId>,
    kernel_index: HashMap<(u64, String), usize>,
    /// Open op lists: the top level, then one per open while/if body.
    stack: Vec<Vec<GOp>>,
    live_scratch: Vec<RegionId>,
    /// In a capture of several devices: the counter all of them number their top-level ops
    /// from, so that the merged graph keeps the order the program issued them in.
    sequence: Option<Arc<AtomicU64>>,
    /// The number of each top-level op.
    numbers: Vec<u64>,
    /// Numbers taken when a top-level while/if body opened, for the op once it closes.
    reserved: Vec<u64>,
}

impl Recording {
    pub fn new() -> Self {
        Recording {
            data: GraphData { regions: Vec::new(), kernels: Vec::new(), ops: Vec::new(), devices: Vec::new() },
            by_buffer: HashMap::new(),
            kernel_index: HashMap::new(),
            stack: vec![Vec::new()],
            live_scratch: Vec::new(),
            sequence: None,
            numbers: Vec::new(),
            reserved: Vec::new(),
        }
    }

    /// One device's part of a capture of several, numbering its ops from `sequence`.
    pub fn in_group(sequence: Arc<AtomicU64>) -> Self {
        Recording { sequence: Some(sequence), ..Recording::new() }
    }

    fn next_number(&self) -> u64 {
        self.sequence.as_ref().map_or(0, |s| s.fetch_add(1, Ordering::Relaxed))
    }

    fn decl_of(b: &RawBuffer) -> RegionDecl {
        let mut decl = RegionDecl::new(b.name(), b.byte_len(), b.dtype());
        decl.scratch = b.is_scratch();
        decl.align = b.align();
        decl.shape = b.shape();
        decl
    }

    /// The region of a live buffer, added on first use.
    pub fn region(&mut self, b: &RawBuffer) -> Result<RegionId> {
        if let Some(&r) = self.by_buffer.get(&b.id()) {
            if b.is_scratch() && !self.live_scratch.contains(&r) {
                return usage(format!("scratch buffer {} is used after it was freed", b.name()));
            }
            return Ok(r);
        }
        if b.is_scratch() {
            return usage(format!("scratch buffer {} belongs to another capture", b.name()));
        }
        let id = self.data.regions.len() as RegionId;
        self.data.regions.push(GraphRegion { decl: Self::decl_of(b), buffer: Some(b.clone()) });
        self.by_buffer.insert(b.id(), id);
        Ok(id)
    }

    pub fn alloc_scratch(&mut self, b: &RawBuffer) -> Result<()> {
        let id = self.data.regions.len() as RegionId;
        self.data.regions.push(GraphRegion { decl: Self::decl_of(b), buffer: None });
        self.by_buffer.insert(b.id(), id);
        self.live_scratch.push(id);
        self.push(GOp::Alloc(id));
        Ok(())
    }

    pub fn free_scratch(&mut self, b: &RawBuffer) -> Result<()> {
        let Some(&r) = self.by_buffer.get(&b.id()) else {
            return usage(format!("buffer {} was not allocated inside this capture; drop it instead", b.name()));
        };
        if !b.is_scratch() {
            return usage(format!("buffer {} was not allocated inside this capture; drop it instead", b.name()));
        }
        if !self.live_scratch.contains(&r) {
            return usage(format!("scratch buffer {} is freed twice", b.name()));
        }
        self.live_scratch.retain(|x| *x != r);
        self.push(GOp::Free(r));
        Ok(())
    }

    pub fn push(&mut self, op: GOp) {
        if self.stack.len() == 1 {
            // A while/if is numbered where its body began: that is where the program issued it.
            let number = match op {
                GOp::While { .. } | GOp::If { .. } => self.reserved.pop().unwrap_or_else(|| self.next_number()),
                _ => self.next_number(),
            };
            self.numbers.push(number);
        }
        // The stack always holds the top level.
        if let Some(top) = self.stack.last_mut() {
            top.push(op);
        }
    }

    pub fn begin_body(&mut self) {
        if self.stack.len() == 1 {
            let number = self.next_number();
            self.reserved.push(number);
        }
        self.stack.push(Vec::new());
    }

    pub fn end_body(&mut self) -> Result<Vec<GOp>> {
        if self.stack.len() < 2 {
            return usage("end of a while/if body that was never opened");
        }
        Ok(self.stack.pop().unwrap_or_default())
    }

    pub fn launch(
        &mut self,
        kernel: &Kernel,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        packed: PackedParams,
    ) -> Result<()> {
        let key = (kernel.module.id, kernel.entry.clone());
        let k = match self.kernel_index.get(&key) {
            Some(&k) => k,
            None => {
                self.data.kernels.push(kernel.clone());
                self.kernel_index.insert(key, self.data.kernels.len() - 1);
                self.data.kernels.len() - 1
            }
        };
        let mut relocs = Vec::with_capacity(packed.pointers.len());
        for p in &packed.pointers {
            let target = self.region(&p.target)?;
            relocs.push(Reloc { offset: p.offset, target, target_offset: p.target_offset });
        }
        self.push(GOp::Launch { kernel: k, grid, block, shared, params: packed.bytes, relocs });
        Ok(())
    }

    /// Closes the recording; scratch still live is freed at the end of every replay.
    pub fn finish(self) -> Result<GraphData> {
        self.finish_numbered().map(|(data, _)| data)
    }

    /// As [`Recording::finish`], with the number of each top-level op (see [`merge`]).
    pub fn finish_numbered(mut self) -> Result<(GraphData, Vec<u64>)> {
        if self.stack.len() != 1 {
            return usage("the capture ended inside a while/if body");
        }
        for r in std::mem::take(&mut self.live_scratch) {
            self.push(GOp::Free(r));
        }
        self.data.ops = self.stack.pop().unwrap_or_default();
        Ok((self.data, self.numbers))
    }
}

/// Merges the parts of a capture of several devices (`parts[d]` recorded on device `d`) into one
/// graph: regions shared through copies between devices become one region, on the device whose
/// buffer it is (`device_of`), and the top-level ops interleave in the order they were issued.
pub(crate) fn merge(
    parts: Vec<(GraphData, Vec<u64>)>,
    device_of: impl Fn(&RawBuffer) -> Result<DeviceId>,
) -> Result<GraphData> {
    let mut merged = GraphData { regions: Vec::new(), kernels: Vec::new(), ops: Vec::new(), devices: Vec::new() };
    let mut by_buffer: HashMap<u64, RegionId> = HashMap::new();
    let mut top: Vec<(u64, DeviceId, GOp)> = Vec::new();
    for (device, (data, numbers)) in parts.into_iter().enumerate() {
        let mut region_map = Vec::with_capacity(data.regions.len());
        for r in data.regions {
            let id = match &r.buffer {
                Some(b) => match by_buffer.get(&b.id()) {
                    Some(&id) => id,
                    None => {
                        let id = merged.regions.len() as RegionId;
                        by_buffer.insert(b.id(), id);
                        let decl = RegionDecl { device: device_of(b)?, ..r.decl };
                        merged.regions.push(GraphRegion { decl, buffer: r.buffer });
                        id
                    }
                },
                None => {
                    // Scratch belongs to the device that allocated it.
                    merged
                        .regions
                        .push(GraphRegion { decl: RegionDecl { device: device as DeviceId, ..r.decl }, buffer: None });
                    merged.regions.len() as RegionId - 1
                }
            };
            region_map.push(id);
        }
        let kernel_base = merged.kernels.len();
        merged.kernels.extend(data.kernels);
        for (number, mut op) in numbers.into_iter().zip(data.ops) {
            renumber(&mut op, &region_map, kernel_base);
            top.push((number, device as DeviceId, op));
        }
    }
    top.sort_by_key(|t| t.0);
    for (_, device, op) in top {
        merged.devices.push(device);
        merged.ops.push(op);
    }
    Ok(merged)
}

/// Points an op (and its body) at the merged graph's regions and kernels.
fn renumber(op: &mut GOp, regions: &[RegionId], kernel_base: usize) {
    let r = |id: &mut RegionId| *id = regions[*id as usize];
    match op {
        GOp::Launch { kernel, relocs, .. } => {
            *kernel += kernel_base;
            relocs.iter_mut().for_each(|x| r(&mut x.target));
        }
        GOp::Copy(c) => {
            r(&mut c.src);
            r(&mut c.dst);
        }
        GOp::Memset(m) => r(&mut m.region),
        GOp::Alloc(id) | GOp::Free(id) => r(id),
        GOp::While { cond, body } | GOp::If { cond, body } => {
            r(&mut cond.region);
            body.iter_mut().for_each(|op| renumber(op, regions, kernel_base));
        }
    }
}
