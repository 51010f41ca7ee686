//! The parameter list of a PTX `.entry`, read from the declaration alone and laid out as the CUDA
//! driver lays out a kernel's parameter buffer.
//!
//! This reads only the `.entry NAME(...)` text, not the body: an importer or a capture needs a
//! kernel's layout even when the rest of the module uses instructions the CPU engine refuses (or
//! when the module is never run on the CPU at all), so it must not depend on a full parse.

use crate::archive::{ParamDecl, ParamKind};

/// Why the parameter list of an `.entry` could not be read, naming the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the PTX has no .entry named {entry}")]
    NoEntry { entry: String },
    #[error(".entry {entry}: parameter list is not closed")]
    Unclosed { entry: String },
    #[error(".entry {entry}: parameter `{decl}`: {reason}")]
    Param { entry: String, decl: String, reason: ParamError },
}

/// What is wrong with one `.param` declaration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("does not start with .param")]
    NotParam,
    #[error("`.align` without a value")]
    AlignWithoutValue,
    #[error("bad alignment {0:?}")]
    BadAlign(String),
    #[error("alignment {0} is not a power of two")]
    AlignNotPowerOfTwo(u32),
    #[error("unknown type {0}")]
    UnknownType(String),
    #[error("unexpected {0:?} after the name")]
    AfterName(String),
    #[error("no parameter name")]
    NoName,
    #[error("no type")]
    NoType,
    #[error("unclosed array size")]
    UnclosedArray,
    #[error("bad array size {0:?}")]
    BadArraySize(String),
    #[error("parameter size overflows")]
    SizeOverflows,
}

/// One `.param` of a PTX `.entry`, as declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryParam {
    pub name: String,
    pub offset: u32,
    pub size: u32,
    pub align: u32,
    /// Declared with `.ptr` (Triton marks its pointer parameters this way).
    pub ptr_annotated: bool,
    /// The declared element type without its dot: `u32`, `f32`, `b8`.
    pub ty: String,
    /// Elements of an array parameter (`.b8 p[24]` has 24); 1 for a scalar.
    pub count: u32,
}

impl EntryParam {
    /// The archive's declaration of this parameter, as a pointer or a plain value.
    pub fn decl(&self, pointer: bool) -> ParamDecl {
        ParamDecl {
            name: self.name.clone(),
            offset: self.offset,
            size: self.size,
            align: self.align,
            kind: if pointer { ParamKind::Pointer } else { ParamKind::Value },
        }
    }
}

/// Parses the parameter list of `.entry NAME(...)` in `ptx` and lays the parameters out as the CUDA
/// driver does: each at the next multiple of its alignment (`.align N` before the type, or the type's
/// own size), arrays as `element size × count`.
pub fn entry_params(ptx: &str, entry: &str) -> Result<Vec<EntryParam>, SignatureError> {
    let list = entry_param_list(ptx, entry)?;
    let mut params = Vec::new();
    let mut end = 0u32;
    for decl in list.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let p = parse_param(decl, end).map_err(|reason| SignatureError::Param {
            entry: entry.to_string(),
            decl: decl.to_string(),
            reason,
        })?;
        end = p.offset + p.size;
        params.push(p);
    }
    Ok(params)
}

/// The text between the parentheses of `.entry NAME(...)`, comments removed.
fn entry_param_list(ptx: &str, entry: &str) -> Result<String, SignatureError> {
    let text: String = ptx.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let mut search = 0;
    while let Some(found) = text[search..].find(".entry") {
        let after = search + found + ".entry".len();
        search = after;
        let rest = text[after..].trim_start();
        let Some(name_rest) = rest.strip_prefix(entry) else { continue };
        let name_rest = name_rest.trim_start();
        if let Some(list) = name_rest.strip_prefix('(') {
            return match list.find(')') {
                Some(close) => Ok(list[..close].to_string()),
                None => Err(SignatureError::Unclosed { entry: entry.to_string() }),
            };
        }
        if name_rest.starts_with('{') || name_rest.starts_with('.') {
            return Ok(String::new()); // an entry without parameters
        }
    }
    Err(SignatureError::NoEntry { entry: entry.to_string() })
}

fn parse_param(decl: &str, prev_end: u32) -> Result<EntryParam, ParamError> {
    let mut tokens = decl.split_whitespace().peekable();
    if tokens.next() != Some(".param") {
        return Err(ParamError::NotParam);
    }
    let mut align: Option<u32> = None;
    let mut elem: Option<(u32, &str)> = None;
    let mut ptr_annotated = false;
    let mut name = None;
    while let Some(tok) = tokens.next() {
        match tok {
            ".align" => {
                let n = tokens.next().ok_or(ParamError::AlignWithoutValue)?;
                let n: u32 = n.parse().map_err(|_| ParamError::BadAlign(n.to_string()))?;
                // After `.ptr`, `.align` describes the pointee, not the parameter.
                if !ptr_annotated {
                    if !n.is_power_of_two() {
                        return Err(ParamError::AlignNotPowerOfTwo(n));
                    }
                    align = Some(n);
                }
            }
            ".ptr" => ptr_annotated = true,
            ".global" | ".shared" | ".const" | ".local" => {}
            t if t.starts_with('.') => {
                elem = Some((type_size(t).ok_or_else(|| ParamError::UnknownType(t.to_string()))?, &t[1..]));
            }
            t => {
                name = Some(t.to_string());
                break;
            }
        }
    }
    if let Some(extra) = tokens.next() {
        return Err(ParamError::AfterName(extra.to_string()));
    }
    let name = name.ok_or(ParamError::NoName)?;
    let (elem, ty) = elem.ok_or(ParamError::NoType)?;
    let (name, count) = match name.split_once('[') {
        Some((base, rest)) => {
            let n = rest.strip_suffix(']').ok_or(ParamError::UnclosedArray)?;
            let n: u32 = n.trim().parse().map_err(|_| ParamError::BadArraySize(n.to_string()))?;
            (base.to_string(), n)
        }
        None => (name, 1),
    };
    let align = align.unwrap_or(elem);
    let size = elem.checked_mul(count).ok_or(ParamError::SizeOverflows)?;
    let offset = prev_end.div_ceil(align) * align;
    Ok(EntryParam { name, offset, size, align, ptr_annotated, ty: ty.to_string(), count })
}

fn type_size(t: &str) -> Option<u32> {
    Some(match t {
        ".b8" | ".u8" | ".s8" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        _ => return None,
    })
}

/// A parameter's value as its declared type reads it: integers as integers (a `u32` is never
/// shown as a float), floats as floats, `.b8` arrays (structs) as their bytes in hex. `ty` is the
/// element type without its dot (`u32`); `None` (no declaration known) reads the bytes as untyped.
pub fn format_value(ty: Option<&str>, bytes: &[u8]) -> String {
    let untyped = match bytes.len() {
        1 => "b8",
        2 => "b16",
        4 => "b32",
        8 => "b64",
        _ => "b8",
    };
    let ty = ty.unwrap_or(untyped);
    let Some(width) = type_size(&format!(".{ty}")).map(|w| w as usize) else { return hex_bytes(bytes) };
    if bytes.len() == width {
        return scalar(ty, bytes);
    }
    if width > 1 && bytes.len().is_multiple_of(width) && bytes.len() / width <= 16 {
        let items: Vec<String> = bytes.chunks(width).map(|c| scalar(ty, c)).collect();
        return format!("[{}]", items.join(", "));
    }
    hex_bytes(bytes)
}

/// `0x` and the bytes in memory order.
fn hex_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A float as it would be written: shortest round-trip digits, `1.0`, `2.5e-8`.
fn float(v: impl std::fmt::Debug) -> String {
    format!("{v:?}")
}

/// One element of `width` bytes (the type's) as `ty` reads it.
fn scalar(ty: &str, b: &[u8]) -> String {
    let mut le = [0u8; 8];
    le[..b.len()].copy_from_slice(b);
    let u = u64::from_le_bytes(le);
    let bits = 8 * b.len() as u32;
    let signed = if bits == 64 { u as i64 } else { ((u << (64 - bits)) as i64) >> (64 - bits) };
    let half = |h: u16| half::f16::from_bits(h).to_f32();
    let bhalf = |h: u16| half::bf16::from_bits(h).to_f32();
    match ty {
        "u8" | "u16" | "u32" | "u64" => u.to_string(),
        "s8" | "s16" | "s32" | "s64" => signed.to_string(),
        "f32" => float(f32::from_bits(u as u32)),
        "f64" => float(f64::from_bits(u)),
        "f16" => float(half(u as u16)),
        "bf16" => float(bhalf(u as u16)),
        "f16x2" => format!("({}, {})", float(half(u as u16)), float(half((u >> 16) as u16))),
        "bf16x2" => format!("({}, {})", float(bhalf(u as u16)), float(bhalf((u >> 16) as u16))),
        // Untyped bits: the integer, and the float they make where that is a plausible one (a
        // small integer's bits are a denormal float, which no one means).
        "b32" => {
            let f = f32::from_bits(u as u32);
            if f.is_normal() && (1e-6..=1e9).contains(&f.abs()) {
                format!("{u} (as f32: {})", float(f))
            } else {
                u.to_string()
            }
        }
        "b64" => {
            let f = f64::from_bits(u);
            if f.is_normal() && (1e-12..=1e15).contains(&f.abs()) {
                format!("{u} (as f64: {})", float(f))
            } else {
                u.to_string()
            }
        }
        _ => u.to_string(),
    }
}

/// The names of every `.entry` the PTX declares, in order.
pub fn entry_names(ptx: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in ptx.lines() {
        let code = line.split("//").next().unwrap_or("");
        let Some(at) = code.find(".entry") else { continue };
        let rest = code[at + ".entry".len()..].trim_start();
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || "_$.".contains(*c)).collect();
        if !name.is_empty() {
            names.push(name);
        }
    }
    names
}

/// The names of the module-scope `.global` and `.const` variables the PTX defines (not those it
/// declares `.extern`), in order: what a capture asks the driver for (`cuModuleGetGlobal`) when
/// it records a module's variables. Read from the declarations alone, skipping function bodies.
pub fn module_variable_names(ptx: &str) -> Vec<String> {
    let mut text = String::with_capacity(ptx.len());
    for line in ptx.lines() {
        text.push_str(line.split("//").next().unwrap_or(""));
        text.push('\n');
    }
    let mut names = Vec::new();
    let mut statement = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            // An initialiser's braces belong to the statement; any other brace opens a body.
            '{' if statement.contains('=') => {
                let mut depth = 1;
                for c in chars.by_ref() {
                    depth += (c == '{') as i32 - (c == '}') as i32;
                    if depth == 0 {
                        break;
                    }
                }
            }
            '{' => {
                let mut depth = 1;
                for c in chars.by_ref() {
                    depth += (c == '{') as i32 - (c == '}') as i32;
                    if depth == 0 {
                        break;
                    }
                }
                statement.clear();
            }
            ';' => {
                let declared = statement.split('=').next().unwrap_or("");
                let words: Vec<&str> = declared.split_whitespace().collect();
                let space = words.iter().any(|w| *w == ".global" || *w == ".const");
                if space && !words.contains(&".extern") {
                    let last = words.last().copied().unwrap_or("");
                    let name = last.split('[').next().unwrap_or("");
                    if !name.is_empty() && !name.starts_with('.') {
                        names.push(name.to_string());
                    }
                }
                statement.clear();
            }
            c => statement.push(c),
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_variables_are_named_from_their_declarations() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\n\
                   .extern .global .align 4 .u32 elsewhere;\n\
                   .const .align 4 .b8 taps[20] = {0, 0, 128, 63, // comment\n 0};\n\
                   .visible .global .align 4 .u32 launches;\n\
                   .global .align 8 .u64 table_at = generic(taps);\n\
                   .shared .align 4 .b8 staging[64];\n\
                   .visible .entry k(.param .u64 p)\n{\n\t.reg .b32 %r<2>;\n\t.global .u32 not_module_scope;\n\tret;\n}\n\
                   .const .f32 after_the_body[2];\n";
        assert_eq!(module_variable_names(ptx), ["taps", "launches", "table_at", "after_the_body"]);
    }

    #[test]
    fn lays_out_params_as_declared() {
        let ptx = ".visible .entry k(\n\t.param .u32 k_param_0,\n\t.param .align 8 .b8 k_param_1[24],\n\
                   \t.param .u64 .ptr .global .align 1 k_param_2,\n\t.param .f32 k_param_3\n)\n{\n}";
        let p = entry_params(ptx, "k").unwrap();
        let got: Vec<_> = p.iter().map(|p| (p.name.as_str(), p.offset, p.size, p.align, p.ptr_annotated)).collect();
        assert_eq!(
            got,
            [
                ("k_param_0", 0, 4, 4, false),
                ("k_param_1", 8, 24, 8, false),
                ("k_param_2", 32, 8, 8, true),
                ("k_param_3", 40, 4, 4, false)
            ]
        );
    }

    #[test]
    fn finds_the_named_entry_among_several() {
        let ptx = ".entry kk(.param .u64 a)\n{}\n.entry k(.param .u16 b, .param .u64 c)\n{}";
        let p = entry_params(ptx, "k").unwrap();
        assert_eq!(p.iter().map(|p| (p.offset, p.size)).collect::<Vec<_>>(), [(0, 2), (8, 8)]);
        assert_eq!(entry_params(ptx, "nope").unwrap_err(), SignatureError::NoEntry { entry: "nope".into() });
        assert!(entry_params(ptx, "nope").unwrap_err().to_string().contains("no .entry named nope"));
        let bad = entry_params(".entry e(.param .u99 x)", "e").unwrap_err();
        assert_eq!(
            bad,
            SignatureError::Param {
                entry: "e".into(),
                decl: ".param .u99 x".into(),
                reason: ParamError::UnknownType(".u99".into())
            }
        );
        assert_eq!(bad.to_string(), ".entry e: parameter `.param .u99 x`: unknown type .u99");
    }

    #[test]
    fn values_read_as_their_declared_type() {
        let ptx = ".entry k(.param .u32 n, .param .s32 d, .param .f32 a, .param .f64 b, .param .u64 big, \
                   .param .f16 h, .param .align 4 .b8 s[8], .param .b32 raw, .param .b32 rawf)\n{}";
        let p = entry_params(ptx, "k").unwrap();
        let ty: Vec<&str> = p.iter().map(|p| p.ty.as_str()).collect();
        assert_eq!(ty, ["u32", "s32", "f32", "f64", "u64", "f16", "b8", "b32", "b32"]);
        assert_eq!(p[6].count, 8);
        let v = |i: usize, b: &[u8]| format_value(Some(&p[i].ty), b);
        // 1024 as a u32 is 1024, never the denormal 1.4e-42.
        assert_eq!(v(0, &1024u32.to_le_bytes()), "1024");
        assert_eq!(v(1, &(-3i32).to_le_bytes()), "-3");
        assert_eq!(v(2, &2.5f32.to_le_bytes()), "2.5");
        assert_eq!(v(3, &1e-300f64.to_le_bytes()), "1e-300");
        assert_eq!(v(4, &u64::MAX.to_le_bytes()), u64::MAX.to_string());
        assert_eq!(v(5, &half::f16::from_f32(0.5).to_bits().to_le_bytes()), "0.5");
        assert_eq!(v(6, &[1, 0, 0, 0, 0xff, 0, 0, 0]), "0x01000000ff000000");
        assert_eq!(v(7, &7u32.to_le_bytes()), "7");
        assert_eq!(v(8, &1.0f32.to_le_bytes()), "1065353216 (as f32: 1.0)");
        // Without a declaration: by size, integers first.
        assert_eq!(format_value(None, &1024u32.to_le_bytes()), "1024");
        assert_eq!(format_value(None, &0.25f32.to_le_bytes()), "1048576000 (as f32: 0.25)");
        assert_eq!(format_value(None, &[1, 2, 3]), "0x010203");
        assert_eq!(format_value(Some("u16"), &[1, 0, 2, 0]), "[1, 2]");
    }

    #[test]
    fn names_every_entry() {
        let ptx = "// .entry commented(\n.visible .entry first(\n.param .u64 a\n)\n{}\n.entry second()\n{}";
        assert_eq!(entry_names(ptx), ["first", "second"]);
    }
}
