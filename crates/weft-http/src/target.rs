//! The request target → a path relative to the served root: percent-decoding and
//! normalisation. Pure.
//!
//! Invariants of a [`Target`] returned by [`parse_target`]:
//! - `relative` never starts with `/`, has no empty, `.` or `..` segment, no NUL byte, and no
//!   slash that came from `%2F` (an encoded slash is refused, as Apache does by default, so
//!   `a%2Fb` can never name the file `a/b` by a second spelling);
//! - normalising never climbs above the root: `/../x` is refused (400), `/a/../x` is `x`.

/// Why a request target was refused; every case answers 400 Bad Request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetError {
    /// Not origin-form (`/path`) nor absolute-form (`http://host/path`).
    NotAPath,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// `%00` (a NUL cannot be part of a file name).
    Nul,
    /// `%2F` (an encoded slash).
    EncodedSlash,
    /// `..` past the root.
    AboveRoot,
}

/// A request target, decoded and normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    /// The path below the root, segments joined by `/`; empty for the root itself.
    pub relative: Vec<u8>,
    /// Whether the decoded path ended with `/` (or with a `.`/`..` segment, which names a
    /// directory): a directory is then served through its `index.html`, otherwise redirected.
    pub trailing_slash: bool,
    /// The path as sent (still percent-encoded, before `?`), for the directory redirect.
    pub raw_path: &'a [u8],
    /// The raw query string (after `?`), if any; kept for the directory redirect.
    pub query: Option<&'a [u8]>,
}

/// Decodes and normalises a request target.
pub fn parse_target(raw: &[u8]) -> Result<Target<'_>, TargetError> {
    let raw = strip_absolute_form(raw);
    let (path, query) = match raw.iter().position(|&b| b == b'?') {
        Some(i) => (&raw[..i], Some(&raw[i + 1..])),
        None => (raw, None),
    };
    // A fragment never belongs in a request, but be lenient like nginx and drop it.
    let path = match path.iter().position(|&b| b == b'#') {
        Some(i) => &path[..i],
        None => path,
    };
    if path.first() != Some(&b'/') {
        return Err(TargetError::NotAPath);
    }
    let mut segments: Vec<Vec<u8>> = Vec::new();
    let mut trailing_slash = false;
    for raw_segment in path[1..].split(|&b| b == b'/') {
        let segment = percent_decode(raw_segment)?;
        trailing_slash = false;
        match segment.as_slice() {
            b"" => trailing_slash = true,
            b"." => trailing_slash = true,
            b".." => {
                segments.pop().ok_or(TargetError::AboveRoot)?;
                trailing_slash = true;
            }
            _ => segments.push(segment),
        }
    }
    if segments.is_empty() {
        trailing_slash = true;
    }
    Ok(Target {
        relative: segments.join(&b'/'),
        trailing_slash,
        raw_path: path,
        query,
    })
}

/// `http://host[:port]/path` → `/path` (case-insensitive scheme); anything else unchanged.
fn strip_absolute_form(raw: &[u8]) -> &[u8] {
    for scheme in [&b"http://"[..], &b"https://"[..]] {
        if raw.len() >= scheme.len() && raw[..scheme.len()].eq_ignore_ascii_case(scheme) {
            let rest = &raw[scheme.len()..];
            return match rest.iter().position(|&b| b == b'/') {
                Some(i) => &rest[i..],
                None => b"/",
            };
        }
    }
    raw
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes one path segment (between slashes).
fn percent_decode(segment: &[u8]) -> Result<Vec<u8>, TargetError> {
    let mut out = Vec::with_capacity(segment.len());
    let mut i = 0;
    while i < segment.len() {
        let b = segment[i];
        if b == b'%' {
            let hi = segment.get(i + 1).copied().and_then(hex_value);
            let lo = segment.get(i + 2).copied().and_then(hex_value);
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(TargetError::BadEscape);
            };
            let decoded = hi << 4 | lo;
            match decoded {
                0 => return Err(TargetError::Nul),
                b'/' => return Err(TargetError::EncodedSlash),
                _ => out.push(decoded),
            }
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(raw: &str) -> (String, bool) {
        let t = parse_target(raw.as_bytes()).unwrap();
        (String::from_utf8(t.relative).unwrap(), t.trailing_slash)
    }

    #[test]
    fn plain_paths() {
        assert_eq!(rel("/"), ("".into(), true));
        assert_eq!(rel("/a.txt"), ("a.txt".into(), false));
        assert_eq!(rel("/dir/"), ("dir".into(), true));
        assert_eq!(rel("/dir/sub/f.css"), ("dir/sub/f.css".into(), false));
    }

    #[test]
    fn normalisation() {
        assert_eq!(rel("//a///b"), ("a/b".into(), false));
        assert_eq!(rel("/a/./b"), ("a/b".into(), false));
        assert_eq!(rel("/a/../b"), ("b".into(), false));
        assert_eq!(rel("/a/b/.."), ("a".into(), true));
        assert_eq!(rel("/a/."), ("a".into(), true));
        assert_eq!(rel("/a/%2e%2E/b"), ("b".into(), false));
    }

    #[test]
    fn decoding() {
        assert_eq!(rel("/a%20b"), ("a b".into(), false));
        assert_eq!(rel("/%C3%A9t%C3%A9"), ("été".into(), false));
        assert_eq!(rel("/a?x=%2F"), ("a".into(), false));
        let t = parse_target(b"/d?x=1").unwrap();
        assert_eq!(t.query, Some(&b"x=1"[..]));
    }

    #[test]
    fn absolute_form() {
        assert_eq!(rel("http://example.com/a/b"), ("a/b".into(), false));
        assert_eq!(rel("HTTP://example.com"), ("".into(), true));
    }

    #[test]
    fn refusals() {
        assert_eq!(parse_target(b"/.."), Err(TargetError::AboveRoot));
        assert_eq!(parse_target(b"/a/../../b"), Err(TargetError::AboveRoot));
        assert_eq!(
            parse_target(b"/%2e%2e/etc/passwd"),
            Err(TargetError::AboveRoot)
        );
        assert_eq!(parse_target(b"/a%2Fb"), Err(TargetError::EncodedSlash));
        assert_eq!(parse_target(b"/a%00b"), Err(TargetError::Nul));
        assert_eq!(parse_target(b"/a%4"), Err(TargetError::BadEscape));
        assert_eq!(parse_target(b"/a%zz"), Err(TargetError::BadEscape));
        assert_eq!(parse_target(b"a"), Err(TargetError::NotAPath));
        assert_eq!(parse_target(b"*"), Err(TargetError::NotAPath));
    }
}
