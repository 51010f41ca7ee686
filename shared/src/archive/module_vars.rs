//! The `module-vars` section (format 1.2): regions that are module-scope variables (PTX `.global`
//! and `.const`, a cubin's global symbols) of a module instead of allocations of their own
//! (docs/FORMAT.md, "Module variables"). A kernel reaches such a variable by its name, with no
//! relocation, so every reader of the archive must know which region the name stands for: the
//! replays give the region the variable's own storage (`cuModuleGetGlobal`, or the CPU module's
//! placed variable) and the plan counts it in every launch of the module's kernels.
//!
//! Here: the rule the writer and the reader share, and the reader's check and accessors (this
//! file is a child of `reader.rs`, so it reads the section's table in place).

use std::collections::HashSet;

use super::{err, Archive, FormatError};
use crate::archive::layout::MODULE_VAR_LEN;
use crate::archive::model::{DeviceId, ModuleId, RegionId};
use crate::le::u32_at;

/// A region that is a module's variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleVar<'a> {
    pub region: RegionId,
    pub module: ModuleId,
    /// The variable's name as the module declares it: its PTX name, or its cubin's symbol.
    pub name: &'a str,
}

/// What one record must be, given what the archive says of its region and module: `(field offset
/// in the record, reason)` when it is not. `seen` holds the regions and the `(module, name,
/// device)` variables of the records before it.
#[expect(
    clippy::too_many_arguments,
    reason = "the record's fields and what the archive around it says, which writer and reader each hold differently"
)]
pub(crate) fn rule(
    region: RegionId,
    region_count: usize,
    scratch: impl FnOnce() -> (bool, DeviceId),
    module: ModuleId,
    module_count: usize,
    name: &str,
    seen_regions: &mut HashSet<RegionId>,
    seen_vars: &mut HashSet<(ModuleId, String, DeviceId)>,
) -> Result<(), (usize, String)> {
    if region as usize >= region_count {
        return Err((0, format!("region {region} does not exist (the archive has {region_count})")));
    }
    let (scratch, device) = scratch();
    if scratch {
        return Err((0, format!("region {region} is scratch, but a module variable lives as long as its module")));
    }
    if module as usize >= module_count {
        return Err((4, format!("module {module} does not exist (the archive has {module_count})")));
    }
    if name.is_empty() {
        return Err((8, "the variable has no name".to_string()));
    }
    if !seen_regions.insert(region) {
        return Err((0, format!("region {region} is already a module variable")));
    }
    if !seen_vars.insert((module, name.to_string(), device)) {
        return Err((8, format!("variable {name} of module {module} on device {device} already has a region")));
    }
    Ok(())
}

impl<'a> Archive<'a> {
    /// Every record names an existing region that is not scratch and an existing module, a
    /// non-empty name; no region twice, no variable (module, name, device) twice; regions ascending.
    pub(super) fn check_module_vars(&self) -> Result<(), FormatError> {
        let t = &self.module_vars;
        let mut seen_regions = HashSet::new();
        let mut seen_vars = HashSet::new();
        let mut last = None;
        for i in 0..t.count {
            let r = t.rec(i);
            let (region, module) = (u32_at(r, 0), u32_at(r, 4));
            let name = self.check_string(t, i, 8, false)?;
            let name = self.string(name);
            let regions = self.regions.count;
            let of_region = || {
                let view = self.region(region);
                (view.scratch, view.device)
            };
            rule(region, regions, of_region, module, self.modules.count, name, &mut seen_regions, &mut seen_vars)
                .or_else(|(field, reason)| err("module-vars", t.at(i, field), format!("record {i}: {reason}")))?;
            if last.is_some_and(|l| l > region) {
                return err("module-vars", t.at(i, 0), format!("record {i}: region {region} comes after a later one"));
            }
            last = Some(region);
        }
        Ok(())
    }

    /// The regions that are module variables, in region order.
    pub fn module_vars(&self) -> impl ExactSizeIterator<Item = ModuleVar<'a>> + '_ {
        (0..self.module_vars.count).map(|i| self.module_var_at(i))
    }

    /// The module variable region `region` is, if it is one.
    pub fn module_var(&self, region: RegionId) -> Option<ModuleVar<'a>> {
        let t = &self.module_vars;
        // Records are in region order (checked at open).
        let (mut lo, mut hi) = (0, t.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match u32_at(t.rec(mid), 0).cmp(&region) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.module_var_at(mid)),
            }
        }
        None
    }

    fn module_var_at(&self, i: usize) -> ModuleVar<'a> {
        let r = self.module_vars.rec(i);
        ModuleVar { region: u32_at(r, 0), module: u32_at(r, 4), name: self.string(u32_at(r, 8)) }
    }
}

/// The section's bytes: a table header, then one record per variable, regions ascending.
pub(crate) fn encode(vars: &[(RegionId, ModuleId, u32)]) -> Vec<u8> {
    let mut sorted = vars.to_vec();
    sorted.sort_unstable_by_key(|v| v.0);
    let mut out = Vec::with_capacity(8 + sorted.len() * MODULE_VAR_LEN);
    out.extend_from_slice(&(sorted.len() as u32).to_le_bytes());
    out.extend_from_slice(&(MODULE_VAR_LEN as u32).to_le_bytes());
    for (region, module, name) in sorted {
        out.extend_from_slice(&region.to_le_bytes());
        out.extend_from_slice(&module.to_le_bytes());
        out.extend_from_slice(&name.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use std::io::Cursor;

    use crate::archive::layout::{SectionKind, SECTION_ENTRY_LEN};
    use crate::archive::*;

    /// An archive with a module, regions `a` (0), `b` (1) and scratch `s` (2), and `b` as the
    /// module's variable `v`.
    fn archive() -> Vec<u8> {
        let mut w = ArchiveWriter::new(Cursor::new(Vec::new())).unwrap();
        let m = w.add_module("m", ".version 8.0\n.target sm_90\n.address_size 64\n.global .u32 v;\n").unwrap();
        w.add_region(RegionDecl::new("a", 4, DType::U32)).unwrap();
        let b = w.add_region(RegionDecl::new("b", 4, DType::U32)).unwrap();
        let s = w.add_region(RegionDecl { scratch: true, ..RegionDecl::new("s", 4, DType::U32) }).unwrap();
        assert!(w.add_module_var(s, m, "v").unwrap_err().to_string().contains("region 2 is scratch"));
        assert!(w.add_module_var(b, 7, "v").unwrap_err().to_string().contains("module 7 does not exist"));
        assert!(w.add_module_var(9, m, "v").unwrap_err().to_string().contains("region 9 does not exist"));
        w.add_module_var(b, m, "v").unwrap();
        assert!(w.add_module_var(b, m, "w").unwrap_err().to_string().contains("region 1 is already"));
        assert!(w.add_module_var(0, m, "v").unwrap_err().to_string().contains("variable v of module 0 on device 0"));
        w.finish().unwrap().into_inner()
    }

    /// The file offset of the first record of section `kind`.
    fn records(bytes: &[u8], kind: SectionKind) -> usize {
        let table = u64::from_le_bytes(bytes[16..24].try_into().unwrap()) as usize;
        let count = u32::from_le_bytes(bytes[24..28].try_into().unwrap()) as usize;
        (0..count)
            .map(|i| table + i * SECTION_ENTRY_LEN)
            .find(|&e| u32::from_le_bytes(bytes[e..e + 4].try_into().unwrap()) == kind as u32)
            .map(|e| u64::from_le_bytes(bytes[e + 8..e + 16].try_into().unwrap()) as usize + 8)
            .expect("the section")
    }

    #[test]
    fn the_writer_refuses_what_the_reader_refuses_and_the_reader_names_the_record() {
        let bytes = archive();
        let a = Archive::open(&bytes).unwrap();
        assert_eq!(a.version(), (1, 2));
        assert_eq!(a.module_vars().collect::<Vec<_>>(), [ModuleVar { region: 1, module: 0, name: "v" }]);
        assert_eq!(a.module_var(0), None);
        let at = records(&bytes, SectionKind::ModuleVars);
        for (field, value, reason) in [
            (0, 2u32, "record 0: region 2 is scratch"),
            (0, 5, "record 0: region 5 does not exist (the archive has 3)"),
            (4, 1, "record 0: module 1 does not exist (the archive has 1)"),
        ] {
            let mut bad = bytes.clone();
            bad[at + field..at + field + 4].copy_from_slice(&value.to_le_bytes());
            reseal(&mut bad);
            let e = Archive::open(&bad).unwrap_err();
            assert_eq!((e.section, e.offset), ("module-vars", (at + field) as u64), "{e}");
            assert!(e.reason.starts_with(reason), "{e}");
        }
    }
}
