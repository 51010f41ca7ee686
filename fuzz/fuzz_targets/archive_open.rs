//! Any bytes: `Archive::open` and `validate` return errors, never panic, and every accessor of an
//! archive that opened is safe to call on everything it lists.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::archive::{Archive, Op};

fuzz_target!(|data: &[u8]| {
    let Ok(archive) = Archive::open(data) else { return };
    let _ = archive.validate();
    walk(&archive);
});

fn walk(a: &Archive) {
    let _ = (a.version(), a.len());
    for m in a.modules() {
        let _ = m.ptx_text();
        for (_, cubin) in &m.cubins {
            let _ = cubin.decode();
        }
    }
    for k in a.kernels() {
        let _ = (k.params_size(), a.kernel_by_name(k.name).map(|k| k.id));
    }
    for r in a.regions() {
        for blob in r.initial.iter().chain(r.expected.iter()) {
            if let Ok(bytes) = blob.decode() {
                let mut again = vec![0u8; bytes.len()];
                let _ = blob.decode_into(&mut again);
            }
        }
        let _ = a.region_by_name(r.name);
    }
    for (owner, reloc) in a.region_relocs() {
        let _ = (a.region(owner).size, a.region(reloc.target).size);
    }
    for id in 0..a.op_count() as u32 {
        match a.op(id) {
            Op::Launch(l) => {
                let _ = a.kernel(l.kernel).params_size();
                for r in a.relocs(l.relocs.clone()) {
                    let _ = a.region(r.target);
                }
            }
            op @ (Op::While { .. } | Op::If { .. }) => {
                assert_eq!(a.body(id).len() as u32, op.body_len());
                let _ = a.children(a.body(id)).count();
            }
            _ => {}
        }
    }
    let _ = a.top_level().count();
    for b in a.bindings() {
        let _ = (a.region(b.region).name, a.binding(b.name));
    }
    for (k, _) in a.meta() {
        let _ = a.meta_value(k);
    }
    // Module variables: each names a region that is not scratch and a module, and is found by it.
    for v in a.module_vars() {
        assert!(!a.region(v.region).scratch && (v.module as usize) < a.module_count());
        assert_eq!(a.module_var(v.region), Some(v));
    }
    // Recorded effects: each names a launch, and each write lies within its region.
    for r in 0..a.region_count() as u32 {
        let _ = a.typed_layout(r);
    }
    // Declared array types: read or refused; those read lie inside their regions, whole, apart.
    if let Ok(declared) = shared::archive::declared::of_archive(a) {
        for (region, list) in declared {
            let size = a.region(region).size;
            for w in list.windows(2) {
                assert!(w[0].offset + w[0].len <= w[1].offset);
            }
            for d in &list {
                assert!(d.offset + d.len <= size && d.len.is_multiple_of(d.ty.size() as u64));
            }
        }
    }
    for e in a.effects() {
        assert!(matches!(a.op(e.op), Op::Launch(_)));
        for (region, offset, blob) in &e.writes {
            assert!(offset + blob.len() <= a.region(*region).size);
            let _ = blob.decode();
        }
    }
}
