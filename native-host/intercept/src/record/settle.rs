//! A call's work stays in the recording only if the driver did it.
//!
//! Work is issued into the recording before the call is forwarded, because issuing it snapshots
//! each allocation it touches for the first time, and that snapshot must be the state before the
//! op. [`State::submit`] notes what the issue added; [`State::settle`] sees the driver's answer.
//! When the driver refuses the call (a grid of 0, a block of 4096 threads, a kernel of a module
//! since unloaded), its ops become [`OpRec::Refused`], which the archive leaves out, and the report
//! says which call it was and what the driver answered. The ops are marked in place rather than
//! removed, since another thread may have recorded work after them while the call was in the
//! driver, and op numbers must stay as they are.
//!
//! Some work can be recorded only from what the driver did: a device copy whose source and
//! destination overlap (CUDA documents that a copy's areas may not overlap, so what the copy leaves
//! is undefined, and the archive's copy refuses to overlap itself). It is recorded as the bytes the
//! destination holds once the call has returned, an upload, and the report names it as incomplete:
//! a replay with other inputs does not recompute those bytes.

use std::collections::BTreeMap;

use super::{read_device, region_name, OpRec, State, Upload, Work};
use crate::real;
use crate::sys::*;

/// What a call's work became, for [`State::settle`].
pub struct Staged {
    what: Described,
    place: Place,
}

enum Place {
    /// Neither recorded nor captured (no range is open).
    Nowhere,
    /// Appended to a stream capture's work.
    Capture { id: usize, at: usize },
    /// Ops `ops` of the recording, with the report's counts for them (added once the driver has
    /// done the work) and the bytes to read back then.
    Recording { ops: std::ops::Range<usize>, counts: BTreeMap<String, u64>, reads: Vec<PendingRead> },
}

/// The call, as the report names it.
enum Described {
    Launch { func: usize, grid: [u32; 3], block: [u32; 3] },
    Upload { len: u64 },
    Download { len: u64 },
    Copy { len: u64 },
    Memset { len: u64 },
    Graph,
    Other,
}

/// Bytes to read back once the call has returned: the destination of an overlapping copy, into
/// the upload that the recording's op `op` makes.
pub(super) struct PendingRead {
    op: usize,
    upload: usize,
    addr: u64,
    len: u64,
}

/// `CUresult`s after which the context cannot go on and memory holds whatever the failing kernel
/// wrote (illegal address, launch timeout, hardware stack error, illegal instruction, misaligned
/// address, invalid address space, invalid PC, launch failed): the call may have done part of its
/// work.
const FAULTS: [CUresult; 8] = [700, 702, 714, 715, 716, 717, 718, 719];

impl State {
    /// Routes work issued on `stream`: into the capture it belongs to, or into the recording.
    /// The caller forwards the call next and hands its answer to [`State::settle`].
    pub fn submit(&mut self, stream: usize, work: Work) -> Staged {
        let what = describe(&work);
        if let Some(id) = self.capture_of(stream) {
            if let Some(list) = self.captures.work.get_mut(&id) {
                list.push(work);
                return Staged { what, place: Place::Capture { id, at: list.len() - 1 } };
            }
            return Staged { what, place: Place::Nowhere };
        }
        let Some(start) = self.recording.as_ref().map(|r| r.ops.len()) else {
            return Staged { what, place: Place::Nowhere };
        };
        // The device it runs on: a change of device is a switch in the recording (`devices.rs`).
        let (ctx, device) = self.ctx_devices.of_stream(stream);
        if let Some(rec) = self.recording.as_mut() {
            rec.devices.issue_on(start, ctx, device);
        }
        // This call's counts and reads, apart from everyone else's.
        let counts = std::mem::take(&mut self.report.ops);
        self.issue(work);
        let counts = std::mem::replace(&mut self.report.ops, counts);
        let reads = std::mem::take(&mut self.pending_reads);
        let end = self.recording.as_ref().map_or(start, |r| r.ops.len());
        Staged { what, place: Place::Recording { ops: start..end, counts, reads } }
    }

    /// The driver answered `result` to the call [`State::submit`] staged: its work is kept (and
    /// completed) or taken back out.
    pub fn settle(&mut self, staged: Staged, result: CUresult) {
        let Staged { what, place } = staged;
        match place {
            Place::Nowhere => {}
            Place::Capture { id, at } => {
                if result != CUDA_SUCCESS {
                    // A refused call adds no node to the capture (or ends it as invalidated).
                    if let Some(list) = self.captures.work.get_mut(&id).filter(|l| l.len() > at) {
                        list.remove(at);
                    }
                }
            }
            Place::Recording { ops, counts, reads } => {
                if result == CUDA_SUCCESS {
                    for (key, n) in counts {
                        *self.report.ops.entry(key).or_default() += n;
                    }
                    for read in reads {
                        self.read_back(read);
                    }
                } else {
                    self.refused(&what, ops, result);
                }
            }
        }
    }

    /// Takes ops `ops`, which the driver refused with `result`, back out, and says so.
    fn refused(&mut self, what: &Described, ops: std::ops::Range<usize>, result: CUresult) {
        // What a launch would have read of its regions before and after it.
        self.pending_effects = None;
        let Some(rec) = self.recording.as_mut() else { return };
        for op in &mut rec.ops[ops.clone()] {
            if let OpRec::Launch { kernel, .. } = op {
                rec.kernels[*kernel].launches = rec.kernels[*kernel].launches.saturating_sub(1);
            }
            *op = OpRec::Refused;
        }
        if let Described::Download { .. } = what {
            rec.downloads = rec.downloads.saturating_sub(1);
        }
        let call = self.describe(what);
        let answer = format!("CUresult {result}{}", error_name(result).map_or(String::new(), |n| format!(", {n}")));
        let at = match self.archive_op(ops.start) {
            0 => "before the first op".to_string(),
            n => format!("after op {}", n - 1),
        };
        if FAULTS.contains(&result) {
            self.report.incomplete(format!(
                "{call} {at} failed ({answer}): the context faulted, so what ran before the fault is not recorded \
                 and the device's memory after it is not what the archive replays"
            ));
        } else {
            self.report.note(format!(
                "{call} {at} was refused by the driver ({answer}): it did nothing, and nothing is recorded"
            ));
        }
    }

    /// The number the archive gives the recording's op `index` (or the next op, past the end):
    /// refused work and the ends of bodies are no ops there.
    fn archive_op(&self, index: usize) -> usize {
        let Some(rec) = self.recording.as_ref() else { return 0 };
        rec.ops[..index.min(rec.ops.len())].iter().filter(|op| !matches!(op, OpRec::Refused | OpRec::EndBody)).count()
    }

    fn describe(&self, what: &Described) -> String {
        match what {
            Described::Launch { func, grid, block } => {
                let name = self.funcs.get(func).map_or_else(|| "an unknown kernel".to_string(), |f| f.name.clone());
                format!("a launch of {name} (grid {grid:?}, block {block:?})")
            }
            Described::Upload { len } => format!("a copy of {len} bytes from the host"),
            Described::Download { len } => format!("a copy of {len} bytes to the host"),
            Described::Copy { len } => format!("a device copy of {len} bytes"),
            Described::Memset { len } => format!("a memset of {len} bytes"),
            Described::Graph => "a CUDA graph launch".to_string(),
            Described::Other => "a conditional node".to_string(),
        }
    }

    /// Records a device copy of `len` bytes at `offset` of region `region` whose source overlaps
    /// its destination, as the bytes it leaves there (read once the call has returned).
    pub(super) fn overlapping_copy(&mut self, region: usize, offset: u64, len: u64) {
        let op = self.archive_op(usize::MAX);
        let rec = self.recording.as_mut().expect("recording");
        let index = rec.ops.len();
        let alloc = rec.regions[region].alloc.clone();
        let name = region_name(&alloc);
        if self.expanding_graph {
            // The graph runs as one call: after it, the destination holds what later nodes wrote.
            self.report.incomplete(format!(
                "a device copy of {len} bytes within {name} in a CUDA graph launch overlaps itself (before op {op}); \
                 CUDA leaves such a copy undefined, and its result cannot be read apart from the rest of the \
                 graph: not recorded"
            ));
            return;
        }
        rec.uploads.push(Upload { bytes: Vec::new(), relocs: Vec::new() });
        let upload = rec.uploads.len() - 1;
        rec.ops.push(OpRec::Upload { upload, dst: region, dst_offset: offset });
        self.pending_reads.push(PendingRead { op: index, upload, addr: alloc.base + offset, len });
        self.report.count("device copy overlapping itself (recorded as the bytes it left)");
        self.report.incomplete(format!(
            "op {op}: a device copy of {len} bytes within {name} overlaps itself, which CUDA leaves undefined \
             (\"the memory areas may not overlap\"): recorded as the bytes the driver left there, which a replay \
             with other inputs does not recompute"
        ));
    }

    /// Reads back what an op's call left, now that the driver has done it.
    fn read_back(&mut self, read: PendingRead) {
        // SAFETY: no arguments; the call's work must have finished before its result is read.
        unsafe { real::ctx_synchronize() };
        let mut bytes = match read_device(read.addr, read.len) {
            Ok(bytes) => bytes,
            Err(e) => {
                let op = self.archive_op(read.op);
                self.report.incomplete(format!(
                    "op {op}: reading what the overlapping copy left failed (CUresult {e}); zeros stand in"
                ));
                vec![0; read.len as usize]
            }
        };
        let relocs = self.pointers_in(&mut bytes, 0);
        let Some(rec) = self.recording.as_mut() else { return };
        if let OpRec::Upload { dst, .. } = rec.ops[read.op] {
            if !relocs.is_empty() {
                rec.pointer_holders.insert(dst);
            }
        }
        rec.uploads[read.upload] = Upload { bytes, relocs };
    }
}

fn describe(work: &Work) -> Described {
    match work {
        Work::Launch { func, grid, block, .. } => Described::Launch { func: *func, grid: *grid, block: *block },
        Work::Upload { data, .. } => Described::Upload {
            len: match data {
                super::HostData::Taken(b) => b.len() as u64,
                super::HostData::At { len, .. } => *len as u64,
            },
        },
        Work::Download { len, .. } => Described::Download { len: *len },
        Work::Copy { len, .. } => Described::Copy { len: *len },
        Work::Memset { width, count, .. } => Described::Memset { len: *width as u64 * count },
        Work::Graph { .. } => Described::Graph,
        Work::Control { .. } | Work::SetCondition { .. } => Described::Other,
    }
}

/// The driver's name for `result` (`CUDA_ERROR_INVALID_VALUE`), if it has one.
fn error_name(result: CUresult) -> Option<String> {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: an out-parameter; the driver's names are static strings.
    let ok = unsafe { real::get_error_name(result, &mut name) } == CUDA_SUCCESS;
    // SAFETY: a NUL-terminated string owned by the driver.
    (ok && !name.is_null()).then(|| unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
}
