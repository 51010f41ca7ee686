//! `recap capture --record-effects`: what each launch of a kernel without PTX wrote, kept so that
//! a CPU replay can go on past it (`shared::effects` says what is hashed and why).
//!
//! Before such a launch is forwarded, the context is synchronised and every region the launch can
//! reach (its parameters' regions and, through the pointers they hold, theirs) is read and hashed:
//! the launch's inputs. After the launch returns, the context is synchronised again and the same
//! regions are read back; each one's changed span is the launch's write there. This is two full
//! reads of the reachable regions per launch, which is why it is asked for and not the default.
//! Launches inside a CUDA graph launch run as one unit with their graph, so they cannot be read
//! around one by one: such a graph is issued node by node instead where it can be
//! (`graph_by_nodes.rs`); where it cannot, they are reported as incomplete.

use shared::effects::{changed_span, reachable, InputsHasher, INPUTS_HASH_LEN};

use super::{read_device, region_name, State};
use crate::real;
use crate::sys::CUDA_SUCCESS;

/// What one launch wrote: `(region, offset, bytes)`, with the hash of its inputs.
pub struct LaunchEffects {
    /// Its index in the recording's ops (the archive's op id).
    pub op: usize,
    pub inputs: [u8; INPUTS_HASH_LEN],
    pub writes: Vec<(usize, u64, Vec<u8>)>,
}

/// A launch on its way through the driver: its regions as they were before it.
pub struct Pending {
    op: usize,
    inputs: [u8; INPUTS_HASH_LEN],
    before: Vec<(usize, Vec<u8>)>,
}

impl State {
    /// Before forwarding launch `op` (the last op recorded), whose parameters point at `targets`.
    pub(super) fn effects_before(&mut self, op: usize, targets: impl Iterator<Item = usize>, kernel: &str) {
        if self.expanding_graph {
            self.report.incomplete(format!(
                "{kernel}: a launch inside a CUDA graph launch has no PTX, and its effects cannot be read around it"
            ));
            return;
        }
        let rec = self.recording.as_ref().expect("recording");
        let pairs: Vec<(u32, u32)> = rec
            .regions
            .iter()
            .enumerate()
            .flat_map(|(owner, r)| r.relocs.iter().map(move |&(_, target, _)| (owner as u32, target as u32)))
            .collect();
        let reach = reachable(targets.map(|t| t as u32), &pairs);
        // SAFETY: no arguments; the reads below must see every op issued before this one.
        unsafe { real::ctx_synchronize() };
        let mut hasher = InputsHasher::default();
        let mut before = Vec::with_capacity(reach.len());
        for region in reach {
            let r = &rec.regions[region as usize];
            match read_device(r.alloc.base, r.alloc.size) {
                Ok(bytes) => {
                    let words: Vec<u64> = r.relocs.iter().map(|&(offset, _, _)| offset).collect();
                    hasher.region(region, &bytes, &words);
                    before.push((region as usize, bytes));
                }
                Err(e) => {
                    let name = region_name(&r.alloc);
                    self.report.incomplete(format!(
                        "{kernel}: reading {name} before the launch failed (CUresult {e}): its effects are not recorded"
                    ));
                    return;
                }
            }
        }
        self.pending_effects = Some(Pending { op, inputs: hasher.finish(), before });
    }

    /// After the launch returned: what it changed.
    pub(super) fn effects_after(&mut self) {
        let Some(p) = self.pending_effects.take() else { return };
        // SAFETY: no arguments; the launch must have finished before its regions are read.
        let sync = unsafe { real::ctx_synchronize() };
        let Some(rec) = self.recording.as_mut() else { return };
        if sync != CUDA_SUCCESS {
            self.report
                .incomplete(format!("op {}: the launch failed (CUresult {sync}): its effects are not recorded", p.op));
            return;
        }
        let mut writes = Vec::new();
        for (region, before) in &p.before {
            let r = &rec.regions[*region];
            match read_device(r.alloc.base, r.alloc.size) {
                Ok(after) => {
                    if let Some((offset, bytes)) = changed_span(before, &after) {
                        writes.push((*region, offset, bytes.to_vec()));
                    }
                }
                Err(e) => {
                    let name = region_name(&r.alloc);
                    self.report.incomplete(format!(
                        "op {}: reading {name} after the launch failed (CUresult {e}): its effects are not recorded",
                        p.op
                    ));
                    return;
                }
            }
        }
        self.report.recorded_effects += 1;
        self.report.effects_bytes += writes.iter().map(|w| w.2.len() as u64).sum::<u64>();
        rec.effects.push(LaunchEffects { op: p.op, inputs: p.inputs, writes });
    }
}
