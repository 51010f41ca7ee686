//! What the driver reads from PTX text before `shared::ptx` parses it: the launch bounds a
//! kernel declares (`.maxntid`, `.reqntid`, `.maxnreg`, which the engine's module does not keep),
//! and the linking of several PTX modules into one (`cuLink*` with several inputs).
//!
//! Linking is done on the text, as a module-level rewrite, because the engine runs one module:
//! the inputs are joined in order, each after the first without its `.version`, `.target` and
//! `.address_size` lines, and then
//! - an `.extern` declaration (a function prototype, a `.global` or `.const` variable) of a name
//!   another input defines is dropped, so the name binds to that definition;
//! - a `.weak` definition of a name another input defines too gives way: the first definition
//!   that is not weak stays, or else the first weak one;
//! - a name an input defines without `.visible`, `.weak` or `.extern` is private to its input:
//!   where another input defines it too, it is renamed (`NAME$recapN`, input N) in all of its
//!   input, as a GPU linker keeps the two apart.
//!
//! Two `.visible` definitions of one name stay, and the module is refused when it is parsed
//! (`CUDA_ERROR_INVALID_PTX` from `cuLinkComplete`), as a GPU linker refuses them. The text is
//! the program's: nothing here indexes it unchecked, and every token boundary is an ASCII byte,
//! so no slice splits a character.

use std::collections::{HashMap, HashSet};

/// One token: a word (a directive, an opcode, a name, a number: `[A-Za-z0-9_$%.]` and any
/// non-ASCII byte), a string, or one punctuation byte; `start..end` in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tok {
    start: usize,
    end: usize,
    word: bool,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%' | b'.') || b >= 0x80
}

/// The tokens of PTX text, comments left out.
fn tokens(text: &str) -> Vec<Tok> {
    let b = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            i = b[i..].iter().position(|&c| c == b'\n').map_or(b.len(), |n| i + n);
        } else if b[i..].starts_with(b"/*") {
            i = b[i + 2..].windows(2).position(|w| w == b"*/").map_or(b.len(), |n| i + 2 + n + 2);
        } else if c == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            toks.push(Tok { start: i, end, word: false });
            i = end;
        } else if is_word_byte(c) {
            let n = b[i..].iter().take_while(|&&c| is_word_byte(c)).count();
            toks.push(Tok { start: i, end: i + n, word: true });
            i += n;
        } else {
            toks.push(Tok { start: i, end: i + 1, word: false });
            i += 1;
        }
    }
    toks
}

/// A kernel's launch bounds, as its `.entry` header declares them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// `.maxntid`: the most threads a block may have (the product of its dimensions).
    pub max_threads: Option<u32>,
    /// `.reqntid`: the one block shape the kernel launches with.
    pub required: Option<[u32; 3]>,
    /// `.maxnreg`: the most registers per thread.
    pub max_registers: Option<u32>,
    /// The registers its body declares (`.reg`), in 32-bit units (a predicate is none).
    pub registers: u32,
}

impl Bounds {
    /// The most threads a block of the kernel may have, by its bounds.
    pub(crate) fn thread_limit(&self) -> Option<u32> {
        let required = self.required.and_then(|r| r[0].checked_mul(r[1])?.checked_mul(r[2]));
        match (self.max_threads, required) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a block of `block` threads may launch: within `.maxntid`, and the very shape
    /// `.reqntid` requires.
    pub(crate) fn admits(&self, block: [u32; 3]) -> bool {
        let threads = block.iter().try_fold(1u32, |n, &d| n.checked_mul(d));
        let within = match (self.max_threads, threads) {
            (Some(max), Some(n)) => n <= max,
            (Some(_), None) => false,
            (None, _) => true,
        };
        within && self.required.is_none_or(|r| r == block)
    }
}

/// Text of token `t`.
fn text_of<'a>(text: &'a str, t: &Tok) -> &'a str {
    text.get(t.start..t.end).unwrap_or("")
}

/// The index after the `)` matching the `(` at `i` (or the end).
fn skip_parens(text: &str, toks: &[Tok], mut i: usize) -> usize {
    let mut depth = 0usize;
    while let Some(t) = toks.get(i) {
        match text_of(text, t) {
            "(" => depth += 1,
            ")" => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// 32-bit registers of a `.reg` type (`.b64` two, `.pred` none), times its vector width.
fn register_words(types: &[&str]) -> u32 {
    let width = |t: &str| match t {
        ".pred" => Some(0),
        ".b64" | ".u64" | ".s64" | ".f64" => Some(2),
        ".b128" => Some(4),
        t if t.starts_with(".b") || t.starts_with(".u") || t.starts_with(".s") || t.starts_with(".f") => Some(1),
        _ => None,
    };
    let lanes = if types.contains(&".v4") {
        4
    } else if types.contains(&".v2") {
        2
    } else {
        1
    };
    types.iter().find_map(|t| width(t)).unwrap_or(1) * lanes
}

/// The 32-bit registers the `.reg` declarations of the body opening at token `open` declare:
/// `%r<57>` is 57 registers, a plain name one.
fn declared_registers(text: &str, toks: &[Tok], open: usize) -> u32 {
    let (mut total, mut depth, mut i) = (0u32, 0usize, open);
    while let Some(t) = toks.get(i) {
        match text_of(text, t) {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    break;
                }
            }
            ".reg" => {
                let mut types = Vec::new();
                let mut j = i + 1;
                while let Some(w) = toks.get(j).map(|t| text_of(text, t)).filter(|w| w.starts_with('.')) {
                    types.push(w);
                    j += 1;
                }
                let words = register_words(&types);
                let mut count = 0u32;
                while let Some(t) = toks.get(j) {
                    match text_of(text, t) {
                        ";" => break,
                        "<" => {
                            let n = toks.get(j + 1).and_then(|n| text_of(text, n).parse::<u32>().ok()).unwrap_or(1);
                            // The name before `<` was counted once already.
                            count = count.saturating_add(n.saturating_sub(1));
                            j += 1;
                        }
                        w if t.word && w.starts_with('%') => count = count.saturating_add(1),
                        _ => {}
                    }
                    j += 1;
                }
                total = total.saturating_add(count.saturating_mul(words));
                i = j;
            }
            _ => {}
        }
        i += 1;
    }
    total
}

/// Each kernel of a module, by name, with what its `.entry` declares: the directives between its
/// parameter list and its body, and the registers its body declares.
pub(crate) fn bounds(text: &str) -> HashMap<String, Bounds> {
    let toks = tokens(text);
    let mut all = HashMap::new();
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(t) = toks.get(i) {
        let word = text_of(text, t);
        i += 1;
        match word {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            ".entry" if depth == 0 => {
                let Some(name) = toks.get(i).filter(|t| t.word).map(|t| text_of(text, t)) else { continue };
                i += 1;
                if toks.get(i).is_some_and(|t| text_of(text, t) == "(") {
                    i = skip_parens(text, &toks, i);
                }
                let mut b = Bounds::default();
                let numbers = |i: &mut usize| -> Vec<u32> {
                    let mut v = Vec::new();
                    while let Some(t) = toks.get(*i) {
                        match text_of(text, t) {
                            "," => {}
                            w => match w.parse::<u32>() {
                                Ok(n) => v.push(n),
                                Err(_) => break,
                            },
                        }
                        *i += 1;
                    }
                    v
                };
                while let Some(t) = toks.get(i) {
                    let directive = text_of(text, t);
                    if directive == "{" || directive == ";" {
                        break;
                    }
                    i += 1;
                    let n = match directive {
                        ".maxntid" | ".reqntid" | ".maxnreg" => numbers(&mut i),
                        _ => continue,
                    };
                    let dims = [
                        n.first().copied().unwrap_or(1),
                        n.get(1).copied().unwrap_or(1),
                        n.get(2).copied().unwrap_or(1),
                    ];
                    match directive {
                        ".maxntid" => b.max_threads = dims.iter().try_fold(1u32, |p, &d| p.checked_mul(d)),
                        ".reqntid" => b.required = Some(dims),
                        _ => b.max_registers = n.first().copied(),
                    }
                }
                if toks.get(i).is_some_and(|t| text_of(text, t) == "{") {
                    b.registers = declared_registers(text, &toks, i);
                }
                all.insert(name.to_string(), b);
            }
            _ => {}
        }
    }
    all
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Linkage {
    Visible,
    Weak,
    Extern,
    Internal,
}

/// A module-level function or variable: its name's token, its linkage, whether it is a
/// definition (a body, or a variable not `.extern`), and the tokens its statement spans.
#[derive(Debug, Clone)]
struct Decl {
    name: String,
    linkage: Linkage,
    defines: bool,
    /// Byte range of the whole statement, linkage words included.
    span: (usize, usize),
}

/// The module-level declarations and header directives (`.version`, `.target`, `.address_size`:
/// their byte ranges) of one module.
fn declarations(text: &str, toks: &[Tok]) -> (Vec<Decl>, Vec<(usize, usize)>) {
    let (mut decls, mut headers) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(t) = toks.get(i) {
        let word = text_of(text, t);
        match word {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            ".version" | ".address_size" if depth == 0 => {
                let end = toks.get(i + 1).map_or(t.end, |n| n.end);
                headers.push((t.start, end));
                i += 2;
                continue;
            }
            ".target" if depth == 0 => {
                let mut j = i + 1;
                while toks.get(j + 1).is_some_and(|c| text_of(text, c) == ",") {
                    j += 2;
                }
                headers.push((t.start, toks.get(j).map_or(t.end, |n| n.end)));
                i = j + 1;
                continue;
            }
            ".entry" | ".func" | ".global" | ".const" if depth == 0 => {
                // The linkage words just before it.
                let mut first = i;
                let mut linkage = Linkage::Internal;
                while first > 0 {
                    match toks.get(first - 1).map(|p| text_of(text, p)) {
                        Some(".visible") => linkage = Linkage::Visible,
                        Some(".weak") => linkage = Linkage::Weak,
                        Some(".extern") => linkage = Linkage::Extern,
                        _ => break,
                    }
                    first -= 1;
                }
                let function = matches!(word, ".entry" | ".func");
                let mut j = i + 1;
                let mut name = None;
                if function {
                    if toks.get(j).is_some_and(|t| text_of(text, t) == "(") {
                        j = skip_parens(text, toks, j);
                    }
                    name = toks.get(j).filter(|t| t.word).map(|t| text_of(text, t).to_string());
                }
                // The statement ends at `;` or, for a function with a body, at its closing `}`.
                let mut body = false;
                let mut inner = 0usize;
                while let Some(t) = toks.get(j) {
                    match text_of(text, t) {
                        "(" | "[" => inner += 1,
                        ")" | "]" => inner = inner.saturating_sub(1),
                        ";" if inner == 0 => break,
                        "{" if function && inner == 0 => {
                            body = true;
                            let mut braces = 0usize;
                            while let Some(t) = toks.get(j) {
                                match text_of(text, t) {
                                    "{" => braces += 1,
                                    "}" => {
                                        braces = braces.saturating_sub(1);
                                        if braces == 0 {
                                            break;
                                        }
                                    }
                                    _ => {}
                                }
                                j += 1;
                            }
                            break;
                        }
                        _ => {}
                    }
                    if !function && name.is_none() {
                        // A variable's name is the last word before `[`, `<`, `=` or `;`.
                        let next = toks.get(j + 1).map(|n| text_of(text, n));
                        if t.word && !text_of(text, t).starts_with('.') && matches!(next, Some("[" | "<" | "=" | ";")) {
                            name = Some(text_of(text, t).to_string());
                        }
                    }
                    j += 1;
                }
                let end = toks.get(j).map_or(text.len(), |t| t.end);
                if let Some(name) = name {
                    let defines = if function { body } else { linkage != Linkage::Extern };
                    let start = toks.get(first).map_or(t.start, |f| f.start);
                    decls.push(Decl { name, linkage, defines, span: (start, end) });
                }
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    (decls, headers)
}

/// `text` with every kernel bounded to `max` registers per thread (`.maxnreg`, lowered where it
/// says more): what a link's or a load's `CU_JIT_MAX_REGISTERS` asks of the code it makes.
pub(crate) fn limit_registers(text: &str, max: u32) -> String {
    let toks = tokens(text);
    let mut out = String::with_capacity(text.len() + 64);
    let (mut at, mut depth, mut i) = (0usize, 0usize, 0usize);
    while let Some(t) = toks.get(i) {
        let word = text_of(text, t);
        i += 1;
        match word {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            ".entry" if depth == 0 => {
                i += 1;
                if toks.get(i).is_some_and(|t| text_of(text, t) == "(") {
                    i = skip_parens(text, &toks, i);
                }
                while let Some(t) = toks.get(i) {
                    match text_of(text, t) {
                        "{" | ";" => {
                            out.push_str(text.get(at..t.start).unwrap_or(""));
                            out.push_str(&format!(".maxnreg {max}\n"));
                            at = t.start;
                            break;
                        }
                        ".maxnreg" => {
                            // Its own bound stays where it is lower; else it is replaced.
                            if let Some(n) = toks.get(i + 1) {
                                let own = text_of(text, n).parse::<u32>().unwrap_or(u32::MAX);
                                out.push_str(text.get(at..t.start).unwrap_or(""));
                                at = n.end;
                                i += 1;
                                out.push_str(&format!(".maxnreg {}", own.min(max)));
                            }
                            // No second bound before the body.
                            while let Some(t) = toks.get(i) {
                                if matches!(text_of(text, t), "{" | ";") {
                                    break;
                                }
                                i += 1;
                            }
                            break;
                        }
                        _ => i += 1,
                    }
                }
            }
            _ => {}
        }
    }
    out.push_str(text.get(at..).unwrap_or(""));
    out
}

/// One module's tokens, declarations and header directives.
type Scanned = (Vec<Tok>, Vec<Decl>, Vec<(usize, usize)>);

/// Several PTX modules linked into one, as the module docs say; one input is itself.
pub(crate) fn link(inputs: &[&str]) -> String {
    let parsed: Vec<Scanned> = inputs
        .iter()
        .map(|text| {
            let toks = tokens(text);
            let (decls, headers) = declarations(text, &toks);
            (toks, decls, headers)
        })
        .collect();
    // Who defines each name, in input order, and how.
    let mut definers: HashMap<&str, Vec<(usize, Linkage)>> = HashMap::new();
    for (k, (_, decls, _)) in parsed.iter().enumerate() {
        for d in decls.iter().filter(|d| d.defines) {
            definers.entry(d.name.as_str()).or_default().push((k, d.linkage));
        }
    }
    // The one weak definition that stays, where no other definition is strong.
    let kept_weak: HashMap<&str, usize> = definers
        .iter()
        .filter(|(_, defs)| defs.iter().all(|&(_, l)| l == Linkage::Weak))
        .filter_map(|(&name, defs)| Some((name, defs.first()?.0)))
        .collect();
    let mut out = String::new();
    for (k, (text, (toks, decls, headers))) in inputs.iter().zip(&parsed).enumerate() {
        let mut cut: Vec<(usize, usize)> = if k == 0 { Vec::new() } else { headers.clone() };
        let mut rename: HashSet<&str> = HashSet::new();
        for d in decls {
            let others = definers.get(d.name.as_str()).map_or(&[][..], Vec::as_slice);
            let elsewhere = others.iter().any(|&(j, _)| j != k);
            match d.linkage {
                Linkage::Extern if !d.defines && elsewhere => cut.push(d.span),
                Linkage::Weak if d.defines && kept_weak.get(d.name.as_str()).is_none_or(|&j| j != k) => {
                    cut.push(d.span)
                }
                Linkage::Internal if d.defines && elsewhere => {
                    rename.insert(d.name.as_str());
                }
                _ => {}
            }
        }
        cut.sort_unstable();
        let mut at = 0;
        for t in toks {
            if t.start < at {
                continue;
            }
            if let Some(&(s, e)) = cut.iter().find(|&&(s, e)| t.start >= s && t.start < e) {
                out.push_str(text.get(at..s).unwrap_or(""));
                at = e;
                continue;
            }
            let word = text_of(text, t);
            if t.word && rename.contains(word) {
                out.push_str(text.get(at..t.start).unwrap_or(""));
                out.push_str(&format!("{word}$recap{k}"));
                at = t.end;
            }
        }
        out.push_str(text.get(at..).unwrap_or(""));
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "ptx_text_tests.rs"]
mod tests;
