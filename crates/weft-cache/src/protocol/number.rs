//! Number parsing with the exact acceptance rules of memcached's `safe_strto*` helpers, which
//! wrap C's `strtol` family: leading whitespace and one sign are accepted, the digits must be
//! followed by the end of the token or a whitespace byte, out-of-range values of the C type
//! (`long`, 64-bit) are refused, and the result is then truncated to the destination width the
//! way a C assignment truncates. Clients rely on these quirks (for example a flags value of
//! 4294967297 is stored as 1), so they are reproduced rather than "fixed".

/// `isspace` in the C locale.
pub fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// What `strtoull`/`strtoll` saw: sign, magnitude (saturated flag) and where it stopped.
struct Scan {
    negative: bool,
    magnitude: u64,
    overflowed: bool,
    /// Index of the first byte not consumed.
    end: usize,
    /// True when at least one digit was read.
    any_digits: bool,
}

fn scan(s: &[u8]) -> Scan {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut negative = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        negative = s[i] == b'-';
        i += 1;
    }
    let start = i;
    let mut magnitude: u64 = 0;
    let mut overflowed = false;
    while i < s.len() && s[i].is_ascii_digit() {
        let d = u64::from(s[i] - b'0');
        match magnitude.checked_mul(10).and_then(|m| m.checked_add(d)) {
            Some(m) => magnitude = m,
            None => overflowed = true,
        }
        i += 1;
    }
    let any_digits = i > start;
    Scan {
        negative,
        magnitude,
        overflowed,
        end: if any_digits { i } else { 0 },
        any_digits,
    }
}

/// The check shared by all helpers: something was converted and it ends the token or is
/// followed by whitespace.
fn well_terminated(s: &[u8], sc: &Scan) -> bool {
    sc.any_digits && (sc.end == s.len() || is_c_space(s[sc.end]))
}

/// `safe_strtoull`: an unsigned 64-bit value.
pub fn strtoull(s: &[u8]) -> Option<u64> {
    let sc = scan(s);
    if !sc.any_digits || sc.overflowed || !well_terminated(s, &sc) {
        return None;
    }
    let value = if sc.negative {
        sc.magnitude.wrapping_neg()
    } else {
        sc.magnitude
    };
    // memcached refuses a '-' only when the result looks negative as a signed number.
    if (value as i64) < 0 && sc.negative {
        return None;
    }
    Some(value)
}

/// `safe_strtoul` into a `uint32_t`: parsed as a 64-bit `unsigned long`, then truncated.
pub fn strtoul32(s: &[u8]) -> Option<u32> {
    strtoull(s).map(|v| v as u32)
}

/// `safe_strtol` into an `int32_t`: parsed as a 64-bit `long` (range-checked), then truncated.
pub fn strtol32(s: &[u8]) -> Option<i32> {
    let sc = scan(s);
    if !sc.any_digits || !well_terminated(s, &sc) {
        return None;
    }
    let limit = if sc.negative {
        1u64 << 63
    } else {
        (1u64 << 63) - 1
    };
    if sc.overflowed || sc.magnitude > limit {
        return None;
    }
    let value = if sc.negative {
        (sc.magnitude as i64).wrapping_neg()
    } else {
        sc.magnitude as i64
    };
    Some(value as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_rules_match_memcached() {
        assert_eq!(strtoull(b"0"), Some(0));
        assert_eq!(strtoull(b"+5"), Some(5));
        assert_eq!(strtoull(b"\t7"), Some(7));
        assert_eq!(strtoull(b"7\r"), Some(7));
        assert_eq!(strtoull(b"-0"), Some(0));
        assert_eq!(strtoull(b"-1"), None);
        assert_eq!(strtoull(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(strtoull(b"18446744073709551616"), None);
        assert_eq!(strtoull(b"1x"), None);
        assert_eq!(strtoull(b""), None);
        assert_eq!(strtoull(b"-"), None);
    }

    #[test]
    fn narrow_values_truncate_like_c() {
        assert_eq!(strtoul32(b"4294967297"), Some(1));
        assert_eq!(strtol32(b"4294967297"), Some(1));
        assert_eq!(strtol32(b"2147483648"), Some(i32::MIN));
        assert_eq!(strtol32(b"-1"), Some(-1));
        assert_eq!(strtol32(b"9223372036854775808"), None);
        assert_eq!(strtol32(b"-9223372036854775808"), Some(0));
        assert_eq!(strtol32(b"abc"), None);
    }
}
