//! `--range nvtx:NAME[@DOMAIN]`: the interposer is also the program's NVTX injection library.
//!
//! # How NVTX reaches us
//!
//! NVTX v3 is header-only: every library or program that uses it (PyTorch's
//! `torch.cuda.nvtx.range_push`, the `nvtx` Python package, C++ `nvtxRangePushA`) carries its own
//! copy of a table of function pointers, one per NVTX call, that start out pointing at an
//! initialiser. The first NVTX call of each copy reads `NVTX_INJECTION64_PATH`, `dlopen`s that
//! library, and calls its `InitializeInjectionNvtx2` with the copy's export-table getter. Export
//! table 1 (callbacks) has `GetModuleFunctionTable(module, &table, &size)`: `table[id]` is the
//! address of the copy's slot for call `id` of that module (ids from 1; slot 0 and the one past
//! the last are NULL). The injection writes its own functions into the slots it wants; the copy
//! turns every slot left alone into a no-op. `recap capture --range nvtx:...` points
//! `NVTX_INJECTION64_PATH` at this library: the program already has it loaded as `libcuda.so.1`,
//! and the dynamic linker hands back that same object (same file), so there is one recorder.
//!
//! # What is taken over
//!
//! Of the core module: push/pop and start/end ranges (ASCII, wide and attribute forms); of the
//! second core module: the domain forms of both, and creating domains and registering strings,
//! since without us those would hand the program NULL handles and every domain would look like
//! the default one. Markers, category and thread names stay no-ops.
//!
//! # The range
//!
//! Nsight's convention: the first range whose message is NAME in the asked domain opens the
//! recorded range and its own end closes it. Push/pop ranges nest per thread and per domain, so
//! each thread keeps its depth per domain and the opening push remembers its thread and depth; a
//! pop at that depth on that thread closes it. Start/end ranges are process-wide: the opening
//! range's id closes it. Handles given out are small numbers (index + 1), never addresses, so a
//! stale or foreign handle looks up nothing.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use shared::capture::{NvtxDomain, Range};

use crate::record;

/// Export table ids and callback modules of the NVTX v3 injection ABI.
const ETID_CALLBACKS: u32 = 1;
const MODULE_CORE: u32 = 1;
const MODULE_CORE2: u32 = 5;

/// Call ids of the core module.
const CORE_RANGE_START_EX: usize = 4;
const CORE_RANGE_START_A: usize = 5;
const CORE_RANGE_START_W: usize = 6;
const CORE_RANGE_END: usize = 7;
const CORE_RANGE_PUSH_EX: usize = 8;
const CORE_RANGE_PUSH_A: usize = 9;
const CORE_RANGE_PUSH_W: usize = 10;
const CORE_RANGE_POP: usize = 11;

/// Call ids of the second core module (domains).
const CORE2_RANGE_START_EX: usize = 2;
const CORE2_RANGE_END: usize = 3;
const CORE2_RANGE_PUSH_EX: usize = 4;
const CORE2_RANGE_POP: usize = 5;
const CORE2_REGISTER_STRING_A: usize = 10;
const CORE2_REGISTER_STRING_W: usize = 11;
const CORE2_DOMAIN_CREATE_A: usize = 12;
const CORE2_DOMAIN_CREATE_W: usize = 13;

/// `nvtxEventAttributes_t`'s message types.
const MESSAGE_ASCII: i32 = 1;
const MESSAGE_UNICODE: i32 = 2;
const MESSAGE_REGISTERED: i32 = 3;

/// The export-table getter the program's NVTX copy hands to the injection.
type GetExportTable = unsafe extern "C" fn(id: u32) -> *const c_void;
/// A slot of the program's table: where one NVTX call's function pointer lives.
type FnSlot = *mut *const c_void;

/// Export table 1.
#[repr(C)]
struct CallbacksTable {
    struct_size: usize,
    get_module_function_table:
        Option<unsafe extern "C" fn(module: u32, out_table: *mut *const FnSlot, out_size: *mut u32) -> c_int>,
}

/// The leading fields of `nvtxEventAttributes_t` (version 2 and later keep this layout); only the
/// size and the message are read.
#[repr(C)]
#[allow(dead_code)]
struct EventAttributes {
    version: u16,
    size: u16,
    category: u32,
    color_type: i32,
    color: u32,
    payload_type: i32,
    reserved: i32,
    payload: u64,
    message_type: i32,
    message: *const c_void,
}

/// Domain names and registered strings, each at its handle - 1.
struct Names {
    domains: Vec<String>,
    strings: Vec<String>,
}

static NAMES: Mutex<Names> = Mutex::new(Names { domains: Vec::new(), strings: Vec::new() });
/// Ids handed out by start; 0 is never one.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// The id of the start/end range that opened the recorded range, 0 if none did.
static OPEN_ID: AtomicU64 = AtomicU64::new(0);

/// One thread's push/pop ranges.
#[derive(Default)]
struct Stacks {
    /// Depth per domain handle (0: the default domain).
    depth: HashMap<usize, i32>,
    /// `(domain, depth)` of the push on this thread that opened the recorded range.
    opened: Option<(usize, i32)>,
}

thread_local! {
    static STACKS: RefCell<Stacks> = RefCell::new(Stacks::default());
}

fn names() -> std::sync::MutexGuard<'static, Names> {
    NAMES.lock().unwrap_or_else(|p| p.into_inner())
}

/// The NVTX request of the range, if the range is an NVTX one.
fn wanted() -> Option<(&'static String, &'static NvtxDomain)> {
    match &crate::request::get().range {
        Range::Nvtx { message, domain } => Some((message, domain)),
        _ => None,
    }
}

/// Whether a range of `message` in domain `domain` (a handle) is the one asked for.
fn is_wanted(domain: usize, message: &str) -> bool {
    let Some((want, in_domain)) = wanted() else { return false };
    if want != message {
        return false;
    }
    match in_domain {
        NvtxDomain::Any => true,
        NvtxDomain::Default => domain == 0,
        NvtxDomain::Named(name) => domain != 0 && names().domains.get(domain - 1) == Some(name),
    }
}

/// The entry point NVTX looks up in an injection library. Returns 1 when the program's NVTX
/// copy now calls recap, 0 (NVTX stays a no-op) when its tables cannot be had.
///
/// # Safety
/// `get_export_table` is NVTX's export-table getter, as the NVTX v3 headers pass it.
#[no_mangle]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get_export_table: Option<GetExportTable>) -> c_int {
    catch_unwind(AssertUnwindSafe(|| {
        let Some(get) = get_export_table else { return 0 };
        let table = get(ETID_CALLBACKS) as *const CallbacksTable;
        if table.is_null() || (*table).struct_size < std::mem::size_of::<CallbacksTable>() {
            return 0;
        }
        let Some(module_table) = (*table).get_module_function_table else { return 0 };
        let core: [(usize, *const c_void); 8] = [
            (CORE_RANGE_START_EX, range_start_ex as *const c_void),
            (CORE_RANGE_START_A, range_start_a as *const c_void),
            (CORE_RANGE_START_W, range_start_w as *const c_void),
            (CORE_RANGE_END, range_end as *const c_void),
            (CORE_RANGE_PUSH_EX, range_push_ex as *const c_void),
            (CORE_RANGE_PUSH_A, range_push_a as *const c_void),
            (CORE_RANGE_PUSH_W, range_push_w as *const c_void),
            (CORE_RANGE_POP, range_pop as *const c_void),
        ];
        let core2: [(usize, *const c_void); 8] = [
            (CORE2_RANGE_START_EX, domain_range_start_ex as *const c_void),
            (CORE2_RANGE_END, domain_range_end as *const c_void),
            (CORE2_RANGE_PUSH_EX, domain_range_push_ex as *const c_void),
            (CORE2_RANGE_POP, domain_range_pop as *const c_void),
            (CORE2_REGISTER_STRING_A, register_string_a as *const c_void),
            (CORE2_REGISTER_STRING_W, register_string_w as *const c_void),
            (CORE2_DOMAIN_CREATE_A, domain_create_a as *const c_void),
            (CORE2_DOMAIN_CREATE_W, domain_create_w as *const c_void),
        ];
        let installed = install(module_table, MODULE_CORE, &core) & install(module_table, MODULE_CORE2, &core2);
        c_int::from(installed)
    }))
    .unwrap_or(0)
}

/// Writes `ours` into the slots of `module`'s table; false if the program has no such table.
unsafe fn install(
    module_table: unsafe extern "C" fn(u32, *mut *const FnSlot, *mut u32) -> c_int,
    module: u32,
    ours: &[(usize, *const c_void)],
) -> bool {
    let (mut table, mut size): (*const FnSlot, u32) = (std::ptr::null(), 0);
    if module_table(module, &mut table, &mut size) == 0 || table.is_null() {
        return false;
    }
    for &(id, f) in ours {
        // Ids 1..size name slots; an older NVTX copy has fewer.
        if id < size as usize {
            let slot = *table.add(id);
            if !slot.is_null() {
                *slot = f;
            }
        }
    }
    true
}

/// Runs an NVTX call's body; a panic in it leaves the program's call answered with `or`.
fn guarded<T>(or: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(or)
}

/// A NUL-terminated string of the program's.
unsafe fn ascii(p: *const c_char) -> Option<String> {
    (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
}

/// A NUL-terminated `wchar_t` string of the program's (UTF-32 on Linux).
unsafe fn wide(p: *const u32) -> Option<String> {
    if p.is_null() {
        return None;
    }
    let mut out = String::new();
    let mut at = p;
    while *at != 0 {
        out.push(char::from_u32(*at).unwrap_or(char::REPLACEMENT_CHARACTER));
        at = at.add(1);
    }
    Some(out)
}

/// The message of event attributes, whichever form it takes.
unsafe fn message(attrs: *const EventAttributes) -> Option<String> {
    if attrs.is_null() || ((*attrs).size as usize) < std::mem::size_of::<EventAttributes>() {
        return None;
    }
    let a = &*attrs;
    match a.message_type {
        MESSAGE_ASCII => ascii(a.message.cast()),
        MESSAGE_UNICODE => wide(a.message.cast()),
        MESSAGE_REGISTERED => (a.message as usize).checked_sub(1).and_then(|i| names().strings.get(i).cloned()),
        _ => None,
    }
}

/// Whether a range beginning in `domain` (a push or a start) opens the recorded range: recording
/// is armed, its message (read only then) is the one asked for, and no range opened it before.
fn opens(domain: usize, message: impl FnOnce() -> Option<String>) -> bool {
    record::armed() && message().is_some_and(|m| is_wanted(domain, &m)) && record::marker_opens()
}

/// A push in `domain`: opens the recorded range if it is the one asked for. Returns the depth
/// of the new range (0 for the outermost), as `nvtxRangePush` does.
fn push(domain: usize, message: impl FnOnce() -> Option<String>) -> c_int {
    let depth = STACKS.with(|s| {
        let mut s = s.borrow_mut();
        let d = s.depth.entry(domain).or_insert(0);
        *d += 1;
        *d
    });
    if opens(domain, message) {
        STACKS.with(|s| s.borrow_mut().opened = Some((domain, depth)));
    }
    depth - 1
}

/// A pop in `domain`: closes the recorded range if it pops the push that opened it. Returns the
/// depth of the range it ended, or -1 without one.
fn pop(domain: usize, at: &str) -> c_int {
    let (depth, closes) = STACKS.with(|s| {
        let mut s = s.borrow_mut();
        let d = s.depth.entry(domain).or_insert(0);
        if *d == 0 {
            return (0, false);
        }
        let depth = *d;
        *d -= 1;
        let closes = s.opened == Some((domain, depth));
        if closes {
            s.opened = None;
        }
        (depth, closes)
    });
    if closes {
        record::marker_closes(at);
    }
    depth - 1
}

/// A start in `domain`: a new range id, which opens the recorded range if it is the one asked for.
fn start(domain: usize, message: impl FnOnce() -> Option<String>) -> u64 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    if opens(domain, message) {
        OPEN_ID.store(id, Ordering::Relaxed);
    }
    id
}

fn end(id: u64, at: &str) {
    if id != 0 && OPEN_ID.compare_exchange(id, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        record::marker_closes(at);
    }
}

unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    guarded(-1, || push(0, || ascii(message)))
}

unsafe extern "C" fn range_push_w(message: *const u32) -> c_int {
    guarded(-1, || push(0, || wide(message)))
}

unsafe extern "C" fn range_push_ex(attrs: *const EventAttributes) -> c_int {
    guarded(-1, || push(0, || message(attrs)))
}

unsafe extern "C" fn range_pop() -> c_int {
    guarded(-1, || pop(0, "nvtxRangePop"))
}

unsafe extern "C" fn range_start_a(message: *const c_char) -> u64 {
    guarded(0, || start(0, || ascii(message)))
}

unsafe extern "C" fn range_start_w(message: *const u32) -> u64 {
    guarded(0, || start(0, || wide(message)))
}

unsafe extern "C" fn range_start_ex(attrs: *const EventAttributes) -> u64 {
    guarded(0, || start(0, || message(attrs)))
}

unsafe extern "C" fn range_end(id: u64) {
    guarded((), || end(id, "nvtxRangeEnd"))
}

unsafe extern "C" fn domain_range_push_ex(domain: usize, attrs: *const EventAttributes) -> c_int {
    guarded(-1, || push(domain, || message(attrs)))
}

unsafe extern "C" fn domain_range_pop(domain: usize) -> c_int {
    guarded(-1, || pop(domain, "nvtxDomainRangePop"))
}

unsafe extern "C" fn domain_range_start_ex(domain: usize, attrs: *const EventAttributes) -> u64 {
    guarded(0, || start(domain, || message(attrs)))
}

unsafe extern "C" fn domain_range_end(_domain: usize, id: u64) {
    guarded((), || end(id, "nvtxDomainRangeEnd"))
}

/// The handle of `text` in `list` (index + 1), added if new: the same name gets the same handle,
/// as NVTX documents for domains and registered strings. No text is handle 0.
fn intern(list: impl FnOnce(&mut Names) -> &mut Vec<String>, text: Option<String>) -> usize {
    let Some(text) = text else { return 0 };
    let mut names = names();
    let list = list(&mut names);
    match list.iter().position(|s| *s == text) {
        Some(i) => i + 1,
        None => {
            list.push(text);
            list.len()
        }
    }
}

fn domain_handle(name: Option<String>) -> usize {
    intern(|n| &mut n.domains, name)
}

fn string_handle(text: Option<String>) -> usize {
    intern(|n| &mut n.strings, text)
}

unsafe extern "C" fn domain_create_a(name: *const c_char) -> usize {
    guarded(0, || domain_handle(ascii(name)))
}

unsafe extern "C" fn domain_create_w(name: *const u32) -> usize {
    guarded(0, || domain_handle(wide(name)))
}

unsafe extern "C" fn register_string_a(_domain: usize, text: *const c_char) -> usize {
    guarded(0, || string_handle(ascii(text)))
}

unsafe extern "C" fn register_string_w(_domain: usize, text: *const u32) -> usize {
    guarded(0, || string_handle(wide(text)))
}
