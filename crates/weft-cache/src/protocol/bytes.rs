//! Finding bytes in a short request line eight at a time (SWAR: a `u64` as eight lanes).
//!
//! Why not `memchr` alone: a request line is a few dozen bytes, and a `memchr` call there
//! runs about 50 instructions (its dispatch and set-up) to look at 24 bytes; the parser made
//! two such calls a request and the look-ahead one more a key, and with the byte-by-byte
//! split into tokens that was about 300 instructions of a pipelined `mg` hit's 2,600
//! (`benches/cachesim.sh`-style counts in `docs/notes/scale.md`). Eight bytes a step take
//! about ten instructions. Past [`SHORT_BYTES`] the search hands over to `memchr`, which is
//! faster on long input (a line without its newline yet, a long multi-get).
//!
//! Invariant: [`eq_mask`] is exact: a lane's high bit is set if and only if that byte equals
//! the one looked for (no carries cross lanes, unlike the shorter "has zero byte" trick), so
//! its lowest set bit always names the first match.

/// Bytes searched eight at a time before handing over to `memchr`.
pub const SHORT_BYTES: usize = 64;

const ONES: u64 = 0x0101_0101_0101_0101;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The full word of `buf` at `at` (which has at least 8 bytes from there).
#[inline(always)]
pub fn load(buf: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(buf[at..at + 8].try_into().expect("eight bytes"))
}

/// The last, short word of `buf` from `at` (fewer than 8 bytes left): its bytes in the low
/// lanes, zero above. Read as the buffer's last 8 bytes shifted down when it has 8, so no
/// copy of a variable length (a `memcpy` call) is made.
#[inline(always)]
pub fn load_tail(buf: &[u8], at: usize) -> u64 {
    let left = buf.len() - at;
    debug_assert!(left < 8);
    if buf.len() >= 8 {
        load(buf, buf.len() - 8) >> (8 * (8 - left))
    } else {
        buf[at..]
            .iter()
            .rev()
            .fold(0u64, |w, &b| (w << 8) | u64::from(b))
    }
}

/// Bit 7 of each lane of `w` that equals `b`, and no other bit.
#[inline(always)]
pub fn eq_mask(w: u64, b: u8) -> u64 {
    let t = w ^ (ONES * u64::from(b));
    // A lane of `t` is zero exactly when neither its low seven bits (the add carries into
    // bit 7, never past it: at most 0x7f + 0x7f) nor its bit 7 are set.
    !(((t & LOW7) + LOW7) | t | LOW7)
}

/// The lanes of a word holding `len` real bytes (`len` below 8).
#[inline(always)]
pub fn real_lanes(len: usize) -> u64 {
    (1u64 << (8 * len)) - 1
}

/// The lane of a word's lowest set bit.
#[inline(always)]
pub fn first_lane(mask: u64) -> usize {
    (mask.trailing_zeros() / 8) as usize
}

/// Where `b` first occurs in `buf`: eight bytes a step over the first [`SHORT_BYTES`], then
/// `memchr`.
#[inline]
pub fn find(b: u8, buf: &[u8]) -> Option<usize> {
    find_by(buf, |w| eq_mask(w, b), |rest| memchr::memchr(b, rest))
}

/// Where `a` or `b` first occurs in `buf` (as [`find`], for either byte).
#[inline]
pub fn find_either(a: u8, b: u8, buf: &[u8]) -> Option<usize> {
    find_by(
        buf,
        |w| eq_mask(w, a) | eq_mask(w, b),
        |rest| memchr::memchr2(a, b, rest),
    )
}

/// The first lane `mask` marks in `buf`'s first [`SHORT_BYTES`], word by word, else what
/// `long` finds in the rest.
#[inline(always)]
fn find_by(
    buf: &[u8],
    mask: impl Fn(u64) -> u64,
    long: impl FnOnce(&[u8]) -> Option<usize>,
) -> Option<usize> {
    let head = buf.len().min(SHORT_BYTES);
    let mut at = 0;
    while at + 8 <= head {
        let m = mask(load(buf, at));
        if m != 0 {
            return Some(at + first_lane(m));
        }
        at += 8;
    }
    if head < buf.len() {
        return long(&buf[at..]).map(|i| at + i);
    }
    if at < head {
        let m = mask(load_tail(buf, at)) & real_lanes(head - at);
        if m != 0 {
            return Some(at + first_lane(m));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mask_marks_exactly_the_equal_lanes() {
        // Every byte value against every looked-for value, in each lane, next to neighbours
        // that would carry in the shorter trick (0x00, 0x80, 0xff, the value itself ± 1).
        for b in 0..=255u8 {
            for v in 0..=255u8 {
                for lane in 0..8 {
                    for fill in [0x00u8, 0x80, 0xff, b.wrapping_add(1), b.wrapping_sub(1)] {
                        let mut bytes = [fill; 8];
                        bytes[lane] = v;
                        let m = eq_mask(u64::from_le_bytes(bytes), b);
                        for (i, &x) in bytes.iter().enumerate() {
                            let set = m & (0x80 << (8 * i)) != 0;
                            assert_eq!(set, x == b, "b {b:#x} v {v:#x} lane {lane} fill {fill:#x}");
                        }
                        assert_eq!(m & !0x8080_8080_8080_8080, 0);
                    }
                }
            }
        }
    }

    #[test]
    fn find_agrees_with_memchr_at_every_length_and_place() {
        for len in 0..200 {
            for at in 0..=len {
                let mut buf = vec![b'a'; len];
                if at < len {
                    buf[at] = b'\n';
                }
                // A second one later must not be reported first.
                if at + 3 < len {
                    buf[at + 3] = b'\n';
                }
                assert_eq!(
                    find(b'\n', &buf),
                    memchr::memchr(b'\n', &buf),
                    "len {len} at {at}"
                );
            }
        }
        // A zero looked for is not found in the zero padding past the end, short or long.
        assert_eq!(find(0, b"abc"), None);
        assert_eq!(find(0, b"ab\0"), Some(2));
        assert_eq!(find(0, b"abcdefghijk"), None);
        assert_eq!(find(0, b"abcdefghij\0"), Some(10));
    }

    #[test]
    fn find_either_agrees_with_memchr2() {
        for len in 0..150 {
            for (i, j) in [(0, 1), (3, 70), (70, 3), (9, 9), (len, 2), (len, len)] {
                let mut buf = vec![b'x'; len];
                if i < len {
                    buf[i] = b' ';
                }
                if j < len {
                    buf[j] = b'\n';
                }
                let want = memchr::memchr2(b' ', b'\n', &buf);
                assert_eq!(find_either(b' ', b'\n', &buf), want, "len {len} {i} {j}");
            }
        }
    }

    #[test]
    fn the_tail_word_holds_the_last_bytes_and_zeros() {
        let buf: Vec<u8> = (1..=20).collect();
        for len in 0..=20usize {
            for at in len.saturating_sub(7)..len {
                let mut want = [0u8; 8];
                want[..len - at].copy_from_slice(&buf[at..len]);
                assert_eq!(
                    load_tail(&buf[..len], at),
                    u64::from_le_bytes(want),
                    "{len} {at}"
                );
            }
        }
    }
}
