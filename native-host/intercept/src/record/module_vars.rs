//! Module variables (`__device__` and `__constant__` in CUDA C++, `.global` and `.const` in PTX)
//! recorded like allocations.
//!
//! A kernel reaches its module's variables by name, with no pointer a capture could see, and a
//! program sets them through addresses the driver hands out (`cuModuleGetGlobal`,
//! `cuLibraryGetGlobal`: what `cudaMemcpyToSymbol` and `cudaGetSymbolAddress` use). So:
//! - every address the driver hands out for a variable is a live allocation of kind
//!   [`MODULE_VAR`] from then on (`globals.rs` hooks the lookups), so copies to and from it, and
//!   words that point into it, resolve as for any allocation;
//! - the range's first launch of a kernel of a module looks up every variable the module defines
//!   (its PTX declarations) and touches each, snapshotting its contents before that launch; the
//!   end of the range reads them back as the expected state, as for every region;
//! - the archive names each such region as its module's variable (the `module-vars` section), so
//!   replays give the region the variable's own storage.

use std::collections::{HashMap, HashSet};
use std::ffi::CString;

use shared::archive::{ArchiveWriter, ModuleId, RegionId, WriteError};

use super::{Alloc, Recording, State};
use crate::real;
use crate::sys::*;

/// The kind of the allocation standing for a module variable.
pub const MODULE_VAR: &str = "cuModuleGetGlobal";

/// What the recorder knows of module variables.
#[derive(Default)]
pub struct Vars {
    /// Per allocation id of a module variable: its module (an index into `State::modules`) and
    /// its name.
    of_alloc: HashMap<u64, (usize, String)>,
    /// Modules whose variables the open range has looked up.
    listed: HashSet<usize>,
}

impl State {
    /// The driver gave `base` and `size` for variable `name` of the module or library `handle`:
    /// an allocation from now on (the same address looked up again is the same allocation).
    pub fn module_var_found(&mut self, handle: usize, name: &str, base: u64, size: u64) {
        if let Some(&module) = self.module_of.get(&handle) {
            self.add_module_var(module, name, base, size);
        }
    }

    fn add_module_var(&mut self, module: usize, name: &str, base: u64, size: u64) -> Option<Alloc> {
        if let Some(a) = self.allocs.get(&base).filter(|a| a.kind == MODULE_VAR && a.size == size) {
            return Some(a.clone());
        }
        self.add_alloc(base, size, MODULE_VAR);
        let alloc = self.allocs.get(&base)?.clone();
        self.vars.of_alloc.insert(alloc.id, (module, name.to_string()));
        Some(alloc)
    }

    /// A range opens: its first launch of each module's kernels looks the module's variables up.
    pub(super) fn module_vars_range_begins(&mut self) {
        self.vars.listed.clear();
    }

    /// Before the range's first launch of a kernel of `module`: every variable the module defines
    /// is looked up in the current context and snapshotted, as the launch will see it.
    pub(super) fn module_vars_before_launch(&mut self, module: usize) {
        if !self.vars.listed.insert(module) {
            return;
        }
        let Some(ptx) = self.modules[module].parsed().and_then(|p| p.ptx.clone()) else { return };
        let handles: Vec<usize> = self.module_of.iter().filter(|(_, &m)| m == module).map(|(&h, _)| h).collect();
        for name in shared::ptx::signature::module_variable_names(&ptx) {
            match lookup(&handles, &name) {
                Some((base, size)) => {
                    if let Some(alloc) = self.add_module_var(module, &name, base, size) {
                        self.touch(&alloc);
                    }
                }
                None => self.report.incomplete(format!(
                    "module{module}: the driver gave no address for its variable {name}, so it is not recorded"
                )),
            }
        }
    }
}

/// `(address, size)` of variable `name` in the current context, through whichever handle of its
/// module the driver answers for (a module, a library, or a library's module).
fn lookup(handles: &[usize], name: &str) -> Option<(u64, u64)> {
    let name = CString::new(name).ok()?;
    for &h in handles {
        let (mut base, mut size) = (0u64, 0usize);
        // SAFETY: out-parameters and a NUL-terminated name; a handle of the other kind is an error.
        let found = unsafe {
            real::module_get_global(&mut base, &mut size, h as Handle, name.as_ptr()) == CUDA_SUCCESS
                || real::library_get_global(&mut base, &mut size, h as Handle, name.as_ptr()) == CUDA_SUCCESS
        };
        if found && base != 0 && size != 0 {
            return Some((base, size as u64));
        }
    }
    None
}

/// Names the regions that are module variables in the archive: those of modules the archive holds
/// (`modules`: a module's index to its archive id); a variable of a module no recorded kernel
/// came from is a plain region.
pub fn write<W: std::io::Write + std::io::Seek>(
    vars: &Vars,
    rec: &Recording,
    regions: &[RegionId],
    modules: &HashMap<usize, ModuleId>,
    w: &mut ArchiveWriter<W>,
) -> Result<(), WriteError> {
    for (r, region) in rec.regions.iter().enumerate() {
        let Some((module, name)) = vars.of_alloc.get(&region.alloc.id) else { continue };
        if let Some(&m) = modules.get(module) {
            w.add_module_var(regions[r], m, name)?;
        }
    }
    Ok(())
}
