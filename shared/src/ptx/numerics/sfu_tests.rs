//! The special-function model against the H200's records (`tests/numerics/`): the checked-in
//! sample on every run, and all 2^32 inputs of every modelled form against the probe's per-chunk
//! hashes (`sfu_exhaustive`, ignored: about a minute per form in a release build).

use std::io::Read;

use super::*;

/// The probe's sample: its inputs and, per form, the hardware's outputs (u32, or u64 for the
/// f64 forms).
struct Sample {
    inputs: Vec<u32>,
    forms: Vec<(String, Vec<u64>)>,
}

fn sample() -> Sample {
    let z = include_bytes!("../../../../tests/numerics/sfu_sample.bin");
    let mut raw = Vec::new();
    ruzstd::decoding::StreamingDecoder::new(&z[..]).unwrap().read_to_end(&mut raw).unwrap();
    assert_eq!(&raw[..4], b"SFUS");
    let word = |at: usize| u32::from_le_bytes(raw[at..at + 4].try_into().unwrap());
    let (count, nforms) = (word(4) as usize, word(8) as usize);
    let inputs: Vec<u32> = (0..count).map(|i| word(12 + 4 * i)).collect();
    let mut at = 12 + 4 * count;
    let mut forms = Vec::new();
    for _ in 0..nforms {
        let (len, width) = (raw[at] as usize, raw[at + 1] as usize);
        let name = String::from_utf8(raw[at + 2..at + 2 + len].to_vec()).unwrap();
        at += 2 + len;
        let outs = (0..count)
            .map(|i| {
                let b = &raw[at + width * i..at + width * (i + 1)];
                if width == 8 {
                    u64::from_le_bytes(b.try_into().unwrap())
                } else {
                    u32::from_le_bytes(b.try_into().unwrap()) as u64
                }
            })
            .collect();
        at += width * count;
        forms.push((name, outs));
    }
    Sample { inputs, forms }
}

type Form = Box<dyn Fn(u32) -> u64 + Sync>;

/// The model of one of the probe's forms, by the probe's name for it; `None` where recap keeps
/// IEEE functions for it.
fn form(name: &str) -> Option<Form> {
    let fixed = |s: &str| u32::from_str_radix(s, 16).ok();
    Some(match name {
        "ex2.approx.ftz.f32" => Box::new(|x| ex2(x, true) as u64),
        "ex2.approx.f32" => Box::new(|x| ex2(x, false) as u64),
        "rcp.approx.ftz.f32" => Box::new(|x| rcp(x, true) as u64),
        "rcp.approx.f32" => Box::new(|x| rcp(x, false) as u64),
        "rsqrt.approx.ftz.f32" => Box::new(|x| rsqrt(x, true) as u64),
        "rsqrt.approx.f32" => Box::new(|x| rsqrt(x, false) as u64),
        "sqrt.approx.ftz.f32" => Box::new(|x| sqrt(x, true) as u64),
        "sqrt.approx.f32" => Box::new(|x| sqrt(x, false) as u64),
        _ => {
            if let Some(a) = name.strip_prefix("div.full.f32/a=").and_then(fixed) {
                Box::new(move |x| div_full(a, x) as u64)
            } else if let Some(b) = name.strip_prefix("div.full.f32/b=").and_then(fixed) {
                Box::new(move |x| div_full(x, b) as u64)
            } else {
                return None;
            }
        }
    })
}

#[test]
fn tables_parse() {
    for t in [rcp_table(), rsq_table(), sqrt_table(), ex2_table()] {
        assert_eq!(t.residual.len(), (t.coef.len()) << t.seg_shift);
    }
}

#[test]
fn recorded_sample() {
    let s = sample();
    let mut modelled = 0;
    let mut bad = Vec::new();
    for (name, outs) in &s.forms {
        let Some(model) = form(name) else { continue };
        modelled += 1;
        for (&x, &want) in s.inputs.iter().zip(outs) {
            let got = model(x);
            if got != want {
                bad.push(format!("{name}({x:#010x}) = {got:#010x}, the H200 gives {want:#010x}"));
            }
        }
    }
    assert_eq!(modelled, 20, "forms with a model in the sample");
    assert!(bad.is_empty(), "{} mismatches, the first: {:#?}", bad.len(), &bad[..bad.len().min(20)]);
}

#[test]
fn ieee_model_is_not_the_unit() {
    // The sample holds inputs where the unit is not correctly rounded: the model must follow
    // the unit there, so IEEE and sm_90 results differ for some of them.
    let s = sample();
    let (_, outs) = s.forms.iter().find(|(n, _)| n == "rcp.approx.ftz.f32").unwrap();
    let differ = s.inputs.iter().zip(outs).filter(|&(&x, &hw)| bits(1.0 / f(x)) as u64 != hw).count();
    assert!(differ > 100, "only {differ} sample inputs where the unit is not IEEE");
}

fn fmix(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The probe's hash of one chunk of 2^24 inputs under `model`.
fn chunk_hash(model: &Form, chunk: u32) -> u64 {
    let first = chunk << 24;
    (0..1u32 << 24).fold(0u64, |s, i| {
        let x = first | i;
        s.wrapping_add(fmix(((x as u64) << 32) ^ model(x)))
    })
}

/// Every modelled form on all 2^32 inputs against the H200's chunk hashes. Prints the count of
/// differing chunks per form; `RECAP_SFU_FORMS` (a comma-separated list of names) narrows it.
#[test]
#[ignore = "2^32 inputs per form: run in a release build"]
fn sfu_exhaustive() {
    use rayon::prelude::*;
    let text = include_str!("../../../../tests/numerics/sfu_hashes.txt");
    let only = std::env::var("RECAP_SFU_FORMS").ok();
    let mut failed = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut it = line.split_whitespace();
        let name = it.next().unwrap();
        let want: Vec<u64> = it.map(|h| u64::from_str_radix(h, 16).unwrap()).collect();
        assert_eq!(want.len(), 256, "{name}");
        if only.as_deref().is_some_and(|o| !o.split(',').any(|n| n == name)) {
            continue;
        }
        let Some(model) = form(name) else { continue };
        let t = std::time::Instant::now();
        let got: Vec<u64> = (0..256u32).into_par_iter().map(|c| chunk_hash(&model, c)).collect();
        let differ: Vec<usize> = (0..256).filter(|&c| got[c] != want[c]).collect();
        println!(
            "{name}: {} of 256 chunks differ{} ({:.1} s)",
            differ.len(),
            differ.first().map(|c| format!(", the first inputs {:#010x}..", c << 24)).unwrap_or_default(),
            t.elapsed().as_secs_f64()
        );
        if !differ.is_empty() {
            failed.push(name.to_string());
        }
    }
    assert!(failed.is_empty(), "forms that differ from the H200: {failed:?}");
}

/// The modelled instructions, as one kernel over the sample's inputs (`out_k[i] = op_k(x[i])`,
/// and a Triton-style `ex2.approx.ftz.f32(x * log2(e))`): the interpreter and native code give the
/// same bits under every model (`run_kernel_in` checks that), under sm_90's they are the H200's,
/// and IEEE's differ from them.
#[test]
fn special_functions_on_every_engine() {
    use crate::ptx::numerics::MmaModel;
    use crate::ptx::tests::run_kernel_in;
    const OPS: [&str; 8] = [
        "ex2.approx.ftz.f32",
        "ex2.approx.f32",
        "rcp.approx.ftz.f32",
        "rcp.approx.f32",
        "sqrt.approx.ftz.f32",
        "sqrt.approx.f32",
        "rsqrt.approx.ftz.f32",
        "rsqrt.approx.f32",
    ];
    let params: Vec<String> = (0..=OPS.len()).map(|k| format!(".param .u64 p{k}")).collect();
    let mut body = String::new();
    for (k, op) in OPS.iter().enumerate() {
        body += &format!(
            "    ld.param.u64 %rd1, [p{o}];\n    add.s64 %rd2, %rd1, %rd0;\n    {op} %f2, %f1;\n    st.global.f32 [%rd2], %f2;\n",
            o = k + 1
        );
    }
    // `div.full.f32` with the dividend 1 and with the divisor pi, the probe's two sweeps.
    const DIVS: [(&str, &str); 2] = [
        ("div.full.f32 %f2, 0f3F800000, %f1;", "div.full.f32/a=3f800000"),
        ("div.full.f32 %f2, %f1, 0f40490FDB;", "div.full.f32/b=40490fdb"),
    ];
    let params: Vec<String> = params.into_iter().chain((0..DIVS.len()).map(|k| format!(".param .u64 q{k}"))).collect();
    for (k, (inst, _)) in DIVS.iter().enumerate() {
        body += &format!(
            "    ld.param.u64 %rd1, [q{k}];\n    add.s64 %rd2, %rd1, %rd0;\n    {inst}\n    st.global.f32 [%rd2], %f2;\n"
        );
    }
    let ptx = format!(
        r#"
.version 8.0
.target sm_90
.address_size 64
.visible .entry special({params}, .param .u64 pscaled)
{{
    .reg .b32 %r<5>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    mul.wide.s32 %rd0, %r4, 4;
    ld.param.u64 %rd1, [p0];
    add.s64 %rd2, %rd1, %rd0;
    ld.global.f32 %f1, [%rd2];
{body}    mul.f32 %f3, %f1, 0f3FB8AA3B;
    ex2.approx.ftz.f32 %f2, %f3;
    ld.param.u64 %rd1, [pscaled];
    add.s64 %rd2, %rd1, %rd0;
    st.global.f32 [%rd2], %f2;
    ret;
}}
"#,
        params = params.join(", ")
    );
    let s = sample();
    let n = s.inputs.len();
    let mut bufs = vec![s.inputs.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()];
    bufs.extend((0..=OPS.len() + DIVS.len()).map(|_| vec![0u8; n * 4]));
    let words = |b: &[u8]| b.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap()) as u64).collect::<Vec<_>>();
    let hw = |name: &str| s.forms.iter().find(|(f, _)| f == name).unwrap().1.clone();
    let run = |model| run_kernel_in(model, &ptx, "special", [n as u32 / 256, 1, 1], [256, 1, 1], &bufs, &[]).unwrap();
    let (sm90, ieee) = (run(MmaModel::Sm90), run(MmaModel::Ieee));
    for (k, op) in OPS.iter().enumerate() {
        assert!(words(&sm90[k + 1]) == hw(op), "{op} under the sm90 model is not the H200's");
        let differ = words(&ieee[k + 1]).iter().zip(hw(op)).filter(|(a, b)| **a != *b).count();
        assert!(differ > 50, "IEEE's {op} differs from the unit on only {differ} inputs");
    }
    for (k, (_, form)) in DIVS.iter().enumerate() {
        let buf = OPS.len() + 1 + k;
        assert!(words(&sm90[buf]) == hw(form), "{form} under the sm90 model is not the H200's");
        let differ = words(&ieee[buf]).iter().zip(hw(form)).filter(|(a, b)| **a != *b).count();
        assert!(differ > 50, "IEEE's {form} differs from the unit on only {differ} inputs");
    }
}
