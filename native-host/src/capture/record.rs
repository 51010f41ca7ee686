//! What a capture records: regions, kernels and a tree of ops that name regions, never addresses.

use std::collections::HashMap;

use shared::archive::{Condition, CopyOp, MemsetOp, RegionDecl, RegionId, Reloc};

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
}

impl Recording {
    pub fn new() -> Self {
        Recording {
            data: GraphData { regions: Vec::new(), kernels: Vec::new(), ops: Vec::new() },
            by_buffer: HashMap::new(),
            kernel_index: HashMap::new(),
            stack: vec![Vec::new()],
            live_scratch: Vec::new(),
        }
    }

    fn decl_of(b: &RawBuffer) -> RegionDecl {
        let mut decl = RegionDecl::new(b.name(), b.byte_len(), b.dtype());
        decl.scratch = b.is_scratch();
        decl.align = b.align();
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
        // The stack always holds the top level.
        if let Some(top) = self.stack.last_mut() {
            top.push(op);
        }
    }

    pub fn begin_body(&mut self) {
        self.stack.push(Vec::new());
    }

    pub fn end_body(&mut self) -> Result<Vec<GOp>> {
        if self.stack.len() < 2 {
            return usage("end of a while/if body that was never opened");
        }
        Ok(self.stack.pop().unwrap_or_default())
    }

    pub fn launch(&mut self, kernel: &Kernel, grid: [u32; 3], block: [u32; 3], shared: u32, packed: PackedParams) -> Result<()> {
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
    pub fn finish(mut self) -> Result<GraphData> {
        if self.stack.len() != 1 {
            return usage("the capture ended inside a while/if body");
        }
        for r in std::mem::take(&mut self.live_scratch) {
            self.push(GOp::Free(r));
        }
        self.data.ops = self.stack.pop().unwrap_or_default();
        Ok(self.data)
    }
}
