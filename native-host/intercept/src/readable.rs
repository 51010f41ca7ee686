//! How many bytes after a pointer can be read without faulting.
//!
//! A code image handed to the driver by pointer (`cuModuleLoadData`, `cuLibraryLoadData`) comes
//! with no length: the driver reads as far as the image's own headers say, and only as far as it
//! needs. A header can claim more than is there (a section table far past the image, a fat binary
//! longer than its allocation) and the driver still accepts the image. So the interposer reads
//! nothing past what the process's mappings make readable: the mapping holding the pointer and
//! every readable mapping that continues it without a gap, as `/proc/self/maps` lists them.

/// The number of readable bytes from `addr` on; 0 when `addr` lies in no readable mapping (or the
/// mappings cannot be listed, in which case nothing is read).
pub fn readable_from(addr: usize) -> usize {
    match std::fs::read_to_string("/proc/self/maps") {
        Ok(maps) => span(&maps, addr as u64) as usize,
        Err(_) => 0,
    }
}

/// [`readable_from`] on the text of a `/proc/PID/maps` listing (lines `LO-HI PERMS ...` in
/// address order, addresses in hex).
fn span(maps: &str, addr: u64) -> u64 {
    let mut end: Option<u64> = None;
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
        let Some((lo, hi)) = range.split_once('-') else { continue };
        let (Ok(lo), Ok(hi)) = (u64::from_str_radix(lo, 16), u64::from_str_radix(hi, 16)) else { continue };
        let readable = perms.starts_with('r');
        match end {
            None if lo <= addr && addr < hi => {
                if !readable {
                    return 0;
                }
                end = Some(hi);
            }
            Some(e) if lo == e && readable => end = Some(hi),
            Some(_) => break,
            None => {}
        }
    }
    end.map_or(0, |e| e - addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d4a0000000-55d4a0001000 r--p 00000000 08:01 42 /usr/bin/prog
55d4a0001000-55d4a0003000 r-xp 00001000 08:01 42 /usr/bin/prog
55d4a0003000-55d4a0004000 ---p 00000000 00:00 0
55d4a0004000-55d4a0005000 rw-p 00000000 00:00 0 [heap]
7ffd00000000-7ffd00002000 rw-p 00000000 00:00 0 [stack]
";

    #[test]
    fn a_span_runs_over_adjacent_readable_mappings_and_stops_at_a_gap_or_a_guard() {
        // From inside the first mapping over the second, stopping at the PROT_NONE guard.
        assert_eq!(span(MAPS, 0x55d4_a000_0ff0), 0x2010);
        assert_eq!(span(MAPS, 0x55d4_a000_2fff), 1);
        // The guard itself and unmapped addresses have nothing readable.
        assert_eq!(span(MAPS, 0x55d4_a000_3000), 0);
        assert_eq!(span(MAPS, 0x10), 0);
        assert_eq!(span(MAPS, 0x55d4_a000_5000), 0);
        // A mapping after a gap is not joined.
        assert_eq!(span(MAPS, 0x55d4_a000_4800), 0x800);
        assert_eq!(span(MAPS, 0x7ffd_0000_0000), 0x2000);
        assert_eq!(span("garbage\n\n1-x r--p", 5), 0);
    }

    #[test]
    fn this_process_reads_its_own_memory_and_not_past_it() {
        let data = [1u8; 100];
        assert!(readable_from(data.as_ptr() as usize) >= 100);
        assert_eq!(readable_from(8), 0);
    }
}
