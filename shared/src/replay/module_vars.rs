//! Module variables on the CPU: a region the archive says is a module's variable (the
//! `module-vars` section) is where that module's kernels find the variable. The module is parsed
//! with the variable placed at the region's address in the replay's memory
//! (`ptx::Module::parse_placing`), so restoring the region, copies into and out of it, pointers to
//! it and the check all act on the bytes the kernels use. Variables the archive does not list stay
//! in the module with their PTX initialisers, as before.
//!
//! The CPU holds every logical device in one memory and parses a module once, so a variable
//! captured on two devices (two regions for one module variable) has no CPU replay.

use std::collections::HashMap;

use super::{RegionContents, RegionState, ReplayError};
use crate::archive::{Archive, RegionId};
use crate::ptx;

/// Per module (by index), its variables that are regions: name to region.
pub(super) fn by_module(archive: &Archive) -> Result<Vec<HashMap<String, RegionId>>, ReplayError> {
    let mut out = vec![HashMap::new(); archive.module_count()];
    for v in archive.module_vars() {
        if let Some(other) = out[v.module as usize].insert(v.name.to_string(), v.region) {
            return Err(ReplayError::Region {
                region: archive.region(v.region).name.to_string(),
                reason: format!(
                    "it is variable {} of module {} on device {}, and so is region {} on device {}: the CPU holds \
                     one copy of a module's variables; replay on as many GPUs as the archive has devices",
                    v.name,
                    archive.module(v.module).name,
                    archive.region(v.region).device,
                    archive.region(other).name,
                    archive.region(other).device
                ),
            });
        }
    }
    Ok(out)
}

/// Parses `text` (module `module`) with the variables in `vars` placed at their regions: at the
/// region's address where it already has one (placed at its captured address), else at a fresh
/// region of `memory`. Gives the module and the PTX initialisers of the placed variables, which
/// stand in for a region without initial contents.
pub(super) fn parse(
    module: &str,
    text: &str,
    vars: &HashMap<String, RegionId>,
    regions: &mut [RegionState],
    memory: &mut ptx::Memory,
) -> Result<(ptx::Module, RegionContents), ReplayError> {
    let mut refused = None;
    let parsed = ptx::Module::parse_placing(text, &mut |v| {
        let Some(&region) = vars.get(v.name) else { return Ok(None) };
        let r = &mut regions[region as usize];
        if r.size < v.size {
            return Err(ptx::PlaceRefusal::RegionTooSmall {
                variable: v.name.to_string(),
                size: v.size,
                region: r.name.clone(),
                holds: r.size,
            });
        }
        let base = match r.base {
            Some(base) => base,
            None => match memory.add_region(r.size, v.align.max(r.align as u64)) {
                Ok(base) => base,
                Err(error) => {
                    refused = Some(ReplayError::Upload { region: r.name.clone(), error: error.clone() });
                    return Err(ptx::PlaceRefusal::NoMemory { variable: v.name.to_string(), source: error });
                }
            },
        };
        r.base = Some(base);
        Ok(Some(base))
    });
    let parsed = match (parsed, refused) {
        (_, Some(e)) => return Err(e),
        (Err(error), None) => return Err(ReplayError::Load { module: module.to_string(), error }),
        (Ok(m), None) => m,
    };
    for (name, &region) in vars {
        if !parsed.placed_variables().iter().any(|p| &p.name == name) {
            return Err(ReplayError::Region {
                region: regions[region as usize].name.clone(),
                reason: format!("module {module} declares no .global or .const variable named {name}"),
            });
        }
    }
    let inits = parsed.placed_variables().iter().map(|p| (vars[&p.name], p.init.clone())).collect();
    Ok((parsed, inits))
}
