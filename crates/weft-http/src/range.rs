//! `Range`, decided against a file's length. Pure.

/// What a `Range` header asks of a file of a given length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangeAnswer {
    /// No usable range (absent, not `bytes=`, malformed, more than the allowed number of
    /// ranges): send it all with 200, as RFC 9110 §14.2 allows a server to ignore `Range`.
    Whole,
    /// One satisfiable range (or several that coalesced into one): `len` bytes from `start`,
    /// answered 206 with `Content-Range`.
    Part { start: u64, len: u64 },
    /// Several satisfiable ranges, none overlapping or touching another: 206 with a
    /// `multipart/byteranges` body, one part per range in this order.
    Parts(Vec<Span>),
    /// Syntactically fine but none satisfiable: 416 with `Content-Range: bytes */LEN`.
    Unsatisfiable,
}

/// `len` bytes from `start` (`len > 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub len: u64,
}

impl Span {
    fn end(self) -> u64 {
        self.start + self.len
    }
}

/// Interprets a `Range` header value for a file of `file_len` bytes, allowing at most
/// `max_ranges` range-specs (RFC 9110 §14.1.2, §14.2).
///
/// Unsatisfiable ranges are dropped (416 only when none is left). When any two of the rest
/// overlap or touch, all are sorted and coalesced (§15.3.7.2 allows it; it is what stops a
/// request for the same bytes many times over from multiplying the response, the
/// "range amplification" attack); otherwise they are answered in the order asked, as nginx
/// does. So the parts never add up to more than the file.
pub fn parse_range(value: &[u8], file_len: u64, max_ranges: usize) -> RangeAnswer {
    let Some(set) = strip_prefix_ignore_case(value, b"bytes=") else {
        return RangeAnswer::Whole;
    };
    let mut spans: Vec<Span> = Vec::new();
    let mut specs = 0usize;
    for spec in set.split(|&b| b == b',') {
        let spec = trim(spec);
        if spec.is_empty() {
            // Empty list elements are allowed (RFC 9110 §5.6.1.2).
            continue;
        }
        specs += 1;
        if specs > max_ranges {
            return RangeAnswer::Whole;
        }
        match parse_spec(spec, file_len) {
            Spec::Invalid => return RangeAnswer::Whole,
            Spec::Unsatisfiable => {}
            Spec::Satisfiable(span) => spans.push(span),
        }
    }
    if specs == 0 {
        return RangeAnswer::Whole;
    }
    if spans.len() > 1 && any_overlap(&spans) {
        spans = coalesce(spans);
    }
    match spans.as_slice() {
        [] => RangeAnswer::Unsatisfiable,
        [one] => RangeAnswer::Part {
            start: one.start,
            len: one.len,
        },
        _ => RangeAnswer::Parts(spans),
    }
}

enum Spec {
    Invalid,
    Unsatisfiable,
    Satisfiable(Span),
}

/// One `int-range` (`first-last`, `first-`) or `suffix-range` (`-length`).
fn parse_spec(spec: &[u8], file_len: u64) -> Spec {
    let Some(dash) = spec.iter().position(|&b| b == b'-') else {
        return Spec::Invalid;
    };
    let (first, last) = (&spec[..dash], &spec[dash + 1..]);
    if first.is_empty() {
        let Some(suffix) = crate::request::parse_decimal(last) else {
            return Spec::Invalid;
        };
        if suffix == 0 || file_len == 0 {
            return Spec::Unsatisfiable;
        }
        let len = suffix.min(file_len);
        return Spec::Satisfiable(Span {
            start: file_len - len,
            len,
        });
    }
    let Some(start) = crate::request::parse_decimal(first) else {
        return Spec::Invalid;
    };
    let last = if last.is_empty() {
        u64::MAX
    } else {
        match crate::request::parse_decimal(last) {
            Some(e) if e >= start => e,
            _ => return Spec::Invalid,
        }
    };
    if start >= file_len {
        return Spec::Unsatisfiable;
    }
    Spec::Satisfiable(Span {
        start,
        len: last.min(file_len - 1) - start + 1,
    })
}

/// Whether any two spans overlap or touch (quadratic, but there are at most `max_ranges`).
fn any_overlap(spans: &[Span]) -> bool {
    let mut sorted = spans.to_vec();
    sorted.sort_unstable_by_key(|s| s.start);
    sorted.windows(2).any(|w| w[1].start <= w[0].end())
}

/// Sorts and merges overlapping or touching spans.
fn coalesce(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_unstable_by_key(|s| s.start);
    let mut out: Vec<Span> = Vec::with_capacity(spans.len());
    for s in spans {
        match out.last_mut() {
            Some(prev) if s.start <= prev.end() => {
                prev.len = prev.end().max(s.end()) - prev.start;
            }
            _ => out.push(s),
        }
    }
    out
}

fn strip_prefix_ignore_case<'a>(v: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    (v.len() >= prefix.len() && v[..prefix.len()].eq_ignore_ascii_case(prefix))
        .then(|| &v[prefix.len()..])
}

fn trim(v: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = v.iter().position(|b| !is_ows(b)).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &v[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeAnswer::*;

    fn parse(v: &[u8], len: u64) -> RangeAnswer {
        parse_range(v, len, 10)
    }

    fn spans(v: &[(u64, u64)]) -> RangeAnswer {
        Parts(v.iter().map(|&(start, len)| Span { start, len }).collect())
    }

    #[test]
    fn ranges() {
        assert_eq!(parse(b"bytes=0-9", 100), Part { start: 0, len: 10 });
        assert_eq!(parse(b"bytes=90-", 100), Part { start: 90, len: 10 });
        assert_eq!(parse(b"bytes=90-500", 100), Part { start: 90, len: 10 });
        assert_eq!(parse(b"bytes=-10", 100), Part { start: 90, len: 10 });
        assert_eq!(parse(b"bytes=-500", 100), Part { start: 0, len: 100 });
        assert_eq!(parse(b"bytes=100-", 100), Unsatisfiable);
        assert_eq!(parse(b"bytes=-0", 100), Unsatisfiable);
        assert_eq!(parse(b"bytes=0-0", 0), Unsatisfiable);
        assert_eq!(parse(b"bytes=5-1", 100), Whole);
        assert_eq!(parse(b"items=0-1", 100), Whole);
        assert_eq!(parse(b"bytes=x-1", 100), Whole);
        assert_eq!(parse(b"bytes=", 100), Whole);
        assert_eq!(parse(b"bytes= 1 - 2", 100), Whole);
        assert_eq!(parse(b"Bytes=1-1", 100), Part { start: 1, len: 1 });
    }

    #[test]
    fn several_ranges() {
        assert_eq!(parse(b"bytes=0-1,5-6", 100), spans(&[(0, 2), (5, 2)]));
        // In the order asked when apart.
        assert_eq!(
            parse(b"bytes=50-59, 0-1 ,", 100),
            spans(&[(50, 10), (0, 2)])
        );
        assert_eq!(parse(b"bytes=0-1,-2", 100), spans(&[(0, 2), (98, 2)]));
        // Unsatisfiable ones dropped; all unsatisfiable → 416.
        assert_eq!(parse(b"bytes=0-1,200-300", 100), Part { start: 0, len: 2 });
        assert_eq!(parse(b"bytes=200-,300-", 100), Unsatisfiable);
        // One malformed spec: the header is ignored.
        assert_eq!(parse(b"bytes=0-1,x", 100), Whole);
    }

    #[test]
    fn overlapping_ranges_coalesce() {
        assert_eq!(parse(b"bytes=0-50,0-50", 100), Part { start: 0, len: 51 });
        assert_eq!(parse(b"bytes=0-4,5-9", 100), Part { start: 0, len: 10 });
        assert_eq!(
            parse(b"bytes=60-70,0-10,5-20,90-", 100),
            spans(&[(0, 21), (60, 11), (90, 10)])
        );
        // Many copies of the whole file are one copy.
        let many = format!("bytes={}", ["0-"; 10].join(","));
        assert_eq!(parse(many.as_bytes(), 100), Part { start: 0, len: 100 });
    }

    #[test]
    fn too_many_ranges_are_ignored() {
        let ten = format!(
            "bytes={}",
            (0..10)
                .map(|i| format!("{}-{}", i * 3, i * 3))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(matches!(parse(ten.as_bytes(), 100), Parts(p) if p.len() == 10));
        let eleven = format!("{ten},90-91");
        assert_eq!(parse(eleven.as_bytes(), 100), Whole);
    }
}
