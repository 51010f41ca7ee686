//! The vocabulary of [`Memory::record_types`](super::Memory::record_types): what a store tells
//! about the bytes it writes, one byte code per byte of memory. A code is an
//! [`ElemType`] code, or [`BITS`] with the store's width for a `.b16`/`.b32`/`.b64` store, which
//! says how wide its elements are but not whether they are integers or floats (Triton stores
//! floats that way); `shared::check::infer` settles those by the region's declared dtype.

use crate::archive::ElemType;

use super::ir::{Ty, F};

/// Bytes no PTX store wrote.
pub const UNTYPED: u8 = 0;
/// Set on the code of a store that gives only a width (the low bits: its bytes per element).
pub const BITS: u8 = 0x80;

fn code(t: ElemType) -> u8 {
    t.code() as u8
}

/// What a byte code means: an element type, or `Err(width)` for a width-only store.
pub fn decode(c: u8) -> Result<ElemType, u8> {
    if c & BITS != 0 {
        return Err(c & !BITS);
    }
    Ok(ElemType::from_code(c as u32).unwrap_or(ElemType::Untyped))
}

/// The code of an `st` of PTX type `ty`.
pub(crate) fn of_store(ty: Ty) -> u8 {
    match ty {
        Ty::F16 => code(ElemType::F16),
        Ty::BF16 => code(ElemType::Bf16),
        Ty::F32 => code(ElemType::F32),
        Ty::F64 => code(ElemType::F64),
        Ty::U8 | Ty::S8 | Ty::B8 => code(ElemType::I8),
        Ty::U16 | Ty::S16 => code(ElemType::I16),
        Ty::U32 | Ty::S32 => code(ElemType::I32),
        Ty::U64 | Ty::S64 => code(ElemType::I64),
        Ty::B16 => BITS | 2,
        Ty::B32 | Ty::F16x2 | Ty::BF16x2 => BITS | 4,
        Ty::B64 | Ty::B128 => BITS | 8,
        Ty::Pred => UNTYPED,
    }
}

/// The code of an atomic of `size` bytes, a float one where `f` says so.
pub(crate) fn of_atomic(f: Option<F>, size: u8) -> u8 {
    match (f, size) {
        (Some(F::F16), _) => code(ElemType::F16),
        (Some(F::BF16), _) => code(ElemType::Bf16),
        (Some(F::F32), _) => code(ElemType::F32),
        (Some(F::F64), _) => code(ElemType::F64),
        (None, 8) => code(ElemType::I64),
        (None, 4) => code(ElemType::I32),
        (None, 2) => code(ElemType::I16),
        (None, _) => code(ElemType::I8),
    }
}

/// A store of `size` bytes of value `v` with code `c`: 64-bit integers and bits whose value is
/// an address in memory are pointers.
pub(crate) fn with_value(c: u8, size: u8, v: u64, is_address: impl FnOnce(u64) -> bool) -> u8 {
    if size == 8 && (c == code(ElemType::I64) || c == BITS | 8) && is_address(v) {
        code(ElemType::Ptr)
    } else {
        c
    }
}

/// Which float type each register last held, in the text's order: what makes a `.b16`, `.b32`
/// or `.u16` store of a converted or computed float a float store (nvcc stores `__half` with
/// `st.u16`, Triton every float with `st.b32` after a `mov.b32` from an `.f32` register). A
/// static guess from the last definition above the store, ignoring branches; a register that
/// held anything else, or is loaded as bits, has no float type.
#[derive(Default)]
pub(crate) struct Provenance {
    floats: std::collections::HashMap<String, F>,
    /// The float type this function keeps in shared memory, where every value it stores there
    /// is of that type or was itself loaded from shared memory ([`Provenance::learn_shared`]):
    /// what a load from shared memory (`ld.shared`, `ldmatrix`) then holds. Compilers stage
    /// results through shared memory to transpose or coalesce them (Triton's reductions do), and
    /// the global store that follows says only `.b32`.
    shared: Option<F>,
}

/// `ld.shared…` or `ldmatrix` (which reads shared memory only).
fn is_shared_load(opcode: &str) -> bool {
    (opcode.starts_with("ld.") && opcode.contains(".shared")) || opcode.starts_with("ldmatrix")
}

fn scalar_float(t: Ty) -> Option<F> {
    match t {
        Ty::F16 | Ty::F16x2 => Some(F::F16),
        Ty::BF16 | Ty::BF16x2 => Some(F::BF16),
        Ty::F32 => Some(F::F32),
        Ty::F64 => Some(F::F64),
        _ => None,
    }
}

/// Instructions whose register sources are floats of their last type.
const FLOAT_OPS: [&str; 23] = [
    "add", "sub", "mul", "div", "fma", "mad", "min", "max", "neg", "abs", "rcp", "sqrt", "rsqrt", "sin", "cos", "lg2",
    "ex2", "tanh", "setp", "set", "cvt", "copysign", "testp",
];

fn float_bytes(f: F) -> usize {
    match f {
        F::F16 | F::BF16 => 2,
        F::F32 => 4,
        F::F64 => 8,
    }
}

impl Provenance {
    /// A provenance for a function whose instructions are `insts` (opcode and operands, in
    /// order): one pass over them finds the float type of what they store in shared memory.
    pub(crate) fn learn_shared<'x>(insts: impl Iterator<Item = (&'x str, &'x [super::parse::Operand])>) -> Provenance {
        use super::parse::Operand;
        let mut p = Provenance::default();
        let mut from_shared: std::collections::HashSet<String> = Default::default();
        let mut kinds: Vec<Option<F>> = Vec::new();
        let mut mixed = false;
        for (opcode, ops) in insts {
            let shared_load = is_shared_load(opcode);
            if opcode.starts_with("st.") && opcode.contains(".shared") {
                let regs: Vec<&String> = match ops.get(1) {
                    Some(Operand::Name(n)) => vec![n],
                    Some(Operand::Vec(v)) => {
                        v.iter().filter_map(|x| if let Operand::Name(n) = x { Some(n) } else { None }).collect()
                    }
                    _ => {
                        mixed = true;
                        Vec::new()
                    }
                };
                for r in regs {
                    match p.floats.get(r) {
                        Some(f) => kinds.push(Some(*f)),
                        None if from_shared.contains(r) => {}
                        None => mixed = true,
                    }
                }
            }
            p.observe(opcode, ops);
            if let Some(dst) = ops.first() {
                let names: Vec<String> = match dst {
                    Operand::Name(n) => vec![n.clone()],
                    Operand::Vec(v) => {
                        v.iter().filter_map(|x| if let Operand::Name(n) = x { Some(n.clone()) } else { None }).collect()
                    }
                    _ => Vec::new(),
                };
                for n in names {
                    if shared_load {
                        from_shared.insert(n);
                    } else if !opcode.starts_with("st.") {
                        from_shared.remove(&n);
                    }
                }
            }
        }
        let first = kinds.first().copied().flatten();
        let shared = first.filter(|f| !mixed && kinds.iter().all(|k| *k == Some(*f)));
        Provenance { floats: Default::default(), shared }
    }

    /// Notes what instruction `opcode` with `operands` (destination first) leaves in its
    /// destination registers.
    pub(crate) fn observe(&mut self, opcode: &str, operands: &[super::parse::Operand]) {
        use super::parse::Operand;
        let mut parts = opcode.split('.');
        let base = parts.next().unwrap_or("");
        if matches!(base, "st" | "red" | "bar" | "bra" | "ret" | "exit" | "membar" | "fence" | "prefetch" | "call") {
            return;
        }
        let types: Vec<Ty> = parts.filter_map(Ty::parse).collect();
        let names = |o: &Operand| -> Vec<String> {
            match o {
                Operand::Name(n) => vec![n.clone()],
                Operand::Vec(v) => {
                    v.iter().filter_map(|x| if let Operand::Name(n) = x { Some(n.clone()) } else { None }).collect()
                }
                // A shuffle's value and its predicate: the predicate holds no float.
                Operand::Pair(n, _) => vec![n.clone()],
                _ => Vec::new(),
            }
        };
        // The float a register operand holds; a literal goes with any (`selp.b32 %r, %r, 0, %p`).
        let held = |o: Option<&Operand>| -> Option<Option<F>> {
            match o {
                Some(Operand::Name(n)) => Some(self.floats.get(n).copied()),
                Some(Operand::Lit(_)) => None,
                _ => Some(None),
            }
        };
        // What moves bits unchanged from its operands keeps their float type: the data operands
        // of a select, a shuffle's value. LLVM's PTX keeps every value in untyped `.b32`/`.b64`
        // registers (XLA's kernels), selecting and shuffling floats as `.b32`.
        let moved = |ops: &[Option<&Operand>]| -> Option<F> {
            let held: Vec<Option<F>> = ops.iter().filter_map(|&o| held(o)).collect();
            match held.first() {
                Some(&Some(f)) if held.iter().all(|h| *h == Some(f)) => Some(f),
                _ => None,
            }
        };
        let Some(dst) = operands.first() else { return };
        let kind = match base {
            // Bits loaded from shared memory hold what the function keeps there.
            _ if is_shared_load(opcode) && types.first().copied().and_then(scalar_float).is_none() => self.shared,
            "cvt" | "ld" | "ldu" => types.first().copied().and_then(scalar_float),
            "mov" => match operands.get(1) {
                Some(src @ (Operand::Name(_) | Operand::Vec(_))) => {
                    let srcs: Vec<Option<F>> = names(src).iter().map(|n| self.floats.get(n).copied()).collect();
                    match srcs.first() {
                        Some(&Some(f)) if srcs.iter().all(|s| *s == Some(f)) => Some(f),
                        _ => None,
                    }
                }
                _ => types.last().copied().and_then(scalar_float),
            },
            "setp" | "set" | "testp" => None,
            // `slct`'s first type is its data's, its last the selector's.
            "selp" | "slct" => match types.first().copied() {
                Some(Ty::B16 | Ty::B32 | Ty::B64 | Ty::U16 | Ty::U32 | Ty::U64) => {
                    moved(&[operands.get(1), operands.get(2)])
                }
                t => t.and_then(scalar_float),
            },
            "shfl" => moved(&[operands.get(1)]),
            _ => types.last().copied().and_then(scalar_float),
        };
        // Registers a float instruction reads hold floats of its source type, unless they are
        // known to hold another: XLA loads floats as `.b32` bits and computes on them.
        let reads_floats = FLOAT_OPS.contains(&base);
        if let Some(f) = types.last().copied().and_then(scalar_float).filter(|_| reads_floats) {
            for src in operands.iter().skip(1) {
                if let Operand::Name(n) = src {
                    self.floats.entry(n.clone()).or_insert(f);
                }
            }
        }
        for d in names(dst) {
            match kind {
                Some(f) => self.floats.insert(d, f),
                None => self.floats.remove(&d),
            };
        }
    }

    /// The codes of an `st` of type `ty` whose value is `src`, one per element (a vector's
    /// elements in order): a float code where `ty` says only bits or an unsigned width and the
    /// element's register last held a float whose size divides the element's width. Each element
    /// on its own, since one vector store may pack an integer beside a float's bits: CUB's scan
    /// tile state is `st.relaxed.gpu.v2.u32 {status, value}`, its value a `float` moved to `.b32`.
    pub(crate) fn store_codes(&self, ty: Ty, src: &super::parse::Operand) -> Vec<u8> {
        use super::parse::Operand;
        let plain = of_store(ty);
        let elements: Vec<&Operand> = match src {
            Operand::Vec(v) => v.iter().collect(),
            x => vec![x],
        };
        elements
            .into_iter()
            .map(|x| match x {
                Operand::Name(r) if matches!(ty, Ty::B16 | Ty::B32 | Ty::B64 | Ty::U16 | Ty::U32 | Ty::U64) => {
                    match self.floats.get(r) {
                        Some(&f) if (ty.bytes() as usize).is_multiple_of(float_bytes(f)) => of_atomic(Some(f), 0),
                        _ => plain,
                    }
                }
                _ => plain,
            })
            .collect()
    }
}
