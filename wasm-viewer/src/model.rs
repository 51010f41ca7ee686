//! What the views show, computed from an archive without touching the DOM (so it is tested natively).

use shared::archive::{Archive, DType, FormatError, Op, ParamKind, RegionView};

self_cell::self_cell!(
    /// An archive that owns its bytes: the browser hands us a copy of the file, and every view
    /// borrows from it for as long as the page shows it.
    pub struct LoadedArchive {
        owner: Vec<u8>,
        #[covariant]
        dependent: Archive,
    }
);

impl LoadedArchive {
    /// Opens (structure check only, as the reader does) bytes the page read or fetched.
    pub fn load(bytes: Vec<u8>) -> Result<Self, FormatError> {
        LoadedArchive::try_new(bytes, |b| Archive::open(b))
    }

    pub fn archive(&self) -> &Archive<'_> {
        self.borrow_dependent()
    }

    pub fn bytes(&self) -> &[u8] {
        self.borrow_owner()
    }
}

/// The kinds an op filter can select.
pub const OP_KINDS: [&str; 8] = ["launch", "copy", "memset", "alloc", "free", "while", "if", "marker"];

/// One op of the flat list with its nesting depth (bodies of while/if are indented).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpEntry {
    pub id: u32,
    pub depth: u16,
}

/// Nesting depth of every op: a linear pass with a stack of body ends.
pub fn op_depths(a: &Archive) -> Vec<u16> {
    let n = a.op_count() as u32;
    let mut depths = Vec::with_capacity(n as usize);
    let mut ends: Vec<u32> = Vec::new();
    for id in 0..n {
        while ends.last().is_some_and(|&e| id >= e) {
            ends.pop();
        }
        depths.push(ends.len().min(u16::MAX as usize) as u16);
        let body = a.op(id).body_len();
        if body > 0 {
            ends.push(id + 1 + body);
        }
    }
    depths
}

/// Which ops the table shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpFilter {
    /// An op kind name, or empty for all.
    pub kind: String,
    /// Substring of the kernel entry name (launches only), or empty for all.
    pub kernel: String,
}

impl OpFilter {
    pub fn is_empty(&self) -> bool {
        self.kind.is_empty() && self.kernel.is_empty()
    }

    /// Ids of the ops that pass, in order.
    pub fn apply(&self, a: &Archive) -> Vec<u32> {
        let kernel = self.kernel.to_lowercase();
        // Decide per kernel once, not per op: 1M launches share a handful of kernels.
        let kernel_ok: Vec<bool> =
            a.kernels().map(|k| kernel.is_empty() || k.name.to_lowercase().contains(&kernel)).collect();
        (0..a.op_count() as u32)
            .filter(|&id| {
                let op = a.op(id);
                if !self.kind.is_empty() && op.kind_name() != self.kind {
                    return false;
                }
                if kernel.is_empty() {
                    return true;
                }
                match op {
                    Op::Launch(l) => kernel_ok.get(l.kernel as usize).copied().unwrap_or(false),
                    _ => false,
                }
            })
            .collect()
    }
}

/// The columns of one op-table row, as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpRow {
    pub kind: &'static str,
    pub kernel: String,
    pub dims: String,
    pub shared: String,
    pub detail: String,
}

fn dim3(d: [u32; 3]) -> String {
    match d {
        [x, 1, 1] => format!("{x}"),
        [x, y, 1] => format!("{x},{y}"),
        [x, y, z] => format!("{x},{y},{z}"),
    }
}

fn region_name<'a>(a: &Archive<'a>, id: u32) -> &'a str {
    if (id as usize) < a.region_count() {
        a.region(id).name
    } else {
        "?"
    }
}

/// `1 op`, `2 ops`: a count with the noun that agrees with it.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What a comparison whose two sides agree says: which sides, over how many ops and region
/// comparisons, each counted in words that agree with its number.
pub fn agreement(a: &str, b: &str, ops: u64, regions: u64) -> String {
    let ops = if ops == 1 { "its one op".to_string() } else { format!("all {ops} ops") };
    format!(
        "AGREE: {a} and {b} wrote the same values in {ops} ({})",
        count(regions, "region comparison", "region comparisons")
    )
}

/// Human-readable byte count (binary units, as GPU engineers read buffer sizes).
pub fn bytes_human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn op_row(a: &Archive, id: u32) -> OpRow {
    let op = a.op(id);
    let kind = op.kind_name();
    let mut row =
        OpRow { kind, kernel: String::new(), dims: String::new(), shared: String::new(), detail: String::new() };
    match op {
        Op::Launch(l) => {
            row.kernel = a.kernel(l.kernel).name.to_string();
            row.dims = format!("{} × {}", dim3(l.grid), dim3(l.block));
            row.shared = if l.shared_bytes == 0 { String::new() } else { l.shared_bytes.to_string() };
            // The regions a launch can reach are those its parameters point into (it may read
            // or write any of them: the kernel's code decides).
            let mut regions: Vec<&str> = Vec::new();
            for r in a.relocs(l.relocs.clone()) {
                let name = region_name(a, r.target);
                if !regions.contains(&name) {
                    regions.push(name);
                }
            }
            row.detail = if regions.is_empty() {
                format!("{} param bytes, no pointers", l.params.len())
            } else {
                format!("↔ {} · {} param bytes", regions.join(", "), l.params.len())
            };
        }
        Op::Copy(c) => {
            row.detail = format!(
                "{}+{} → {}+{}, {}",
                region_name(a, c.src),
                c.src_offset,
                region_name(a, c.dst),
                c.dst_offset,
                bytes_human(c.len)
            );
        }
        Op::Memset(m) => {
            let w = m.width.clamp(1, 8) as usize;
            let pat = m.pattern & if w == 8 { u64::MAX } else { (1u64 << (w * 8)) - 1 };
            row.detail = format!(
                "{}+{}, {} = 0x{:0width$x} (×{} bytes)",
                region_name(a, m.region),
                m.offset,
                bytes_human(m.len),
                pat,
                w,
                width = w * 2
            );
        }
        Op::Alloc(r) | Op::Free(r) => row.detail = region_name(a, r).to_string(),
        Op::While { cond, body_len } | Op::If { cond, body_len } => {
            let bound = if cond.max_iterations == 0 {
                String::new()
            } else {
                format!(", at most {} iterations", cond.max_iterations)
            };
            row.detail = format!("{}+{} ≠ 0, body of {body_len} ops{bound}", region_name(a, cond.region), cond.offset);
        }
        Op::Marker(name) => row.detail = name.to_string(),
        Op::Signal(e) => row.detail = format!("event {e}: later waits for it follow what this device did before"),
        Op::Wait(e) => row.detail = format!("for event {e}: this device goes on once it is signalled"),
        Op::Library(l) => row.detail = format!("{} of {} elements", l.name(), l.count()),
    }
    if a.device_count() > 1 {
        row.detail = format!("device {} · {}", a.op_device(id), row.detail);
    }
    row
}

/// One decoded kernel parameter of a launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamValue {
    pub name: String,
    pub offset: u32,
    pub size: u32,
    pub kind: ParamKind,
    /// The element type the PTX `.entry` declares (`u32`, `f32`, `b8`), empty when unknown.
    pub ty: String,
    /// The value as its declared type reads it (a `u32` an integer, an `f32` a float, a `.b8`
    /// array its bytes in hex); without a declaration, an integer with a float view where the bits
    /// make a plausible float.
    pub value: String,
    /// Pointers inside this parameter: `(offset within the parameter, "region+offset")`.
    pub pointers: Vec<(u64, String)>,
}

fn le_u64(b: &[u8]) -> u64 {
    let mut v = [0u8; 8];
    v[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
    u64::from_le_bytes(v)
}

/// Decodes a launch's parameter bytes per its kernel's declared layout, with its relocations.
pub fn launch_params(a: &Archive, id: u32) -> Vec<ParamValue> {
    let Op::Launch(l) = a.op(id) else { return Vec::new() };
    let kernel = a.kernel(l.kernel);
    let relocs: Vec<_> = a.relocs(l.relocs.clone()).collect();
    // The declared types come from the module's `.entry` (the archive keeps only the layout).
    let declared: Vec<shared::ptx::signature::EntryParam> = a
        .module(kernel.module)
        .ptx_text()
        .ok()
        .and_then(|ptx| shared::ptx::signature::entry_params(&ptx, kernel.name).ok())
        .unwrap_or_default();
    kernel
        .params
        .iter()
        .map(|p| {
            let start = (p.offset as usize).min(l.params.len());
            let end = (p.offset as usize + p.size as usize).min(l.params.len());
            let bytes = &l.params[start..end];
            let pointers: Vec<(u64, String)> = relocs
                .iter()
                .filter(|r| r.offset >= p.offset as u64 && r.offset < p.offset as u64 + p.size as u64)
                .map(|r| (r.offset - p.offset as u64, format!("{}+{}", region_name(a, r.target), r.target_offset)))
                .collect();
            let ty = declared.iter().find(|d| d.offset == p.offset && d.size == p.size).map(|d| d.ty.clone());
            let value = if bytes.len() < p.size as usize {
                format!("missing (parameter bytes end at {})", l.params.len())
            } else if p.kind == ParamKind::Pointer || (p.size == 8 && pointers.iter().any(|(o, _)| *o == 0)) {
                match pointers.iter().find(|(o, _)| *o == 0) {
                    Some((_, t)) => format!("&{t}"),
                    None if le_u64(bytes) == 0 => "null".to_string(),
                    None => format!("0x{:x} (no relocation)", le_u64(bytes)),
                }
            } else {
                shared::ptx::signature::format_value(ty.as_deref(), bytes)
            };
            let ty = ty.unwrap_or_default();
            ParamValue { name: p.name.clone(), offset: p.offset, size: p.size, kind: p.kind, ty, value, pointers }
        })
        .collect()
}

/// Counts of what an archive holds, for the header line and the archive list.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub bytes: u64,
    pub version: String,
    pub ops: usize,
    pub launches: usize,
    pub kernels: usize,
    pub modules: usize,
    pub regions: usize,
    pub bindings: usize,
}

pub fn summary(a: &Archive) -> Summary {
    let (maj, min) = a.version();
    Summary {
        bytes: a.len(),
        version: format!("{maj}.{min}"),
        ops: a.op_count(),
        launches: a.ops().filter(|o| matches!(o, Op::Launch(_))).count(),
        kernels: a.kernel_count(),
        modules: a.module_count(),
        regions: a.region_count(),
        bindings: a.binding_count(),
    }
}

/// Converts element `i` of `bytes` (little-endian, of `dtype`) to f64 for plotting.
pub fn element_f64(bytes: &[u8], dtype: DType, i: usize) -> f64 {
    shared::check::element(bytes, dtype, i)
}

/// Region contents reduced for a plot: `min`/`max` per bucket so spikes survive downsampling.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub elements: usize,
    pub lo: Vec<f64>,
    pub hi: Vec<f64>,
    pub min: f64,
    pub max: f64,
    pub non_finite: usize,
}

/// Buckets `bytes` (of `dtype`) into at most `buckets` min/max pairs.
pub fn series(bytes: &[u8], dtype: DType, buckets: usize) -> Series {
    let n = bytes.len() / dtype.size();
    let buckets = buckets.clamp(1, n.max(1));
    let mut lo = vec![f64::INFINITY; buckets];
    let mut hi = vec![f64::NEG_INFINITY; buckets];
    let (mut min, mut max, mut non_finite) = (f64::INFINITY, f64::NEG_INFINITY, 0);
    for i in 0..n {
        let v = element_f64(bytes, dtype, i);
        if !v.is_finite() {
            non_finite += 1;
            continue;
        }
        let b = i * buckets / n;
        lo[b] = lo[b].min(v);
        hi[b] = hi[b].max(v);
        min = min.min(v);
        max = max.max(v);
    }
    Series { elements: n, lo, hi, min, max, non_finite }
}

/// The 2-D shape to draw a region as a heatmap, if its shape hint has two or more dimensions
/// (outer dimensions are folded into rows).
pub fn grid_shape(r: &RegionView) -> Option<(usize, usize)> {
    if r.shape.len() < 2 {
        return None;
    }
    let cols = *r.shape.last()? as usize;
    let total = (r.size / r.dtype.size() as u64) as usize;
    if cols == 0 || total < cols {
        return None;
    }
    Some((total / cols, cols))
}

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A binding's direction as far as the archive tells it: the declared one, unless the capture
/// declared `inout` (as importers do when they cannot tell) and the region's recorded contents
/// say more: expected bytes equal to the initial ones mean the replay only reads it (`in`).
/// `derived` is true when the answer comes from the contents, not the declaration.
pub fn binding_direction(
    declared: shared::archive::Direction,
    initial: Option<&[u8]>,
    expected: Option<&[u8]>,
) -> (shared::archive::Direction, bool) {
    use shared::archive::Direction;
    match (declared, initial, expected) {
        (Direction::InOut, Some(i), Some(e)) if i == e => (Direction::In, true),
        (d, _, _) => (d, false),
    }
}

/// What a region whose every 4-byte word is the same holds, said plainly: such a region is a fill
/// (a memset, an allocator's poison such as 0xA5A5A5A5), and its min and max, read as numbers,
/// would look like computed values. `None` for anything else, and for regions under 8 bytes.
pub fn fill_note(bytes: &[u8]) -> Option<String> {
    if bytes.len() < 8 || !bytes.len().is_multiple_of(4) {
        return None;
    }
    let word = &bytes[..4];
    if !bytes.chunks_exact(4).all(|c| c == word) {
        return None;
    }
    Some(word_fill_text(u32::from_le_bytes([word[0], word[1], word[2], word[3]])))
}

/// The sentence for a region filled with one 4-byte `word`.
pub fn word_fill_text(word: u32) -> String {
    let b = word.to_le_bytes();
    if word == 0 {
        "every byte is zero: nothing was written here, or it was cleared".into()
    } else if b.iter().all(|&x| x == b[0]) {
        format!("every byte is 0x{:02X} (0x{word:08X} in every word): a fill pattern, not computed values", b[0])
    } else {
        format!("every 4-byte word is 0x{word:08X}: a constant fill, not computed values")
    }
}

/// For a host's summary of a region of `dtype` (its name) whose min and max are the same value
/// `v` over `count` elements: what that constant is, with its bit pattern where the type is 4
/// bytes wide (a fill is recognised by its bytes, not by the number they read as).
pub fn constant_note(v: f64, dtype: &str, count: u64) -> Option<String> {
    if count < 2 {
        return None;
    }
    let word = match dtype {
        "i32" => Some(v as i32 as u32),
        "u32" => Some(v as u32),
        "f32" => Some((v as f32).to_bits()),
        _ => None,
    };
    Some(match word {
        Some(w) => word_fill_text(w),
        None => format!("every element is {v}: a constant, not varying values"),
    })
}

/// A host's RFC 3339 UTC time as a list shows it: `2026-11-22 02:20:03` (to the second; the
/// columns are sized for that).
pub fn when(t: &str) -> String {
    let t = t.trim_end_matches('Z').replacen('T', " ", 1);
    match t.split_once('.') {
        Some((whole, _)) => whole.to_string(),
        None => t,
    }
}

/// Seconds between two RFC 3339 UTC times of the host (`2026-11-22T02:20:03Z`).
pub fn seconds_between(a: &str, b: &str) -> Option<i64> {
    let secs = |t: &str| -> Option<i64> {
        let t = t.strip_suffix('Z')?;
        let (date, time) = t.split_once('T')?;
        let d: Vec<i64> = date.split('-').map(|x| x.parse().ok()).collect::<Option<_>>()?;
        let h: Vec<i64> = time.split(':').map(|x| x.parse::<f64>().ok().map(|v| v as i64)).collect::<Option<_>>()?;
        let (y, m, day) = (d.first()?, d.get(1)?, d.get(2)?);
        // Days from the civil date (Howard Hinnant's algorithm).
        let y = if *m <= 2 { y - 1 } else { *y };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let mp = (m + 9) % 12;
        let doy = (153 * mp + 2) / 5 + day - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146097 + doe;
        Some(days * 86400 + h.first()? * 3600 + h.get(1)? * 60 + h.get(2)?)
    };
    Some(secs(b)? - secs(a)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::archive::*;

    fn sample() -> Vec<u8> {
        let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
        let m = w.add_module("m", ".version 8.0").unwrap();
        let k = w
            .add_kernel(
                m,
                "scale",
                vec![
                    ParamDecl { name: "x".into(), offset: 0, size: 8, align: 8, kind: ParamKind::Pointer },
                    ParamDecl { name: "a".into(), offset: 8, size: 4, align: 4, kind: ParamKind::Value },
                ],
            )
            .unwrap();
        let x = w.add_region(RegionDecl::new("x", 64, DType::F32)).unwrap();
        let flag = w.add_region(RegionDecl::new("flag", 4, DType::U32)).unwrap();
        let mut params = vec![0u8; 12];
        params[8..12].copy_from_slice(&2.5f32.to_le_bytes());
        w.begin_while(Condition { region: flag, offset: 0, max_iterations: 3 }).unwrap();
        w.launch(LaunchDecl {
            kernel: k,
            grid: [4, 1, 1],
            block: [16, 1, 1],
            shared_bytes: 0,
            params,
            relocs: vec![Reloc { offset: 0, target: x, target_offset: 0 }],
        })
        .unwrap();
        w.end_body().unwrap();
        w.memset(MemsetOp { region: x, offset: 0, len: 64, width: 4, pattern: 0 }).unwrap();
        w.finish().unwrap().into_inner()
    }

    #[test]
    fn rows_depths_filters_and_params() {
        let loaded = LoadedArchive::load(sample()).unwrap();
        let a = loaded.archive();
        assert_eq!(op_depths(a), vec![0, 1, 0]);
        let r = op_row(a, 1);
        assert_eq!((r.kind, r.kernel.as_str(), r.dims.as_str()), ("launch", "scale", "4 × 16"));
        assert!(r.detail.starts_with("↔ x ·"), "the region the launch points into: {}", r.detail);
        assert!(op_row(a, 0).detail.contains("flag+0"), "{:?}", op_row(a, 0));
        let f = OpFilter { kind: String::new(), kernel: "SCA".into() };
        assert_eq!(f.apply(a), vec![1]);
        let f = OpFilter { kind: "memset".into(), kernel: String::new() };
        assert_eq!(f.apply(a), vec![2]);
        let p = launch_params(a, 1);
        assert_eq!(p[0].value, "&x+0");
        assert_eq!(p[1].value, format!("{} (as f32: 2.5)", 2.5f32.to_bits()), "no declaration: untyped bits");
    }

    #[test]
    fn params_read_as_the_entry_declares_them() {
        let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k(.param .u64 x, .param .u32 n, .param .f32 a, .param .s32 d)\n{\nret;\n}\n";
        let mut w = ArchiveWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
        let m = w.add_module("m", ptx).unwrap();
        let layout = shared::ptx::signature::entry_params(ptx, "k").unwrap();
        let decls = layout.iter().enumerate().map(|(i, p)| p.decl(i == 0)).collect();
        let k = w.add_kernel(m, "k", decls).unwrap();
        let x = w.add_region(RegionDecl::new("x", 64, DType::F32)).unwrap();
        let mut params = vec![0u8; 20];
        params[8..12].copy_from_slice(&1024u32.to_le_bytes());
        params[12..16].copy_from_slice(&0.5f32.to_le_bytes());
        params[16..20].copy_from_slice(&(-7i32).to_le_bytes());
        w.launch(LaunchDecl {
            kernel: k,
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared_bytes: 0,
            params,
            relocs: vec![Reloc { offset: 0, target: x, target_offset: 0 }],
        })
        .unwrap();
        let loaded = LoadedArchive::load(w.finish().unwrap().into_inner()).unwrap();
        let p = launch_params(loaded.archive(), 0);
        let got: Vec<(&str, &str)> = p.iter().map(|p| (p.ty.as_str(), p.value.as_str())).collect();
        // 1024 is an integer, not the denormal float its bits would make.
        assert_eq!(got, [("u64", "&x+0"), ("u32", "1024"), ("f32", "0.5"), ("s32", "-7")]);
    }

    #[test]
    fn series_keeps_extremes() {
        let vals: Vec<u8> = (0..1000).flat_map(|i| (if i == 500 { 1e6f32 } else { i as f32 }).to_le_bytes()).collect();
        let s = series(&vals, DType::F32, 10);
        assert_eq!(s.elements, 1000);
        assert_eq!(s.max, 1e6);
        assert_eq!(s.hi[5], 1e6);
        assert_eq!(s.lo[0], 0.0);
    }

    #[test]
    fn invalid_bytes_name_section_and_offset() {
        let mut bytes = sample();
        bytes[0] = b'X';
        let e = LoadedArchive::load(bytes).err().unwrap();
        assert_eq!((e.section, e.offset), ("header", 0));
    }

    #[test]
    fn an_agreement_counts_in_words_that_agree_with_its_numbers() {
        assert_eq!(
            agreement("jit", "interp", 1, 1),
            "AGREE: jit and interp wrote the same values in its one op (1 region comparison)"
        );
        assert_eq!(
            agreement("jit", "cuda:0", 12, 30),
            "AGREE: jit and cuda:0 wrote the same values in all 12 ops (30 region comparisons)"
        );
    }

    #[test]
    fn durations_come_from_the_hosts_timestamps() {
        assert_eq!(seconds_between("2026-11-22T02:20:00Z", "2026-11-22T02:20:03Z"), Some(3));
        assert_eq!(seconds_between("2026-12-31T23:59:59Z", "2027-01-01T00:00:01Z"), Some(2));
        assert_eq!(seconds_between("garbage", "2027-01-01T00:00:01Z"), None);
    }

    #[test]
    fn a_constant_fill_says_so_by_its_bytes() {
        let poison: Vec<u8> = std::iter::repeat_n(0xA5u8, 64).collect();
        assert_eq!(
            fill_note(&poison).as_deref(),
            Some("every byte is 0xA5 (0xA5A5A5A5 in every word): a fill pattern, not computed values")
        );
        // The host's summary of that region as i32: min = max = -1515870811.
        assert_eq!(constant_note(-1515870811.0, "i32", 16), fill_note(&poison));
        let mut varied = poison.clone();
        varied[9] = 0;
        assert_eq!(fill_note(&varied), None);
        assert!(fill_note(&[0u8; 16]).unwrap().starts_with("every byte is zero"));
        assert_eq!(constant_note(1.5, "f64", 1), None);
    }

    #[test]
    fn host_times_read_to_the_second() {
        assert_eq!(when("2026-11-28T16:36:12.123456Z"), "2026-11-28 16:36:12");
        assert_eq!(when("2026-11-28T16:36:12Z"), "2026-11-28 16:36:12");
    }

    #[test]
    fn an_inout_binding_whose_bytes_do_not_change_reads_as_in() {
        use shared::archive::Direction;
        let (x, y) = (vec![1u8, 2, 3, 4], vec![1u8, 2, 3, 5]);
        assert_eq!(binding_direction(Direction::InOut, Some(&x), Some(&x)), (Direction::In, true));
        assert_eq!(binding_direction(Direction::InOut, Some(&x), Some(&y)), (Direction::InOut, false));
        assert_eq!(binding_direction(Direction::InOut, None, Some(&y)), (Direction::InOut, false));
        assert_eq!(binding_direction(Direction::Out, Some(&x), Some(&x)), (Direction::Out, false));
    }
}
