//! Archives described as plain data: write one with the real writer, then check that the reader hands
//! back exactly what was described. Used by the round-trip property tests and the golden files.

use std::io::Cursor;

use shared::archive::layout::{self, SectionKind, CHECKSUM_LEN, HEADER_LEN, SECTION_ENTRY_LEN};
use shared::archive::*;

/// One op, with while/if bodies nested.
#[derive(Clone, Debug)]
pub enum OpSpec {
    Launch(LaunchDecl),
    Copy(CopyOp),
    Memset(MemsetOp),
    Alloc(RegionId),
    Free(RegionId),
    While(Condition, Vec<OpSpec>),
    If(Condition, Vec<OpSpec>),
    Marker(String),
}

#[derive(Clone, Debug)]
pub struct RegionSpec {
    pub decl: RegionDecl,
    pub initial: Option<Vec<u8>>,
    pub expected: Option<(Vec<u8>, Tolerance)>,
}

#[derive(Clone, Debug)]
pub struct ModuleSpec {
    pub name: String,
    pub ptx: String,
    pub cubins: Vec<(u32, Vec<u8>)>,
}

/// Everything an archive holds, as values.
#[derive(Clone, Debug, Default)]
pub struct ArchiveSpec {
    pub modules: Vec<ModuleSpec>,
    pub kernels: Vec<(ModuleId, String, Vec<ParamDecl>)>,
    pub regions: Vec<RegionSpec>,
    pub region_relocs: Vec<(RegionId, Reloc)>,
    pub ops: Vec<OpSpec>,
    pub bindings: Vec<(String, RegionId, Direction)>,
    pub meta: Vec<(String, String)>,
}

impl ArchiveSpec {
    /// Writes the archive with [`ArchiveWriter`].
    pub fn write(&self) -> Result<Vec<u8>, WriteError> {
        let mut w = ArchiveWriter::new(Cursor::new(Vec::new()))?;
        for m in &self.modules {
            let id = w.add_module(&m.name, &m.ptx)?;
            for (sm, cubin) in &m.cubins {
                w.add_cubin(id, *sm, cubin)?;
            }
        }
        for (module, name, params) in &self.kernels {
            w.add_kernel(*module, name, params.clone())?;
        }
        for r in &self.regions {
            let id = w.add_region(r.decl.clone())?;
            if let Some(bytes) = &r.initial {
                w.set_initial_bytes(id, bytes)?;
            }
            if let Some((bytes, tol)) = &r.expected {
                w.set_expected_bytes(id, bytes, *tol)?;
            }
        }
        for (region, reloc) in &self.region_relocs {
            w.add_region_reloc(*region, *reloc)?;
        }
        write_ops(&mut w, &self.ops)?;
        for (name, region, dir) in &self.bindings {
            w.add_binding(name, *region, *dir)?;
        }
        for (k, v) in &self.meta {
            w.set_meta(k, v);
        }
        Ok(w.finish()?.into_inner())
    }

    /// Number of ops once flattened (bodies included).
    pub fn op_count(&self) -> usize {
        fn count(ops: &[OpSpec]) -> usize {
            ops.iter()
                .map(|o| match o {
                    OpSpec::While(_, body) | OpSpec::If(_, body) => 1 + count(body),
                    _ => 1,
                })
                .sum()
        }
        count(&self.ops)
    }

    /// Asserts that `a` holds exactly this spec.
    pub fn assert_matches(&self, a: &Archive) {
        assert_eq!(a.module_count(), self.modules.len());
        for (m, spec) in a.modules().zip(&self.modules) {
            assert_eq!(m.name, spec.name);
            assert_eq!(m.ptx_text().unwrap(), spec.ptx);
            let cubins: Vec<(u32, Vec<u8>)> = m.cubins.iter().map(|(sm, b)| (*sm, b.decode().unwrap())).collect();
            assert_eq!(cubins, spec.cubins);
        }
        assert_eq!(a.kernel_count(), self.kernels.len());
        for (k, (module, name, params)) in a.kernels().zip(&self.kernels) {
            assert_eq!((k.module, k.name, &k.params), (*module, name.as_str(), params));
        }
        assert_eq!(a.region_count(), self.regions.len());
        for (r, spec) in a.regions().zip(&self.regions) {
            let d = &spec.decl;
            assert_eq!(
                (r.name, r.size, r.align, r.dtype, &r.shape, r.scratch),
                (d.name.as_str(), d.size, d.align, d.dtype, &d.shape, d.scratch)
            );
            assert_eq!(r.initial.map(|b| b.decode().unwrap()), spec.initial);
            let expected = r.expected.map(|b| (b.decode().unwrap(), r.tolerance.unwrap()));
            assert_eq!(expected, spec.expected);
        }
        assert_eq!(a.region_relocs().collect::<Vec<_>>(), self.region_relocs);
        assert_eq!(a.op_count(), self.op_count());
        let top: Vec<OpId> = a.top_level().collect();
        assert_ops(a, &top, &self.ops);
        let bindings: Vec<(String, RegionId, Direction)> =
            a.bindings().map(|b| (b.name.to_string(), b.region, b.direction)).collect();
        assert_eq!(bindings, self.bindings);
        let meta: Vec<(String, String)> = a.meta().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(meta, self.meta);
    }
}

fn write_ops<W: std::io::Write + std::io::Seek>(w: &mut ArchiveWriter<W>, ops: &[OpSpec]) -> Result<(), WriteError> {
    for op in ops {
        match op {
            OpSpec::Launch(l) => drop(w.launch(l.clone())?),
            OpSpec::Copy(c) => drop(w.copy(*c)?),
            OpSpec::Memset(m) => drop(w.memset(*m)?),
            OpSpec::Alloc(r) => drop(w.alloc(*r)?),
            OpSpec::Free(r) => drop(w.free(*r)?),
            OpSpec::While(c, body) => {
                w.begin_while(*c)?;
                write_ops(w, body)?;
                w.end_body()?;
            }
            OpSpec::If(c, body) => {
                w.begin_if(*c)?;
                write_ops(w, body)?;
                w.end_body()?;
            }
            OpSpec::Marker(name) => drop(w.marker(name)?),
        }
    }
    Ok(())
}

fn assert_ops(a: &Archive, ids: &[OpId], specs: &[OpSpec]) {
    assert_eq!(ids.len(), specs.len(), "ops at one level");
    for (&id, spec) in ids.iter().zip(specs) {
        match (a.op(id), spec) {
            (Op::Launch(l), OpSpec::Launch(s)) => {
                assert_eq!(
                    (l.kernel, l.grid, l.block, l.shared_bytes, l.params),
                    (s.kernel, s.grid, s.block, s.shared_bytes, &s.params[..])
                );
                assert_eq!(a.relocs(l.relocs).collect::<Vec<_>>(), s.relocs);
            }
            (Op::Copy(c), OpSpec::Copy(s)) => assert_eq!(c, *s),
            (Op::Memset(m), OpSpec::Memset(s)) => assert_eq!(m, *s),
            (Op::Alloc(r), OpSpec::Alloc(s)) | (Op::Free(r), OpSpec::Free(s)) => assert_eq!(r, *s),
            (Op::While { cond, .. }, OpSpec::While(c, body)) | (Op::If { cond, .. }, OpSpec::If(c, body)) => {
                assert_eq!(cond, *c);
                let children: Vec<OpId> = a.children(a.body(id)).collect();
                assert_ops(a, &children, body);
            }
            (Op::Marker(name), OpSpec::Marker(s)) => assert_eq!(name, s),
            (got, want) => panic!("op {id}: got {got:?}, want {want:?}"),
        }
    }
}

/// Where a section lies in an archive: `(kind code, offset, len)` for every section table entry.
pub fn sections(bytes: &[u8]) -> Vec<(u32, u64, u64)> {
    let table = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    let count = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| {
            let e = &bytes[table + i * SECTION_ENTRY_LEN..];
            (
                u32::from_le_bytes(e[0..4].try_into().unwrap()),
                u64::from_le_bytes(e[8..16].try_into().unwrap()),
                u64::from_le_bytes(e[16..24].try_into().unwrap()),
            )
        })
        .collect()
}

/// `(offset, len)` of one section.
pub fn section(bytes: &[u8], kind: SectionKind) -> (usize, usize) {
    let (_, off, len) = sections(bytes).into_iter().find(|s| s.0 == kind as u32).expect("section present");
    (off as usize, len as usize)
}

/// Recomputes every section checksum and the header checksum, so that a deliberately broken record
/// reaches the structural checks instead of stopping at a checksum.
pub fn reseal(bytes: &mut [u8]) {
    let table = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
    for (i, (_, off, len)) in sections(bytes).into_iter().enumerate() {
        if off.checked_add(len).is_none_or(|end| end > bytes.len() as u64) {
            continue; // a deliberately escaping section has no bytes to sum
        }
        let sum = layout::checksum(&[&bytes[off as usize..(off + len) as usize]]);
        let at = table + i * SECTION_ENTRY_LEN + 24;
        bytes[at..at + CHECKSUM_LEN].copy_from_slice(&sum);
    }
    let count = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as usize;
    let sum = layout::checksum(&[&bytes[..layout::header::CHECKSUM], &bytes[table..table + count * SECTION_ENTRY_LEN]]);
    bytes[layout::header::CHECKSUM..HEADER_LEN].copy_from_slice(&sum);
}
