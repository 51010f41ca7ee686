//! Any bytes as a Warp capture (`.wrp`): `shared::wrp::parse` returns an error or a capture, never
//! panics, and whatever it reads lies inside the input (region contents, argument bytes, uploads).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::wrp::{self, OpKind, WrpOp};

fn inside(data: &[u8], part: &[u8]) -> bool {
    let (start, end) = (data.as_ptr() as usize, data.as_ptr() as usize + data.len());
    let p = part.as_ptr() as usize;
    part.is_empty() || (p >= start && p + part.len() <= end)
}

fn check(data: &[u8], ops: &[WrpOp]) {
    for op in ops {
        assert!((op.offset as usize) < data.len());
        match &op.kind {
            OpKind::Launch(l) => {
                for p in l.params.iter().chain(&l.adjoints) {
                    assert!(matches!(p.value, std::borrow::Cow::Owned(_)) || inside(data, &p.value));
                    assert!(p.pointers.iter().all(|q| q.at as usize + 8 <= p.value.len()));
                }
            }
            OpKind::Upload { data: bytes, .. } | OpKind::Fill { value: bytes, .. } => assert!(inside(data, bytes)),
            OpKind::If { then, otherwise, .. } => {
                check(data, then);
                check(data, otherwise);
            }
            OpKind::While { body, .. } => check(data, body),
            _ => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(capture) = wrp::parse(data) else { return };
    for r in &capture.regions {
        if let Some(bytes) = r.initial {
            assert!(inside(data, bytes) && bytes.len() as u64 == r.size);
        }
    }
    check(data, &capture.ops);
});
