//! Element types the program's own arrays declare, asked for as the range ends
//! (`shared::archive::declared` says what they are for).
//!
//! The interposer cannot see a dtype: the driver only moves bytes. The program's runtime can. A
//! Python program run by `recap capture` imports recap's `sitecustomize` (`cli/sitecustomize.py`),
//! which registers a callback here ([`recap_set_declarer`]); as a range ends, before the
//! recorder's lock is taken, [`gather`] calls it, and it names each live device array through
//! [`recap_declare`]. The writer then maps each onto the region that holds it ([`for_regions`]).
//!
//! Why before the lock: the callback runs Python, which takes the interpreter's lock, and another
//! thread of the program may hold that one while it waits for the recorder's (a launch in flight).
//! Taking them in the other order could deadlock. The callback may itself call the driver (a JAX
//! array waits for its buffer): those calls pass through the hooks as any other.

use std::cell::Cell;
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use shared::archive::declared::{elem_type_named, resolve, DeclaredType};
use shared::archive::{ElemType, RegionId};

use crate::control::{guard, text, ControlError};
use crate::record::Recording;

/// Declarations kept per range, at most: a program with more live arrays gets the first ones
/// typed and a note.
const MAX_DECLARATIONS: usize = 1 << 20;

/// One live array's bytes, as the program named them.
struct Declaration {
    ptr: u64,
    bytes: u64,
    ty: ElemType,
    from: String,
}

#[derive(Default)]
struct Declared {
    list: Vec<Declaration>,
    /// Declarations past [`MAX_DECLARATIONS`], dropped.
    dropped: u64,
}

static DECLARED: Mutex<Declared> = Mutex::new(Declared { list: Vec::new(), dropped: 0 });

/// The registered callback, as an address (0: none).
static DECLARER: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set while this thread runs the callback, so that a range end inside it does not call again.
    static GATHERING: Cell<bool> = const { Cell::new(false) };
}

fn declared() -> std::sync::MutexGuard<'static, Declared> {
    DECLARED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Registers `declarer` (NULL: none), called as each range ends to name the live arrays.
#[no_mangle]
pub extern "C" fn recap_set_declarer(declarer: Option<extern "C" fn()>) -> c_int {
    DECLARER.store(declarer.map_or(0, |f| f as usize), Ordering::SeqCst);
    0
}

/// Names `bytes` bytes of device memory at `ptr` as elements of `ty` (`f32`, `bf16`, `i64`, ...:
/// `shared::archive::ElemType`'s names), declared by `from` (`torch.float32`).
///
/// # Safety
/// `ty` and `from` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn recap_declare(ptr: u64, bytes: u64, ty: *const c_char, from: *const c_char) -> c_int {
    guard(|| {
        // SAFETY: forwarded from the caller.
        let (name, from) = unsafe { (text(ty, "element type")?, text(from, "what declared it")?) };
        let ty = elem_type_named(&name).ok_or(ControlError::ElemType { name })?;
        let mut d = declared();
        if d.list.len() >= MAX_DECLARATIONS {
            d.dropped += 1;
        } else {
            d.list.push(Declaration { ptr, bytes, ty, from });
        }
        Ok(())
    })
}

/// Asks the registered callback, now, for the live arrays (what it named before is forgotten).
#[no_mangle]
pub extern "C" fn recap_gather_declared() -> c_int {
    gather();
    0
}

/// As a range ends, before the recorder's lock is taken: the callback, if one is registered,
/// names the live arrays afresh.
pub fn gather() {
    let address = DECLARER.load(Ordering::SeqCst);
    if address == 0 || GATHERING.get() {
        return;
    }
    *declared() = Declared::default();
    // SAFETY: registered by `recap_set_declarer` as an `extern "C" fn()`, and kept alive by its
    // owner until it registers NULL.
    let declarer: extern "C" fn() = unsafe { std::mem::transmute::<usize, extern "C" fn()>(address) };
    GATHERING.set(true);
    declarer();
    GATHERING.set(false);
}

/// The declarations as stretches of the recording's regions (by the recording's region index):
/// each array onto the newest region that holds its first byte, clipped to the region's first
/// `sizes[r]` bytes; overlaps resolved (`declared::resolve`). Also says how many arrays lay
/// outside every region and how many were dropped.
pub fn for_regions(rec: &Recording, sizes: &[u64]) -> (Vec<DeclaredType>, usize, u64) {
    let d = declared();
    let mut out = Vec::new();
    let mut outside = 0;
    for a in &d.list {
        let holder = rec.regions.iter().rposition(|r| r.alloc.base <= a.ptr && a.ptr < r.alloc.base + r.alloc.size);
        let Some(r) = holder else {
            outside += 1;
            continue;
        };
        let offset = a.ptr - rec.regions[r].alloc.base;
        let end = offset.saturating_add(a.bytes).min(sizes[r]);
        if end <= offset {
            continue;
        }
        let size = a.ty.size() as u64;
        out.push(DeclaredType {
            region: r as RegionId,
            offset,
            len: (end - offset) / size * size,
            ty: a.ty,
            from: a.from.clone(),
        });
    }
    (resolve(out), outside, d.dropped)
}

/// Forgets the declarations (once a range's archive has them).
pub fn clear() {
    *declared() = Declared::default();
}
