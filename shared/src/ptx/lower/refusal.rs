//! What a refusal costs: the kernels of the module that a function which cannot be lowered stops.
//!
//! A module loads whole or not at all, so one unsupported instruction in a helper stops every
//! kernel that calls it, and nothing else would. The error names them, so a capture's report says
//! how much of a module the CPU loses to one instruction, not only where the instruction is.

use super::super::error::PtxError;
use super::super::parse::ParsedModule;
use super::shared_layout::SharedPlan;

/// Most kernel names an error lists; the count is always whole.
const LISTED: usize = 4;

/// `e` (raised lowering function `f`) with the kernels it stops: the module's kernels whose
/// call graph reaches `f`.
pub(super) fn with_kernels_stopped(e: PtxError, pm: &ParsedModule, plan: &SharedPlan, f: usize) -> PtxError {
    let kernels: Vec<usize> = (0..pm.funcs.len())
        .filter(|&k| {
            let func = &pm.funcs[k];
            // A prototype followed by its definition counts once, as its definition.
            func.is_entry
                && func.body.is_some()
                && !pm.funcs[k + 1..].iter().any(|later| later.name == func.name && later.body.is_some())
        })
        .collect();
    let stopped: Vec<&str> =
        kernels.iter().filter(|&&k| reaches(plan, k, f)).map(|&k| pm.funcs[k].name.as_str()).collect();
    let mut names = stopped.iter().take(LISTED).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    if stopped.len() > LISTED {
        names.push_str(", ...");
    }
    let (name, total) = (&pm.funcs[f].name, kernels.len());
    let message = if pm.funcs[f].is_entry {
        format!("{} (in kernel `{name}`; it stops 1 of the module's {total} kernels)", e.message)
    } else if stopped.is_empty() {
        format!("{} (in function `{name}`, which no kernel calls)", e.message)
    } else {
        format!(
            "{} (in function `{name}`; it stops {} of the module's {total} kernels: {names})",
            e.message,
            stopped.len()
        )
    };
    PtxError::new(e.line, message)
}

/// Whether function `from` calls `to`, directly or through others (or is it).
fn reaches(plan: &SharedPlan, from: usize, to: usize) -> bool {
    let mut seen = vec![from];
    let mut next = vec![from];
    while let Some(f) = next.pop() {
        if f == to {
            return true;
        }
        for &c in plan.callees(f) {
            if !seen.contains(&c) {
                seen.push(c);
                next.push(c);
            }
        }
    }
    false
}
