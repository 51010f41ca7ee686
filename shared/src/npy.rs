//! numpy's `.npy` files: what GPU engineers read and write everywhere, for a region's bytes.
//!
//! A `.npy` file is a magic string, a version, a header that is a Python dict literal
//! (`{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`) padded so that the data starts on
//! a 64-byte boundary, then the elements in C order. Writing needs nothing but a region's dtype and
//! shape hints; reading takes a file from anyone, so [`parse`] accepts exactly the literal forms
//! numpy and the common writers produce and names what it finds wrong otherwise, never panicking.
//!
//! bf16 has no numpy type: a bf16 region is written as `<u2` (its raw bits, which
//! `ml_dtypes.bfloat16` views without a copy) and reads from `<u2`, `<i2` or `<V2`.

use crate::archive::DType;

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// The longest header accepted: numpy itself writes a few hundred bytes at most.
const MAX_HEADER: usize = 1 << 16;

/// What is wrong with a `.npy` file, or with its fit to a region.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NpyError {
    #[error("not a .npy file: {0}")]
    Format(String),
    #[error("dtype {file} of the file does not fit region {region:?} of dtype {want}")]
    DType { file: String, region: String, want: &'static str },
    #[error("shape {file:?} of the file does not fit region {region:?} of shape {want:?} ({count} elements of {size} bytes)")]
    Shape { file: Vec<u64>, region: String, want: Vec<u64>, count: u64, size: usize },
}

fn bad<T>(why: impl Into<String>) -> Result<T, NpyError> {
    Err(NpyError::Format(why.into()))
}

/// The header of a `.npy` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyHeader {
    /// numpy's type string (`<f4`, `|u1`, ...).
    pub descr: String,
    pub fortran_order: bool,
    pub shape: Vec<u64>,
}

impl NpyHeader {
    /// Elements the shape holds (1 for a scalar's empty shape); `None` if that overflows.
    pub fn count(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
    }
}

/// numpy's type string for a region's dtype.
pub fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::Bytes | DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::U16 | DType::Bf16 => "<u2",
        DType::I16 => "<i2",
        DType::U32 => "<u4",
        DType::I32 => "<i4",
        DType::U64 => "<u8",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
    }
}

/// The region dtype a file's type string reads as (`bool` as `u8`); `None` for types regions do
/// not have (complex numbers, strings, records).
pub fn dtype_of(file: &str) -> Option<DType> {
    if file.trim_start_matches(['|', '=', '<']) == "b1" {
        return Some(DType::U8);
    }
    DType::ALL.into_iter().filter(|d| !matches!(d, DType::Bytes | DType::Bf16)).find(|&d| fits(file, d))
}

/// Whether a file's type string can fill a region of `dtype` byte for byte.
fn fits(file: &str, dtype: DType) -> bool {
    // One-byte types have no byte order: numpy writes `|`, others may write `<` or `=`.
    let norm = |s: &str| match s.as_bytes().first() {
        Some(b'|' | b'=' | b'<') => s[1..].to_string(),
        _ => s.to_string(),
    };
    let f = norm(file);
    match dtype {
        DType::Bytes => f.ends_with('1') || f.starts_with('V'),
        DType::Bf16 => matches!(f.as_str(), "u2" | "i2" | "V2"),
        other => f == norm(descr(other)),
    }
}

/// The shape a region is written with: its shape hints when they describe its size exactly, else
/// one dimension.
pub fn region_shape(dtype: DType, size: u64, hints: &[u64]) -> Vec<u64> {
    let elem = dtype.size() as u64;
    let product = hints.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
    match product {
        Some(n) if !hints.is_empty() && n.checked_mul(elem) == Some(size) => hints.to_vec(),
        _ => vec![size / elem],
    }
}

/// A file name stem for a region or binding name: anything but letters, digits, `-`, `_` and `.`
/// replaced, and no leading dots, so that any name makes one plain file.
pub fn file_stem(name: &str) -> String {
    let safe: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
    safe.trim_start_matches('.').to_string()
}

/// The header bytes of a `.npy` file (format 1.0) for `shape` elements of `dtype`; the region's
/// bytes follow it unchanged (little-endian, C order).
pub fn header(dtype: DType, shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [one] => format!("({one},)"),
        _ => format!("({})", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut dict = format!("{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}", descr(dtype));
    // Magic, version and length take 10 bytes; the dict ends with a newline and the data starts
    // on a 64-byte boundary.
    let total = (10 + dict.len() + 1).div_ceil(64) * 64;
    dict.extend(std::iter::repeat_n(' ', total - 10 - dict.len() - 1));
    dict.push('\n');
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// The most bytes [`parse_header`] needs: the fixed start and the longest header accepted.
pub const HEADER_PREFIX: usize = 12 + MAX_HEADER;

/// Reads a `.npy` header from the first bytes of a file (all of them, or at least
/// [`HEADER_PREFIX`]): the header, where the data starts and how many bytes of data the header
/// says follow, so that a reader checks a file's data size before it reads any of it.
pub fn parse_header(prefix: &[u8]) -> Result<(NpyHeader, usize, u64), NpyError> {
    let bytes = prefix;
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return bad("the file does not start with numpy's magic `\\x93NUMPY`");
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        v => return bad(format!("format version {v}.{} is not one numpy writes (1, 2 or 3)", bytes[7])),
    };
    if len > MAX_HEADER {
        return bad(format!("a header of {len} bytes (at most {MAX_HEADER})"));
    }
    let Some(text) = bytes.get(start..start + len) else {
        return bad(format!("the header says {len} bytes but the file ends after {}", bytes.len() - start));
    };
    let text = std::str::from_utf8(text).map_err(|_| NpyError::Format("the header is not text".into()))?;
    let header = parse_dict(text)?;
    let item = item_size(&header.descr)?;
    let want = header
        .count()
        .and_then(|n| n.checked_mul(item))
        .ok_or_else(|| NpyError::Format(format!("shape {:?} is too large", header.shape)))?;
    Ok((header, start + len, want))
}

/// Splits a `.npy` file into its header and its data, checking that the data is exactly what the
/// header describes.
pub fn parse(bytes: &[u8]) -> Result<(NpyHeader, &[u8]), NpyError> {
    let (header, start, want) = parse_header(bytes)?;
    let data = &bytes[start..];
    if data.len() as u64 != want {
        return bad(format!(
            "shape {:?} of {} needs {want} bytes of data but the file has {}",
            header.shape,
            header.descr,
            data.len()
        ));
    }
    Ok((header, data))
}

/// Bytes per element of a simple type string (`<f4`: 4); structured types are refused.
fn item_size(descr: &str) -> Result<u64, NpyError> {
    let body = descr.trim_start_matches(['<', '>', '|', '=']);
    if descr.starts_with('>') && !body.ends_with('1') {
        return bad(format!(
            "big-endian data ({descr}): save it little-endian (`arr.astype(arr.dtype.newbyteorder('<'))`)"
        ));
    }
    let kind = body.chars().next();
    match (kind, body.get(1..).and_then(|n| n.parse::<u64>().ok())) {
        (Some('b' | 'i' | 'u' | 'f' | 'V'), Some(n)) if (1..=64).contains(&n) => Ok(n),
        _ => bad(format!("dtype {descr:?} is not a plain number type")),
    }
}

/// Checks that a parsed file fills region `name` (`dtype`, `size` bytes, shape hints `hints`): the
/// same element type, and either the region's shape or one dimension of its element count.
pub fn check_fit(header: &NpyHeader, name: &str, dtype: DType, size: u64, hints: &[u64]) -> Result<(), NpyError> {
    if !fits(&header.descr, dtype) {
        return Err(NpyError::DType { file: header.descr.clone(), region: name.to_string(), want: descr(dtype) });
    }
    let want = region_shape(dtype, size, hints);
    let count = size / dtype.size() as u64;
    let flat = header.shape.len() == 1 && header.count() == Some(count);
    if header.fortran_order && header.shape.iter().filter(|&&d| d > 1).count() > 1 {
        return bad("Fortran-ordered data: save it in C order (`np.ascontiguousarray`)");
    }
    if header.shape != want && !flat || !size.is_multiple_of(dtype.size() as u64) {
        return Err(NpyError::Shape {
            file: header.shape.clone(),
            region: name.to_string(),
            want,
            count,
            size: dtype.size(),
        });
    }
    Ok(())
}

/// The dict literal: keys `descr`, `fortran_order` and `shape` in any order, each once, nothing else.
fn parse_dict(text: &str) -> Result<NpyHeader, NpyError> {
    let mut p = Lexer { s: text.as_bytes(), at: 0 };
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.space();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.space();
        p.expect(b':')?;
        p.space();
        let dup = match key.as_str() {
            "descr" => descr.replace(p.string()?).is_some(),
            "fortran_order" => fortran.replace(p.boolean()?).is_some(),
            "shape" => shape.replace(p.tuple()?).is_some(),
            other => return bad(format!("unknown header key {other:?}")),
        };
        if dup {
            return bad(format!("header key {key:?} given twice"));
        }
        p.space();
        if !p.eat(b',') {
            p.space();
            p.expect(b'}')?;
            break;
        }
    }
    if !text[p.at..].trim().is_empty() {
        return bad("text after the header's dict");
    }
    match (descr, fortran, shape) {
        (Some(descr), Some(fortran_order), Some(shape)) => Ok(NpyHeader { descr, fortran_order, shape }),
        _ => bad("the header lacks one of `descr`, `fortran_order` and `shape`"),
    }
}

struct Lexer<'a> {
    s: &'a [u8],
    at: usize,
}

impl Lexer<'_> {
    fn space(&mut self) {
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.s.get(self.at) == Some(&c);
        self.at += hit as usize;
        hit
    }

    fn expect(&mut self, c: u8) -> Result<(), NpyError> {
        if self.eat(c) {
            return Ok(());
        }
        bad(format!("expected `{}` at byte {} of the header", c as char, self.at))
    }

    fn string(&mut self) -> Result<String, NpyError> {
        let quote = match self.s.get(self.at) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return bad(format!("expected a quoted string at byte {} of the header", self.at)),
        };
        let start = self.at + 1;
        let Some(len) = self.s[start..].iter().position(|&c| c == quote) else {
            return bad("an unterminated string in the header");
        };
        self.at = start + len + 1;
        Ok(String::from_utf8_lossy(&self.s[start..start + len]).into_owned())
    }

    fn boolean(&mut self) -> Result<bool, NpyError> {
        for (word, v) in [("True", true), ("False", false)] {
            if self.s[self.at..].starts_with(word.as_bytes()) {
                self.at += word.len();
                return Ok(v);
            }
        }
        bad(format!("expected True or False at byte {} of the header", self.at))
    }

    fn tuple(&mut self) -> Result<Vec<u64>, NpyError> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.space();
            if self.eat(b')') {
                return Ok(dims);
            }
            let start = self.at;
            while self.s.get(self.at).is_some_and(u8::is_ascii_digit) {
                self.at += 1;
            }
            // Python 2 era writers append `L` to long integers.
            let digits = std::str::from_utf8(&self.s[start..self.at]).unwrap_or_default();
            let Ok(d) = digits.parse::<u64>() else {
                return bad(format!("expected a dimension at byte {start} of the header"));
            };
            self.eat(b'L');
            dims.push(d);
            if dims.len() > 32 {
                return bad("more than 32 dimensions");
            }
            self.space();
            if !self.eat(b',') {
                self.space();
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_strings_name_region_dtypes() {
        assert_eq!(dtype_of("<f4"), Some(DType::F32));
        assert_eq!(dtype_of("|u1"), Some(DType::U8));
        assert_eq!(dtype_of("=i8"), Some(DType::I64));
        assert_eq!(dtype_of("|b1"), Some(DType::U8));
        assert_eq!(dtype_of("<c8"), None);
    }

    #[test]
    fn headers_are_what_numpy_writes() {
        // `np.save` of `np.zeros((3, 4), np.float32)` and of `np.zeros(5, np.uint8)`.
        let h = header(DType::F32, &[3, 4]);
        assert_eq!(h.len(), 128);
        assert_eq!(&h[..10], b"\x93NUMPY\x01\x00v\x00");
        assert!(std::str::from_utf8(&h[10..])
            .unwrap()
            .starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"));
        assert_eq!(*h.last().unwrap(), b'\n');
        let h = header(DType::U8, &[5]);
        assert!(std::str::from_utf8(&h[10..])
            .unwrap()
            .starts_with("{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }"));
        assert_eq!(h.len() % 64, 0);
    }

    #[test]
    fn every_dtype_round_trips() {
        for dtype in DType::ALL {
            let shape = [2u64, 3];
            let mut file = header(dtype, &shape);
            let data: Vec<u8> = (0..6 * dtype.size()).map(|i| i as u8).collect();
            file.extend_from_slice(&data);
            let (h, d) = parse(&file).unwrap();
            assert_eq!((h.shape.as_slice(), d), (&shape[..], &data[..]), "{dtype:?}");
            check_fit(&h, "r", dtype, data.len() as u64, &shape).unwrap();
            // One dimension of the same count fits too.
            check_fit(&NpyHeader { shape: vec![6], ..h.clone() }, "r", dtype, data.len() as u64, &shape).unwrap();
        }
    }

    #[test]
    fn other_writers_spellings_parse() {
        let text = "{\"shape\": (2L, 2L), \"fortran_order\": False, \"descr\": \"<i8\"}";
        let mut file = b"\x93NUMPY\x02\x00".to_vec();
        file.extend_from_slice(&(text.len() as u32).to_le_bytes());
        file.extend_from_slice(text.as_bytes());
        file.extend_from_slice(&[0; 32]);
        let (h, _) = parse(&file).unwrap();
        assert_eq!(h, NpyHeader { descr: "<i8".into(), fortran_order: false, shape: vec![2, 2] });
    }

    #[test]
    fn mismatches_name_the_file_and_the_region() {
        let h = NpyHeader { descr: "<f8".into(), fortran_order: false, shape: vec![4] };
        let e = check_fit(&h, "x", DType::F32, 16, &[]).unwrap_err().to_string();
        assert_eq!(e, "dtype <f8 of the file does not fit region \"x\" of dtype <f4");
        let h = NpyHeader { descr: "<f4".into(), fortran_order: false, shape: vec![2, 3] };
        let e = check_fit(&h, "x", DType::F32, 16, &[2, 2]).unwrap_err().to_string();
        assert!(e.contains("shape [2, 3]") && e.contains("[2, 2]") && e.contains("\"x\""), "{e}");
    }

    #[test]
    fn damaged_files_are_errors() {
        let good = {
            let mut f = header(DType::F32, &[4]);
            f.extend_from_slice(&[0; 16]);
            f
        };
        assert!(parse(&good).is_ok());
        for cut in 0..good.len() {
            assert!(parse(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut wrong = good.clone();
        wrong[0] = b'x';
        assert!(parse(&wrong).unwrap_err().to_string().contains("magic"));
        let big = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {}), }}", u64::MAX, u64::MAX);
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        file.extend_from_slice(&(big.len() as u16).to_le_bytes());
        file.extend_from_slice(big.as_bytes());
        assert!(parse(&file).unwrap_err().to_string().contains("too large"));
        for dict in [
            "{'descr': '<f4'}",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",
            "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}",
        ] {
            let mut file = b"\x93NUMPY\x01\x00".to_vec();
            file.extend_from_slice(&(dict.len() as u16).to_le_bytes());
            file.extend_from_slice(dict.as_bytes());
            assert!(parse(&file).is_err(), "{dict}");
        }
    }
}
