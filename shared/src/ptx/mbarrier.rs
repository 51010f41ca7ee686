//! The `mbarrier` object as the CPU models it: what its 8 bytes of shared memory hold, and what
//! each operation does to them. No engine in it: the executor reads the word, calls [`apply`],
//! and writes it back.
//!
//! **The object.** The ISA leaves the contents of an mbarrier opaque; recap stores, low bits
//! first: the arrivals still pending in the current phase (21 bits), the arrivals expected per
//! phase (21 bits), the transaction count (21 bits, signed: bytes expected minus bytes done) and
//! the phase parity (bit 63). A phase completes when its pending arrivals and its transaction
//! count are both zero: the parity flips, the pending count is reset to the expected count and
//! the transaction count to zero. Counts out of the ranges the ISA allows (arrivals up to
//! 2^20 - 1, transaction counts within ±(2^20 - 1)), which the ISA leaves undefined, saturate
//! (arrivals) or wrap (transaction bytes).
//!
//! **Why waits can be decided at once.** A block's threads run in lockstep segments and every
//! asynchronous copy (`cp.async`, `cp.async.bulk`) is complete when it issues, so by the time a
//! thread waits, every arrival and every transaction that threads before it in the segment have
//! issued has been counted. A wait on a complete phase succeeds; a wait on one that is not
//! complete returns false, as a `try_wait` does when its time limit passes. A wait that fails
//! again with no barrier changed since its last failure can never succeed (the threads that
//! would arrive are the ones spinning), so the executor stops the block there with an error
//! instead of spinning until the instruction budget runs out.
//!
//! The state an `arrive` returns is the object's word before the arrival; `test_wait` and
//! `try_wait` with such a state succeed once the parity differs from the state's, and with
//! `.parity` once the current parity differs from the one given (the phase of that parity has
//! completed).

use super::ir::MbarOp;

const FIELD: u64 = (1 << 21) - 1;
const PENDING: u32 = 0;
const EXPECTED: u32 = 21;
const TX: u32 = 42;
const PARITY: u32 = 63;

fn field(w: u64, at: u32) -> u64 {
    (w >> at) & FIELD
}

fn with(w: u64, at: u32, v: u64) -> u64 {
    (w & !(FIELD << at)) | (v & FIELD) << at
}

/// The bits of a state that hold its pending arrivals, the lowest (`mbarrier.pending_count`).
pub(crate) const PENDING_MASK: u64 = FIELD << PENDING;

#[cfg(test)]
fn pending(w: u64) -> u64 {
    w & PENDING_MASK
}

fn parity(w: u64) -> u64 {
    w >> PARITY
}

/// Completes the phase when nothing is pending.
fn settle(w: u64) -> u64 {
    if field(w, PENDING) != 0 || field(w, TX) != 0 {
        return w;
    }
    let w = with(w, PENDING, field(w, EXPECTED));
    w ^ 1 << PARITY
}

/// Arrivals (`count`) at `w`, of which `drop` are also expected no more from now on.
fn arrive(w: u64, count: u64, drop: bool) -> u64 {
    let mut w = w;
    if drop {
        w = with(w, EXPECTED, field(w, EXPECTED).saturating_sub(count));
    }
    w = with(w, PENDING, field(w, PENDING).saturating_sub(count));
    settle(w)
}

fn add_tx(w: u64, bytes: i64) -> u64 {
    with(w, TX, (field(w, TX) as i64).wrapping_add(bytes) as u64)
}

/// Operation `op` with operand `b` on the object's word `w`: the new word, and what the
/// instruction gives its destination (the word before an arrive, 1 or 0 for a wait).
pub(crate) fn apply(op: MbarOp, w: u64, b: u64) -> (u64, u64) {
    match op {
        MbarOp::Init => {
            let count = b.min(FIELD);
            (with(with(0, PENDING, count), EXPECTED, count), 0)
        }
        MbarOp::Arrive { drop, expect_tx: false } => (arrive(w, b.min(FIELD), drop), w),
        MbarOp::Arrive { drop, expect_tx: true } => (arrive(add_tx(w, b as u32 as i64), 1, drop), w),
        MbarOp::ExpectTx => (add_tx(w, b as u32 as i64), 0),
        MbarOp::CompleteTx => (settle(add_tx(w, -(b as u32 as i64))), 0),
        MbarOp::Wait { parity: true, .. } => (w, (parity(w) != (b & 1)) as u64),
        MbarOp::Wait { parity: false, .. } => (w, (parity(w) != parity(b)) as u64),
        MbarOp::Inval => (0, 0),
        MbarOp::CpAsyncArrive { noinc: true } => (arrive(w, 1, false), 0),
        MbarOp::CpAsyncArrive { noinc: false } => (w, 0),
    }
}

/// Whether `op` changes the object (a wait does not).
pub(crate) fn changes(op: MbarOp) -> bool {
    !matches!(op, MbarOp::Wait { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARRIVE: MbarOp = MbarOp::Arrive { drop: false, expect_tx: false };
    const PARITY_WAIT: MbarOp = MbarOp::Wait { parity: true, blocking: true };

    #[test]
    fn a_phase_completes_when_arrivals_and_bytes_are_done() {
        let (w, _) = apply(MbarOp::Init, 0, 2);
        assert_eq!(apply(PARITY_WAIT, w, 0).1, 0);
        let (w, state) = apply(MbarOp::Arrive { drop: false, expect_tx: true }, w, 64);
        assert_eq!(pending(state), 2);
        let (w, _) = apply(ARRIVE, w, 1);
        assert_eq!(apply(PARITY_WAIT, w, 0).1, 0, "64 bytes still expected");
        let (w, _) = apply(MbarOp::CompleteTx, w, 64);
        assert_eq!(apply(PARITY_WAIT, w, 0).1, 1, "phase 0 complete");
        assert_eq!(apply(PARITY_WAIT, w, 1).1, 0, "phase 1 not yet");
        assert_eq!(apply(MbarOp::Wait { parity: false, blocking: false }, w, state).1, 1);
        assert_eq!(pending(w), 2);
    }

    #[test]
    fn bytes_may_complete_before_they_are_expected() {
        let (w, _) = apply(MbarOp::Init, 0, 1);
        let (w, _) = apply(MbarOp::CompleteTx, w, 128);
        assert_eq!(apply(PARITY_WAIT, w, 0).1, 0);
        let (w, _) = apply(MbarOp::Arrive { drop: false, expect_tx: true }, w, 128);
        assert_eq!(apply(PARITY_WAIT, w, 0).1, 1);
    }

    #[test]
    fn arrive_drop_lowers_the_expected_count() {
        let (w, _) = apply(MbarOp::Init, 0, 3);
        let (w, _) = apply(MbarOp::Arrive { drop: true, expect_tx: false }, w, 1);
        let (w, _) = apply(ARRIVE, w, 2);
        assert_eq!(apply(PARITY_WAIT, w, 0).1, 1);
        assert_eq!(pending(w), 2, "the next phase expects one arrival fewer");
    }
}
