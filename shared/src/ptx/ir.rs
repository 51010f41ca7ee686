//! The lowered form the executor runs: per function, a flat list of typed instructions whose operands
//! are register indices (immediates live in constant registers filled once per frame), whose branch
//! targets are instruction indices and whose reconvergence points are precomputed.

/// A register index within one function's register file.
pub(crate) type R = u32;

/// Integer widths of arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum W {
    W16,
    W32,
    W64,
}

impl W {
    pub fn bits(self) -> u32 {
        match self {
            W::W16 => 16,
            W::W32 => 32,
            W::W64 => 64,
        }
    }
}

/// Float formats of arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum F {
    F16,
    BF16,
    F32,
    F64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rnd {
    Rn,
    Rz,
    Rm,
    Rp,
}

/// Scalar types as PTX spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    B8,
    B16,
    B32,
    B64,
    B128,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    F16x2,
    BF16,
    BF16x2,
    F32,
    F64,
    Pred,
}

impl Ty {
    pub fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "b128" => Ty::B128,
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "f16x2" => Ty::F16x2,
            "bf16" => Ty::BF16,
            "bf16x2" => Ty::BF16x2,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }
    pub fn bits(self) -> u32 {
        match self {
            Ty::B8 | Ty::U8 | Ty::S8 => 8,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::BF16 => 16,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16x2 | Ty::BF16x2 => 32,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 64,
            Ty::B128 => 128,
            Ty::Pred => 1,
        }
    }
    pub fn bytes(self) -> u32 {
        (self.bits() / 8).max(1)
    }
    pub fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }
    pub fn is_float(self) -> bool {
        matches!(self, Ty::F16 | Ty::BF16 | Ty::F32 | Ty::F64 | Ty::F16x2 | Ty::BF16x2)
    }
    pub fn float(self) -> Option<F> {
        match self {
            Ty::F16 => Some(F::F16),
            Ty::BF16 => Some(F::BF16),
            Ty::F32 => Some(F::F32),
            Ty::F64 => Some(F::F64),
            _ => None,
        }
    }
    pub fn int_w(self) -> Option<W> {
        match self.bits() {
            16 if !self.is_float() => Some(W::W16),
            32 if !self.is_float() => Some(W::W32),
            64 if !self.is_float() => Some(W::W64),
            _ => None,
        }
    }
}

pub(crate) fn mask_bits(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Global,
    Shared,
    Local,
    Const,
    /// The kernel's parameter buffer (read-only, block-uniform).
    KParam,
    Generic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Base {
    Reg(R),
    /// The offset alone is the address.
    Abs,
    /// The offset is relative to the current call frame's local base.
    Frame,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Addr {
    pub base: Base,
    pub off: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Sreg {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    LaneId,
    WarpId,
    NWarpId,
    SmId,
    NSmId,
    GridId,
    LaneMaskEq,
    LaneMaskLt,
    LaneMaskLe,
    LaneMaskGt,
    LaneMaskGe,
    DynSmemSize,
    TotalSmemSize,
    Zero,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// Unordered forms (true when either operand is NaN).
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpTy {
    U(W),
    S(W),
    B(W),
    F(F),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FMode {
    /// `.rn/.rz/.rm/.rp` IEEE operations.
    Ieee(Rnd),
    /// `.approx`.
    Approx,
    /// `div.full`: the GPU's own division, not IEEE's (`numerics::sfu`).
    Full,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FFlags {
    pub ftz: bool,
    pub sat: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnOp {
    /// `d = a & mask`
    Mov(u64),
    /// `d = (a >> shift) & mask`: unpacking halves of a wider register.
    Extract(u8, u64),
    Neg(W),
    Abs(W),
    Not(u64),
    CNot(u64),
    Popc(W),
    Clz(W),
    Brev(W),
    Bfind {
        w: W,
        signed: bool,
        shiftamt: bool,
    },
    FNeg(F, bool),
    FAbs(F, bool),
    FRcp(F, FMode, bool),
    FSqrt(F, FMode, bool),
    FRsqrt(F, bool),
    FSin(bool),
    FCos(bool),
    FLg2(bool),
    FEx2(F, bool),
    FTanh(F),
    Testp(F, Testp),
    Cvt(Cvt),
    /// Predicate from `.pred` operand with negation handled at lowering (`not.pred`).
    PredNot,
    /// `isspacep`: whether a generic address falls in the given state space's window.
    IsSpace(Space),
    /// Conversions to and from the 8-bit float pairs (`.e4m3x2`, `.e5m2x2`).
    Fp8(Fp8Cvt),
}

/// The 8-bit float formats of `cvt` and `mma`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fp8 {
    E4M3,
    E5M2,
}

/// A conversion of `cvt` with an 8-bit float pair on one side; `.relu` clamps negative results
/// to zero. Conversions to fp8 are always `.rn.satfinite` (the only form PTX has).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fp8Cvt {
    /// One `.f32` (the low 32 bits) to one 8-bit value; two of them are packed by `BinOp::Pack`.
    FromF32 { to: Fp8, relu: bool },
    /// The two halves of an `.f16x2` to the two bytes of a `.b16` (high to high).
    FromF16x2 { to: Fp8, relu: bool },
    /// The two bytes of a `.b16` to the two halves of an `.f16x2` (exact).
    ToF16x2 { from: Fp8, relu: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Testp {
    Finite,
    Infinite,
    Number,
    NotANumber,
    Normal,
    Subnormal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cvt {
    pub from: Ty,
    pub to: Ty,
    /// Float rounding (`.rn...`) or round-to-integer (`.rni...`, stored as `int_round`).
    pub rnd: Option<Rnd>,
    pub int_round: bool,
    pub ftz: bool,
    pub sat: bool,
    /// `.satfinite`: infinities become the largest finite value of the destination format.
    pub satfinite: bool,
    /// Bits of the destination register: a narrower signed result is sign-extended to it.
    pub dst_bits: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add(W),
    Sub(W),
    AddSatS32,
    SubSatS32,
    MulLo(W),
    MulHiU(W),
    MulHiS(W),
    MulWideU(W),
    MulWideS(W),
    Mul24Lo(bool),
    Mul24Hi(bool),
    DivU(W),
    DivS(W),
    RemU(W),
    RemS(W),
    MinU(W),
    MinS(W),
    MaxU(W),
    MaxS(W),
    And,
    Or,
    Xor,
    Shl(W),
    ShrU(W),
    ShrS(W),
    FAdd(F, Rnd, FFlags),
    FSub(F, Rnd, FFlags),
    FMul(F, Rnd, FFlags),
    FDiv(F, FMode, bool),
    FMin(F, bool, bool),
    FMax(F, bool, bool),
    CopySign(F),
    /// `d = a | b << shift`: packing a vector operand into a wider register.
    Pack(u8),
    /// Packed half-precision pairs: op on both 16-bit lanes.
    H2(H2Op, F),
    /// Packed 16-bit integer pairs (`.u16x2`, `.s16x2`): op on both halves, each wrapping on its
    /// own; the flag says the halves compare as signed.
    I2(I2Op, bool),
    Bmsk,
    /// Carry (or borrow) out of `a + b` (`a - b`): the condition code of `add.cc` (`sub.cc`).
    AddCarryOut(W),
    SubBorrowOut(W),
    PredAnd,
    PredOr,
    PredXor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum H2Op {
    Add,
    Sub,
    Mul,
    Min,
    Max,
}

/// What [`BinOp::I2`] does to each 16-bit half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum I2Op {
    Add,
    Sub,
    Min,
    Max,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TernOp {
    MadLo(W),
    MadHiU(W),
    MadHiS(W),
    MadWideU(W),
    MadWideS(W),
    Mad24Lo(bool),
    MadHiSatS32,
    Fma(F, Rnd, FFlags),
    /// `(±a·b) ± c` rounded once to nearest: a multiply and an add that ptxas fused, with the
    /// negations its `FFMA` applies to the product (first flag) and to the addend (second).
    FmaNeg(F, FFlags, bool, bool),
    Selp,
    SlctS(W),
    SlctF(bool),
    Bfe {
        w: W,
        signed: bool,
    },
    Prmt(Prmt),
    ShfL {
        w: bool,
        wrap: bool,
    },
    ShfR {
        wrap: bool,
    },
    SadU(W),
    SadS(W),
    Lop3(u8),
    FmaH2(F),
    /// `a + b + c` and `a - b - c` with `c` the carry/borrow flag, and their carry/borrow out.
    Addc(W),
    AddcCarryOut(W),
    Subc(W),
    SubcBorrowOut(W),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prmt {
    Default,
    F4e,
    B4e,
    Rc8,
    Ecl,
    Ecr,
    Rc16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    FAdd,
    Min(bool),
    Max(bool),
    FMin,
    FMax,
    Inc,
    Dec,
    And,
    Or,
    Xor,
    Exch,
    Cas,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReduxOp {
    Add,
    MinU,
    MinS,
    MaxU,
    MaxS,
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BarRed {
    Popc,
    And,
    Or,
}

#[derive(Debug, Clone)]
pub(crate) struct CallArg {
    /// Byte offset of the argument in the caller's frame.
    pub caller: u32,
    /// Byte offset of the parameter in the callee's frame.
    pub callee: u32,
    pub size: u32,
}

#[derive(Debug, Clone)]
pub(crate) enum Inst {
    Un {
        op: UnOp,
        d: R,
        a: R,
    },
    Bin {
        op: BinOp,
        d: R,
        a: R,
        b: R,
    },
    Tern {
        op: TernOp,
        d: R,
        a: R,
        b: R,
        c: R,
    },
    Bfi {
        w: W,
        d: R,
        f: R,
        b: R,
        pos: R,
        len: R,
    },
    Setp {
        ty: CmpTy,
        cmp: Cmp,
        ftz: bool,
        d: R,
        dn: Option<R>,
        a: R,
        b: R,
        comb: Option<(BoolOp, R, bool)>,
    },
    /// `set`: like `setp` but writes all-ones/zero or 1.0/0.0 into a register.
    Set {
        ty: CmpTy,
        cmp: Cmp,
        ftz: bool,
        d: R,
        float_result: bool,
        a: R,
        b: R,
        comb: Option<(BoolOp, R, bool)>,
    },
    /// The address of a frame slot (local variable or `.param` of a function) in the local window.
    FrameAddr {
        d: R,
        off: u32,
    },
    Ld {
        space: Space,
        size: u8,
        sext: bool,
        dmask: u64,
        n: u8,
        d: [R; 4],
        addr: Addr,
    },
    St {
        space: Space,
        size: u8,
        n: u8,
        a: [R; 4],
        addr: Addr,
    },
    Atom {
        space: Space,
        op: AtomOp,
        size: u8,
        f: Option<F>,
        d: Option<R>,
        addr: Addr,
        b: R,
        c: R,
    },
    Cvta {
        to_generic: bool,
        space: Space,
        d: R,
        a: R,
        dmask: u64,
    },
    Bra {
        target: u32,
        reconv: u32,
    },
    Ret,
    Exit,
    Trap,
    Bar {
        count: Option<R>,
        red: Option<(BarRed, R, bool)>,
        d: Option<R>,
        arrive: bool,
    },
    Shfl {
        mode: ShflMode,
        d: R,
        p: Option<R>,
        a: R,
        b: R,
        c: R,
    },
    Vote {
        mode: VoteMode,
        d: R,
        a: R,
        neg: bool,
    },
    Activemask {
        d: R,
    },
    /// `redux.sync`: a reduction over the active lanes of each warp, given to all of them.
    Redux {
        op: ReduxOp,
        d: R,
        a: R,
    },
    Clock {
        d: R,
        wide: bool,
    },
    Call {
        func: u32,
        args: Vec<CallArg>,
        rets: Vec<CallArg>,
    },
    /// `mma.sync.aligned`: reads and writes the fragments of a whole warp.
    Mma(Box<Mma>),
    /// `ldmatrix.sync.aligned.m8n8.xN{.trans}.b16`: `n` 8x8 matrices of 16-bit elements whose rows
    /// the warp's lanes address, spread over the lanes' `d` registers.
    Ldmatrix {
        n: u8,
        trans: bool,
        space: Space,
        d: [R; 4],
        addr: Addr,
    },
    /// `stmatrix.sync.aligned.m8n8.xN{.trans}.b16`: the inverse of `ldmatrix`.
    Stmatrix {
        n: u8,
        trans: bool,
        space: Space,
        a: [R; 4],
        addr: Addr,
    },
    /// `movmatrix.sync.aligned.m8n8.trans.b16`: the transpose of an 8x8 matrix held across a warp.
    Movmatrix {
        d: R,
        a: R,
    },
    /// `cp.async.{ca,cg}.shared.global`: `size` bytes from global to shared memory, of which
    /// only the first `src_size` are read and the rest are zero; done when it issues.
    CpAsync {
        size: u8,
        src_size: R,
        dst: Addr,
        src: Addr,
    },
    /// `mbarrier.*` on a barrier object (8 bytes of shared memory; `mbarrier.rs` has its model):
    /// `b` is the count, transaction count, state or parity the operation takes, `d` what it
    /// gives (the state before an arrive, whether a wait's phase is complete).
    Mbar {
        op: MbarOp,
        space: Space,
        addr: Addr,
        d: Option<R>,
        b: R,
    },
    /// `cp.async.bulk` of `size` bytes between global and shared memory, done when it issues;
    /// a copy into shared memory with `.mbarrier::complete_tx::bytes` completes `size` bytes of
    /// the transaction count of the barrier at `mbar`.
    CpBulk {
        to_shared: bool,
        dst: Addr,
        src: Addr,
        src_space: Space,
        size: R,
        mbar: Option<Addr>,
    },
    /// `elect.sync d|p, membermask`: per warp, the lowest active lane of `membermask` is the
    /// leader; every active lane gets its lane number in `d`, and only the leader `p` true.
    Elect {
        d: R,
        p: R,
        mask: R,
    },
    /// `wgmma.mma_async`: one matrix product per warpgroup (four warps), done when it issues.
    Wgmma(Box<Wgmma>),
    Nop,
    /// `bar.warp.sync`: a no-op for lanes in lockstep, but a synchronisation point for an engine that
    /// runs threads one after another.
    WarpSync,
}

/// What an `mbarrier` instruction does to its barrier object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MbarOp {
    /// `init`: `b` arrivals expected per phase.
    Init,
    /// `arrive` (`b` arrivals) or `arrive_drop` (`b` arrivals, each also expected no more);
    /// with `expect_tx`, one arrival after adding `b` to the transaction count.
    Arrive { drop: bool, expect_tx: bool },
    /// `expect_tx`: `b` more bytes of transactions.
    ExpectTx,
    /// `complete_tx`: `b` bytes of transactions done.
    CompleteTx,
    /// `test_wait` and `try_wait`: whether the phase that `b` names (a state from `arrive`, or
    /// with `.parity` a phase parity) is complete.
    Wait { parity: bool, blocking: bool },
    /// `inval`: the object is no barrier any more.
    Inval,
    /// `cp.async.mbarrier.arrive`: an arrival once the thread's `cp.async` copies are done,
    /// which is at once; without `.noinc` the pending count is first raised by one.
    CpAsyncArrive { noinc: bool },
}

/// `wgmma.mma_async.sync.aligned.m64nNkK.dtype.atype.btype`: D (64xN) = A (64xK) * B (KxN) + D
/// per warpgroup, A from registers or a shared-memory descriptor, B from a descriptor
/// (`wgmma.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Wgmma {
    pub n: u16,
    pub k: u8,
    pub dty: MmaTy,
    pub aty: MmaTy,
    pub bty: MmaTy,
    pub satfinite: bool,
    /// D's registers, which are also the accumulator it adds to.
    pub d: Vec<R>,
    /// A's fragment registers, or one register holding A's descriptor.
    pub a: Vec<R>,
    pub a_desc: bool,
    pub b_desc: R,
    /// `scale-d`: a predicate or constant; false: D = A * B.
    pub scale_d: R,
    /// `imm-scale-a`, `imm-scale-b`: -1 negates the operand.
    pub neg_a: bool,
    pub neg_b: bool,
    /// `imm-trans-a`, `imm-trans-b`: the operand is stored MN-major instead of K-major.
    pub trans_a: bool,
    pub trans_b: bool,
}

/// Element types of `mma` operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MmaTy {
    F16,
    BF16,
    /// An `.f32` register of which the low 13 mantissa bits are ignored.
    TF32,
    F32,
    F64,
    S8,
    U8,
    S32,
    E4M3,
    E5M2,
}

/// `mma.sync.aligned.mMnNkK.row.col.dtype.atype.btype.ctype`: one matrix product per warp, each
/// operand a vector of registers holding the lane's fragment (`matrix.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mma {
    pub m: u8,
    pub n: u8,
    pub k: u8,
    pub dty: MmaTy,
    pub aty: MmaTy,
    pub bty: MmaTy,
    pub cty: MmaTy,
    /// Integer products: clamp the sum to the s32 range instead of wrapping.
    pub satfinite: bool,
    pub d: Vec<R>,
    pub a: Vec<R>,
    pub b: Vec<R>,
    pub c: Vec<R>,
}

impl Inst {
    /// The instructions that read or write the registers of a whole warp (`ptx::matrix`): native
    /// code runs them as boundaries, as it does shuffles.
    pub(crate) fn is_warp_matrix(&self) -> bool {
        matches!(self, Inst::Mma(_) | Inst::Ldmatrix { .. } | Inst::Stmatrix { .. } | Inst::Movmatrix { .. })
    }

    /// A plain barrier of the whole block (`bar.sync 0`, `barrier.sync`): no thread count, no
    /// reduction, no result, not an arrive. It waits and orders memory; it reads and writes no
    /// register.
    pub(crate) fn is_plain_barrier(&self) -> bool {
        matches!(self, Inst::Bar { count: None, red: None, d: None, arrive: false })
    }

    /// Whether the instruction only computes registers from registers: no memory, no control,
    /// nothing another thread sees, nothing that can fail.
    pub(crate) fn is_register_only(&self) -> bool {
        matches!(
            self,
            Inst::Un { .. }
                | Inst::Bin { .. }
                | Inst::Tern { .. }
                | Inst::Bfi { .. }
                | Inst::Setp { .. }
                | Inst::Set { .. }
        )
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Instr {
    pub guard: Option<(R, bool)>,
    pub inst: Inst,
    pub line: u32,
    /// A float `mul`, `add` or `sub` without a rounding modifier: one that ptxas may fuse with
    /// another into a multiply-add (`lower/contract.rs`).
    pub contractable: bool,
}

impl Instr {
    /// Whether native code may run the instruction in the boundary of a run of warp matrix
    /// instructions (`lower/warp_runs.rs`): an unguarded warp matrix instruction, or an
    /// unguarded plain barrier, which a boundary is already (every thread stops there).
    pub(crate) fn joins_warp_run(&self) -> bool {
        self.guard.is_none() && (self.inst.is_warp_matrix() || self.inst.is_plain_barrier())
    }
}

/// Addresses of the device address space. Buffers live at `(slot + 1) << REGION_SHIFT`; module
/// variables, the shared and the local windows sit above every buffer, so a pointer that strays
/// out of one buffer lands in no other.
pub(crate) const REGION_SHIFT: u32 = 36;
pub(crate) const MAX_REGION_SLOTS: u64 = 1 << 19;
pub(crate) const MODVAR_BASE: u64 = 0x0100_0000_0000_0000;
pub(crate) const SHARED_BASE: u64 = 0x0200_0000_0000_0000;
pub(crate) const LOCAL_BASE: u64 = 0x0300_0000_0000_0000;
pub(crate) const WINDOW_MASK: u64 = 0xFF00_0000_0000_0000;

/// Where a state space's window starts in the generic address space (`cvta`).
pub(crate) fn window_base(space: Space) -> u64 {
    match space {
        Space::Shared => SHARED_BASE,
        Space::Local => LOCAL_BASE,
        _ => 0,
    }
}

/// A lowered function: its instructions, its register file and its frame.
pub(crate) struct Function {
    pub name: String,
    pub insts: Vec<Instr>,
    pub nregs: u32,
    pub consts: Vec<(R, u64)>,
    pub sregs: Vec<(R, Sreg)>,
    /// Bytes of this function's own frame (locals, `.param` slots) per thread.
    pub frame_size: u32,
    /// Deepest frame use of any call chain starting here, per thread.
    pub stack_size: u64,
    /// Per instruction: every path from here ends the thread without passing a barrier. Lanes
    /// parked at such a point do not hold up a barrier of their block (they will exit first).
    pub exit_bound: Vec<bool>,
    /// `((line, source register), typemap code)` of every element of every `st`, sorted, for
    /// [`Function::store_type`].
    pub store_types: Vec<((u32, R), u8)>,
    /// What ptxas's contraction puts in place of instructions (`lower/contract.rs`): by index,
    /// the other form of each, swapped in and out by `Module::set_contraction`.
    pub contraction: Vec<(u32, Inst)>,
}

impl Function {
    /// The `super::typemap` code of the element of the `st` at `line` whose value is register
    /// `src` (untyped where there is none).
    pub fn store_type(&self, line: u32, src: R) -> u8 {
        match self.store_types.binary_search_by_key(&(line, src), |s| s.0) {
            Ok(i) => self.store_types[i].1,
            Err(_) => super::typemap::UNTYPED,
        }
    }
}
