//! AFL++ harness (cargo-afl) for weft-http's pure parsing: one input is parsed as a request
//! head and, independently, as a request target, a `Range` value and an entity-tag list, and
//! every result is checked against the invariants the server relies on. The modules are the
//! server's own source files, compiled here by path, so nothing is copied and no fuzzing API
//! is exported. See README.md for how to run it.

#![allow(dead_code)]

#[path = "../../src/conditional.rs"]
mod conditional;
#[path = "../../src/range.rs"]
mod range;
#[path = "../../src/request.rs"]
mod request;
#[path = "../../src/target.rs"]
mod target;

use conditional::{Conditions, Validators};
use range::RangeAnswer;
use request::{HeadLimits, Parsed};

const LIMITS: HeadLimits = HeadLimits {
    max_request_line_bytes: 512,
    max_head_bytes: 2048,
    max_header_lines: 40,
};
const MAX_RANGES: usize = 8;
const LAST_MODIFIED: &[u8] = b"Sun, 06 Nov 1994 08:49:37 GMT";

fn main() {
    afl::fuzz!(|data: &[u8]| {
        check_head(data);
        check_target(data);
        let file_len = data.first().map_or(0, |&b| u64::from(b) * 3);
        check_range(data, file_len);
        check_range(data, u64::MAX);
        let _ = conditional::tags(data);
        let v = Validators {
            etag: b"\"2ec2e6a1-3e8\"",
            mtime_secs: 784111777,
            last_modified: LAST_MODIFIED,
        };
        let _ = conditional::if_range_holds(data, &v);
    });
}

fn check_head(data: &[u8]) {
    let mut buf = data.to_vec();
    let Ok(Parsed::Complete(req, used)) = request::parse(&mut buf, &LIMITS) else {
        return;
    };
    assert!(used <= data.len() && used <= LIMITS.max_head_bytes + data.len());
    assert!((0..=9).contains(&req.minor_version));
    if let Some(host) = req.host {
        assert!(target::valid_authority(host));
        assert!(header_safe(host), "{host:?}");
    }
    if let Ok(t) = target::parse_target(req.target) {
        check_parsed_target(&t);
        let authority = t.authority.or(req.host).unwrap_or(b"127.0.0.1:80");
        let mut location = Vec::new();
        target::push_directory_uri(&mut location, authority, t.raw_path, t.query);
        assert!(header_safe(&location), "{location:?}");
        assert!(
            location.iter().all(|&b| b.is_ascii_graphic()),
            "{location:?}"
        );
        assert!(!location.contains(&b'#'));
    }
    if let Some(r) = req.range {
        check_range(r, 1000);
    }
    let v = Validators {
        etag: b"\"2ec2e6a1-3e8\"",
        mtime_secs: 784111777,
        last_modified: LAST_MODIFIED,
    };
    let c = Conditions {
        if_match: req.if_match.lines(),
        if_none_match: req.if_none_match.lines(),
        if_modified_since: req.if_modified_since,
        if_unmodified_since: req.if_unmodified_since,
    };
    let _ = conditional::evaluate(&c, &v);
    if let Some(ir) = req.if_range {
        let _ = conditional::if_range_holds(ir, &v);
    }
}

/// No byte that could end a header line or start another.
fn header_safe(v: &[u8]) -> bool {
    !v.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0)
}

fn check_target(data: &[u8]) {
    if let Ok(t) = target::parse_target(data) {
        check_parsed_target(&t);
    }
}

/// The invariants `target.rs` documents: no leading slash, no empty, `.` or `..` segment, no
/// NUL; and the authority of an absolute-form target is valid.
fn check_parsed_target(t: &target::Target<'_>) {
    let rel = &t.relative;
    assert!(!rel.starts_with(b"/"), "{rel:?}");
    assert!(!rel.contains(&0), "{rel:?}");
    if !rel.is_empty() {
        for seg in rel.split(|&b| b == b'/') {
            assert!(!seg.is_empty() && seg != b"." && seg != b"..", "{rel:?}");
        }
    } else {
        assert!(t.trailing_slash);
    }
    assert!(t.raw_path.starts_with(b"/"));
    if let Some(a) = t.authority {
        assert!(target::valid_authority(a));
    }
}

/// A range answer stays inside the file, parts are apart and ascending only if sorted,
/// never more than the cap, never more bytes than the file.
fn check_range(value: &[u8], file_len: u64) {
    match range::parse_range(value, file_len, MAX_RANGES) {
        RangeAnswer::Whole | RangeAnswer::Unsatisfiable => {}
        RangeAnswer::Part { start, len } => {
            assert!(len > 0 && start.checked_add(len).is_some_and(|e| e <= file_len));
        }
        RangeAnswer::Parts(spans) => {
            assert!(spans.len() >= 2 && spans.len() <= MAX_RANGES);
            let mut total = 0u64;
            for s in &spans {
                assert!(s.len > 0 && s.start.checked_add(s.len).is_some_and(|e| e <= file_len));
                total += s.len;
            }
            assert!(total <= file_len);
            let mut sorted = spans.clone();
            sorted.sort_by_key(|s| s.start);
            for w in sorted.windows(2) {
                assert!(w[0].start + w[0].len < w[1].start, "{spans:?}");
            }
        }
    }
}
