//! The early trigger of programmatic dependent launch (`pdl.rs`): which of an archive's kernels
//! fire `griddepcontrol.launch_dependents` at entry. A kernel does when every launch of it in the
//! archive is at most half a wave on the GPU it runs on (its blocks and a dependent's like them
//! resident together, [`pdl::half_wave`]); a grid that fills more leaves its dependents' waiting
//! blocks no room of their own, so it keeps the wait alone. Launches with a cluster shape never trigger: the
//! per-block occupancy figure does not describe them.
//!
//! Whether a launch is half a wave depends on the compiled kernel (registers, static shared memory),
//! which the occupancy API reads from a loaded function, and loading PTX costs its JIT. So the
//! decision comes in two steps, to JIT each module once wherever the answer is clear without it.
//! Before loading, from the GPU's limits alone ([`by_limits`]): no more blocks than half the GPU's
//! multiprocessors is half a wave whatever the kernel (a kernel that can be launched at all holds a
//! block per multiprocessor), and more than half the blocks the multiprocessors hold by their block
//! and thread limits is not. A kernel with any launch in between is loaded with the trigger and asked
//! afterwards (`cuOccupancyMaxActiveBlocksPerMultiprocessor` with the launch's block size and
//! dynamic shared memory); only a module with a kernel whose answer is no is loaded again, once,
//! without the trigger for it.

use std::collections::{BTreeSet, HashMap, HashSet};

use shared::archive::{Archive, KernelId, Op};

use super::{CudaError, CudaReplay};
use crate::driver::{call, DriverError, Func, Residency};
use crate::pdl;

/// What a GPU's limits alone say of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Waves {
    /// Half a wave or less whatever the kernel.
    One,
    /// More than half a wave whatever the kernel.
    Many,
    /// It depends on the compiled kernel: ask the occupancy API.
    Ask,
}

/// What `residency`'s limits say of a launch of `blocks` blocks of `threads` threads.
pub(super) fn by_limits(blocks: u64, threads: u32, residency: Residency) -> Waves {
    if blocks.saturating_mul(2) <= u64::from(residency.multiprocessors) {
        return Waves::One;
    }
    // A block takes whole warps of the multiprocessor's threads.
    let warps = threads.div_ceil(32).max(1) * 32;
    let most = residency.blocks.min(residency.threads / warps);
    if pdl::half_wave(blocks, residency.multiprocessors, most) {
        Waves::Ask
    } else {
        Waves::Many
    }
}

/// Per kernel of the archive (by id): whether its entry triggers its dependents early, and
/// whether that was taken before loading and still needs the occupancy API's answer.
pub(super) struct Triggers {
    on: Vec<bool>,
    ask: Vec<bool>,
}

impl Triggers {
    /// No kernel triggers (PDL off, or asked to wait only).
    pub(super) fn none(archive: &Archive) -> Triggers {
        Triggers { on: vec![false; archive.kernel_count()], ask: vec![false; archive.kernel_count()] }
    }

    /// Module `module` was loaded without a trigger in any entry (a cubin, PTX with its own
    /// `griddepcontrol`, PTX the rewrite could not read): none of its kernels triggers, and
    /// none is asked about.
    pub(super) fn without_module(&mut self, archive: &Archive, module: u32) {
        for k in archive.kernels().filter(|k| k.module == module) {
            self.on[k.id as usize] = false;
        }
    }

    /// The entry names of module `module`'s kernels that trigger.
    pub(super) fn entries<'a>(&self, archive: &Archive<'a>, module: u32) -> HashSet<&'a str> {
        archive.kernels().filter(|k| k.module == module && self.on[k.id as usize]).map(|k| k.name).collect()
    }
}

/// One launch of a kernel, as the wave decision sees it.
struct Shape {
    op: u32,
    kernel: KernelId,
    blocks: u64,
    threads: u32,
    shared: u32,
    clustered: bool,
}

fn shapes(archive: &Archive) -> Result<Vec<Shape>, CudaError> {
    let attrs = shared::launch_attrs::of_archive(archive)?;
    let mut out = Vec::new();
    for id in 0..archive.op_count() as u32 {
        let Op::Launch(l) = archive.op(id) else { continue };
        out.push(Shape {
            op: id,
            kernel: l.kernel,
            blocks: l.grid.iter().map(|&d| u64::from(d)).product(),
            threads: l.block.iter().product(),
            shared: l.shared_bytes,
            clustered: attrs.get(&id).is_some_and(|a| a.cluster.is_some()),
        });
    }
    Ok(out)
}

impl CudaReplay {
    /// The kernels that trigger, as far as the GPUs' limits tell before anything is loaded.
    pub(super) fn plan_triggers(&self, archive: &Archive) -> Result<Triggers, CudaError> {
        let mut t = Triggers::none(archive);
        let mut launched = vec![false; archive.kernel_count()];
        let mut never = vec![false; archive.kernel_count()];
        for s in shapes(archive)? {
            let k = s.kernel as usize;
            launched[k] = true;
            let residency = self.slots[self.op_slots[s.op as usize]].device.residency;
            match by_limits(s.blocks, s.threads, residency) {
                _ if s.clustered => never[k] = true,
                Waves::Many => never[k] = true,
                Waves::Ask => t.ask[k] = true,
                Waves::One => {}
            }
        }
        for (k, on) in t.on.iter_mut().enumerate() {
            *on = launched[k] && !never[k];
            t.ask[k] &= *on;
        }
        Ok(t)
    }

    /// Asks the occupancy API about every launch of a kernel given the trigger before loading;
    /// a module with a kernel that is past half a wave after all is loaded again without the trigger
    /// for it, and its kernels looked up again on every GPU. Gives the number of modules loaded
    /// again; `triggered[m]` is kept as the number of module `m`'s entries that trigger.
    pub(super) fn confirm_triggers(
        &mut self,
        archive: &Archive,
        t: &mut Triggers,
        functions_on: &mut [HashMap<KernelId, Func>],
        triggered: &mut [usize],
        library: bool,
    ) -> Result<usize, CudaError> {
        let mut again = BTreeSet::new();
        for s in shapes(archive)? {
            let k = s.kernel as usize;
            if !(t.on[k] && t.ask[k]) {
                continue;
            }
            let slot = self.op_slots[s.op as usize];
            let device = self.slots[slot].device.clone();
            device.bind()?;
            let func = functions_on[slot][&s.kernel];
            if s.shared > 48 * 1024 {
                // What the launch sets too: without it the query counts no room for the block.
                call!(cuFuncSetAttribute(
                    func.function,
                    cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    s.shared as i32
                ))
                .map_err(|error| self.op_error(s.op, error))?;
            }
            let mut per = 0;
            // A refusal (a block size the kernel cannot take) counts as no room: the launch
            // itself then fails with the driver's error, naming its op.
            let asked = call!(cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut per,
                func.function,
                s.threads as i32,
                s.shared as usize
            ));
            let per = if asked.is_ok() { per.max(0) as u32 } else { 0 };
            if !pdl::half_wave(s.blocks, device.residency.multiprocessors, per) {
                t.on[k] = false;
                again.insert(archive.kernel(s.kernel).module);
            }
        }
        self.slots[0].device.bind()?;
        for &m in &again {
            triggered[m as usize] = self.reload_module(archive, m, t, functions_on, library)?;
        }
        Ok(again.len())
    }

    /// Loads module `m` again with the trigger in the entries `t` names only, in place of the
    /// code loaded before, and looks its kernels up again on every GPU. Gives how many of its
    /// entries trigger.
    fn reload_module(
        &mut self,
        archive: &Archive,
        m: u32,
        t: &Triggers,
        functions_on: &mut [HashMap<KernelId, Func>],
        library: bool,
    ) -> Result<usize, CudaError> {
        let module = archive.module(m);
        let ptx = module.ptx.decode()?;
        let invalid = |why: String| CudaError::Invalid(format!("module {}: {why}", module.name));
        let text = std::str::from_utf8(&ptx).map_err(|e| invalid(e.to_string()))?;
        let names = t.entries(archive, m);
        let (text, triggers) = match pdl::with_entry_waits(text, &|name| names.contains(name)) {
            Ok(pdl::Rewritten::Waits { text, triggers }) => (text, triggers),
            // Only modules rewritten on the first load gain a trigger, so neither happens; the
            // code loaded first then stays.
            Ok(pdl::Rewritten::OwnWaits) => return Ok(0),
            Err(why) => return Err(invalid(why.to_string())),
        };
        let mut image = text.into_bytes();
        image.push(0);
        let (code, _) = self.load_code(module.name, image, library)?;
        std::mem::replace(&mut self.modules[m as usize], code).unload();
        for k in archive.kernels().filter(|k| k.module == m) {
            let lookup_error = |error: DriverError| CudaError::Kernel {
                module: module.name.to_owned(),
                kernel: k.name.to_owned(),
                error,
            };
            let name = std::ffi::CString::new(k.name)
                .map_err(|_| CudaError::Invalid(format!("kernel name {:?} holds a NUL byte", k.name)))?;
            self.slots[0].device.bind()?;
            let f = code.get(&name).map_err(lookup_error)?;
            functions_on[0].insert(k.id, f);
            for (slot, functions) in functions_on.iter_mut().enumerate().skip(1) {
                self.slots[slot].device.bind()?;
                let mut function = std::ptr::null_mut();
                call!(cuKernelGetFunction(&mut function, f.kernel)).map_err(lookup_error)?;
                functions.insert(k.id, Func { function, kernel: f.kernel });
            }
        }
        self.slots[0].device.bind()?;
        Ok(triggers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H100/H200: 132 multiprocessors of at most 32 blocks and 2,048 threads each.
    const HOPPER: Residency = Residency { multiprocessors: 132, blocks: 32, threads: 2048 };

    #[test]
    fn the_limits_alone_settle_the_clear_cases() {
        // No more blocks than half the multiprocessors: half a wave whatever the kernel.
        assert_eq!(by_limits(1, 256, HOPPER), Waves::One);
        assert_eq!(by_limits(66, 1024, HOPPER), Waves::One);
        // 1024-thread blocks: at most 2 to a multiprocessor, so 132 may be half a wave, 133 never is.
        assert_eq!(by_limits(132, 1024, HOPPER), Waves::Ask);
        assert_eq!(by_limits(133, 1024, HOPPER), Waves::Many);
        // 256-thread blocks: at most 8 to a multiprocessor, so 528 may be half a wave and 529 never is;
        // 1,056 fill the GPU.
        assert_eq!(by_limits(67, 256, HOPPER), Waves::Ask);
        assert_eq!(by_limits(528, 256, HOPPER), Waves::Ask);
        assert_eq!(by_limits(529, 256, HOPPER), Waves::Many);
        assert_eq!(by_limits(1056, 256, HOPPER), Waves::Many);
        // 32-thread blocks: the block limit (32) binds before the thread limit (64).
        assert_eq!(by_limits(132 * 16, 32, HOPPER), Waves::Ask);
        assert_eq!(by_limits(132 * 16 + 1, 32, HOPPER), Waves::Many);
        // A block of 100 threads takes 4 warps: 16 to a multiprocessor.
        assert_eq!(by_limits(132 * 8, 100, HOPPER), Waves::Ask);
        assert_eq!(by_limits(132 * 8 + 1, 100, HOPPER), Waves::Many);
        // 65,536 blocks of 256 threads: many waves on any GPU.
        assert_eq!(by_limits(65_536, 256, HOPPER), Waves::Many);
        // A block larger than a multiprocessor holds never triggers past the first half row.
        assert_eq!(by_limits(67, 4096, HOPPER), Waves::Many);
    }
}
