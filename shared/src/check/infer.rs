//! Element types inferred per byte range: an archive replayed once on the CPU interpreter with
//! [`ReplayOptions::record_types`] on, so memory keeps the type of the last PTX store to every
//! byte (`ptx::typemap`), read back as a run-length typed layout per region (`recap infer-types`,
//! the archive's `types` section).
//!
//! A store of `.b16/.b32/.b64` says only a width; it takes the region's declared dtype where that
//! is a float whose elements divide the width (Triton stores `f32` and packed `f16` pairs as
//! `.b32`), and is an integer of that width otherwise. Bytes no PTX wrote (host data, copies of
//! such bytes, memsets, launches replayed from recorded effects) stay untyped.

use crate::archive::{Archive, DType, ElemType, OpId, RegionId, Stretch};
use crate::ptx::{typemap, Engine};
use crate::replay::{CpuReplay, NoObserver, ReplayError, ReplayOptions};

/// The element type a byte's code stands for in a region of declared `dtype`.
pub fn resolve(code: u8, dtype: DType) -> ElemType {
    match typemap::decode(code) {
        Ok(t) => t,
        Err(width) => match ElemType::of_dtype(dtype) {
            Some(t) if t.is_float() && (width as usize).is_multiple_of(t.size()) => t,
            _ => match width {
                1 => ElemType::I8,
                2 => ElemType::I16,
                8 => ElemType::I64,
                _ => ElemType::I32,
            },
        },
    }
}

/// What one inference replay learnt.
#[derive(Debug, Default)]
pub struct Inference {
    /// The typed layout of each region some PTX store wrote, in region order.
    pub layouts: Vec<(RegionId, Vec<Stretch>)>,
    /// Launches the interpreter could not run (no PTX, PTX it refuses, a GPU-only attribute) and
    /// ops that failed, with the reason: what they wrote stays untyped.
    pub skipped: Vec<(OpId, String)>,
    /// Why the replay ended before the iteration's end (its budget, a cancel); the layouts then
    /// come from the ops before that point.
    pub stopped: Option<String>,
}

/// The typed layout of every region that PTX stores wrote, from one iteration of `archive` on
/// the CPU interpreter (native code keeps no type map); `options` gives budget, limits and
/// cancellation, its engine, type recording and skipping are set here. A launch the CPU cannot
/// run is passed over, and a spent budget or a cancel keeps what was learnt so far, so that an
/// archive of a real program (library kernels without PTX, TMA) still gets the types its PTX
/// shows. Regions no PTX store wrote are left out (no layout says the same as an untyped one).
pub fn infer_layouts(archive: &Archive<'_>, options: ReplayOptions) -> Result<Inference, ReplayError> {
    let options = ReplayOptions { engine: Engine::Interpreter, record_types: true, skip_unrunnable: true, ..options };
    let mut replay = CpuReplay::new(archive, options)?;
    let stopped = match replay.run_iteration(&mut NoObserver) {
        Ok(_) => None,
        Err(e @ (ReplayError::Budget { .. } | ReplayError::Cancelled { .. })) => Some(e.to_string()),
        Err(e) => return Err(e),
    };
    let mut layouts = Vec::new();
    for view in archive.regions() {
        let Some(codes) = replay.written_types(view.id)? else { continue };
        if codes.iter().all(|&c| c == typemap::UNTYPED) {
            continue;
        }
        layouts.push((view.id, crate::archive::run_lengths(codes.into_iter().map(|c| resolve(c, view.dtype)))));
    }
    Ok(Inference { layouts, skipped: replay.skipped().to_vec(), stopped })
}
