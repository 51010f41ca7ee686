//! PTX text to a light syntax tree: directives, declarations, labels and instruction statements with
//! their operands. Opcodes stay dotted strings here; `lower` decodes them into typed instructions.

use super::error::PtxError;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// Identifiers, opcodes, directives, registers: anything made of `[A-Za-z0-9_$%.]`.
    Word(String),
    Num(String),
    Str,
    Punct(u8),
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub tok: Tok,
    pub line: u32,
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

pub(crate) fn tokenize(text: &str) -> Result<Vec<Token>, PtxError> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len() / 4);
    let mut i = 0;
    let mut line = 1u32;
    let mut line_start = true;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 2;
            continue;
        }
        let at_line_start = line_start;
        line_start = false;
        if is_word_start(c) {
            let s = i;
            loop {
                if i < b.len() && is_word_char(b[i]) {
                    i += 1;
                } else if b.get(i) == Some(&b':')
                    && b.get(i + 1) == Some(&b':')
                    && b.get(i + 2).is_some_and(|c| is_word_char(*c))
                {
                    // Scoped modifiers: `.shared::cta`, `.mbarrier::complete_tx::bytes`.
                    i += 2;
                } else {
                    break;
                }
            }
            let w = &text[s..i];
            // Debug-info directives run to the end of their line without a terminating `;`.
            if w == ".loc" || w == ".file" || (at_line_start && w.starts_with("@@")) {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            out.push(Token { tok: Tok::Word(w.to_string()), line });
            continue;
        }
        if c == b'@' && b.get(i + 1) == Some(&b'@') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                // Exponent sign in decimal floats such as 1.5e-3.
                if (b[i] == b'e' || b[i] == b'E')
                    && !text[s..i].starts_with("0x")
                    && !text[s..i].starts_with("0X")
                    && !text[s..i].starts_with("0f")
                    && !text[s..i].starts_with("0d")
                    && matches!(b.get(i + 1), Some(b'+') | Some(b'-'))
                {
                    i += 2;
                    continue;
                }
                i += 1;
            }
            out.push(Token { tok: Tok::Num(text[s..i].to_string()), line });
            continue;
        }
        if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(Token { tok: Tok::Str, line });
            continue;
        }
        if b",;:{}[]()<>+-@!=|*".contains(&c) {
            out.push(Token { tok: Tok::Punct(c), line });
            i += 1;
            continue;
        }
        return Err(PtxError::new(line, format!("unexpected character {:?}", c as char)));
    }
    Ok(out)
}

#[derive(Debug, Clone)]
pub(crate) enum Lit {
    Int(i128),
    F32(u32),
    F64(u64),
    Float(f64),
}

#[derive(Debug, Clone)]
pub(crate) enum Operand {
    /// A register, special register, variable, label or function name.
    Name(String),
    /// `!%p`
    Not(String),
    Lit(Lit),
    /// `[base+off]`, `[sym]`, `[imm]`
    Addr {
        base: Option<String>,
        off: i64,
    },
    /// `[tensorMap, {c0, c1}]`: a tensor and coordinates (TMA copies, which lowering refuses).
    TensorAddr,
    /// `{a, b}`
    Vec(Vec<Operand>),
    /// `%p|%q`
    Pair(String, String),
    /// `(a, b)` in `call`
    List(Vec<Operand>),
    /// `sym+off` outside brackets
    SymOff(String, i64),
}

#[derive(Debug, Clone)]
pub(crate) struct Inst {
    pub line: u32,
    pub guard: Option<(String, bool)>,
    pub opcode: String,
    pub operands: Vec<Operand>,
}

#[derive(Debug, Clone)]
pub(crate) enum InitElem {
    Int(i128),
    Float(f64),
    F32(u32),
    F64(u64),
    Sym(String, i64),
}

#[derive(Debug, Clone)]
pub(crate) struct VarDecl {
    pub line: u32,
    pub space: String,
    pub align: Option<u32>,
    pub ty: String,
    pub vec: u32,
    pub name: String,
    /// Array dimensions; `None` for `[]` (size from the initializer or extern).
    pub dims: Vec<Option<u64>>,
    pub is_array: bool,
    pub init: Option<Vec<InitElem>>,
    pub is_extern: bool,
    /// `.reg .b32 %r<15>` declares 15 registers `%r0..%r14`.
    pub count: Option<u32>,
    /// A kernel parameter annotated `.ptr`.
    pub ptr: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Stmt {
    Decl(VarDecl),
    Label(String, u32),
    Inst(Inst),
    Open,
    Close,
}

#[derive(Debug, Clone)]
pub(crate) struct Func {
    pub line: u32,
    pub name: String,
    pub is_entry: bool,
    pub rets: Vec<VarDecl>,
    pub params: Vec<VarDecl>,
    pub body: Option<Vec<Stmt>>,
}

#[derive(Debug, Default)]
pub(crate) struct ParsedModule {
    pub version: Option<String>,
    pub target: Vec<String>,
    pub address_size: Option<u32>,
    pub vars: Vec<VarDecl>,
    pub funcs: Vec<Func>,
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
}

fn describe(t: Option<&Token>) -> String {
    match t.map(|t| &t.tok) {
        None => "end of input".into(),
        Some(Tok::Word(w)) => format!("`{w}`"),
        Some(Tok::Num(n)) => format!("`{n}`"),
        Some(Tok::Str) => "a string".into(),
        Some(Tok::Punct(c)) => format!("`{}`", *c as char),
    }
}

impl Parser {
    fn line(&self) -> u32 {
        self.toks.get(self.pos).or_else(|| self.toks.last()).map(|t| t.line).unwrap_or(1)
    }
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.tok)
    }
    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.pos + k).map(|t| &t.tok)
    }
    fn err<T>(&self, msg: impl Into<String>) -> Result<T, PtxError> {
        Err(PtxError::new(self.line(), msg.into()))
    }
    fn is_punct(&self, c: u8) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }
    fn eat_punct(&mut self, c: u8) -> bool {
        if self.is_punct(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect_punct(&mut self, c: u8) -> Result<(), PtxError> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            self.err(format!("expected `{}`, found {}", c as char, describe(self.toks.get(self.pos))))
        }
    }
    fn word(&mut self) -> Result<String, PtxError> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => self.err(format!("expected a name, found {}", describe(self.toks.get(self.pos)))),
        }
    }
    fn peek_word(&self) -> Option<&str> {
        match self.peek() {
            Some(Tok::Word(w)) => Some(w.as_str()),
            _ => None,
        }
    }
    fn number(&mut self) -> Result<i128, PtxError> {
        let neg = self.eat_punct(b'-');
        match self.peek() {
            Some(Tok::Num(n)) => {
                let n = n.clone();
                self.pos += 1;
                match parse_lit(&n) {
                    Some(Lit::Int(v)) => Ok(if neg { -v } else { v }),
                    _ => self.err(format!("expected an integer, found `{n}`")),
                }
            }
            _ => self.err(format!("expected a number, found {}", describe(self.toks.get(self.pos)))),
        }
    }
    /// Skips tokens through the next `;` at brace depth zero.
    fn skip_statement(&mut self) {
        let mut depth = 0i32;
        while let Some(t) = self.peek().cloned() {
            self.pos += 1;
            match t {
                Tok::Punct(b'{') => depth += 1,
                Tok::Punct(b'}') => {
                    depth -= 1;
                    if depth <= 0 {
                        return;
                    }
                }
                Tok::Punct(b';') if depth == 0 => return,
                _ => {}
            }
        }
    }
}

pub(crate) fn parse_lit(s: &str) -> Option<Lit> {
    let lower = s.to_ascii_lowercase();
    let (body, _unsigned) = match lower.strip_suffix('u') {
        Some(b) if !b.starts_with("0f") && !b.starts_with("0d") => (b.to_string(), true),
        _ => (lower.clone(), false),
    };
    if let Some(h) = body.strip_prefix("0f") {
        if h.len() == 8 {
            return u32::from_str_radix(h, 16).ok().map(Lit::F32);
        }
    }
    if let Some(h) = body.strip_prefix("0d") {
        if h.len() == 16 {
            return u64::from_str_radix(h, 16).ok().map(Lit::F64);
        }
    }
    if let Some(h) = body.strip_prefix("0x") {
        return u128::from_str_radix(h, 16).ok().map(|v| Lit::Int(v as i128));
    }
    if let Some(h) = body.strip_prefix("0b") {
        return u128::from_str_radix(h, 2).ok().map(|v| Lit::Int(v as i128));
    }
    if body.contains('.') || body.contains('e') {
        return body.parse::<f64>().ok().map(Lit::Float);
    }
    if body.len() > 1 && body.starts_with('0') {
        return u128::from_str_radix(&body[1..], 8).ok().map(|v| Lit::Int(v as i128));
    }
    body.parse::<u128>().ok().map(|v| Lit::Int(v as i128))
}

const TYPE_WORDS: &[&str] = &[
    ".b8", ".b16", ".b32", ".b64", ".b128", ".u8", ".u16", ".u32", ".u64", ".s8", ".s16", ".s32", ".s64", ".f16",
    ".f16x2", ".bf16", ".bf16x2", ".f32", ".f64", ".pred", ".e4m3x2", ".e5m2x2",
];

const SPACES: &[&str] = &[".global", ".const", ".shared", ".local", ".param", ".reg", ".tex"];

pub(crate) fn parse(text: &str) -> Result<ParsedModule, PtxError> {
    let toks = tokenize(text)?;
    let mut p = Parser { toks, pos: 0 };
    let mut m = ParsedModule::default();
    while let Some(t) = p.peek().cloned() {
        let w = match t {
            Tok::Word(w) => w,
            Tok::Punct(b';') => {
                p.pos += 1;
                continue;
            }
            _ => return p.err(format!("unexpected {} at module level", describe(p.toks.get(p.pos)))),
        };
        match w.as_str() {
            ".version" => {
                p.pos += 1;
                match p.peek() {
                    Some(Tok::Num(n)) => {
                        m.version = Some(n.clone());
                        p.pos += 1;
                    }
                    _ => return p.err("expected a version number after .version"),
                }
            }
            ".target" => {
                p.pos += 1;
                loop {
                    m.target.push(p.word()?);
                    if !p.eat_punct(b',') {
                        break;
                    }
                }
            }
            ".address_size" => {
                p.pos += 1;
                let n = p.number()?;
                if n != 64 && n != 32 {
                    return p.err(format!("unsupported .address_size {n}"));
                }
                m.address_size = Some(n as u32);
            }
            ".section" => {
                // DWARF sections: `.section .debug_info { ... }`.
                p.pos += 1;
                p.word()?;
                if p.is_punct(b'{') {
                    p.skip_statement();
                }
            }
            ".pragma" => p.skip_statement(),
            ".visible" | ".extern" | ".weak" | ".common" | ".entry" | ".func" | ".global" | ".const" | ".shared"
            | ".local" | ".tex" | ".alias" => {
                let line = p.line();
                let mut is_extern = false;
                while let Some(l) = p.peek_word() {
                    match l {
                        ".visible" | ".weak" | ".common" => p.pos += 1,
                        ".extern" => {
                            is_extern = true;
                            p.pos += 1
                        }
                        _ => break,
                    }
                }
                match p.peek_word() {
                    Some(".entry") | Some(".func") => {
                        let f = parse_func(&mut p, line)?;
                        m.funcs.push(f);
                    }
                    Some(".alias") => return p.err("`.alias` is not supported"),
                    Some(s) if SPACES.contains(&s) => {
                        let mut v = parse_var_decl(&mut p)?;
                        v.is_extern |= is_extern;
                        p.expect_punct(b';')?;
                        m.vars.push(v);
                    }
                    _ => return p.err(format!("unexpected {} at module level", describe(p.toks.get(p.pos)))),
                }
            }
            _ => return p.err(format!("unexpected `{w}` at module level")),
        }
    }
    Ok(m)
}

fn parse_func(p: &mut Parser, line: u32) -> Result<Func, PtxError> {
    let kind = p.word()?;
    let is_entry = kind == ".entry";
    let mut rets = Vec::new();
    if !is_entry && p.is_punct(b'(') {
        rets = parse_param_list(p)?;
    }
    let name = p.word()?;
    let mut params = Vec::new();
    if p.is_punct(b'(') {
        params = parse_param_list(p)?;
    }
    // Performance directives (.maxntid, .reqntid, .minnctapersm, .maxnreg, .noreturn, .pragma...).
    loop {
        match p.peek().cloned() {
            Some(Tok::Word(w)) if w.starts_with('.') => {
                p.pos += 1;
                if w == ".pragma" {
                    p.skip_statement();
                    continue;
                }
                while matches!(p.peek(), Some(Tok::Num(_)) | Some(Tok::Punct(b','))) {
                    p.pos += 1;
                }
            }
            _ => break,
        }
    }
    if p.eat_punct(b';') {
        return Ok(Func { line, name, is_entry, rets, params, body: None });
    }
    p.expect_punct(b'{')?;
    let body = parse_body(p)?;
    Ok(Func { line, name, is_entry, rets, params, body: Some(body) })
}

fn parse_param_list(p: &mut Parser) -> Result<Vec<VarDecl>, PtxError> {
    p.expect_punct(b'(')?;
    let mut out = Vec::new();
    if p.eat_punct(b')') {
        return Ok(out);
    }
    loop {
        out.push(parse_var_decl(p)?);
        if p.eat_punct(b')') {
            break;
        }
        p.expect_punct(b',')?;
    }
    Ok(out)
}

/// `[.space] [.align N] [.ptr .global .align N] [.vN] .type name[<N>|[dims]] [= init]`
fn parse_var_decl(p: &mut Parser) -> Result<VarDecl, PtxError> {
    let line = p.line();
    let mut d = VarDecl {
        line,
        space: String::new(),
        align: None,
        ty: String::new(),
        vec: 1,
        name: String::new(),
        dims: Vec::new(),
        is_array: false,
        init: None,
        is_extern: false,
        count: None,
        ptr: false,
    };
    loop {
        let Some(w) = p.peek_word().map(str::to_string) else {
            return p.err(format!("expected a declaration, found {}", describe(p.toks.get(p.pos))));
        };
        if !w.starts_with('.') {
            break;
        }
        p.pos += 1;
        match w.as_str() {
            ".align" => d.align = Some(p.number()? as u32),
            ".ptr" => {
                d.ptr = true;
                // `.ptr .global .align 1`: pointer annotations on kernel parameters.
                while let Some(x) = p.peek_word() {
                    if matches!(x, ".global" | ".shared" | ".const" | ".local") {
                        p.pos += 1;
                    } else if x == ".align" {
                        p.pos += 1;
                        p.number()?;
                    } else {
                        break;
                    }
                }
            }
            ".v2" => d.vec = 2,
            ".v4" => d.vec = 4,
            ".v8" => d.vec = 8,
            ".extern" => d.is_extern = true,
            ".visible" | ".weak" | ".common" => {}
            s if SPACES.contains(&s) => d.space = w.clone(),
            s if TYPE_WORDS.contains(&s) => d.ty = w.clone(),
            ".texref" | ".samplerref" | ".surfref" => return p.err(format!("`{w}` declarations are not supported")),
            _ => return p.err(format!("unknown qualifier `{w}` in declaration")),
        }
    }
    d.name = p.word()?;
    if d.ty.is_empty() {
        return p.err(format!("declaration of `{}` has no type", d.name));
    }
    if p.eat_punct(b'<') {
        d.count = Some(p.number()? as u32);
        p.expect_punct(b'>')?;
    }
    while p.eat_punct(b'[') {
        d.is_array = true;
        if p.eat_punct(b']') {
            d.dims.push(None);
        } else {
            let n = p.number()?;
            if n < 0 {
                return p.err("negative array size");
            }
            d.dims.push(Some(n as u64));
            p.expect_punct(b']')?;
        }
    }
    if p.eat_punct(b'=') {
        let mut elems = Vec::new();
        parse_init(p, &mut elems)?;
        d.init = Some(elems);
    }
    Ok(d)
}

fn parse_init(p: &mut Parser, out: &mut Vec<InitElem>) -> Result<(), PtxError> {
    if p.eat_punct(b'{') {
        if p.eat_punct(b'}') {
            return Ok(());
        }
        loop {
            parse_init(p, out)?;
            if p.eat_punct(b'}') {
                return Ok(());
            }
            p.expect_punct(b',')?;
        }
    }
    let neg = p.eat_punct(b'-');
    match p.peek().cloned() {
        Some(Tok::Num(n)) => {
            p.pos += 1;
            let e = match parse_lit(&n) {
                Some(Lit::Int(v)) => InitElem::Int(if neg { -v } else { v }),
                Some(Lit::Float(v)) => InitElem::Float(if neg { -v } else { v }),
                Some(Lit::F32(v)) => InitElem::F32(if neg { v ^ 0x8000_0000 } else { v }),
                Some(Lit::F64(v)) => InitElem::F64(if neg { v ^ (1 << 63) } else { v }),
                None => return p.err(format!("bad number `{n}` in initializer")),
            };
            out.push(e);
        }
        Some(Tok::Word(w)) => {
            p.pos += 1;
            // `generic(sym)` or `sym` or `sym+off`
            let name = if (w == "generic" || w == "mask") && p.eat_punct(b'(') {
                let s = p.word()?;
                p.expect_punct(b')')?;
                s
            } else {
                w
            };
            let mut off = 0i64;
            if p.eat_punct(b'+') {
                off = p.number()? as i64;
            }
            out.push(InitElem::Sym(name, off));
        }
        _ => return p.err(format!("bad initializer {}", describe(p.toks.get(p.pos)))),
    }
    Ok(())
}

fn parse_body(p: &mut Parser) -> Result<Vec<Stmt>, PtxError> {
    let mut out = Vec::new();
    let mut depth = 1;
    loop {
        let line = p.line();
        match p.peek().cloned() {
            None => return p.err("unterminated function body"),
            Some(Tok::Punct(b'}')) => {
                p.pos += 1;
                depth -= 1;
                if depth == 0 {
                    return Ok(out);
                }
                out.push(Stmt::Close);
            }
            Some(Tok::Punct(b'{')) => {
                p.pos += 1;
                depth += 1;
                out.push(Stmt::Open);
            }
            Some(Tok::Punct(b';')) => p.pos += 1,
            Some(Tok::Word(w)) if p.peek_at(1) == Some(&Tok::Punct(b':')) && !w.starts_with('.') => {
                p.pos += 2;
                out.push(Stmt::Label(w, line));
            }
            Some(Tok::Word(w)) if w == ".pragma" => p.skip_statement(),
            Some(Tok::Word(w)) if w.starts_with('.') => {
                let d = parse_var_decl(p)?;
                if p.eat_punct(b',') {
                    // `.reg .b32 a, b, c;`
                    let mut names = vec![d.clone()];
                    loop {
                        let mut e = d.clone();
                        e.name = p.word()?;
                        e.count = None;
                        if p.eat_punct(b'<') {
                            e.count = Some(p.number()? as u32);
                            p.expect_punct(b'>')?;
                        }
                        names.push(e);
                        if !p.eat_punct(b',') {
                            break;
                        }
                    }
                    out.extend(names.into_iter().map(Stmt::Decl));
                } else {
                    out.push(Stmt::Decl(d));
                }
                p.expect_punct(b';')?;
            }
            Some(_) => out.push(Stmt::Inst(parse_inst(p)?)),
        }
    }
}

fn parse_inst(p: &mut Parser) -> Result<Inst, PtxError> {
    let line = p.line();
    let mut guard = None;
    if p.eat_punct(b'@') {
        let neg = p.eat_punct(b'!');
        guard = Some((p.word()?, neg));
    }
    let opcode = p.word()?;
    let mut operands = Vec::new();
    if !p.eat_punct(b';') {
        loop {
            let o = parse_operand(p)
                .map_err(|e| PtxError::new(e.line, format!("unsupported instruction `{opcode}` ({})", e.message)))?;
            operands.push(o);
            if p.eat_punct(b';') {
                break;
            }
            p.expect_punct(b',')?;
        }
    }
    Ok(Inst { line, guard, opcode, operands })
}

fn parse_operand(p: &mut Parser) -> Result<Operand, PtxError> {
    if p.eat_punct(b'[') {
        let mut base = None;
        let mut off = 0i64;
        match p.peek().cloned() {
            Some(Tok::Word(w)) => {
                p.pos += 1;
                base = Some(w);
            }
            Some(Tok::Num(_)) | Some(Tok::Punct(b'-')) => off = p.number()? as i64,
            _ => return p.err(format!("bad address {}", describe(p.toks.get(p.pos)))),
        }
        // `+k`, `+-k` and `-k` (the sign belongs to the number).
        while p.eat_punct(b'+') || p.is_punct(b'-') {
            off = off.wrapping_add(p.number()? as i64);
        }
        if base.is_some() && p.eat_punct(b',') {
            parse_operand(p)?;
            p.expect_punct(b']')?;
            return Ok(Operand::TensorAddr);
        }
        p.expect_punct(b']')?;
        return Ok(Operand::Addr { base, off });
    }
    if p.eat_punct(b'{') {
        let mut v = Vec::new();
        loop {
            v.push(parse_operand(p)?);
            if p.eat_punct(b'}') {
                break;
            }
            p.expect_punct(b',')?;
        }
        return Ok(Operand::Vec(v));
    }
    if p.eat_punct(b'(') {
        let mut v = Vec::new();
        if p.eat_punct(b')') {
            return Ok(Operand::List(v));
        }
        loop {
            v.push(parse_operand(p)?);
            if p.eat_punct(b')') {
                break;
            }
            p.expect_punct(b',')?;
        }
        return Ok(Operand::List(v));
    }
    if p.eat_punct(b'!') {
        return Ok(Operand::Not(p.word()?));
    }
    let neg = p.eat_punct(b'-');
    match p.peek().cloned() {
        Some(Tok::Num(n)) => {
            p.pos += 1;
            let lit = parse_lit(&n).ok_or_else(|| PtxError::new(p.line(), format!("bad number `{n}`")))?;
            Ok(Operand::Lit(if neg { negate(lit) } else { lit }))
        }
        Some(Tok::Word(w)) if !neg => {
            p.pos += 1;
            if p.eat_punct(b'|') {
                let q = p.word()?;
                return Ok(Operand::Pair(w, q));
            }
            if p.is_punct(b'+') {
                // `sym+off` as a plain operand (the address of a variable plus an offset).
                p.pos += 1;
                let off = p.number()? as i64;
                return Ok(Operand::SymOff(w, off));
            }
            Ok(Operand::Name(w))
        }
        _ => p.err(format!("bad operand {}", describe(p.toks.get(p.pos)))),
    }
}

fn negate(l: Lit) -> Lit {
    match l {
        Lit::Int(v) => Lit::Int(-v),
        Lit::F32(v) => Lit::F32(v ^ 0x8000_0000),
        Lit::F64(v) => Lit::F64(v ^ (1 << 63)),
        Lit::Float(v) => Lit::Float(-v),
    }
}
