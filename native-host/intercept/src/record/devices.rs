//! The GPUs a range runs on: which device each op was issued to, which contexts the range used,
//! and the architecture of each device.
//!
//! An allocation belongs to the device of the context current when it was made (`Alloc::device`);
//! an op to the device of its stream's context (the current context's, for the default streams).
//! The recording stays one sequence in issue order; where the device changes between two ops the
//! recording keeps a switch, and the archive turns each switch into a signal on the device left
//! and a wait on the device entered (`archive.rs`), so that every op on one device still follows
//! everything issued before it on the others. That is conservative (two streams that never wait
//! for each other are ordered all the same) and always correct, as issue order is a valid serial
//! order of the program.
//!
//! A range on one device writes the archive it always did: no devices section, no signals.

use std::collections::{BTreeMap, HashMap};

use crate::real;
use crate::sys::*;

/// What the recording knows of devices.
#[derive(Default)]
pub struct Devices {
    /// `(first op, device)`: the ops from `first op` on, up to the next switch, run on `device`.
    switches: Vec<(usize, CUdevice)>,
    /// The contexts work was issued in, with their devices (for synchronising all of them).
    contexts: BTreeMap<usize, CUdevice>,
    /// The SM version of each device the range used, found as it ends.
    pub sms: BTreeMap<CUdevice, u32>,
}

impl Devices {
    /// Notes that the ops from `first_op` on run on `device`.
    pub fn issue_on(&mut self, first_op: usize, ctx: usize, device: CUdevice) {
        if ctx != 0 {
            self.contexts.insert(ctx, device);
        }
        if self.switches.last().is_none_or(|&(_, d)| d != device) {
            self.switches.push((first_op, device));
        }
    }

    /// The device op `op` was issued to (0 before any was noted).
    pub fn of_op(&self, op: usize) -> CUdevice {
        let at = self.switches.partition_point(|&(first, _)| first <= op);
        at.checked_sub(1).map_or(0, |i| self.switches[i].1)
    }

    /// Finds the SM version of every device that ops were issued to or regions made on.
    pub fn learn_sms(&mut self, regions: impl Iterator<Item = CUdevice>) {
        let used: Vec<CUdevice> = self.switches.iter().map(|&(_, d)| d).chain(regions).collect();
        for d in used {
            self.sms.entry(d).or_insert_with(|| sm_of(d));
        }
    }

    /// Synchronises every context the range issued work in (or the current one, when it used at
    /// most one): a snapshot or a final read must see the work of every device issued before it.
    pub fn synchronize(&self) -> CUresult {
        if self.contexts.len() <= 1 {
            // SAFETY: no arguments.
            return unsafe { real::ctx_synchronize() };
        }
        let mut status = CUDA_SUCCESS;
        for &ctx in self.contexts.keys() {
            // SAFETY: a context the program issued work in; popped right after.
            let r = unsafe {
                if real::ctx_push_current(ctx as Handle) != CUDA_SUCCESS {
                    continue;
                }
                let r = real::ctx_synchronize();
                let mut popped: Handle = std::ptr::null_mut();
                real::ctx_pop_current(&mut popped);
                r
            };
            if status == CUDA_SUCCESS {
                status = r;
            }
        }
        status
    }
}

/// The devices of contexts seen so far, so that finding an op's device costs one driver call. A
/// context's device never changes; the entry goes when the program destroys the context, whose
/// handle may then come back for another.
#[derive(Default)]
pub struct ContextDevices(HashMap<usize, CUdevice>);

impl ContextDevices {
    /// The context work on `stream` runs in, and its device; `(0, 0)` without a context.
    pub fn of_stream(&mut self, stream: usize) -> (usize, CUdevice) {
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: plain out-parameters; the default streams' context is the current one.
        let found = unsafe {
            if stream == 0 {
                real::ctx_get_current(&mut ctx) == CUDA_SUCCESS
            } else {
                real::stream_get_ctx(stream as Handle, &mut ctx) == CUDA_SUCCESS
                    || real::ctx_get_current(&mut ctx) == CUDA_SUCCESS
            }
        };
        if !found || ctx.is_null() {
            return (0, 0);
        }
        (ctx as usize, self.of_context(ctx as usize))
    }

    /// The device of the calling thread's current context (0 without one).
    pub fn current(&mut self) -> CUdevice {
        self.of_stream(0).1
    }

    fn of_context(&mut self, ctx: usize) -> CUdevice {
        if let Some(&d) = self.0.get(&ctx) {
            return d;
        }
        let mut device: CUdevice = 0;
        // SAFETY: a live context, pushed and popped around the question.
        unsafe {
            if real::ctx_push_current(ctx as Handle) == CUDA_SUCCESS {
                real::ctx_get_device(&mut device);
                let mut popped: Handle = std::ptr::null_mut();
                real::ctx_pop_current(&mut popped);
            }
        }
        self.0.insert(ctx, device);
        device
    }

    /// The program destroys `ctx`.
    pub fn forget(&mut self, ctx: usize) {
        self.0.remove(&ctx);
    }
}

/// Device `device`'s SM version (`90` for sm_90), from its own attributes; 0 when it cannot say.
pub fn sm_of(device: CUdevice) -> u32 {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe {
        real::device_get_attribute(&mut major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
        real::device_get_attribute(&mut minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
    }
    (major * 10 + minor).max(0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_take_the_device_of_the_last_switch_before_them() {
        let mut d = Devices::default();
        assert_eq!(d.of_op(0), 0);
        d.issue_on(0, 0, 1);
        d.issue_on(2, 0, 1);
        d.issue_on(3, 0, 0);
        d.issue_on(5, 0, 1);
        let devices: Vec<CUdevice> = (0..7).map(|op| d.of_op(op)).collect();
        assert_eq!(devices, [1, 1, 1, 0, 0, 1, 1]);
        assert_eq!(d.switches, [(0, 1), (3, 0), (5, 1)], "no switch where the device stays");
    }
}
