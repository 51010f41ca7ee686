//! Faults: a sticky driver error turned into [`CudaError::Fault`] (the device reset so that the
//! next replay works, or marked lost where the driver keeps the fault for the process), and the
//! op that faulted found by replaying op by op, here or in a child process.

use std::sync::Arc;

use shared::archive::{Archive, OpId};

use super::{CudaError, CudaReplay, Mode, ReplayOptions};
use crate::driver::Device;

impl CudaReplay {
    /// Turns a sticky error into a fault: resets the device so that the next replay works.
    pub(super) fn fail(&mut self, e: CudaError) -> CudaError {
        let sticky = e.driver().is_some_and(|d| d.is_sticky());
        if !sticky {
            return e;
        }
        self.poisoned = true;
        let op = match &e {
            CudaError::Op { op, label, .. } => Some((*op, label.clone())),
            _ => None,
        };
        let error = e.driver().cloned().expect("sticky errors carry a driver error");
        // A fault on one GPU of several leaves the others' work of this replay undefined too.
        let lost = self.slots.iter().filter_map(|s| s.device.recover().err()).map(|e| e.to_string()).next();
        let device = self.slots.iter().map(|s| format!("{:?}", s.device)).collect::<Vec<_>>().join(" + ");
        CudaError::Fault { device, op, error, lost }
    }
}

/// After a fault in graph mode (or without per-op sync), finds which op faulted by replaying the
/// archive (`bytes`) again op by op, waiting after each, for up to `iterations` replays. In this
/// process when the device recovered; otherwise in a child process, since the driver keeps the
/// fault for the whole process: the one the program set with [`crate::probe::set_child_probe`]
/// (`recap cuda-probe`). Other errors are handed back as they are.
pub fn locate_fault(device: &Arc<Device>, bytes: &[u8], error: CudaError, iterations: u64) -> CudaError {
    let (name, driver_error, lost) = match error {
        CudaError::Fault { op: None, device, error, lost } => (device, error, lost),
        other => return other,
    };
    let found = if lost.is_none() {
        locate_here(device, bytes, iterations)
    } else {
        crate::probe::locate_in_child(device.ordinal, bytes, iterations)
    };
    CudaError::Fault { device: name, op: found, error: driver_error, lost }
}

fn locate_here(device: &Arc<Device>, bytes: &[u8], iterations: u64) -> Option<(OpId, String)> {
    let archive = Archive::open(bytes).ok()?;
    let options = ReplayOptions { mode: Mode::Stream, sync_each_op: true, ..Default::default() };
    let mut probe = CudaReplay::load(device, &archive, options).ok()?;
    for _ in 0..iterations.max(1) {
        match probe.replay() {
            Ok(_) => continue,
            Err(CudaError::Fault { op: Some(op), .. }) => return Some(op),
            Err(_) => break,
        }
    }
    None
}

/// Runs `iterations` stream-mode replays waiting after every op, and says which op faulted, if
/// one did (what `recap cuda-probe` does in a child process).
pub fn probe_ops(
    device: &Arc<Device>,
    archive: &Archive,
    iterations: u64,
) -> Result<Option<(OpId, String, String)>, CudaError> {
    let options = ReplayOptions { mode: Mode::Stream, sync_each_op: true, ..Default::default() };
    let mut probe = CudaReplay::load(device, archive, options)?;
    for _ in 0..iterations.max(1) {
        match probe.replay() {
            Ok(_) => continue,
            Err(CudaError::Fault { op: Some((op, label)), error, .. }) => {
                return Ok(Some((op, label, error.to_string())))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}
