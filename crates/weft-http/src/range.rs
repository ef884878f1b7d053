//! `Range`, decided against a file's length. Pure.

/// What a `Range` header asks of a file of a given length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeAnswer {
    /// No usable single range (absent, not `bytes=`, several ranges, malformed): send it all
    /// with 200, as RFC 9110 §14.2 allows a server to ignore `Range`.
    Whole,
    /// One satisfiable range: `len` bytes from `start`, answered 206.
    Part { start: u64, len: u64 },
    /// Syntactically fine but beyond the end: 416 with `Content-Range: bytes */LEN`.
    Unsatisfiable,
}

/// Interprets a `Range` header value for a file of `file_len` bytes.
pub fn parse_range(value: &[u8], file_len: u64) -> RangeAnswer {
    let Some(spec) = strip_prefix_ignore_case(value, b"bytes=") else {
        return RangeAnswer::Whole;
    };
    let spec = trim(spec);
    if spec.contains(&b',') {
        return RangeAnswer::Whole;
    }
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return RangeAnswer::Whole;
    };
    let (first, last) = (trim(&spec[..dash]), trim(&spec[dash + 1..]));
    if first.is_empty() {
        // A suffix: the last N bytes.
        let Some(suffix) = crate::request::parse_decimal(last) else {
            return RangeAnswer::Whole;
        };
        if suffix == 0 || file_len == 0 {
            return RangeAnswer::Unsatisfiable;
        }
        let len = suffix.min(file_len);
        return RangeAnswer::Part {
            start: file_len - len,
            len,
        };
    }
    let Some(start) = crate::request::parse_decimal(first) else {
        return RangeAnswer::Whole;
    };
    let end_inclusive = if last.is_empty() {
        u64::MAX
    } else {
        match crate::request::parse_decimal(last) {
            Some(e) if e >= start => e,
            _ => return RangeAnswer::Whole,
        }
    };
    if start >= file_len {
        return RangeAnswer::Unsatisfiable;
    }
    let end_inclusive = end_inclusive.min(file_len - 1);
    RangeAnswer::Part {
        start,
        len: end_inclusive - start + 1,
    }
}

fn strip_prefix_ignore_case<'a>(v: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (v.len() >= prefix.len() && v[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &v[prefix.len()..])
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ').unwrap_or(v.len());
    let end = v.iter().rposition(|&b| b != b' ').map_or(start, |i| i + 1);
    &v[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeAnswer::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range(b"bytes=0-9", 100), Part { start: 0, len: 10 });
        assert_eq!(parse_range(b"bytes=90-", 100), Part { start: 90, len: 10 });
        assert_eq!(
            parse_range(b"bytes=90-500", 100),
            Part { start: 90, len: 10 }
        );
        assert_eq!(parse_range(b"bytes=-10", 100), Part { start: 90, len: 10 });
        assert_eq!(parse_range(b"bytes=-500", 100), Part { start: 0, len: 100 });
        assert_eq!(parse_range(b"bytes=100-", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=-0", 100), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-0", 0), Unsatisfiable);
        assert_eq!(parse_range(b"bytes=0-1,5-6", 100), Whole);
        assert_eq!(parse_range(b"bytes=5-1", 100), Whole);
        assert_eq!(parse_range(b"items=0-1", 100), Whole);
        assert_eq!(parse_range(b"bytes=x-1", 100), Whole);
        assert_eq!(parse_range(b"Bytes=1-1", 100), Part { start: 1, len: 1 });
    }
}
